"""The gateway's default timeouts against the longest healthy silence, a cold prefill of the default
model's full context (262,144 tokens) on the picker's default cost model: a prefill never trips the
per-try idle timeout, and a request whose first attempt waited that timeout out on a frozen engine
still has the whole prefill before the stream idle timeout (Envoy does not restart it for a retry:
tests/integration/envoy/test_envoy_frozen_engine.py), within the route timeout. The same request
through real Envoy and the emulator: tests/integration/envoy/test_envoy_long_prefill.py."""

from __future__ import annotations

from smetric.core.gatewaytimeouts import GatewayTimeouts
from smetric.core.presets import PRESETS
from smetric.epp.envoy import EnvoyOptions, bootstrap
from smetric.policy.base import PolicyParams

LONGEST_PROMPT = 262_144


def test_a_retried_longest_prefill_fits_the_default_timeouts() -> None:
    o = EnvoyOptions(listen_port=1, admin_port=2, picker_port=3)
    prefill_s = PolicyParams().cost_model.cost(LONGEST_PROMPT, LONGEST_PROMPT)
    assert prefill_s > 500  # what the old fixed 200 s per-try idle timeout cut
    assert o.per_try_idle_timeout_s > prefill_s
    assert o.stream_idle_timeout_s >= o.per_try_idle_timeout_s + prefill_s
    assert o.route_timeout_s > o.stream_idle_timeout_s


def test_with_timeouts_renders_the_derived_values() -> None:
    t = GatewayTimeouts.for_preset(PRESETS["qwen3-235b-4xh20"], 131_072, time_scale=0.5)
    o = EnvoyOptions(listen_port=1, admin_port=2, picker_port=3).with_timeouts(t)
    route = bootstrap(o)["static_resources"]["listeners"][0]["filter_chains"][0]["filters"][0]["typed_config"]
    r = route["route_config"]["virtual_hosts"][0]["routes"][0]["route"]
    assert float(r["retry_policy"]["per_try_idle_timeout"].rstrip("s")) >= t.per_try_idle_s * 0.9999
    assert float(r["idle_timeout"].rstrip("s")) >= t.stream_idle_s * 0.9999
    assert float(r["timeout"].rstrip("s")) >= t.route_s * 0.9999
    assert route["stream_idle_timeout"] == r["idle_timeout"]
