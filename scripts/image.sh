#!/usr/bin/env bash
# Builds the rkube container image (rkube:latest) without pulling anything: assembles a root
# filesystem from the built binaries and the shared libraries they need, then builds the
# Dockerfile (FROM scratch) over it.
#   ./scripts/image.sh [--debug]   (--debug packs target/debug instead of a release build)
set -euo pipefail
cd "$(dirname "$0")/.."
PROFILE=release
[ "${1:-}" = "--debug" ] && PROFILE=debug
BINS=(rkube-store rkube-apiserver rkube-pki rkube-controller-manager rkube-scheduler rkube-kubelet-agent rkube-probe)
if [ "$PROFILE" = release ]; then
  cargo build --release -q $(printf -- '--bin %s ' "${BINS[@]}")
fi
ROOT=target/image-root
rm -rf "$ROOT"; mkdir -p "$ROOT/usr/local/bin" "$ROOT/tmp" "$ROOT/data" "$ROOT/etc"
files=()
for b in "${BINS[@]}"; do
  cp "target/$PROFILE/$b" "$ROOT/usr/local/bin/"
  strip --strip-debug "$ROOT/usr/local/bin/$b" 2>/dev/null || true
  files+=("target/$PROFILE/$b")
done
# Debian's etcd (docker-compose.etcd.yml) and Prometheus (the `monitoring` profile), when installed.
for tool in etcd prometheus; do
  if command -v "$tool" >/dev/null; then cp "$(command -v "$tool")" "$ROOT/usr/local/bin/$tool"; files+=("$(command -v "$tool")"); fi
done
# The shared libraries (and the loader) every binary needs, at their own paths.
for f in "${files[@]}"; do
  ldd "$f" 2>/dev/null | grep -o '/[^ ]*' | while read -r lib; do
    [ -e "$lib" ] && mkdir -p "$ROOT$(dirname "$lib")" && cp -L "$lib" "$ROOT$lib"
  done
done
printf 'root:x:0:0:root:/:/usr/local/bin/rkube-probe\n' >"$ROOT/etc/passwd"
printf 'hosts: files dns\n' >"$ROOT/etc/nsswitch.conf"
chmod 1777 "$ROOT/tmp"
docker build -q -t rkube:latest -f Dockerfile "$ROOT"
echo "built rkube:latest from $ROOT ($(du -sh "$ROOT" | cut -f1))"
