#!/usr/bin/env bash
# Brings up a whole rkube cluster on loopback and deploys the nginx example:
#   rkube-store (or a real etcd with --etcd), rkube-apiserver, rkube-controller-manager,
#   rkube-scheduler and one rkube-kubelet-agent per node (3 by default).
# Secure by default, like a kubeadm cluster: rkube-pki makes a CA, the apiserver's serving
# certificate and a client certificate + kubeconfig per component (the controller-manager, the
# scheduler, system:node:<name> for each node) and for the admin; the apiserver serves HTTPS,
# authenticates client certificates, authorizes with Node,RBAC and runs priority and fairness.
# --insecure runs the open configuration instead (plain HTTP, anyone may do anything).
# Writes the admin kubeconfig, waits until everything is ready, shows the nginx pod Running,
# then keeps running until Ctrl-C, which stops everything.
#
#   ./scripts/up.sh [--nodes N] [--etcd] [--no-example] [--insecure] [--dir DIR] [--port 6443]
set -euo pipefail
cd "$(dirname "$0")/.."

NODES=3 ETCD=0 EXAMPLE=1 SECURE=1 DIR="${RKUBE_DIR:-$PWD/.rkube}" PORT=6443 STORE_PORT=2379
while [ $# -gt 0 ]; do
  case "$1" in
    --nodes) NODES="$2"; shift 2 ;;
    --etcd) ETCD=1; shift ;;
    --no-example) EXAMPLE=0; shift ;;
    --insecure) SECURE=0; shift ;;
    --dir) DIR="$2"; shift 2 ;;
    --port) PORT="$2"; shift 2 ;;
    --store-port) STORE_PORT="$2"; shift 2 ;;
    -h|--help) sed -n '2,14p' "$0"; exit 0 ;;
    *) echo "unknown flag $1" >&2; exit 2 ;;
  esac
done

say() { printf '\033[1m==> %s\033[0m\n' "$*"; }
die() { printf '\033[31merror: %s\033[0m\n' "$*" >&2; exit 1; }

