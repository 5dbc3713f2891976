#!/usr/bin/env bash
# kind end-to-end environment for the SMetric operator: the steps of docs/deploy.md with the
# emulator sample (no GPU).
#   tests/e2e/kind_e2e.sh up      cluster, images (built here, loaded into kind), Gateway API +
#                                 Inference Extension CRDs, kgateway, the chart, Gateway + sample
#                                 pool, wait for Ready, one chat completion through the Gateway,
#                                 the picker's decision metrics
#   tests/e2e/kind_e2e.sh down    delete the cluster
# Needs docker (with a running engine), kind, kubectl and helm. Network is needed for the base
# images, the CRDs and the kgateway charts (override the URLs/versions for a mirror).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
CLUSTER="${SMETRIC_E2E_CLUSTER:-smetric-e2e}"
NODE_IMAGE="${SMETRIC_E2E_NODE_IMAGE:-kindest/node:v1.31.0}"
GATEWAY_API_VERSION="${GATEWAY_API_VERSION:-v1.3.0}"
GIE_VERSION="${GIE_VERSION:-v1.0.0}"
KGTW_VERSION="${KGTW_VERSION:-v2.1.0}"
GATEWAY_API_CRDS="${GATEWAY_API_CRDS:-https://github.com/kubernetes-sigs/gateway-api/releases/download/${GATEWAY_API_VERSION}/standard-install.yaml}"
INFERENCE_POOL_CRDS="${INFERENCE_POOL_CRDS:-https://github.com/kubernetes-sigs/gateway-api-inference-extension/releases/download/${GIE_VERSION}/manifests.yaml}"
TAG=dev
LOCAL_PORT="${SMETRIC_E2E_GATEWAY_PORT:-18081}"

up() {
  # 1. Cluster and images (docs/deploy.md step 1: here loaded into kind instead of pushed).
  if ! kind get clusters 2>/dev/null | grep -qx "$CLUSTER"; then
    kind create cluster --name "$CLUSTER" --image "$NODE_IMAGE" --wait 120s
  fi
  kubectl config use-context "kind-$CLUSTER"
  for image in operator epp emulator; do
    docker build -f "$ROOT/images/$image.Dockerfile" -t "smetric/smetric-$image:$TAG" "$ROOT"
    kind load docker-image --name "$CLUSTER" "smetric/smetric-$image:$TAG"
  done
  # 2. CRDs: Gateway API and Inference Extension (InferencePool v1).
  kubectl apply -f "$GATEWAY_API_CRDS"
  kubectl apply -f "$INFERENCE_POOL_CRDS"
  # The pools' namespace, before the operator (its watchNamespaces Roles) and the samples use it.
  kubectl create namespace smetric --dry-run=client -o yaml | kubectl apply -f -
  # 3. A gateway implementation with InferencePool support: kgateway.
  helm upgrade -i --create-namespace --namespace kgateway-system --version "$KGTW_VERSION" \
    kgateway-crds oci://cr.kgateway.dev/kgateway-dev/charts/kgateway-crds
  helm upgrade -i --namespace kgateway-system --version "$KGTW_VERSION" \
    kgateway oci://cr.kgateway.dev/kgateway-dev/charts/kgateway \
    --set inferenceExtension.enabled=true --wait --timeout 300s
  # 4. The operator.
  helm upgrade --install smetric "$ROOT/charts/smetric-operator" \
    --namespace smetric-system --create-namespace \
    --set image.repository=smetric/smetric-operator --set image.tag="$TAG" --set image.pullPolicy=Never \
    --wait --timeout 180s
  # 5. Gateway + sample pool; wait for Ready (deployments ready and the route accepted).
  kubectl apply -f "$ROOT/manifests/samples/gateway.yaml"
  kubectl apply -f "$ROOT/manifests/samples/kind-emulator.yaml"
  kubectl -n smetric wait smetricpool/emu --for=jsonpath='{.status.phase}'=Ready --timeout=600s
  kubectl -n smetric get smetricpool emu
  # 6. A first request through the Gateway, then the picker's decision metrics.
  first_request
}

first_request() {
  kubectl -n smetric port-forward service/inference-gateway "$LOCAL_PORT:80" >/dev/null 2>&1 &
  local fwd=$!
  trap 'kill $fwd 2>/dev/null || true' RETURN
  for _ in $(seq 1 30); do
    if curl -sf -o /dev/null "http://127.0.0.1:$LOCAL_PORT/v1/models"; then break; fi
    sleep 2
  done
  curl -sf "http://127.0.0.1:$LOCAL_PORT/v1/chat/completions" -H 'content-type: application/json' \
    -d '{"model":"qwen3-coder","messages":[{"role":"user","content":"hello"}],"max_tokens":16}'
  echo
  kubectl -n smetric exec deployment/emu-epp -- python -c \
    "import urllib.request; print(''.join(l for l in urllib.request.urlopen('http://127.0.0.1:9090/metrics').read().decode().splitlines(True) if l.startswith('smetric_epp_decisions')))"
}

down() {
  kind delete cluster --name "$CLUSTER"
}

case "${1:-}" in
  up) up ;;
  request) first_request ;;
  down) down ;;
  *) echo "usage: $0 up|request|down" >&2; exit 2 ;;
esac
