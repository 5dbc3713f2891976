"""What goes into an engine instance (a request) and what comes out (events with timings)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

import numpy as np
import numpy.typing as npt

from smetric.engine.prefix_cache import Piece


def pieces_from_ranges(ranges: npt.NDArray[np.int64]) -> tuple[Piece, ...]:
    """Trace ``hash_ranges`` (``(k, 2)`` inclusive ranges) as a tuple of Python int pairs."""
    return tuple((int(a), int(b)) for a, b in np.asarray(ranges, dtype=np.int64).reshape(-1, 2))


@dataclass(frozen=True, slots=True)
class EngineRequest:
    """One request as an engine instance sees it.

    ``prompt_pieces``: the prompt's full blocks as chained-id pieces (trace block granularity).
    ``output_pieces``: ids of the blocks the generated answer fills, as the session's next request
    will hash them (empty if unknown); cached at finish, so the next turn can hit them.
    ``index``: the caller's own key (the simulator uses the trace index); never read here.
    """

    request_id: str
    prompt_tokens: int
    output_tokens: int
    prompt_pieces: tuple[Piece, ...] = ()
    output_pieces: tuple[Piece, ...] = ()
    index: int = -1

    def __post_init__(self) -> None:
        if self.prompt_tokens <= 0:
            raise ValueError(f"request {self.request_id}: prompt_tokens must be > 0")
        if self.output_tokens < 1:
            raise ValueError(f"request {self.request_id}: output_tokens must be >= 1")


EventKind = Literal["first_token", "finished"]


@dataclass(frozen=True, slots=True)
class RequestTiming:
    """Timings and reuse of one request on one instance (``nan`` = not reached yet)."""

    arrival_s: float
    admitted_s: float
    loaded_s: float  # global-tier load finished (== admitted_s when nothing was loaded)
    first_token_s: float
    finish_s: float
    local_hit_tokens: int
    global_hit_tokens: int
    computed_tokens: int
    output_tokens: int

    @property
    def ttft_s(self) -> float:
        return self.first_token_s - self.arrival_s

    @property
    def tpot_s(self) -> float:
        """Mean time per output token after the first (0 for one-token answers)."""
        if self.output_tokens <= 1:
            return 0.0
        return (self.finish_s - self.first_token_s) / (self.output_tokens - 1)


@dataclass(frozen=True, slots=True)
class EngineEvent:
    """A request reached its first token, or finished. ``time_s`` is engine time."""

    kind: EventKind
    time_s: float
    request: EngineRequest
    instance: str
    timing: RequestTiming = field(compare=False)
