# vLLM engine with LMCache and the Mooncake transfer engine: the global KV tier (globalKV.enabled)
# runs LMCacheConnectorV1 on Mooncake inside vLLM, which the plain vllm/vllm-openai image lacks.
# Versions pinned to the releases on PyPI: lmcache 0.5.6, mooncake-transfer-engine 0.3.13.post1.
# Build:  docker build -f images/engine-lmcache.Dockerfile -t ghcr.io/<you>/vllm-lmcache:v0.32.0-lmcache0.5.6 .
ARG VLLM_IMAGE=vllm/vllm-openai:v0.32.0
FROM ${VLLM_IMAGE}
ARG LMCACHE_VERSION=0.5.6
ARG MOONCAKE_VERSION=0.3.13.post1
RUN pip install --no-cache-dir "lmcache==${LMCACHE_VERSION}" "mooncake-transfer-engine==${MOONCAKE_VERSION}"
LABEL org.opencontainers.image.title="vllm-lmcache" \
      org.opencontainers.image.description="vLLM + LMCache + Mooncake transfer engine (SMetric global KV tier)"
