"""The Envoy bootstrap is parsed into envoy-data-plane's typed Bootstrap message on every build: every
option combination builds, a misspelt field or an unknown typed_config fails at build time."""

from __future__ import annotations

import copy
import itertools
from typing import Any

import pytest

from smetric.epp.envoy.bootstrap import EnvoyOptions, bootstrap
from smetric.epp.envoy.typed import BootstrapError, typed_bootstrap


@pytest.mark.parametrize(
    ("response_path", "subset", "body_mode"),
    list(itertools.product(("inline", "observer"), (False, True), ("FULL_DUPLEX_STREAMED", "BUFFERED"))),
)
def test_every_variant_builds_as_a_typed_message(response_path: str, subset: bool, body_mode: str) -> None:
    opts = EnvoyOptions(
        listen_port=8080,
        admin_port=9901,
        picker_port=9002,
        response_path=response_path,  # type: ignore[arg-type]
        subset_hint_header=subset,
        request_body_mode=body_mode,  # type: ignore[arg-type]
    )
    message = typed_bootstrap(bootstrap(opts))
    clusters = {c.name for c in message.static_resources.clusters}
    assert {"original_destination", "picker"} <= clusters


def test_pool_and_direct_listener_variants_build() -> None:
    opts = EnvoyOptions(
        listen_port=8080,
        admin_port=9901,
        picker_port=9002,
        pool_endpoints=("10.0.0.1:8000", "10.0.0.2:8000"),
        direct_port=8081,
        direct_backend="10.0.0.1:8000",
    )
    names = {c.name for c in typed_bootstrap(bootstrap(opts)).static_resources.clusters}
    assert {"pool", "direct_backend"} <= names


def _config() -> dict[str, Any]:
    return copy.deepcopy(bootstrap(EnvoyOptions(listen_port=8080, admin_port=9901, picker_port=9002)))


def test_misspelt_fields_fail_at_build_time() -> None:
    bad = _config()
    bad["static_resources"]["clusters"][0]["conect_timeout"] = "1s"
    with pytest.raises(BootstrapError, match="conect_timeout"):
        typed_bootstrap(bad)
    nested = _config()
    nested["static_resources"]["listeners"][0]["filter_chains"][0]["filters"][0]["typed_config"][
        "stat_prefx"
    ] = "x"
    with pytest.raises(BootstrapError, match="stat_prefx"):
        typed_bootstrap(nested)
    unknown = _config()
    unknown["static_resources"]["listeners"][0]["filter_chains"][0]["filters"][0]["typed_config"]["@type"] = (
        "type.googleapis.com/envoy.extensions.filters.network.nope.v3.Nope"
    )
    with pytest.raises(BootstrapError, match="nope"):
        typed_bootstrap(unknown)


def _route(config: dict[str, Any]) -> dict[str, Any]:
    hcm = config["static_resources"]["listeners"][0]["filter_chains"][0]["filters"][0]["typed_config"]
    vhost: dict[str, Any] = hcm["route_config"]["virtual_hosts"][0]
    return vhost


def test_an_engines_5xx_and_429_are_retried_and_the_attempt_count_reported() -> None:
    base = EnvoyOptions(
        listen_port=8080, admin_port=9901, picker_port=9002, pool_endpoints=("10.0.0.1:8000",)
    )
    vhost = _route(bootstrap(base))
    policy = vhost["routes"][0]["route"]["retry_policy"]
    assert set(policy["retry_on"].split(",")) == {
        "connect-failure",
        "refused-stream",
        "reset",
        "5xx",
        "retriable-status-codes",
    }
    assert policy["retriable_status_codes"] == [429] and "rate_limited_retry_back_off" not in policy
    assert vhost["include_attempt_count_in_response"] is True
    pool = next(c for c in bootstrap(base)["static_resources"]["clusters"] if c["name"] == "pool")
    assert pool["outlier_detection"]["consecutive_5xx"] == 3
    off = bootstrap(
        EnvoyOptions(
            listen_port=8080,
            admin_port=9901,
            picker_port=9002,
            pool_endpoints=("10.0.0.1:8000",),
            retry_on_status=False,
            pool_outlier_detection=False,
        )
    )
    assert (
        _route(off)["routes"][0]["route"]["retry_policy"]["retry_on"]
        == "connect-failure,refused-stream,reset"
    )
    assert "outlier_detection" not in next(
        c for c in off["static_resources"]["clusters"] if c["name"] == "pool"
    )


def test_the_fields_envoy_data_plane_cannot_read_are_checked_apart() -> None:
    config = bootstrap(
        EnvoyOptions(listen_port=8080, admin_port=9901, picker_port=9002, pool_endpoints=("10.0.0.1:8000",))
    )
    bad = copy.deepcopy(config)
    pool = next(c for c in bad["static_resources"]["clusters"] if c["name"] == "pool")
    pool["outlier_detection"]["consecutive_5xx"] = "three"
    with pytest.raises(BootstrapError, match="consecutive_5xx"):
        typed_bootstrap(bad)
