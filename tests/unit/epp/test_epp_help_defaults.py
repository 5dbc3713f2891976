"""``smetric-epp --help`` states the defaults the picker really uses, and every binary has
``--version`` from the package metadata.

The help texts are built from the code that picks the defaults (``registry.default_policy``,
``pickerflags.POOL_GAUGE_INTERVAL_S``); these tests read the printed help and run the behaviour, so
a help text that names another default (it once said ``llmd-slo``) fails here.
"""

from __future__ import annotations

import contextlib
import io
import re
import tomllib
from importlib.metadata import EntryPoint, version
from pathlib import Path

import pytest

from smetric.core.pickerflags import build_parser
from smetric.epp.config import load_config
from smetric.epp.settings import PickerSettings

ROOT = Path(__file__).resolve().parents[3]
TIER_PARAMS = "policy:\n  parameters:\n    globalFetchSPerToken: 2.0e-5\n"
NO_TIER_PARAMS = "policy:\n  parameters: {}\n"


def _help() -> str:
    return " ".join(build_parser().format_help().split())


def _help_of(flag: str) -> str:
    text = _help()
    start = text.index(f"{flag} ")
    following = re.search(r" --[a-z]", text[start + len(flag) + 1 :])
    assert following is not None
    return text[start : start + len(flag) + 1 + following.start()]


def test_config_help_names_the_policies_the_picker_runs() -> None:
    text = _help_of("--config-file CONFIG")
    empty = re.search(r"empty = ([a-z0-9-]+) with its defaults", text)
    named = re.search(
        r"gets ([a-z0-9-]+) when its parameters set globalFetchSPerToken .*?, else ([a-z0-9-]+)", text
    )
    one = re.search(r"gets ([a-z0-9-]+) too, with or without globalFetchSPerToken", text)
    assert empty and (named or one), text
    assert empty.group(1) == load_config(None).policy.name == load_config("").policy.name
    with_tier, without = (named.group(1), named.group(2)) if named else (one.group(1), one.group(1))  # type: ignore[union-attr]
    assert with_tier == load_config(None, TIER_PARAMS).policy.name
    assert without == load_config(None, NO_TIER_PARAMS).policy.name
    assert "llmd-slo" not in text


def test_pool_gauge_interval_help_is_the_settings_default() -> None:
    text = _help_of("--refresh-prometheus-metrics-interval REFRESH_PROMETHEUS_METRICS_INTERVAL")
    stated = re.search(r"\(default ([0-9.]+)s\)", text)
    assert stated, text
    assert float(stated.group(1)) == PickerSettings.defaults().pool_gauge_interval_s


def _scripts() -> dict[str, str]:
    with (ROOT / "pyproject.toml").open("rb") as fh:
        return dict(tomllib.load(fh)["project"]["scripts"])


@pytest.mark.parametrize("script", sorted(_scripts()))
def test_every_binary_reports_the_package_version(script: str) -> None:
    main = EntryPoint(name=script, value=_scripts()[script], group="console_scripts").load()
    out = io.StringIO()
    with contextlib.redirect_stdout(out), pytest.raises(SystemExit) as done:
        code = main(["--version"])
        raise SystemExit(code)
    assert done.value.code in (0, None)
    assert out.getvalue().strip() == f"{script} {version('smetric')}"
