"""The models each engine serves, read from its ``GET /v1/models`` (OpenAI list: ``{"data": [{"id":
...}]}``; vLLM lists its served model names and loaded LoRA adapters there, the emulator its model).

The scrape loop asks an endpoint after its first good scrape and then every ``interval_s``
(:data:`MODELS_INTERVAL_S`). Bounds: the page is at most :data:`MAX_MODELS_PAGE_BYTES`, at most
:data:`MAX_MODELS_PER_ENDPOINT` ids are kept, each at most :data:`MAX_MODEL_ID_CHARS` characters
(longer ones are dropped). A failed or malformed answer keeps the last list (none before the first
good one) and is logged once per endpoint until it answers again.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

import orjson

from smetric.epp.scrape.http1 import HttpError, KeepAliveGetter

log = logging.getLogger(__name__)

MODELS_PATH = "/v1/models"
MODELS_INTERVAL_S = 30.0  # LoRA adapters loaded at run time show up within this
MAX_MODELS_PAGE_BYTES = 1024 * 1024  # ~150 bytes per model card: thousands of models
MAX_MODELS_PER_ENDPOINT = 64
MAX_MODEL_ID_CHARS = 256  # smetric.epp.obs.labels.MAX_LABEL_CHARS


class ModelsParseError(ValueError):
    pass


def parse_model_ids(page: bytes) -> tuple[str, ...]:
    """The ``id`` of each entry of an OpenAI model list, bounded as the module says."""
    try:
        doc = orjson.loads(page)
    except orjson.JSONDecodeError as exc:
        raise ModelsParseError(f"not JSON: {exc}") from None
    data = doc.get("data") if isinstance(doc, dict) else None
    if not isinstance(data, list):
        raise ModelsParseError("no 'data' list")
    ids: list[str] = []
    for entry in data:
        mid = entry.get("id") if isinstance(entry, dict) else None
        if isinstance(mid, str) and 0 < len(mid) <= MAX_MODEL_ID_CHARS and mid not in ids:
            ids.append(mid)
            if len(ids) == MAX_MODELS_PER_ENDPOINT:
                break
    return tuple(ids)


class ModelLister:
    """Per endpoint: the model ids of its last good ``/v1/models`` answer."""

    def __init__(
        self, timeout_s: float, clock: Callable[[], float], interval_s: float = MODELS_INTERVAL_S
    ) -> None:
        self._timeout_s = timeout_s
        self._interval_s = interval_s
        self._clock = clock
        self._models: dict[str, tuple[str, ...]] = {}
        self._asked_at: dict[str, float] = {}
        self._getters: dict[str, KeepAliveGetter] = {}
        self._failing: set[str] = set()

    def models(self, address: str) -> tuple[str, ...]:
        return self._models.get(address, ())

    def due(self, address: str) -> bool:
        at = self._asked_at.get(address)
        return at is None or self._clock() - at >= self._interval_s

    async def refresh(self, address: str, host: str, port: int) -> None:
        self._asked_at[address] = self._clock()
        getter = self._getters.get(address)
        if getter is None:
            getter = self._getters[address] = KeepAliveGetter(host, port, MODELS_PATH, MAX_MODELS_PAGE_BYTES)
        try:
            status, page = await getter.get(self._timeout_s)
            if status != 200:
                raise HttpError(f"HTTP {status}")
            self._models[address] = parse_model_ids(page)
        except (HttpError, ModelsParseError) as exc:
            if address not in self._failing:
                self._failing.add(address)
                log.warning(
                    "GET %s from %s failed (%s); its model list stays as it was", MODELS_PATH, address, exc
                )
            return
        self._failing.discard(address)

    def forget(self, address: str) -> None:
        self._models.pop(address, None)
        self._asked_at.pop(address, None)
        self._failing.discard(address)
        getter = self._getters.pop(address, None)
        if getter is not None:
            getter.close()

    def close(self) -> None:
        for getter in self._getters.values():
            getter.close()
        self._getters.clear()
