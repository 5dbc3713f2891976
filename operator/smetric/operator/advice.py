"""Render-time advice: warn when a pool's context limit is far below what agents send, and when a
pool sets a deprecated field.

Reference: the shared agentic trace (``../shared/traces/claude-code-agentic.jsonl.gz``, 38,510
requests, Claude Code sessions). Share of requests whose prompt + output fits a context limit,
computed with the project's loader (``smetric.trace.agentic.load_agentic``)::

    python -c "from smetric.trace.agentic import load_agentic; import numpy as np; \\
      t = load_agentic('../shared/traces/claude-code-agentic.jsonl.gz', on_error='skip'); \\
      n = np.array([r.prompt_tokens + r.output_tokens for r in t.requests]); \\
      print([(c, round(100 * (n <= c).mean(), 2)) for c in (32768, 65536, 131072, 196608, 262144, 524288)])"

p50 103,478 tokens, p90 230,896, p99 509,261, max 895,166.
"""

from __future__ import annotations

from smetric.operator.spec import SMetricPoolSpec

# (context limit in tokens, % of the trace's requests that fit), ascending.
AGENT_CONTEXT_SHARE: tuple[tuple[int, float], ...] = (
    (32_768, 5.63),
    (65_536, 24.36),
    (131_072, 70.42),
    (196_608, 87.33),
    (262_144, 92.73),
    (524_288, 99.17),
    (1_048_576, 100.0),
)
WARN_BELOW_SHARE = 90.0  # percent of agent requests a pool should be able to serve


def servable_share(max_model_len: int) -> float:
    """Lower bound of the share (percent) of the trace's requests that fit ``max_model_len``."""
    share = 0.0
    for limit, pct in AGENT_CONTEXT_SHARE:
        if max_model_len >= limit:
            share = pct
    return share


def deprecation_warnings(name: str, spec: SMetricPoolSpec) -> list[str]:
    """One line per deprecated field the pool sets (it still works; the line names the new one)."""
    if spec.policies is None:
        return []
    return [
        f"SMetricPool {name}: spec.policies is deprecated (it reads like the routing policy); "
        "the same fields are spec.protection"
    ]


def context_warnings(name: str, spec: SMetricPoolSpec) -> list[str]:
    """Warnings for a vLLM pool whose context limit rejects many agent requests (none for custom
    engine commands such as the emulator, whose limit the operator does not know)."""
    if spec.model.command:
        return []
    limit = spec.model.max_model_len
    if limit is None:
        return [
            f"SMetricPool {name}: model.maxModelLen is unset (vLLM takes the model's default); agent "
            "requests reach 895,166 tokens (p90 230,896) in the shared agentic trace: set it explicitly"
        ]
    share = servable_share(limit)
    if share >= WARN_BELOW_SHARE:
        return []
    return [
        f"SMetricPool {name}: model.maxModelLen={limit} fits at most {share:.1f} % of the shared agentic "
        f"trace's requests (prompt + output; p90 230,896 tokens): vLLM rejects the rest. Consider "
        "model.kvCacheDtype=fp8 and maxModelLen 262144 (92.7 %)"
    ]
