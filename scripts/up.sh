#!/usr/bin/env bash
# Brings up an rkube cluster on loopback and deploys the nginx example — a thin wrapper over
# the cluster CLI (`rkube cluster create`): rkube-store (or a real etcd with --etcd),
# rkube-apiserver, rkube-controller-manager, rkube-scheduler and one simulated node per
# kubelet-agent (3 by default), each a background process of the `rkube` binary.
# Secure by default, like a kubeadm cluster (HTTPS, client certificates, Node+RBAC, priority
# and fairness); --insecure runs the open configuration (plain HTTP, anyone may do anything).
# Shows the nginx pod Running and serves the web view (`rkube dashboard`, on
# http://127.0.0.1:8001/ui/ when that port is free), then keeps running until Ctrl-C, which stops the cluster
# (`rkube cluster start NAME` brings it back; `rkube cluster delete NAME` removes it).
# A previous cluster of the same name is replaced. RKUBE_BIN uses an rkube binary already built.
#
#   ./scripts/up.sh [--nodes N] [--etcd] [--no-example] [--insecure] [--name up] [--port 6443]
set -euo pipefail
cd "$(dirname "$0")/.."

NAME=up NODES=3 EXAMPLE=1 ARGS=()
while [ $# -gt 0 ]; do
  case "$1" in
    --nodes) NODES="$2"; shift 2 ;;
    --etcd) ARGS+=(--etcd); ETCD=1; shift ;;
    --no-example) EXAMPLE=0; shift ;;
    --insecure) ARGS+=(--insecure); shift ;;
    --name) NAME="$2"; shift 2 ;;
    --port) ARGS+=(--port "$2"); shift 2 ;;
    -h|--help) sed -n '2,12p' "$0"; exit 0 ;;
    *) echo "unknown flag $1 (see --help)" >&2; exit 2 ;;
  esac
done

say() { printf '\033[1m==> %s\033[0m\n' "$*"; }
die() { printf '\033[31merror: %s\033[0m\n' "$*" >&2; exit 1; }

command -v kubectl >/dev/null || die "kubectl is needed on PATH: see https://kubernetes.io/docs/tasks/tools/"
if [ "${ETCD:-0}" = 1 ] && ! command -v etcd >/dev/null; then
  say "installing etcd-server (Debian)"
  if [ "$(id -u)" -eq 0 ]; then apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq etcd-server >/dev/null
  else sudo apt-get update -qq && DEBIAN_FRONTEND=noninteractive sudo apt-get install -y -qq etcd-server >/dev/null; fi
fi

if [ -n "${RKUBE_BIN:-}" ]; then
  RKUBE="$RKUBE_BIN"
else
  say "building rkube (release)"
  cargo build --release -q -p rkube
  RKUBE="$PWD/target/release/rkube"
fi

# Ctrl-C reaches this script alone (the cluster's processes are in groups of their own):
# it stops the cluster and exits 0. Any other way out (a failed step) stops it too, saying so.
STARTED=0 DASHBOARD=
exists() { "$RKUBE" cluster kubeconfig "$NAME" --path >/dev/null 2>&1; }
stop() {
  trap - INT TERM HUP EXIT
  if [ -n "$DASHBOARD" ]; then kill "$DASHBOARD" 2>/dev/null || true; fi
  echo
  if [ "$STARTED" = 1 ] && exists; then
    "$RKUBE" cluster stop "$NAME" || true
    say "rkube stopped ($RKUBE cluster start $NAME starts it again; $RKUBE cluster delete $NAME removes it)"
  else
    say "rkube stopped"
  fi
  exit 0
}
failed() {
  local rc=$?
  trap - INT TERM HUP EXIT
  if [ -n "$DASHBOARD" ]; then kill "$DASHBOARD" 2>/dev/null || true; fi
  if [ "$rc" -ne 0 ] && [ "$STARTED" = 1 ] && exists; then
    "$RKUBE" cluster stop "$NAME" --quiet || true
    printf '\033[31merror: up.sh failed (exit %s); cluster %s stopped. Its logs: %s cluster logs %s\033[0m\n' \
      "$rc" "$NAME" "$RKUBE" "$NAME" >&2
  fi
  exit "$rc"
}
trap stop INT TERM HUP
trap failed EXIT

# A fresh cluster each run (Ctrl-C keeps the data until then).
"$RKUBE" cluster delete "$NAME" --quiet >/dev/null 2>&1 || true
STARTED=1
"$RKUBE" cluster create "$NAME" --nodes "$NODES" "${ARGS[@]}"
KUBECONFIG="$("$RKUBE" cluster kubeconfig "$NAME" --path)"
export KUBECONFIG
kubectl get nodes

if [ "$EXAMPLE" = 1 ]; then
  say "deploying the nginx example (e2e/nginx.yml)"
  kubectl apply -f e2e/nginx.yml
  kubectl rollout status deployment/nginx-deployment --timeout=60s
  kubectl get po -l app=nginx
fi

"$RKUBE" dashboard "$NAME" &
DASHBOARD=$!
cat <<MSG
rkube is up; the web view's address is printed above. In another shell:
  export KUBECONFIG=$KUBECONFIG
  kubectl get deploy,rs,po,nodes
  $RKUBE cluster logs $NAME [COMPONENT] [-f]
Ctrl-C stops it.
MSG
while "$RKUBE" cluster list | awk -v n="$NAME" '$1 == n { print $2 }' | grep -qx Running; do
  sleep 1
done
trap - INT TERM HUP
die "a component of cluster $NAME exited: $RKUBE cluster list; $RKUBE cluster logs $NAME"
