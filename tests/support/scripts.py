"""Import a script that is not part of a package (``docs/gen.py``, ``images/check_native_deps.py``) by its path."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[2]


def load_script(path: Path, name: str) -> ModuleType:
    """The module at ``path``, registered in ``sys.modules`` as ``name`` (dataclasses look their
    module up there)."""
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module
