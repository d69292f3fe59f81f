#!/usr/bin/env bash
# The scripted end-to-end nginx deployment, with stock kubectl, against any running rkube
# (KUBECONFIG, or --server URL): create, wait, list, scale to 5, set image + rollout status,
# rollout undo, describe, logs, delete and wait until the pods are gone. Each step is printed;
# any failure stops the script with a non-zero exit.
#
#   ./scripts/e2e-nginx.sh [--server http://127.0.0.1:6443] [--kubectl kubectl]
set -euo pipefail
cd "$(dirname "$0")/.."
KUBECTL=kubectl
ARGS=()
while [ $# -gt 0 ]; do
  case "$1" in
    --server) ARGS+=(--server "$2"); shift 2 ;;
    --kubectl) KUBECTL="$2"; shift 2 ;;
    *) echo "unknown flag $1" >&2; exit 2 ;;
  esac
done
k() { "$KUBECTL" "${ARGS[@]}" "$@"; }
# Private scratch files: several runs may go at once (the e2e tests run in parallel).
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
step() { printf '\n\033[1m--- %s\033[0m\n' "$*"; }
fail() { printf '\n\033[31mFAILED: %s\033[0m\n' "$*" >&2; exit 1; }
trap 'fail "step failed at line $LINENO (exit $?)"' ERR

running_pods() { k get po -l app=nginx --no-headers 2>/dev/null | grep -c ' 1/1 *Running ' || true; }
wait_running() {
  local want="$1" deadline=$((SECONDS + 60))
  until [ "$(running_pods)" -eq "$want" ] && [ "$(k get po -l app=nginx --no-headers 2>/dev/null | wc -l)" -eq "$want" ]; do
    [ $SECONDS -lt $deadline ] || fail "expected $want Running nginx pod(s)"
    sleep 0.2
  done
}

step "kubectl create -f e2e/nginx.yml"
k delete deployment nginx-deployment --ignore-not-found --wait=true >/dev/null
k create -f e2e/nginx.yml
k rollout status deployment/nginx-deployment --timeout=60s
wait_running 1
step "kubectl get po -l app=nginx"
k get po -l app=nginx

step "kubectl scale deployment nginx-deployment --replicas=5"
k scale deployment nginx-deployment --replicas=5
k rollout status deployment/nginx-deployment --timeout=60s
wait_running 5
k get po -l app=nginx -o wide

step "kubectl set image deployment/nginx-deployment nginx=nginx:1.16.1"
k set image deployment/nginx-deployment nginx=nginx:1.16.1
k rollout status deployment/nginx-deployment --timeout=60s
wait_running 5
images=$(k get po -l app=nginx -o jsonpath='{range .items[*]}{.spec.containers[0].image}{"\n"}{end}' | sort -u)
[ "$images" = "nginx:1.16.1" ] || fail "pods run $images, expected nginx:1.16.1"
k rollout history deployment/nginx-deployment

step "kubectl rollout undo deployment/nginx-deployment"
k rollout undo deployment/nginx-deployment
k rollout status deployment/nginx-deployment --timeout=60s
wait_running 5
images=$(k get po -l app=nginx -o jsonpath='{range .items[*]}{.spec.containers[0].image}{"\n"}{end}' | sort -u)
[ "$images" = "nginx:1.14.2" ] || fail "pods run $images after undo, expected nginx:1.14.2"
k get deploy,rs -l app=nginx

pod=$(k get po -l app=nginx -o jsonpath='{.items[0].metadata.name}')
step "kubectl describe pod $pod"
k describe pod "$pod" | tee "$TMP/describe.txt"
grep -q "Successfully assigned default/$pod" "$TMP/describe.txt" || fail "describe shows no Scheduled event"
grep -q "Started container nginx" "$TMP/describe.txt" || fail "describe shows no Started event"

step "kubectl logs $pod"
k logs "$pod" | tee "$TMP/logs.txt"
grep -q "Configuration complete" "$TMP/logs.txt" || fail "no nginx start-up lines in the logs"

step "kubectl delete deployment nginx-deployment"
k delete deployment nginx-deployment
deadline=$((SECONDS + 60))
until [ "$(k get po -l app=nginx --no-headers 2>/dev/null | wc -l)" -eq 0 ]; do
  [ $SECONDS -lt $deadline ] || fail "nginx pods still present 60s after the delete"
  sleep 0.2
done
k get po -l app=nginx
printf '\n\033[32mnginx end-to-end: all steps passed\033[0m\n'
