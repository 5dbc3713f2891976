"""The simulator's request table: one row per sent request, and the record a run can keep."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True, slots=True)
class RequestRecord:
    """One sent request (kept only with ``keep_records=True``; for tests and analysis)."""

    key: int  # clone * len(trace) + trace index
    send_s: float
    first_token_s: float
    finish_s: float
    instance: int  # -1 when dropped
    dropped: bool
    local_hit_tokens: int
    global_hit_tokens: int


@dataclass(slots=True)
class _Sent:
    """One row of the request table: a sent request and what happened to it."""

    key: int  # clone * len(trace) + trace index
    send_s: float
    first_token_s: float = math.nan
    finish_s: float = math.nan
    instance: int = -1  # -1 while not dispatched (or dropped)
    rejected: bool = False  # the instance could not hold it (counted as dropped)
    local_hit_tokens: int = 0
    global_hit_tokens: int = 0


class RequestTable:
    """The sent requests in send order, and by key (the engine events carry the key)."""

    __slots__ = ("by_key", "rows")

    def __init__(self) -> None:
        self.rows: list[_Sent] = []
        self.by_key: dict[int, _Sent] = {}

    def add(self, key: int, send_s: float) -> _Sent:
        row = _Sent(key, send_s)
        self.rows.append(row)
        self.by_key[key] = row
        return row

    def column(self, name: str, dtype: type) -> np.ndarray:
        return np.array([getattr(r, name) for r in self.rows], dtype=dtype)
