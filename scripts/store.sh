#!/usr/bin/env bash
# Builds and starts rkube-store on 127.0.0.1:2379 with its data in ./.rkube/store, until Ctrl-C.
# Talk to it with any etcd v3 client, over gRPC or the JSON gateway, e.g.:
#   ETCDCTL_API=3 etcdctl --endpoints=127.0.0.1:2379 put foo bar
#   curl -s localhost:2379/v3/kv/put -d '{"key":"Zm9v","value":"YmFy"}'
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release -p rkube-store
mkdir -p .rkube
exec ./target/release/rkube-store --data-dir .rkube/store --listen-client-urls "${RKUBE_STORE_URL:-http://127.0.0.1:2379}" "$@"
