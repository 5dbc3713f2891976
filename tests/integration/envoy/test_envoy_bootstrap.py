"""The generated Envoy bootstrap is accepted by the real Envoy; the process helper's errors are clear."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from smetric.epp.envoy import (
    EnvoyError,
    EnvoyOptions,
    EnvoyProcess,
    bootstrap,
    envoy_binary,
    free_port,
    validate,
)

pytestmark = pytest.mark.integration


@pytest.mark.parametrize(
    "opts",
    [
        EnvoyOptions(listen_port=10000, admin_port=10001, picker_port=9002),
        EnvoyOptions(listen_port=10000, admin_port=10001, picker_port=9002, retries=0),
        EnvoyOptions(
            listen_port=10000,
            admin_port=10001,
            picker_port=9002,
            request_body_mode="BUFFERED",
            failure_mode_allow=True,
        ),
        EnvoyOptions(
            listen_port=10000,
            admin_port=10001,
            picker_port=9002,
            direct_port=10002,
            direct_backend="10.0.0.1:8000",
            subset_hint_header=True,
        ),
        EnvoyOptions(listen_port=10000, admin_port=10001, picker_port=9002, response_path="observer"),
    ],
)
def test_envoy_accepts_the_bootstrap(opts: EnvoyOptions) -> None:
    validate(bootstrap(opts))


def test_envoy_rejects_a_broken_bootstrap_with_its_message() -> None:
    cfg = bootstrap(EnvoyOptions(listen_port=10000, admin_port=10001, picker_port=9002))
    cfg["static_resources"]["clusters"][0]["type"] = "NOT_A_TYPE"
    with pytest.raises(EnvoyError, match="invalid Envoy config"):
        validate(cfg)


def test_bootstrap_shape() -> None:
    cfg = bootstrap(EnvoyOptions(listen_port=1, admin_port=2, picker_port=3))
    hcm = cfg["static_resources"]["listeners"][0]["filter_chains"][0]["filters"][0]["typed_config"]
    names = [f["name"] for f in hcm["http_filters"]]
    # refused protocols answered first, then client routing headers go before the picker sees them
    assert names[:2] == ["smetric.protocol_guard", "smetric.scrub"]
    ext = hcm["http_filters"][names.index("envoy.filters.http.ext_proc")]["typed_config"]
    assert ext["processing_mode"]["request_body_mode"] == "FULL_DUPLEX_STREAMED"
    assert ext["processing_mode"]["request_trailer_mode"] == "SEND"
    assert ext["allow_mode_override"] is True and ext["failure_mode_allow"] is False
    clusters = {c["name"]: c for c in cfg["static_resources"]["clusters"]}
    # retries (2 by default): attempt n to the ORIGINAL_DST cluster of the picker's n-th address
    composite = clusters["original_destination"]["cluster_type"]
    assert composite["name"] == "envoy.clusters.composite"
    attempts = [c["name"] for c in composite["typed_config"]["clusters"]]
    headers = [clusters[a]["original_dst_lb_config"]["http_header_name"] for a in attempts]
    assert headers == [
        "x-smetric-destination-primary",
        "x-smetric-destination-fallback-1",
        "x-smetric-destination-fallback-2",
    ]
    assert all(clusters[a]["type"] == "ORIGINAL_DST" for a in attempts)
    assert names.index("smetric.fallback_headers") == names.index("envoy.filters.http.ext_proc") + 1
    plain = bootstrap(EnvoyOptions(listen_port=1, admin_port=2, picker_port=3, retries=0))
    odst = plain["static_resources"]["clusters"][0]
    assert odst["type"] == "ORIGINAL_DST"
    assert odst["original_dst_lb_config"] == {
        "use_http_header": True,
        "http_header_name": "x-smetric-destination-primary",
    }
    with pytest.raises(ValueError):
        bootstrap(EnvoyOptions(listen_port=1, admin_port=2, picker_port=3, direct_port=4))


async def test_taken_port_and_missing_binary_are_clear_errors(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        taken = s.getsockname()[1]
        proc = EnvoyProcess(
            bootstrap(EnvoyOptions(listen_port=taken, admin_port=free_port(), picker_port=9002))
        )
        with pytest.raises(EnvoyError, match="already in use"):
            await proc.start()
    monkeypatch.setenv("SMETRIC_ENVOY_BIN", str(tmp_path / "no-envoy"))
    with pytest.raises(EnvoyError, match="SMETRIC_ENVOY_BIN"):
        envoy_binary()


async def test_envoy_starts_and_stops() -> None:
    opts = EnvoyOptions(listen_port=free_port(), admin_port=free_port(), picker_port=free_port())
    async with EnvoyProcess(bootstrap(opts)) as envoy:
        assert envoy.log_path is not None and envoy.log_path.exists()
    assert envoy.log_path is None


def test_observer_response_path_shape() -> None:
    cfg = bootstrap(EnvoyOptions(listen_port=1, admin_port=2, picker_port=3, response_path="observer"))
    hcm = cfg["static_resources"]["listeners"][0]["filter_chains"][0]["filters"][0]["typed_config"]
    by_name = {f["name"]: f for f in hcm["http_filters"]}
    routing, observer = by_name["envoy.filters.http.ext_proc"], by_name["smetric.response_observer"]
    names = list(by_name)  # the observer runs after the routing filter (it sees the routed headers)
    assert names.index("smetric.response_observer") > names.index("envoy.filters.http.ext_proc")
    assert names[-1] == "envoy.filters.http.router"
    mode = routing["typed_config"]["processing_mode"]
    assert (mode["response_header_mode"], mode["response_body_mode"]) == ("SKIP", "NONE")
    assert mode["request_body_mode"] == "FULL_DUPLEX_STREAMED"
    obs = observer["typed_config"]
    assert obs["observability_mode"] is True and obs["failure_mode_allow"] is True
    assert obs["processing_mode"]["response_body_mode"] == "STREAMED"
    assert obs["processing_mode"]["request_body_mode"] == "NONE"


def test_clusters_lift_envoys_default_circuit_breakers() -> None:
    """1,024 concurrent requests per cluster (Envoy's default) failed requests with 500 at ~400
    req/s with the response observer, whose streams Envoy keeps open after each request."""
    cfg = bootstrap(
        EnvoyOptions(listen_port=1, admin_port=2, picker_port=3, direct_port=4, direct_backend="h:1")
    )
    for cluster in cfg["static_resources"]["clusters"]:
        limits = cluster["circuit_breakers"]["thresholds"][0]
        assert limits["max_requests"] >= 1 << 20 and limits["max_pending_requests"] >= 1 << 20, cluster[
            "name"
        ]
