"""Bounded label values for the picker's metrics: no client-chosen string becomes a series.

The request's ``model`` is the client's string. As a Prometheus label it would let any client grow
``/metrics`` without bound (one series set per name, each name as long as the body allows). The
picker labels a request with its model only when the pool serves that model, and with
:data:`OTHER` otherwise:

* served models: the config's ``servedModels``; when that is empty, the names the engines list at
  ``GET /v1/models`` (vLLM's OpenAI server lists the served names and loaded LoRA adapters there;
  the scraper reads it, :mod:`smetric.epp.scrape.scraper`);
* at most :data:`MAX_MODEL_LABELS` distinct names are ever emitted (a pool whose engines list more
  names, or change them over time, sees the rest as :data:`OTHER`), each cut to
  :data:`MAX_LABEL_CHARS` characters;
* ``""`` (a request without a body, e.g. ``GET /v1/models``) stays ``""``: one value.

Other label values the picker exports are its own (policy names, decision reasons, shed reasons,
status codes it answers with), discovery's endpoint addresses, or a response status, bounded by
:func:`status_label`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

OTHER = "other"
# Hugging Face repo ids are at most 96 characters per part (huggingface_hub 2.4.0
# utils/_validators.py REPO_ID_REGEX, lines 30-32), so "org/name" fits in 193; 256 also fits a
# local path.
MAX_LABEL_CHARS = 256
# Distinct model label values per picker: a base model and its LoRA adapters (vLLM --max-loras
# defaults to 1; adapters listed by --lora-modules) stay far below this.
MAX_MODEL_LABELS = 64


class ModelLabels:
    """``labels(model) -> label value``: the model when the pool serves it, else :data:`OTHER`."""

    __slots__ = ("_configured", "_discovered", "_emitted", "_max")

    def __init__(
        self,
        configured: Iterable[str] = (),
        discovered: Callable[[str], bool] | None = None,
        max_labels: int = MAX_MODEL_LABELS,
    ) -> None:
        """``configured``: the config's ``servedModels`` (when non-empty, discovery is not asked);
        ``discovered(model)``: an engine lists it now (``Datastore.serves``)."""
        self._configured = frozenset(configured)
        self._discovered = discovered
        self._emitted: set[str] = set()
        self._max = max_labels

    def discover_from(self, discovered: Callable[[str], bool]) -> None:
        self._discovered = discovered

    def configure(self, configured: Iterable[str]) -> None:
        """The config's ``servedModels`` changed (a reloaded config file)."""
        self._configured = frozenset(configured)

    def served(self, model: str) -> bool:
        if self._configured:
            return model in self._configured
        return self._discovered is not None and self._discovered(model)

    def __call__(self, model: str) -> str:
        if not model:
            return ""
        if model in self._emitted:
            return model[:MAX_LABEL_CHARS]
        if len(self._emitted) >= self._max or not self.served(model):
            return OTHER
        self._emitted.add(model)
        return model[:MAX_LABEL_CHARS]


def status_label(status: int) -> str:
    """An HTTP status as a label: 100-599, else ``"other"`` (a broken or hostile upstream)."""
    return str(status) if 100 <= status <= 599 else OTHER


# Upstream's canonical error codes (GIE v1.5.0 and llm-d-router v0.10.0 pkg/common/error/error.go
# lines 58-69): the ``error_code`` label of ``*_request_error_total``. A refusal's HTTP status maps
# back through upstream's BuildErrResponse table (error.go lines 91-107); a status that table does
# not produce is Unknown.
MODEL_SERVER_ERROR = "ModelServerError"
_CANONICAL = {
    400: "BadRequest",
    401: "Unauthorized",
    403: "Forbidden",
    404: "NotFound",
    412: "PreconditionFailed",
    429: "ResourceExhausted",
    500: "Internal",
    503: "ServiceUnavailable",
}


def error_code(status: int) -> str:
    """The canonical code of a request the picker itself answered with ``status``."""
    return _CANONICAL.get(status, "Unknown")
