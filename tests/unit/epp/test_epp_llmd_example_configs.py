"""llm-d's own example configs, loaded as smetric-epp loads them, and the routing they produce.

* ``AGENTIC``: the EndpointPickerConfig of llm-d/llm-d ``guides/agentic-serving/router/
  agentic-serving.values.yaml`` (commit 5cf25d8c), the agentic-serving guide's router: agent
  identity, approximate prefix cache with a prefix-cache affinity filter and token-load scoring,
  program-aware fairness.
* ``PRECISE``: llm-d-router v0.10.0 ``deploy/config/epp-precise-prefix-cache-config.yaml`` (the
  split precise-prefix-cache pipeline), verbatim but for its comments.

Each maps to what it asks of the pool, or says loudly why not: prefix-cache affinity (lmetric),
the agents' session headers as the session key, the precise index with the producer's block size.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import grpc
import pytest
import yaml
from prometheus_client import CollectorRegistry

from smetric.core.views import RequestView
from smetric.epp.config import read_config
from smetric.epp.contracts import EndpointInfo
from smetric.epp.obs.metrics import PickerMetrics
from smetric.epp.server.app import build_picker
from smetric.epp.server.servicer import ExtProcServicer, ServicerSettings
from smetric.epp.server.static import StaticEndpointSource
from smetric.epp.settings import PickerSettings
from smetric.epp.upstream.translate import AGENT_HEADERS
from smetric.policy.pickerconfig import policy_params
from tests.support.epp_harness import BASE_HEADERS, EPS, FakeIndex, body_msgs, chat, headers_msg, set_headers

AGENTIC = """\
apiVersion: llm-d.ai/v1alpha1
kind: EndpointPickerConfig
plugins:
- type: agent-identity
- type: token-load-scorer
- type: inflight-load-producer
- type: approx-prefix-cache-producer
  parameters:
    maxPrefixTokensToMatch: 262144
    autoTune: false
    lruCapacityPerServer: 1570000
    blockSizeTokens: 256
- type: prefix-cache-affinity-filter
  parameters:
    peakPrefillThroughput: 16444
- type: program-aware-fairness
featureGates:
- flowControl
flowControl:
  defaultPriorityBand:
    fairnessPolicyRef: program-aware-fairness
schedulingProfiles:
- name: default
  plugins:
  - pluginRef: prefix-cache-affinity-filter
  - pluginRef: token-load-scorer
"""

PRECISE = """\
apiVersion: llm-d.ai/v1alpha1
kind: EndpointPickerConfig
plugins:
  - type: token-producer
    parameters:
      modelName: hf-repo/model-name
      vllm:
        url: http://localhost:8000
  - type: endpoint-notification-source
  - type: metrics-data-source
  - type: core-metrics-extractor
  - type: single-profile-handler
  - type: decode-filter
  - type: precise-prefix-cache-producer
    parameters:
      tokenProcessorConfig:
        blockSize: 64
      indexerConfig:
        kvBlockIndexConfig:
          enableMetrics: true
  - type: prefix-cache-scorer
    parameters:
      prefixMatchInfoProducerName: precise-prefix-cache-producer
  - type: kv-cache-utilization-scorer
  - type: queue-scorer
  - type: max-score-picker
dataLayer:
  sources:
    - pluginRef: metrics-data-source
      extractors:
        - pluginRef: core-metrics-extractor
    - pluginRef: endpoint-notification-source
      extractors:
        - pluginRef: precise-prefix-cache-producer
schedulingProfiles:
  - name: default
    plugins:
      - pluginRef: decode-filter
      - pluginRef: prefix-cache-scorer
        weight: 2.0
      - pluginRef: kv-cache-utilization-scorer
        weight: 1.0
      - pluginRef: queue-scorer
        weight: 1.0
      - pluginRef: max-score-picker
"""


def _read(text: str) -> Any:
    return read_config(yaml.safe_load(text), "example.yaml")


def test_the_agentic_config_asks_for_prefix_affinity_and_agent_session_keys() -> None:
    loaded = _read(AGENTIC)
    cfg = loaded.config
    assert cfg.policy.name == "lmetric"  # prefix-cache affinity traded against token load
    assert cfg.sessionHeaders == ("x-session-token", *AGENT_HEADERS)
    joined = "\n".join(loaded.warnings)
    assert "prefix-cache-affinity-filter" in joined and "'lmetric'" in joined
    assert "agent-identity" not in joined  # mapped, not ignored
    assert "program-aware-fairness" in joined and "flowControl" in joined  # said, not silent


class _Spy:
    """The picker's ``pick``, recording the request view of each decision."""

    def __init__(self, picker: Any) -> None:
        self.views: list[RequestView] = []
        self._pick = picker.pick
        picker.pick = self

    def __call__(self, view: RequestView, *args: Any, **kwargs: Any) -> Any:
        self.views.append(view)
        return self._pick(view, *args, **kwargs)


