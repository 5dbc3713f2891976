"""Every listener binds loopback unless told otherwise (or, for the picker, unless it runs in a
Kubernetes pod, where the gateway reaches it over the pod network): the picker's ext_proc, health,
metrics and snapshot listeners, the Envoy gateway and its admin, the emulated engines."""

from __future__ import annotations

import inspect

import pytest

from smetric.core.pickerflags import build_parser, default_bind_address
from smetric.emulator.cli import config_from_args
from smetric.epp.envoy import EnvoyOptions, bootstrap
from smetric.epp.server.app import PickerServer
from smetric.epp.server.snapshot import StateKeeper


def test_picker_binds_loopback_outside_kubernetes(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    assert default_bind_address() == "127.0.0.1"
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "10.96.0.1")
    assert default_bind_address() == "0.0.0.0"
    args = build_parser().parse_args(["--endpoints=127.0.0.1:1", "--bind-address=10.1.2.3"])
    assert args.bind_address == "10.1.2.3"


def test_code_defaults_are_loopback() -> None:
    for cls in (PickerServer, StateKeeper):
        assert inspect.signature(cls).parameters["host"].default == "127.0.0.1", cls
    assert config_from_args([]).host == "127.0.0.1"
    config = bootstrap(EnvoyOptions(listen_port=1, admin_port=2, picker_port=3))
    assert config["admin"]["address"]["socket_address"]["address"] == "127.0.0.1"
    for listener in config["static_resources"]["listeners"]:
        assert listener["address"]["socket_address"]["address"] == "127.0.0.1"
