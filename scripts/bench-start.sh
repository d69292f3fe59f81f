#!/usr/bin/env bash
# Benchmarks rkube as a test dependency: `rkube server` start-to-ready (secure, open, API only),
# in-process clusters one by one and 20 at once, idle memory; with --cli, the cluster CLI and a
# 10k-pod snapshot restore instead. Writes docs/benchmarks.md.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release -p rkube -p rkube-bench
exec ./target/release/start-bench "$@"
