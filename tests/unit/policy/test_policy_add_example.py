"""The worked example of docs/architecture.md, "Add a policy": a policy with one parameter is
one module (class + ``Params``) and one registry entry; names, the config parser, the simulator
CLI and the generated CRD schema pick it up from the registry with no other edit."""

from __future__ import annotations

import re
import sys
from pathlib import Path
from types import ModuleType

import pytest

from smetric.core.views import EndpointSnapshot, RequestView
from smetric.operator.gencrd import crd_text, router_schema
from smetric.policy import Router, params_from_mapping
from smetric.policy.registry import REGISTRY, Registry
from smetric.sim import cli
from tests.support.scripts import load_script

# File 1 of 3: the policy module (in the tree: core/smetric/policy/least_queue.py).
TOY_MODULE = '''
from collections.abc import Sequence

from pydantic import Field

from smetric.core.names import REASON_BALANCE
from smetric.core.views import EndpointSnapshot, RequestView
from smetric.policy.base import Decision, PolicyParams
from smetric.policy.estimates import batch, nonneg
from smetric.policy.params import ParamsModel
from smetric.policy.registry import PolicyEntry
from smetric.policy.select import argmin_first


class LeastQueueParams(ParamsModel):
    queue_weight: float = Field(default=1.0, gt=0, description="Weight of queued prefill tokens against batch size.")


class LeastQueue:
    name = "least-queue"

    def __init__(self, params: PolicyParams) -> None:
        self._w = params.get(LeastQueueParams).queue_weight

    def pick(self, request: RequestView, endpoints: Sequence[EndpointSnapshot]) -> Decision:
        scores = tuple(self._w * nonneg(ep.queued_prefill_tokens) + batch(ep) for ep in endpoints)
        return Decision(argmin_first(scores), REASON_BALANCE, scores)

    def on_dispatch(self, request: RequestView, endpoint: str) -> None:
        """Stateless."""


# File 2 of 3: in the tree, this is one line appended to BUILTIN in smetric/policy/registry.py.
ENTRY = PolicyEntry("least-queue", LeastQueue, LeastQueueParams)
'''


@pytest.fixture
def toy(tmp_path: Path) -> ModuleType:
    path = tmp_path / "least_queue.py"
    path.write_text(TOY_MODULE, encoding="utf-8")
    yield load_script(path, "least_queue_example")
    del sys.modules["least_queue_example"]


@pytest.fixture
def registry(toy: ModuleType) -> Registry:
    return REGISTRY.with_entries(toy.ENTRY)


def test_registered_and_built_with_its_parameter_from_yaml(registry: Registry) -> None:
    assert registry.names[-1] == "least-queue" and "least-queue" not in REGISTRY.names
    params = params_from_mapping({"queueWeight": 0.5, "slack": 2.0}, registry)
    policy = registry.make("least-queue", params)
    eps = [EndpointSnapshot("a", queued_prefill_tokens=10, running=1), EndpointSnapshot("b", running=5)]
    d = Router(policy).pick(RequestView("r", prompt_tokens=100), eps)
    assert d.scores == (0.5 * 10 + 1, 5.0) and d.target == 1
    with pytest.raises(ValueError, match="queueWeight"):
        params_from_mapping({"queueWeight": 0}, registry)
    with pytest.raises(ValueError, match="queueWeight: unknown key"):
        params_from_mapping({"queueWeight": 1.0})  # not in the built-in registry


def test_cli_choices_come_from_the_registry(registry: Registry) -> None:
    parser = cli.parser(registry)
    assert parser.get_default("known_policies")[-1] == "least-queue"
    assert "least-queue" in re.sub(r"-\s+", "-", parser.format_help())  # argparse wraps after a hyphen
    spec = cli._spec(parser.parse_args(["--trace", "t.jsonl.gz", "--policies", "least-queue,smetric"]))
    assert spec.policies == ("least-queue", "smetric")
    with pytest.raises(ValueError, match="unknown policies"):
        cli._spec(cli.parser().parse_args(["--trace", "t.jsonl.gz", "--policies", "least-queue"]))


def test_generated_crd_schema_lists_it(registry: Registry) -> None:
    schema = router_schema(registry)
    assert schema["policy"]["enum"][-1] == "least-queue"
    weight = schema["parameters"]["properties"]["queueWeight"]
    assert weight["type"] == "number" and weight["exclusiveMinimum"] is True and weight["minimum"] == 0
    assert "Default 1.0" in weight["description"]
    # `smetric-operator gen-crd --write` would rewrite both CRD copies with it (the generated files)
    assert "queueWeight" in crd_text(registry=registry)
