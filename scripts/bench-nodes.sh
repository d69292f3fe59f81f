#!/usr/bin/env bash
# Benchmarks rkube-scheduler (5,000 nodes) and rkube-kubelet-agent (1,000 simulated nodes in one
# process; 10,000 pods Running) and writes the table to docs/benchmarks.md.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release -p rkube-store -p rkube-apiserver -p rkube-scheduler -p rkube-kubelet-agent -p rkube-bench
exec ./target/release/nodes-bench "$@"
