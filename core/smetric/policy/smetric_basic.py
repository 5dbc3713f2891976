"""Ablation 1, basic session-centric (paper §5.4; Fig. 13 lines 2, 4, 5).

Stick iff ``turn > 0`` and the session is cached (``c[prev] > HIT_RATIO * est_hit``);
otherwise the least loaded endpoint by SMetric's balance score (Fig. 13 (c), mode-aware).
No migration: a cached follow-up always sticks.
"""

from __future__ import annotations

from smetric.policy.sessioncentric import SessionCentric


class SMetricBasic(SessionCentric):
    name = "smetric-basic"
