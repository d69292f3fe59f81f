#!/usr/bin/env bash
# The scale run: 100,000 pods (Deployments of mixed sizes) on 5,000 simulated nodes through the
# whole control plane on rkube-store, with pods/s over time, RSS and CPU per component, pod
# startup and API latency against upstream's SLOs. Writes the e2e-scale section of
# docs/benchmarks.md and docs/e2e-scale-*.svg. Smaller: --scale-pods N --scale-nodes M.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release -p rkube-store -p rkube-apiserver -p rkube-controller-manager -p rkube-scheduler -p rkube-kubelet-agent -p rkube-bench
exec ./target/release/e2e-bench --scale "$@"
