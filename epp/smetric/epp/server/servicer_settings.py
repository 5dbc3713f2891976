"""What the ext_proc servicer reads (:class:`ServicerSettings`) and the chat renderer it may use."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, fields
from typing import Any, Protocol

from smetric.epp.server.guard import INFERENCE_PATHS
from smetric.epp.settings import PickerSettings
from smetric.policy.pickerconfig import DEFAULT_SESSION_HEADERS


class ChatRenderer(Protocol):
    """Renders chat messages as the engine does (``smetric.core.tokenizer.Tokenizer`` satisfies it)."""

    def render_chat(self, messages: Sequence[Mapping[str, Any]]) -> str: ...


# The picker's flags at their defaults: the only place those defaults are written is the flag
# table (smetric.core.pickerflags); ServicerSettings' flag-backed fields read them from here.
_FLAGS = PickerSettings.defaults()


@dataclass(frozen=True, slots=True)
class ServicerSettings:
    """What the servicer reads. A field named like a :class:`PickerSettings` field is that picker
    flag (its default from the flag table; :meth:`from_picker` copies it); the others are the
    servicer's own."""

    max_body_bytes: int = _FLAGS.max_body_bytes
    served_models: frozenset[str] = frozenset()  # empty: accept any model (the config's servedModels)
    response_observer: bool = _FLAGS.response_observer  # responses come on an observability_mode stream
    observer_attach_timeout_s: float = 2.0
    # Hostile input: the sum of all buffered bodies (503 past it), the API paths routed (others
    # 404; empty = all), bodies at least this large are parsed on a worker thread.
    body_budget_bytes: int = _FLAGS.body_budget_bytes
    allowed_paths: tuple[str, ...] = INFERENCE_PATHS
    offload_parse_bytes: int = 1024 * 1024
    parse_workers: int = 2  # threads, where no processes parse (below)
    # worker processes for those bodies (``--parse-processes``; used with a key recipe only)
    parse_processes: int = _FLAGS.parse_processes
    # Admission control (an alive but overloaded picker): requests waiting for a decision, and the
    # time from their headers to their decision; past either, 503 + retry-after at once.
    max_inflight_decisions: int = _FLAGS.max_inflight_decisions
    decision_budget_s: float = _FLAGS.decision_budget_s
    subset_filter: bool = _FLAGS.subset_filter  # honour the gateway's endpoint-subset hint
    destination_list: str = _FLAGS.destination_list  # "primary": no fallbacks sent to the gateway
    session_headers: tuple[str, ...] = DEFAULT_SESSION_HEADERS  # the config's sessionHeaders

    @classmethod
    def from_picker(
        cls,
        settings: PickerSettings,
        served_models: Iterable[str] = (),
        session_headers: Sequence[str] = DEFAULT_SESSION_HEADERS,
    ) -> ServicerSettings:
        """The running picker's values of every flag-backed field, and the config's served models
        and session headers."""
        picker = {f.name for f in fields(PickerSettings)}
        flags = {f.name: getattr(settings, f.name) for f in fields(cls) if f.name in picker}
        return cls(served_models=frozenset(served_models), session_headers=tuple(session_headers), **flags)
