"""``spec.router.flowControl``: the picker's SLO-aware flow control (the picker config's
``flowControl``, :class:`smetric.policy.pickerconfig.FlowControlSection`; docs/overload.md)."""

from __future__ import annotations

from pydantic import Field

from smetric.operator.spec_params import SpecModel


class FlowControlSpec(SpecModel):
    enabled: bool = Field(
        default=True,
        description="Hold a request no engine can serve within its TTFT SLO in a bounded gateway queue "
        "(fair across sessions, sheddable requests last) instead of sending it to an overloaded engine; "
        "refuse with 429 + Retry-After what can no longer make it.",
    )
    max_queued: int = Field(
        default=1024,
        ge=1,
        le=1_000_000,
        description="Requests held at once; a full queue answers 429 at once.",
    )
    ttl_s: float = Field(
        default=2.0,
        gt=0,
        le=3600,
        description="The longest a request waits before 429 (short: what waits long misses its SLO anyway).",
    )
    shed_on_deadline: bool = Field(
        default=True, description="Answer 429 once a held request's TTFT SLO has passed."
    )
    retry_after_s: float = Field(default=5.0, ge=0, le=3600, description="Retry-After of a 429, seconds.")
    slack: float = Field(
        default=1.0,
        gt=0,
        le=100,
        description="An engine meets when its TTFT estimate <= slack x the SLO time left.",
    )
    max_engine_waiting: int = Field(
        default=0,
        ge=0,
        description="An engine with more requests waiting (vLLM num_requests_waiting) takes none.",
    )
    kv_headroom: bool = Field(
        default=True, description="A request's uncached tokens must fit the engine's free KV cache."
    )
    late_last: bool = Field(
        default=True,
        description="A resend after a 429 (already late) waits below every fresh request: under "
        "sustained overload capacity goes to requests that can still make their SLO.",
    )
    tpot_guard: bool = Field(
        default=True,
        description="An engine takes a request only if its running decodes keep the TPOT SLO once "
        "this prefill joins.",
    )
    filter_candidates: bool = Field(
        default=False,
        description="The policy chooses only among the engines the gate accepts (filters before "
        "scorers); off: the gate decides whether a request goes now, the policy where, among all.",
    )
    hopeless_last: bool = Field(
        default=True,
        description="A request no engine could serve within its TTFT SLO even with nothing queued (a long "
        "prompt no cache holds) waits with the late ones: served when no request that can still make its "
        "SLO waits, shed after the TTL otherwise (docs/overload.md).",
    )
    session_miss_share: float = Field(
        default=0.0,
        ge=0.0,
        lt=1.0,
        description="Above 0: an adaptive budget of live sessions in front of the gate. A request of a session "
        "that is not live (named by the session headers) gets 429 + Retry-After while the budget binds; the "
        "budget is unbounded until more than this share of a window of returning turns finds less than half "
        "its prompt held (the sessions outgrew the pool's KV), then halves from the live count and climbs "
        "back by one per clean window. Off by default; for pools without a full global tier past their "
        "knee (docs/overload.md, 8g).",
    )
    session_window: int = Field(
        default=20, ge=1, le=100_000, description="Returning turns per adaptive-session-budget window."
    )
    session_idle_s: float = Field(
        default=60.0,
        gt=0,
        le=86_400,
        description="A session is live from an admitted request until idle this long (seconds).",
    )
