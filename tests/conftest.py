"""Test tiers (docs/testing.md). ``pytest -q`` runs the fast tier: every test not marked with one of
:data:`TIERS`. Each other tier is one command: ``pytest -q -m slow`` (long integration runs),
``pytest -q -m chaos``, ``pytest -q -m vllm`` (the real vLLM CPU engine), ``pytest -q -m e2e``
(kind + helm); ``.ci/run`` runs them all.

* ``-m EXPR`` chooses the tests itself (``-m "not e2e"``: every tier but e2e).
* A test file named on the command line runs whole, whatever its tier: ``pytest
  tests/integration/chaos/test_chaos.py`` runs that file.
* :data:`SLOW` puts tests of other folders in the slow tier by node-id prefix, each with the time it
  took, so a tier changes here, in one place; a prefix that matches no collected test fails a
  whole-suite run (a renamed test must not fall silently back into the fast tier).
"""

from __future__ import annotations

from pathlib import Path

import pytest

TIERS: tuple[str, ...] = ("slow", "chaos", "vllm", "e2e")

# Measured with `pytest --durations` on the shared 2-core box under load (about 5-6 runnable
# processes per core): seconds of the whole prefix in that run.
SLOW: dict[str, str] = {
    "tests/unit/bench/test_bench_arrivals.py::test_agents_send_a_steady_request_rate_from_the_start": "153 s",
    "tests/integration/operator/test_operator_kmock.py": "108 s: kopf against kmock, 3 lifecycles",
    "tests/unit/operator/test_operator_deploy.py::test_samples_start_on_paper": "78 s",
    "tests/integration/envoy/test_envoy_cut_stream.py": "76 s",
    "tests/unit/epp/test_epp_parse_processes.py": "67 s: parse worker processes started and killed",
    "tests/unit/operator/test_operator_crd_versions.py::test_every_custom_resource_fits_the_pinned_crd": "60 s",
    "tests/integration/envoy/test_envoy_stuck_load.py": "57 s: 200 streaming requests per response path",
    "tests/unit/epp/test_epp_body_memory.py": "46 s",
    "tests/unit/epp/test_epp_leader.py::test_two_picker_processes_one_ready_and_failover_on_sigterm": "27 s",
    "tests/integration/bench/test_bench_side_by_side.py": "27 s",
    "tests/integration/bench/test_bench_smoke.py::test_quick_bench_runs_every_row_and_cleans_up": "a quick bench",
    "tests/integration/bench/test_bench_smoke.py::test_ctrl_c_and_sigterm_stop_every_process": "2 bench starts",
    "tests/integration/bench/test_bench_anthropic.py": "a quick bench over the Anthropic API",
}


def _named_files(config: pytest.Config) -> set[Path]:
    """The test files given on the command line (``file.py`` or ``file.py::test``)."""
    out = set()
    for arg in config.args:
        path = Path(arg.split("::", 1)[0])
        if path.suffix == ".py":
            out.add(path.resolve())
    return out


@pytest.hookimpl(tryfirst=True)  # before -m and -k deselect: SLOW's markers must be there for -m slow
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    used = set()
    for item in items:
        for prefix in SLOW:
            if item.nodeid == prefix or item.nodeid.startswith((prefix + "::", prefix + "[")):
                item.add_marker(pytest.mark.slow)
                used.add(prefix)
    whole_suite = config.args_source == pytest.Config.ArgsSource.TESTPATHS and not config.option.keyword
    if whole_suite and (unused := sorted(set(SLOW) - used)):
        raise pytest.UsageError(f"tests/conftest.py SLOW names tests that do not exist: {unused}")
    if config.option.markexpr:
        return
    named = _named_files(config)
    keep, drop = [], []
    for item in items:
        tiered = any(item.get_closest_marker(t) for t in TIERS)
        (drop if tiered and item.path.resolve() not in named else keep).append(item)
    if drop:
        config.hook.pytest_deselected(items=drop)
        items[:] = keep


def pytest_report_header(config: pytest.Config) -> str | None:
    if config.option.markexpr:
        return None
    return "tier: fast (the slower tiers: pytest -q -m slow | -m chaos | -m vllm | -m e2e; docs/testing.md)"
