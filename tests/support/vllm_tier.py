"""The real-vLLM tier's interpreter (``tests/integration/vllm``, marker ``vllm``): the venv that
``tests/integration/vllm/install_vllm_tier.sh`` builds, ``$SMETRIC_VLLM_VENV`` or ``.venv-vllm``."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

VENV = Path(os.environ.get("SMETRIC_VLLM_VENV", Path(__file__).parents[2] / ".venv-vllm"))
INSTALL = "bash tests/integration/vllm/install_vllm_tier.sh .venv-vllm (README, Tests)"


def tier_python() -> Path:
    """The tier venv's ``python``; skips the test when the tier is disabled
    (``SMETRIC_VLLM_TIER=0``) or not installed."""
    if os.environ.get("SMETRIC_VLLM_TIER") == "0":
        pytest.skip("vLLM tier disabled (SMETRIC_VLLM_TIER=0)")
    py = VENV / "bin" / "python"
    if not py.exists():
        pytest.skip(f"vLLM tier not installed ({py} missing; run {INSTALL} or set SMETRIC_VLLM_VENV)")
    return py
