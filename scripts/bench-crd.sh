#!/usr/bin/env bash
# Benchmarks CustomResourceDefinitions, custom resources beside ConfigMaps, an admission
# webhook's round trip and a CEL rule's cost; writes the table to docs/benchmarks.md.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release -p rkube-store -p rkube-apiserver -p rkube-bench
exec ./target/release/crd-bench "$@"
