#!/usr/bin/env bash
# Runs every rkube test: unit and component tests, the store's conformance suite against
# rkube-store AND a real etcd 3.4, the crash test, and the end-to-end tests that start the real
# binaries (built first) and drive them with kubectl. Installs what the tests need first
# (etcd-server and etcd-client from Debian, cargo-nextest if absent). Extra arguments go to `cargo nextest run`.
set -euo pipefail
cd "$(dirname "$0")/.."

as_root() { if [ "$(id -u)" -eq 0 ]; then "$@"; else sudo "$@"; fi; }

if ! command -v etcd >/dev/null 2>&1 || ! command -v etcdctl >/dev/null 2>&1; then
  echo "==> installing etcd-server and etcd-client from Debian (the conformance oracle, etcdctl)"
  as_root apt-get update -qq
  DEBIAN_FRONTEND=noninteractive as_root apt-get install -y -qq etcd-server etcd-client >/dev/null
fi
# Prometheus (Debian's) for the compose stack's monitoring profile, where Docker runs.
if ! command -v prometheus >/dev/null 2>&1 && docker info >/dev/null 2>&1; then
  echo "==> installing prometheus from Debian (the compose monitoring profile)"
  as_root apt-get update -qq
  DEBIAN_FRONTEND=noninteractive as_root apt-get install -y -qq --no-install-recommends prometheus >/dev/null
fi
# Debian's chromium and its WebDriver for the web view's browser test.
if ! command -v chromedriver >/dev/null 2>&1; then
  echo "==> installing chromium and chromium-driver from Debian (the web view's browser test)"
  as_root apt-get update -qq
  DEBIAN_FRONTEND=noninteractive as_root apt-get install -y -qq chromium chromium-driver >/dev/null
fi
if ! cargo nextest --version >/dev/null 2>&1; then
  echo "==> installing cargo-nextest"
  cargo install cargo-nextest --locked
fi

# CI builds once from a fresh clone: incremental state would only cost disk (GBs).
if [ -n "${CI:-}" ]; then export CARGO_INCREMENTAL=0; fi

# The binaries are built together with the tests (`--tests`), so dependencies are compiled
# once, with the features both need, rather than once for each.
echo "==> cargo build --workspace --bins --tests (the e2e tests run the binaries)"
cargo build --workspace --bins --tests

echo "==> cargo nextest run --workspace"
cargo nextest run --workspace --no-fail-fast "$@"
