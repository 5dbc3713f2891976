"""The picker reloads its config file on change (epp/reload.py); a bad file keeps the running
config and logs one clear error. Through the real picker process: ``smetric-epp --config-file``
over a static pool, the policy read back from the decisions it counts on /metrics."""

from __future__ import annotations

import asyncio
import logging
import sys
from pathlib import Path

import aiohttp
import grpc
import pytest
from envoy.service.ext_proc.v3 import external_processor_pb2_grpc as ep_grpc
from prometheus_client.parser import text_string_to_metric_families

from smetric.emulator.ports import free_port_block
from smetric.epp.config import LoadedConfig
from smetric.epp.index.approximate import ApproximateIndex
from smetric.epp.obs.health import wait_serving
from smetric.epp.reload import MAX_CONFIG_BYTES, ConfigReloader
from smetric.epp.server.app import build_picker
from smetric.epp.server.outlier import OutlierDetector, OutlierSettings
from smetric.epp.server.static import StaticEndpointSource
from smetric.policy import params_from_mapping
from smetric.policy.pickerconfig import PickerConfig
from tests.support.epp_harness import BASE_HEADERS, body_msgs, chat, exchange, headers_msg

GOOD = "policy: {name: lmetric}\n"
OTHER = "policy: {name: smetric}\nservedModels: [qwen]\n"


def _reloader(path: Path) -> tuple[ConfigReloader, list[LoadedConfig]]:
    applied: list[LoadedConfig] = []

    def apply(loaded: LoadedConfig) -> None:
        params_from_mapping(loaded.config.policy.parameters)  # what the picker's apply checks
        applied.append(loaded)

    return ConfigReloader(path, apply, interval_s=0.01), applied


def test_a_changed_file_is_applied_once(tmp_path: Path) -> None:
    path = tmp_path / "config.yaml"
    path.write_text(GOOD)
    reloader, applied = _reloader(path)
    assert not reloader.check()  # unchanged since start-up
    path.write_text(OTHER)
    assert reloader.check()
    assert not reloader.check()  # the same content again: nothing to do
    assert [a.config.policy.name for a in applied] == ["smetric"]
    assert applied[0].config.servedModels == ("qwen",)


@pytest.mark.parametrize(
    ("text", "said"),
    [
        ("policy: {name: nope}\n", "unknown policy 'nope'"),
        ("policy: [unclosed\n", "not valid YAML"),
        ("policy: {name: smetric, parameters: {slack: -5}}\n", "slack"),
        ("x" * (MAX_CONFIG_BYTES + 1), "larger than"),
    ],
)
def test_a_bad_file_keeps_the_config_and_logs_one_error(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, text: str, said: str
) -> None:
    path = tmp_path / "config.yaml"
    path.write_text(GOOD)
    reloader, applied = _reloader(path)
    path.write_text(text)
    with caplog.at_level(logging.ERROR, logger="smetric.epp.config"):
        for _ in range(5):  # polled again and again: one error
            assert not reloader.check()
    errors = [r.getMessage() for r in caplog.records if r.levelno == logging.ERROR]
    assert len(errors) == 1 and said in errors[0] and "running config stays" in errors[0], errors
    assert applied == []
    path.write_text(OTHER)  # fixed: applied
    assert reloader.check() and applied[0].config.policy.name == "smetric"


def test_a_missing_file_keeps_the_config(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    path = tmp_path / "config.yaml"
    path.write_text(GOOD)
    reloader, applied = _reloader(path)
    path.unlink()
    with caplog.at_level(logging.ERROR, logger="smetric.epp.config"):
        assert not reloader.check() and not reloader.check()
    assert sum(1 for r in caplog.records if "cannot read config" in r.getMessage()) == 1
    assert applied == []


def test_a_reloaded_picker_keeps_the_requests_in_flight() -> None:
    source = StaticEndpointSource(["10.0.0.1:8000"])
    index = ApproximateIndex()
    old = build_picker(PickerConfig(), params_from_mapping({}), source, index)
    new = build_picker(PickerConfig(), params_from_mapping({}), source, index, succeeds=old)
    assert new.ledger is old.ledger and new.rates is old.rates


def test_a_reloaded_picker_keeps_its_ejections_and_follow_up_map() -> None:
    """A config reload keeps the outlier detector (an ejected engine stays out) and the Responses
    follow-up map, as the running picker's ``main`` builds the replacement (no outlier argument)."""
    source = StaticEndpointSource(["10.0.0.1:8000"])
    index = ApproximateIndex()
    outliers = OutlierDetector(OutlierSettings(3, 10.0, 300.0))
    old = build_picker(
        PickerConfig(), params_from_mapping({}), source, index, response_affinity_entries=8, outliers=outliers
    )
    assert old.outliers is outliers and old.responses is not None
    new = build_picker(PickerConfig(), params_from_mapping({}), source, index, succeeds=old)
    assert new.outliers is outliers and new.responses is old.responses


def _decisions(page: str) -> dict[str, float]:
    out: dict[str, float] = {}
    for fam in text_string_to_metric_families(page):
        for s in fam.samples:
            if s.name == "smetric_epp_decisions_total":
                out[s.labels["policy"]] = out.get(s.labels["policy"], 0.0) + s.value
    return out


async def _policy_after_request(port: int, grpc_port: int) -> dict[str, float]:
    async with grpc.aio.insecure_channel(f"127.0.0.1:{grpc_port}") as channel:
        await exchange(
            ep_grpc.ExternalProcessorStub(channel), [headers_msg(BASE_HEADERS), *body_msgs(chat())]
        )
    async with aiohttp.ClientSession() as http, http.get(f"http://127.0.0.1:{port}/metrics") as r:
        return _decisions(await r.text())


@pytest.mark.integration
async def test_the_running_picker_follows_its_config_file(tmp_path: Path) -> None:
    grpc_port, health_port, metrics_port = (free_port_block(3) + i for i in range(3))
    path = tmp_path / "config.yaml"
    path.write_text(GOOD)
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "smetric.epp.main", "--endpoints=10.0.0.1:8000", f"--config-file={path}",
        f"--grpc-port={grpc_port}", f"--grpc-health-port={health_port}", f"--metrics-port={metrics_port}",
        "--bind-address=127.0.0.1", "--secure-serving=false", stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    try:
        await wait_serving(f"127.0.0.1:{health_port}", 60.0)
        assert (await _policy_after_request(metrics_port, grpc_port)).keys() == {"lmetric"}
        path.write_text("policy: {name: nope}\n")  # bad: kept
        await asyncio.sleep(2.5)
        assert (await _policy_after_request(metrics_port, grpc_port)).keys() == {"lmetric"}
        path.write_text(OTHER.replace("servedModels: [qwen]\n", ""))
        for _ in range(60):
            await asyncio.sleep(0.25)
            if "smetric" in await _policy_after_request(metrics_port, grpc_port):
                break
        assert "smetric" in await _policy_after_request(metrics_port, grpc_port)
    finally:
        proc.terminate()
        _, err = await asyncio.wait_for(proc.communicate(), 30)
    log = err.decode()
    assert log.count("config reload refused") == 1 and "unknown policy 'nope'" in log, log[-2000:]
    assert "config reloaded" in log
