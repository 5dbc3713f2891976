# SMetric endpoint picker (Envoy ext_proc on 9002, gRPC health 9003, metrics 9090).
# Build and tag:  images/build.sh [--registry PREFIX] [--version VERSION] epp   (docs/deploy.md step 1)
FROM python:3.11-slim AS wheel
WORKDIR /src
COPY pyproject.toml README.md ./
COPY core core
COPY sim sim
COPY engine engine
COPY trace trace
COPY emulator emulator
COPY bench/smetric bench/smetric
COPY epp epp
COPY operator operator
COPY crds crds
# The [tokenizer] extra: `prefixIndex: precise` loads the model's tokenizer (tokenizers, jinja2 and
# huggingface_hub for a model id resolved through the mounted hub cache or the network).
RUN pip wheel --no-cache-dir --wheel-dir /wheels ".[tokenizer]"

FROM python:3.11-slim
LABEL org.opencontainers.image.title="smetric-epp" \
      org.opencontainers.image.description="SMetric endpoint picker (Envoy ext_proc on 9002, gRPC health 9003, metrics 9090)" \
      org.opencontainers.image.licenses="Apache-2.0"
RUN useradd --uid 65532 --no-create-home --shell /usr/sbin/nologin smetric
COPY --from=wheel /wheels /wheels
RUN pip install --no-cache-dir --no-index --find-links=/wheels "smetric[tokenizer]" && rm -rf /wheels
ENV PYTHONUNBUFFERED=1 HF_HOME=/var/cache/huggingface
USER 65532
ENTRYPOINT ["smetric-epp"]
CMD ["--help"]
