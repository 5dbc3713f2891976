#!/usr/bin/env bash
# kind end-to-end environment for the SMetric operator.
#   tests/e2e/kind_e2e.sh up     create the cluster, build+load images, install CRDs and the chart,
#                                apply the kind sample pool and the Gateway example, wait for Ready
#   tests/e2e/kind_e2e.sh down   delete the cluster
# Needs docker (with a running engine), kind, kubectl and helm. Network is needed for the base
# images and the Gateway API / InferencePool CRDs (override the URLs for a mirror).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
CLUSTER="${SMETRIC_E2E_CLUSTER:-smetric-e2e}"
NODE_IMAGE="${SMETRIC_E2E_NODE_IMAGE:-kindest/node:v1.31.0}"
GATEWAY_API_CRDS="${GATEWAY_API_CRDS:-https://github.com/kubernetes-sigs/gateway-api/releases/download/v1.3.0/standard-install.yaml}"
INFERENCE_POOL_CRDS="${INFERENCE_POOL_CRDS:-https://github.com/kubernetes-sigs/gateway-api-inference-extension/releases/download/v1.0.0/manifests.yaml}"
TAG=dev

up() {
  if ! kind get clusters 2>/dev/null | grep -qx "$CLUSTER"; then
    kind create cluster --name "$CLUSTER" --image "$NODE_IMAGE" --wait 120s
  fi
  kubectl config use-context "kind-$CLUSTER"
  for image in operator epp emulator; do
    docker build -f "$ROOT/images/$image.Dockerfile" -t "smetric/smetric-$image:$TAG" "$ROOT"
    kind load docker-image --name "$CLUSTER" "smetric/smetric-$image:$TAG"
  done
  kubectl apply -f "$GATEWAY_API_CRDS"
  kubectl apply -f "$INFERENCE_POOL_CRDS"
  helm upgrade --install smetric "$ROOT/charts/smetric-operator" \
    --namespace smetric-system --create-namespace \
    --set image.repository=smetric/smetric-operator --set image.tag="$TAG" --set image.pullPolicy=Never \
    --wait --timeout 180s
  kubectl create namespace smetric --dry-run=client -o yaml | kubectl apply -f -
  kubectl apply -f "$ROOT/manifests/samples/gateway.yaml"  # no Gateway controller needed: Envoy stands in
  kubectl apply -f "$ROOT/manifests/samples/kind-emulator.yaml"
  kubectl -n smetric wait smetricpool/emu --for=jsonpath='{.status.phase}'=Ready --timeout=300s
  kubectl -n smetric get smetricpool emu
}

down() {
  kind delete cluster --name "$CLUSTER"
}

case "${1:-}" in
  up) up ;;
  down) down ;;
  *) echo "usage: $0 up|down" >&2; exit 2 ;;
esac
