#!/usr/bin/env bash
# Regenerates crates/etcd-api/src/pb/etcdserverpb.rs from crates/etcd-api/proto/etcd.proto
# with tonic-prost-build (installs Debian's protobuf-compiler if protoc is missing). Only
# needed after editing the .proto; builds use the committed file.
set -euo pipefail
cd "$(dirname "$0")/.."
as_root() { if [ "$(id -u)" -eq 0 ]; then "$@"; else sudo "$@"; fi; }
if ! command -v protoc >/dev/null 2>&1; then
  as_root apt-get update -qq
  DEBIAN_FRONTEND=noninteractive as_root apt-get install -y -qq protobuf-compiler >/dev/null
fi
cargo run --quiet --manifest-path tools/gen-etcd-proto/Cargo.toml --target-dir target/gen-etcd-proto
rustfmt --edition 2021 crates/etcd-api/src/pb/etcdserverpb.rs
echo "wrote crates/etcd-api/src/pb/etcdserverpb.rs"