def _servicer(text: str) -> tuple[ExtProcServicer, FakeIndex, _Spy]:
    cfg = _read(text).config
    source = StaticEndpointSource([EndpointInfo(a) for a in EPS])
    index = FakeIndex()
    picker = build_picker(cfg, policy_params(cfg), source, index)
    settings = ServicerSettings.from_picker(PickerSettings.defaults(), cfg.servedModels, cfg.sessionHeaders)
    return ExtProcServicer(picker, PickerMetrics(CollectorRegistry()), settings), index, _Spy(picker)


async def _route(stub: Any, headers: dict[str, str], text: str) -> str:
    call = stub.Process()
    await call.write(headers_msg({**BASE_HEADERS, **headers}))
    for m in body_msgs(chat(text=text)):
        await call.write(m)
    reply = await call.read()
    await call.done_writing()
    while await call.read() != grpc.aio.EOF:
        pass
    return set_headers(reply)["x-smetric-destination-primary"]


async def test_the_agentic_config_routes_to_the_cached_endpoint_and_keys_by_agent(serve: Any) -> None:
    servicer, index, spy = _servicer(AGENTIC)
    stub = await serve(servicer)
    index.hits = {EPS[2]: 10_000}  # the third endpoint holds the agent's prefix
    agent = {"x-claude-code-session-id": "agent-7", "x-request-id": "a1"}
    assert await _route(stub, agent, "turn one " * 50) == EPS[2]
    assert spy.views[-1].session_id == "agent-7"  # the agent's own header is the session key
    codex = {"session-id": "codex-1", "x-request-id": "a2"}
    await _route(stub, codex, "x")
    assert spy.views[-1].session_id == "codex-1"
    both = {"x-session-token": "explicit", "x-session-affinity": "opencode-1", "x-request-id": "a3"}
    await _route(stub, both, "x")
    assert spy.views[-1].session_id == "explicit"  # the picker's own header first
    await _route(stub, {"x-request-id": "a4"}, "x")
    assert spy.views[-1].session_id is None


def test_the_precise_config_selects_the_precise_index_with_its_block_size() -> None:
    loaded = _read(PRECISE)
    index = loaded.config.prefixIndex
    assert index is not None
    assert (index.mode, index.blockSize, index.tokenizer) == ("precise", 64, "hf-repo/model-name")
    assert not any("precise-prefix-cache-producer" in w for w in loaded.warnings)  # not ignored
    settings = PickerSettings.defaults().with_config_index(index)
    assert (settings.prefix_index, settings.block_size, settings.tokenizer) == (
        "precise",
        64,
        "hf-repo/model-name",
    )
    # a local copy of the tokenizer on the command line wins over the config's model name
    flagged = PickerSettings.from_argv(["--tokenizer=/models/qwen"]).with_config_index(index)
    assert (flagged.prefix_index, flagged.tokenizer) == ("precise", "/models/qwen")


def test_a_precise_config_without_a_tokenizer_is_refused_not_degraded(
    capsys: pytest.CaptureFixture[str],
) -> None:
    from smetric.epp.main import main

    text = PRECISE.replace(
        "  - type: token-producer\n    parameters:\n      modelName: hf-repo/model-name\n",
        "  - type: token-producer\n    parameters:\n",
    )
    loaded = _read(text)
    assert loaded.config.prefixIndex is not None and loaded.config.prefixIndex.tokenizer == ""
    assert any("needs the engines' tokenizer" in w for w in loaded.warnings)
    with pytest.raises(ValueError, match="mode precise needs the engines' tokenizer"):
        PickerSettings.defaults().with_config_index(loaded.config.prefixIndex)
    assert main(["--endpoints=127.0.0.1:1", f"--config-text={text}"]) == 2
    assert "mode precise needs the engines' tokenizer" in capsys.readouterr().err


def test_the_precise_config_builds_a_precise_index(tmp_path: Path) -> None:
    """With the engines' tokenizer at hand (a local one here), the datastore keeps the precise
    index at the producer's 64-token blocks."""
    tokenizers = pytest.importorskip("tokenizers")
    from smetric.epp.datastore import build_datastore
    from smetric.epp.index.precise import PreciseIndex

    tok = tokenizers.Tokenizer(tokenizers.models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer = tokenizers.pre_tokenizers.ByteLevel(add_prefix_space=False)
    trainer = tokenizers.trainers.BpeTrainer(vocab_size=300, special_tokens=["<unk>", "<s>"])
    tok.train_from_iterator(["hello world"] * 20, trainer=trainer)
    tok.save(str(tmp_path / "tokenizer.json"))
    (tmp_path / "tokenizer_config.json").write_text(json.dumps({"bos_token": "<s>"}))
    index = _read(PRECISE.replace("hf-repo/model-name", str(tmp_path))).config.prefixIndex
    settings = PickerSettings.from_argv(["--endpoints=127.0.0.1:1"]).with_config_index(index)
    datastore = build_datastore(settings)
    assert isinstance(datastore.index, PreciseIndex) and datastore.index.block_size == 64
