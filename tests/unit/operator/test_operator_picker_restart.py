"""What the operator renders so that a picker restart keeps routing and stickiness: 2 replicas with
the precise index by default, a PodDisruptionBudget, a rolling update that starts the new pod first,
and ``--state-file`` on an emptyDir volume (it outlives a container restart)."""

from __future__ import annotations

from typing import Any

from smetric.core.pickerflags import build_parser
from smetric.operator.render_picker import STATE_DIR, STATE_FILE
from tests.support.operator_render import by_name, container, render, spec, validate

EMULATOR = {"name": "emu", "command": ["smetric", "emulate"]}


def _picker(raw: dict[str, Any]) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    children = render(raw)
    return children, by_name(children, "Deployment", "p-epp")


def test_default_pool_runs_two_precise_pickers_with_a_budget_and_a_state_file() -> None:
    children, dep = _picker(spec())
    assert dep["spec"]["replicas"] == 2
    assert dep["spec"]["strategy"] == {
        "type": "RollingUpdate",
        "rollingUpdate": {"maxUnavailable": 0, "maxSurge": 1},
    }
    epp = container(dep, "epp")
    args = build_parser().parse_args(epp["args"])
    assert args.prefix_index == "precise" and args.state_file == STATE_FILE
    assert {"name": "state", "mountPath": STATE_DIR} in epp["volumeMounts"]
    pod = dep["spec"]["template"]["spec"]
    assert {"name": "state", "emptyDir": {"sizeLimit": "1Gi"}} in pod["volumes"]
    assert epp["securityContext"]["readOnlyRootFilesystem"] is True  # so the file needs its volume
    pdb = by_name(children, "PodDisruptionBudget", "p-epp")
    assert pdb["spec"] == {"maxUnavailable": 1, "selector": dep["spec"]["selector"]}
    for manifest in (dep, pdb):
        validate(manifest)


def test_one_picker_is_recreated_and_has_no_budget() -> None:
    for raw in (spec(model=EMULATOR), spec(router={"replicas": 1})):
        children, dep = _picker(raw)
        assert dep["spec"]["replicas"] == 1 and dep["spec"]["strategy"] == {"type": "Recreate"}
        assert not [
            c for c in children if c["kind"] == "PodDisruptionBudget" and c["metadata"]["name"] == "p-epp"
        ]
    args = build_parser().parse_args(container(_picker(spec(model=EMULATOR))[1], "epp")["args"])
    assert args.prefix_index == "approximate" and args.state_file == STATE_FILE  # restarts keep state too


def test_the_budget_follows_the_pool_policy_switch() -> None:
    children, _ = _picker(spec(policies={"podDisruptionBudget": False}))
    assert not [c for c in children if c["kind"] == "PodDisruptionBudget"]