PIDS=()
STORE_FLAGS=() STORE_CURL=(curl -sf) AGENT_FLAGS=()
cleanup() {
  trap - INT TERM EXIT
  if [ ${#PIDS[@]} -gt 0 ]; then
    say "stopping rkube"
    # Reverse start order: nodes and controllers first, storage last.
    for ((i=${#PIDS[@]}-1; i>=0; i--)); do kill "${PIDS[$i]}" 2>/dev/null || true; done
    for pid in "${PIDS[@]}"; do wait "$pid" 2>/dev/null || true; done
  fi
}
trap cleanup EXIT
trap 'cleanup; say "rkube stopped"; exit 0' INT TERM HUP
# Each component in a session of its own: Ctrl-C reaches this script alone, which stops them
# in order (else the terminal's SIGINT would reach them first and look like a crash).
SETSID=()
command -v setsid >/dev/null && SETSID=(setsid)

# wait_for "what" seconds command...
wait_for() {
  local what="$1" secs="$2"; shift 2
  local deadline=$((SECONDS + secs))
  printf '    waiting for %s ' "$what"
  until "$@" >/dev/null 2>&1; do
    [ $SECONDS -lt $deadline ] || { echo; die "$what not ready after ${secs}s (logs in $DIR/logs)"; }
    printf '.'; sleep 0.2
  done
  echo " ok"
}

command -v kubectl >/dev/null || die "kubectl is needed on PATH"
command -v curl >/dev/null || die "curl is needed on PATH"
if [ "$ETCD" = 1 ] && ! command -v etcd >/dev/null; then
  say "installing etcd-server (Debian)"
  if [ "$(id -u)" -eq 0 ]; then apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq etcd-server >/dev/null
  else sudo apt-get update -qq && DEBIAN_FRONTEND=noninteractive sudo apt-get install -y -qq etcd-server >/dev/null; fi
fi

say "building rkube (release)"
cargo build --release -q -p rkube-store -p rkube-apiserver -p rkube-controller-manager -p rkube-scheduler -p rkube-kubelet-agent
BIN="$PWD/target/release"
rm -rf "$DIR"; mkdir -p "$DIR/logs"

export KUBECONFIG="$DIR/kubeconfig"
rm -f "$KUBECONFIG"
NODE_NAMES=$(seq -f 'rkube-node-%g' -s, 1 "$NODES")
STORE_SCHEME=http
if [ "$SECURE" = 1 ]; then
  SERVER="https://127.0.0.1:$PORT"
  PKI="$DIR/pki"
  say "writing certificates and kubeconfigs to $PKI (rkube-pki)"
  "$BIN/rkube-pki" --dir "$PKI" --server "$SERVER" --node "$NODE_NAMES"
  cp "$PKI/admin.kubeconfig" "$KUBECONFIG"
  API_FLAGS=(--tls-cert-file "$PKI/apiserver.crt" --tls-private-key-file "$PKI/apiserver.key"
    --client-ca-file "$PKI/ca.crt" --authorization-mode Node,RBAC --enable-priority-and-fairness=true
    --enable-admission-plugins NodeRestriction
    --kubelet-client-certificate "$PKI/apiserver-kubelet-client.crt"
    --kubelet-client-key "$PKI/apiserver-kubelet-client.key" --kubelet-certificate-authority "$PKI/ca.crt")
  # The kubelets' port: HTTPS, logs only for the apiserver's certificate.
  AGENT_FLAGS=(--tls-cert-file "$PKI/kubelet.crt" --tls-private-key-file "$PKI/kubelet.key"
    --client-ca-file "$PKI/ca.crt")
  CURL=(curl -sf --cacert "$PKI/ca.crt")
  kubeconfig_of() { echo "$PKI/$1.kubeconfig"; }
  if [ "$ETCD" = 0 ]; then
    # rkube-store as a kubeadm etcd: HTTPS, client certificates required.
    STORE_SCHEME=https
    STORE_FLAGS=(--cert-file "$PKI/store.crt" --key-file "$PKI/store.key"
      --trusted-ca-file "$PKI/ca.crt" --client-cert-auth --client-cert-allowed-cn kube-apiserver-etcd-client)
    API_FLAGS+=(--etcd-cafile "$PKI/ca.crt" --etcd-certfile "$PKI/apiserver-etcd-client.crt"
      --etcd-keyfile "$PKI/apiserver-etcd-client.key")
    STORE_CURL=(curl -sf --cacert "$PKI/ca.crt" --cert "$PKI/apiserver-etcd-client.crt"
      --key "$PKI/apiserver-etcd-client.key")
  fi
else
  SERVER="http://127.0.0.1:$PORT"
  API_FLAGS=(--write-kubeconfig "$KUBECONFIG")
  AGENT_FLAGS=()
  CURL=(curl -sf)
  kubeconfig_of() { echo "$KUBECONFIG"; }
fi
STORE_URL="$STORE_SCHEME://127.0.0.1:$STORE_PORT"
if [ "$ETCD" = 1 ]; then
  say "starting etcd on $STORE_URL"
  "${SETSID[@]}" etcd --data-dir "$DIR/etcd" --listen-client-urls "$STORE_URL" --advertise-client-urls "$STORE_URL" \
    --listen-peer-urls "http://127.0.0.1:$((STORE_PORT + 1))" --initial-advertise-peer-urls "http://127.0.0.1:$((STORE_PORT + 1))" \
    --initial-cluster "default=http://127.0.0.1:$((STORE_PORT + 1))" \
    --experimental-watch-progress-notify-interval 5s >"$DIR/logs/etcd.log" 2>&1 &
  PIDS+=($!)
else
  say "starting rkube-store on $STORE_URL"
  "${SETSID[@]}" "$BIN/rkube-store" --data-dir "$DIR/store" --listen-client-urls "$STORE_URL" "${STORE_FLAGS[@]}" \
    >"$DIR/logs/store.log" 2>&1 &
  PIDS+=($!)
fi
wait_for "storage" 30 "${STORE_CURL[@]}" -XPOST "$STORE_URL/v3/maintenance/status" -d '{}'

say "starting rkube-apiserver on $SERVER"
"${SETSID[@]}" "$BIN/rkube-apiserver" --etcd-servers "$STORE_URL" --secure-port "$PORT" "${API_FLAGS[@]}" \
  >"$DIR/logs/apiserver.log" 2>&1 &
PIDS+=($!)
wait_for "apiserver" 60 "${CURL[@]}" "$SERVER/readyz"
[ -s "$KUBECONFIG" ] || { echo "no kubeconfig at $KUBECONFIG" >&2; exit 1; }

say "starting rkube-controller-manager and rkube-scheduler"
"${SETSID[@]}" "$BIN/rkube-controller-manager" --kubeconfig "$(kubeconfig_of controller-manager)" --secure-port 10257 \
  ${PKI:+--cluster-signing-cert-file "$PKI/ca.crt" --cluster-signing-key-file "$PKI/ca.key"} \
  >"$DIR/logs/controller-manager.log" 2>&1 &
PIDS+=($!)
"${SETSID[@]}" "$BIN/rkube-scheduler" --kubeconfig "$(kubeconfig_of scheduler)" --secure-port 10259 \
  >"$DIR/logs/scheduler.log" 2>&1 &
PIDS+=($!)
wait_for "controller-manager" 30 curl -sf http://127.0.0.1:10257/readyz
wait_for "scheduler" 30 curl -sf http://127.0.0.1:10259/readyz

say "starting $NODES simulated node(s)"
for i in $(seq 1 "$NODES"); do
  "${SETSID[@]}" "$BIN/rkube-kubelet-agent" --kubeconfig "$(kubeconfig_of "node-rkube-node-$i")" --node-name "rkube-node-$i" \
    --node-index $((i - 1)) --port $((10249 + i)) "${AGENT_FLAGS[@]}" >"$DIR/logs/node-$i.log" 2>&1 &
  PIDS+=($!)
done
ready_nodes() { [ "$(kubectl get nodes --no-headers 2>/dev/null | grep -c ' Ready ')" -ge "$NODES" ]; }
wait_for "$NODES node(s) Ready" 60 ready_nodes
kubectl get nodes

if [ "$EXAMPLE" = 1 ]; then
  say "deploying the nginx example (e2e/nginx.yml)"
  kubectl apply -f e2e/nginx.yml
  kubectl rollout status deployment/nginx-deployment --timeout=60s
  kubectl get po -l app=nginx
fi

cat <<MSG

rkube is up. In another shell:
  export KUBECONFIG=$KUBECONFIG
  kubectl get deploy,rs,po,nodes
Logs are in $DIR/logs. Ctrl-C stops everything.
MSG
wait -n "${PIDS[@]}" || true
die "a component exited; see $DIR/logs"
