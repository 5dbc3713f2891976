"""spec.router.flowControl renders the picker config's flowControl, read by the picker's parser."""

from __future__ import annotations

import pytest
import yaml

from smetric.operator.spec import parse_spec
from smetric.policy.pickerconfig import validate_config
from tests.support.operator_render import by_name, render, spec


def picker_config(raw: dict[str, object]) -> dict[str, object]:
    cm = by_name(render(raw), "ConfigMap", "p-epp-config")
    out: dict[str, object] = yaml.safe_load(cm["data"]["config.yaml"])
    return out


def test_flow_control_renders_into_the_picker_config_and_the_picker_reads_it() -> None:
    raw = spec(router={"flowControl": {"enabled": True, "maxQueued": 200, "ttlS": 20, "retryAfterS": 3}})
    cfg = picker_config(raw)
    assert cfg["flowControl"]["enabled"] is True  # type: ignore[index]
    fc = validate_config(cfg).flowControl.config()
    assert (fc.enabled, fc.max_queued, fc.ttl_s, fc.retry_after_s) == (True, 200, 20.0, 3.0)


def test_flow_control_is_on_by_default_and_rendered_either_way() -> None:
    """The default pool renders flow control on; a pool that turns it off renders ``enabled:
    false``, so the picker never falls back to its own default."""
    on = picker_config(spec())["flowControl"]
    assert on["enabled"] is True and on["hopelessLast"] is True  # type: ignore[index]
    assert validate_config(picker_config(spec())).flowControl.config().enabled
    off = picker_config(spec(router={"flowControl": {"enabled": False}}))
    assert off["flowControl"]["enabled"] is False  # type: ignore[index]
    assert not validate_config(off).flowControl.config().enabled


def test_bad_flow_control_is_refused() -> None:
    with pytest.raises(Exception, match=r"maxQueued|max_queued"):
        parse_spec(spec(router={"flowControl": {"maxQueued": 0}}))
