#!/usr/bin/env bash
# The request chain's cost: cached GETs through an open apiserver and through one with token
# authentication, Node+RBAC, audit and encryption, side by side on one rkube-store. Builds in
# release mode and writes the figures to docs/benchmarks.md. Flags go to chain-bench.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release -p rkube-store -p rkube-apiserver -p rkube-bench
exec ./target/release/chain-bench "$@"
