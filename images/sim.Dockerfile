# smetric simulate on a Dask cluster: the scheduler, the workers and the sweep client share this
# image (the workers unpickle the client's tasks, so every pod must run the same smetric version).
# Build and tag:  images/build.sh [--registry PREFIX] [--version VERSION] sim   (docs/deploy.md step 1)
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
RUN pip wheel --no-cache-dir --wheel-dir /wheels '.[cluster]'

FROM python:3.11-slim
LABEL org.opencontainers.image.title="smetric-sim" \
      org.opencontainers.image.description="smetric simulate with the [cluster] extra (Dask distributed)" \
      org.opencontainers.image.licenses="Apache-2.0"
RUN useradd --uid 65532 --create-home --shell /usr/sbin/nologin smetric
COPY --from=wheel /wheels /wheels
RUN pip install --no-cache-dir --no-index --find-links=/wheels 'smetric[cluster]' && rm -rf /wheels
ENV PYTHONUNBUFFERED=1
USER 65532
WORKDIR /home/smetric
CMD ["smetric", "simulate", "--help"]
