#!/usr/bin/env bash
# End-to-end benchmark of the whole control plane (Deployment → Running latency, 100 replicas,
# 10,000 replicas on 1,000 simulated nodes; rkube-store and etcd 3.4; client limits off and
# upstream-like; `--one-binary`: the 10,000-replica run on `rkube server` beside the separate
# processes). Writes docs/benchmarks.md and docs/e2e-*.svg. Installs etcd-server if missing.
set -euo pipefail
cd "$(dirname "$0")/.."
if ! command -v etcd >/dev/null 2>&1; then
  if [ "$(id -u)" -eq 0 ]; then apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq etcd-server >/dev/null
  else sudo apt-get update -qq && DEBIAN_FRONTEND=noninteractive sudo apt-get install -y -qq etcd-server >/dev/null; fi
fi
cargo build --release -p rkube-store -p rkube-apiserver -p rkube-controller-manager -p rkube-scheduler -p rkube-kubelet-agent -p rkube -p rkube-bench
exec ./target/release/e2e-bench "$@"
