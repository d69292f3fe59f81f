#!/usr/bin/env bash
# Benchmarks rkube-apiserver on rkube-store and on etcd 3.4 (10k pods, 1k node watchers, paced
# writes) and writes the table to docs/benchmarks.md. Installs etcd-server if it is missing.
set -euo pipefail
cd "$(dirname "$0")/.."
if ! command -v etcd >/dev/null 2>&1; then
  if [ "$(id -u)" -eq 0 ]; then apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq etcd-server >/dev/null
  else sudo apt-get update -qq && DEBIAN_FRONTEND=noninteractive sudo apt-get install -y -qq etcd-server >/dev/null; fi
fi
cargo build --release -p rkube-store -p rkube-apiserver -p rkube-bench
exec ./target/release/apiserver-bench "$@"
