#!/usr/bin/env bash
# Benchmarks rkube-controller-manager (1,000-replica Deployment creation; RSS with 10k pods and
# 1k nodes cached) and writes the table to docs/benchmarks.md.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release -p rkube-store -p rkube-apiserver -p rkube-controller-manager -p rkube-bench
exec ./target/release/controller-bench "$@"
