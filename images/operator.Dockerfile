# Kubernetes operator for SMetricPool.
# Build and tag:  images/build.sh [--registry PREFIX] [--version VERSION] operator   (docs/deploy.md step 1)
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
RUN pip wheel --no-cache-dir --wheel-dir /wheels .

FROM python:3.11-slim
LABEL org.opencontainers.image.title="smetric-operator" \
      org.opencontainers.image.description="Kubernetes operator for SMetricPool" \
      org.opencontainers.image.licenses="Apache-2.0"
RUN useradd --uid 65532 --no-create-home --shell /usr/sbin/nologin smetric
COPY --from=wheel /wheels /wheels
RUN pip install --no-cache-dir --no-index --find-links=/wheels smetric && rm -rf /wheels
ENV PYTHONUNBUFFERED=1
USER 65532
ENTRYPOINT ["smetric-operator"]
CMD ["run", "--all-namespaces"]
