"""The gateway's default timeouts against the longest healthy silence, the prefill of the largest
prompt on the project's default cost model: a prefill never trips the per-try idle timeout, and a
request whose first attempt waited that timeout out on a frozen engine still has the whole prefill
before the stream idle timeout (Envoy does not restart it for a retry:
tests/integration/envoy/test_envoy_frozen_engine.py), within the route timeout."""

from __future__ import annotations

from smetric.epp.envoy import EnvoyOptions
from smetric.policy.base import PolicyParams

LONGEST_PROMPT = 131_072


def test_a_retried_longest_prefill_fits_the_default_timeouts() -> None:
    o = EnvoyOptions(listen_port=1, admin_port=2, picker_port=3)
    prefill_s = PolicyParams().cost_model.cost(LONGEST_PROMPT, LONGEST_PROMPT)
    assert o.per_try_idle_timeout_s > prefill_s
    assert o.stream_idle_timeout_s >= o.per_try_idle_timeout_s + prefill_s
    assert o.route_timeout_s > o.stream_idle_timeout_s
