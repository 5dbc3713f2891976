"""Structured JSON logs, one object per line on stderr (``extra={...}`` fields are included)."""

from __future__ import annotations

import logging
import sys
from typing import Any

import orjson

_STANDARD = frozenset(vars(logging.LogRecord("", 0, "", 0, "", (), None))) | {"message", "asctime"}


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        doc: dict[str, Any] = {
            "ts": round(record.created, 6),
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
        }
        for key, value in record.__dict__.items():
            if key not in _STANDARD and not key.startswith("_"):
                doc[key] = value
        if record.exc_info:
            doc["exc"] = self.formatException(record.exc_info)
        return orjson.dumps(doc, default=str).decode()


def configure_logging(level: str) -> None:
    """Root logger -> JSON on stderr. Raises ``ValueError`` for an unknown level name."""
    numeric = logging.getLevelName(level.upper())
    if not isinstance(numeric, int):
        raise ValueError(f"unknown log level {level!r}; use debug, info, warning or error")
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(numeric)


DECISION_LOGGER = "smetric.epp.decisions"


def set_decision_log(enabled: bool) -> None:
    """Switch the per-request decision line (request id, reason, endpoint, ranked candidates) on/off."""
    logging.getLogger(DECISION_LOGGER).setLevel(logging.INFO if enabled else logging.WARNING)


def toggle_decision_log() -> bool:
    """SIGUSR1 handler body: flip the decision log at runtime; returns the new state."""
    enabled = not logging.getLogger(DECISION_LOGGER).isEnabledFor(logging.INFO)
    set_decision_log(enabled)
    logging.getLogger("smetric.epp").warning("decision log %s", "on" if enabled else "off")
    return enabled


def level_from_verbosity(v: int) -> str:
    """klog/zap verbosity as the upstream chart passes it (``--v``): >= 4 debug, 2-3 info, else warning."""
    if v >= 4:
        return "debug"
    return "info" if v >= 2 else "warning"


def use_console_encoder() -> None:
    """``--zap-encoder=console``: human-readable lines instead of JSON."""
    for handler in logging.getLogger().handlers:
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
