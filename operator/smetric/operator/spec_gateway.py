"""``gateway.clientLimits``: the bounds on slow clients that the gateway's listeners enforce (what the
standalone Envoy bootstrap sets with ``EnvoyOptions.request_headers_timeout_s``,
``request_timeout_s``, ``max_connections`` and ``max_concurrent_streams``), rendered for the
gateway implementations that offer them (:mod:`smetric.operator.render_client_limits`)."""

from __future__ import annotations

from pydantic import Field

from smetric.operator.spec_params import SpecModel

# Envoy Gateway's duration pattern allows at most 5 digits per unit ("99999s").
MAX_TIMEOUT_S = 99_999


class ClientLimitsSpec(SpecModel):
    enabled: bool = Field(
        default=True,
        description="Render the provider's client-limit object: an Envoy Gateway ClientTrafficPolicy or an "
        "Istio EnvoyFilter attached to the pool's Gateway (kgateway and GKE offer no such setting: nothing is "
        "rendered for them). Listener settings apply to every route of that Gateway; with several pools on "
        "one Gateway enable it on one pool only.",
    )
    request_headers_timeout_s: int = Field(
        default=10,
        ge=0,
        le=MAX_TIMEOUT_S,
        description="Seconds a request's headers may take to arrive (Envoy request_headers_timeout; a late "
        "request gets 408). 0 = not set.",
    )
    request_timeout_s: int = Field(
        default=60,
        ge=0,
        le=MAX_TIMEOUT_S,
        description="Seconds the whole request (headers and body) may take to arrive (Envoy request_timeout, "
        "408): disarmed once the request is sent upstream or the response starts, so it never cuts a long "
        "prefill or stream. 0 = not set.",
    )
    max_connections: int = Field(
        default=10_000,
        ge=0,
        le=10_000_000,
        description="Downstream connections the Gateway's listeners hold at most (Envoy's connection_limit "
        "filter: the excess is closed at accept). 0 = not set.",
    )
    max_concurrent_streams: int = Field(
        default=100,
        ge=0,
        le=2_147_483_647,
        description="Requests one HTTP/2 client connection may have open at once (Envoy "
        "http2_protocol_options.max_concurrent_streams, advertised in the gateway's SETTINGS). 0 = not set.",
    )

    @property
    def any_set(self) -> bool:
        bounds = (
            self.request_headers_timeout_s,
            self.request_timeout_s,
            self.max_connections,
            self.max_concurrent_streams,
        )
        return self.enabled and any(bounds)
