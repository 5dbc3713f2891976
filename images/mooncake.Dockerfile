# Mooncake master (globalKV.enabled): the `mooncake_master` binary of the CUDA 13 Mooncake wheel, the
# same distribution and version as the engines' client (images/engine-lmcache.Dockerfile).
# Shaped like Mooncake's own docker/master-cuda13.Dockerfile (kvcache-ai/Mooncake 3b5a594):
# Debian trixie slim and the runtime libraries auditwheel leaves out of the wheel. The binary's ELF
# NEEDED (images/native-needed.json): libibverbs.so.1 (libibverbs1), libnuma.so.1 (libnuma1),
# libcurl.so.4 (libcurl4t64), libstdc++/libgcc/glibc (the base); ibverbs-providers holds the
# libibverbs device plugins (RDMA) and libmlx5.so.1. Checked without Docker by
# `python images/check_native_deps.py` (tests/unit/project/test_images_native_deps.py).
# Build and tag:  images/build.sh [--registry PREFIX] [--version VERSION] mooncake   (docs/deploy.md step 1)
FROM python:3.12-slim-trixie
ARG MOONCAKE_VERSION=0.3.13.post1
RUN apt-get update && apt-get install -y --no-install-recommends \
        ca-certificates libibverbs1 ibverbs-providers libnuma1 libcurl4t64 libstdc++6 \
 && rm -rf /var/lib/apt/lists/*
RUN pip install --no-cache-dir "mooncake-transfer-engine-cuda13==${MOONCAKE_VERSION}" \
 && useradd --uid 65532 --no-create-home --shell /usr/sbin/nologin mooncake
LABEL org.opencontainers.image.title="mooncake-master" \
      org.opencontainers.image.description="Mooncake store master for the SMetric global KV tier"
USER 65532
ENTRYPOINT ["mooncake_master"]
