# Mooncake master (globalKV.enabled): the `mooncake_master` binary of the mooncake-transfer-engine
# wheel, pinned. Build:  docker build -f images/mooncake.Dockerfile -t ghcr.io/<you>/mooncake-master:0.3.13.post1 .
FROM python:3.11-slim
ARG MOONCAKE_VERSION=0.3.13.post1
RUN pip install --no-cache-dir "mooncake-transfer-engine==${MOONCAKE_VERSION}" \
 && useradd --uid 65532 --no-create-home --shell /usr/sbin/nologin mooncake
LABEL org.opencontainers.image.title="mooncake-master" \
      org.opencontainers.image.description="Mooncake store master for the SMetric global KV tier"
USER 65532
ENTRYPOINT ["mooncake_master"]
