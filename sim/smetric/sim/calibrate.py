"""The simulated router's cost model, fitted from observed prefill timings as for the picker.

The deployed picker's cost model is fitted by least squares from measured queue-free prefills
``(n, L, seconds)`` (algorithms.md "Cost model"; :func:`smetric.core.costmodel.fit_csv`). The
simulator's deployed router view does the same against the simulated engine instead of reading
the engine's ground truth: :func:`profiled_cost_model` runs a profiling sweep on one idle
simulated instance of the preset (no global tier, one request at a time, one output token) and
fits :class:`~smetric.core.costmodel.CostModel` to the observed times to first token.

The sweep: full prefills ``n = L`` for ``L`` in :data:`FULL_PREFILL_TOKENS`, and prefix-hit
prefills (a ``L0``-token prompt, then the same prefix plus ``n`` new tokens) for ``L0`` in
:data:`HIT_PREFIX_TOKENS` and ``n`` in :data:`HIT_NEW_TOKENS` -- the shapes the router charges
(first turns and follow-ups). Lengths past the instance's KV pool are skipped. The observed times
include what the engine model adds to the pure compute (per-step overhead, weight and KV reads,
chunking), so the fit is close to, not equal to, the engine's own cost model; the online
prefill-rate estimate (:class:`smetric.router.PrefillRateEstimator`) absorbs the rest, as in the
picker.
"""

from __future__ import annotations

from smetric.core.costmodel import CostModel
from smetric.core.presets import InstancePreset
from smetric.engine import EngineConfig, EngineRequest, Instance, StepModel

# Stated choice (fixed before any result): powers of two from 512 to 128k tokens spans the
# agentic trace's prompts (median ~30k, p99 ~120k tokens; docs/workloads.md).
FULL_PREFILL_TOKENS = (512, 1024, 2048, 4096, 8192, 16384, 32768, 65536, 98304, 131072)
HIT_PREFIX_TOKENS = (8192, 32768, 65536, 98304)
HIT_NEW_TOKENS = (512, 2048, 8192)
_BASE_ID = 1 << 40  # block ids of the profiling prompts (never shared with a trace)


def _ttft_s(inst: Instance, request: EngineRequest, now_s: float) -> float:
    """Submit on an idle instance and run it to its first token; returns the first-token time."""
    inst.submit(request, now_s)
    while True:
        t = inst.next_event_s()
        if t == float("inf"):
            raise RuntimeError("profiling request never reached its first token")
        for e in inst.advance(t):
            if e.kind == "first_token" and e.request.request_id == request.request_id:
                return e.time_s  # one output token: the request is finished too


def profile_samples(preset: InstancePreset, block_tokens: int) -> list[tuple[float, float, float]]:
    """``(n, L, seconds)`` queue-free prefill samples observed on one simulated instance."""
    model = StepModel.from_preset(preset)
    cfg = EngineConfig.from_preset(preset, block_tokens, decode=True)
    limit = cfg.capacity_blocks * block_tokens - 2 * block_tokens
    samples: list[tuple[float, float, float]] = []
    now = 0.0
    seq = 0

    def request(total_tokens: int, shared_blocks: int, fresh_base: int) -> EngineRequest:
        nonlocal seq
        seq += 1
        full = total_tokens // block_tokens
        pieces = [(_BASE_ID, _BASE_ID + shared_blocks - 1)] if shared_blocks else []
        if full > shared_blocks:
            pieces.append((fresh_base, fresh_base + full - shared_blocks - 1))
        return EngineRequest(f"profile-{seq}", total_tokens, 1, tuple(pieces))

    inst = Instance("profile", model, cfg)
    for L in FULL_PREFILL_TOKENS:
        if limit < L:
            continue
        req = request(L, 0, _BASE_ID * 2 + seq * (1 << 20))
        first = _ttft_s(inst, req, now)
        samples.append((L, L, first - now))
        now = first + 1.0
    for L0 in HIT_PREFIX_TOKENS:
        for n in HIT_NEW_TOKENS:
            if L0 + n > limit:
                continue
            inst = Instance("profile", model, cfg)  # fresh: only the prefix is cached
            now = 0.0
            prefix_blocks = L0 // block_tokens
            first = _ttft_s(inst, request(prefix_blocks * block_tokens, prefix_blocks, 0), now)
            now = first + 1.0
            req = request(prefix_blocks * block_tokens + n, prefix_blocks, _BASE_ID * 3 + seq * (1 << 20))
            hit = inst.local_hit_tokens(req)
            first = _ttft_s(inst, req, now)
            samples.append((req.prompt_tokens - hit, req.prompt_tokens, first - now))
            now = first + 1.0
    return samples


def profiled_cost_model(preset: InstancePreset, block_tokens: int) -> CostModel:
    """:meth:`CostModel.fit` on :func:`profile_samples`: the deployed router view's prior."""
    return CostModel.fit(profile_samples(preset, block_tokens))
