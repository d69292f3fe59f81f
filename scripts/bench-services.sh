#!/usr/bin/env bash
# Benchmarks Services: create latency with cluster IP / node port allocation (beside a
# ConfigMap create), and how long after a pod turns Ready its Endpoints and EndpointSlice list
# it. Writes the table to docs/benchmarks.md.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release -p rkube-store -p rkube-apiserver -p rkube-controller-manager -p rkube-bench
exec ./target/release/services-bench "$@"
