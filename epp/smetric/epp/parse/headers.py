"""Request headers the picker reads (protocols.md "Request headers used upstream")."""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from smetric.epp.parse.errors import RequestError

HDR_REQUEST_ID = "x-request-id"
HDR_OBJECTIVE = "x-gateway-inference-objective"
HDR_FAIRNESS_ID = "x-gateway-inference-fairness-id"
HDR_MODEL_REWRITE = "x-gateway-model-name-rewrite"
HDR_SLO_TTFT_MS = "x-slo-ttft-ms"
HDR_SLO_TPOT_MS = "x-slo-tpot-ms"
HDR_SESSION_TOKEN = "x-session-token"
HDR_SHEDDABLE = "x-sheddable"

_TRUE = frozenset({"1", "true", "yes"})


@dataclass(frozen=True, slots=True)
class RequestHeaders:
    """What the request path needs from the request headers.

    ``sheddable``: the request may be refused with 429 when every endpoint is saturated; set by
    ``x-sheddable: true`` or by an objective header whose value is ``sheddable`` (case-insensitive;
    the GIE ``Sheddable`` criticality).
    """

    method: str
    path: str
    request_id: str
    ttft_slo_s: float | None = None
    tpot_slo_s: float | None = None
    session_token: str | None = None
    sheddable: bool = False
    objective: str = ""
    fairness_id: str = ""
    model_rewrite: str = ""
    content_type: str = ""


def _slo_seconds(headers: Mapping[str, str], name: str) -> float | None:
    raw = headers.get(name)
    if raw is None or raw.strip() == "":
        return None
    try:
        ms = float(raw)
    except ValueError:
        raise RequestError(400, f"header {name} must be a number of milliseconds, got {raw!r}") from None
    if not ms > 0.0 or ms == float("inf"):
        raise RequestError(
            400, f"header {name} must be a positive finite number of milliseconds, got {raw!r}"
        )
    return ms / 1000.0


def parse_headers(
    headers: Mapping[str, str], session_headers: Sequence[str] = (HDR_SESSION_TOKEN,)
) -> RequestHeaders:
    """Parse lower-cased request headers (HTTP/2 pseudo-headers included). Raises :class:`RequestError`.
    ``session_headers``: where the session id is read, the first non-empty wins (the config's
    ``sessionHeaders``; an upstream config's ``agent-identity`` adds the agents' own headers)."""
    objective = headers.get(HDR_OBJECTIVE, "")
    sheddable = (
        headers.get(HDR_SHEDDABLE, "").strip().lower() in _TRUE or objective.strip().lower() == "sheddable"
    )
    return RequestHeaders(
        method=headers.get(":method", "POST"),
        path=headers.get(":path", ""),
        request_id=headers.get(HDR_REQUEST_ID) or uuid.uuid4().hex,
        ttft_slo_s=_slo_seconds(headers, HDR_SLO_TTFT_MS),
        tpot_slo_s=_slo_seconds(headers, HDR_SLO_TPOT_MS),
        session_token=next((v for v in (headers.get(n) for n in session_headers) if v), None),
        sheddable=sheddable,
        objective=objective,
        fairness_id=headers.get(HDR_FAIRNESS_ID, ""),
        model_rewrite=headers.get(HDR_MODEL_REWRITE, ""),
        content_type=headers.get("content-type", ""),
    )
