# vLLM engine with LMCache and the Mooncake transfer engine: the global KV tier (globalKV.enabled)
# runs LMCacheConnectorV1 on Mooncake inside vLLM, which the plain vllm/vllm-openai image lacks.
# vLLM 0.32.0 runs torch 2.13.0 on CUDA 13 (cuda-toolkit[cudart]==13.0.3), and lmcache 0.5.6's
# cuda_ops needs libcudart.so.13: Mooncake must be the CUDA 13 wheel (mooncake-transfer-engine-cuda13;
# the plain mooncake-transfer-engine's engine.so/store.so need libcudart.so.12 and fail to import).
# Its engine.so/store.so also need libibverbs.so.1, libmlx5.so.1, libnuma.so.1 and libcurl.so.4,
# which auditwheel leaves to the system (Mooncake docker/master-cuda13.Dockerfile installs the same
# packages). Checked without Docker by `python images/check_native_deps.py`
# (tests/unit/project/test_images_native_deps.py; images/native-needed.json).
# Build and tag:  images/build.sh [--registry PREFIX] [--version VERSION] engine-lmcache   (docs/deploy.md step 1)
ARG VLLM_IMAGE=vllm/vllm-openai:v0.32.0
FROM ${VLLM_IMAGE}
ARG LMCACHE_VERSION=0.5.6
ARG MOONCAKE_VERSION=0.3.13.post1
RUN apt-get update && apt-get install -y --no-install-recommends \
        libibverbs1 ibverbs-providers libnuma1 libcurl4 \
 && rm -rf /var/lib/apt/lists/*
RUN pip install --no-cache-dir "lmcache==${LMCACHE_VERSION}" "mooncake-transfer-engine-cuda13==${MOONCAKE_VERSION}"
LABEL org.opencontainers.image.title="vllm-lmcache" \
      org.opencontainers.image.description="vLLM + LMCache + Mooncake transfer engine (CUDA 13) (SMetric global KV tier)"
