"""The installed distribution's version, for every binary's ``--version`` (``smetric``,
``smetric-epp``, ``smetric-operator``): read from the package metadata, so the wheel, the images and
the editable checkout all report what ``pyproject.toml`` declares."""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version

DISTRIBUTION = "smetric"


def package_version() -> str:
    """``pyproject.toml``'s ``[project] version`` as installed; a source tree run without
    installing (no metadata) says so instead of guessing."""
    try:
        return version(DISTRIBUTION)
    except PackageNotFoundError:
        return "unknown (not installed: pip install -e .)"


def version_line(prog: str) -> str:
    return f"{prog} {package_version()}"
