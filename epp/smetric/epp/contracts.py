"""Contracts between the picker's request path and its data sources.

The request path (``smetric.epp.server``) reads endpoints, their scraped metrics and prefix hits
through these protocols; discovery, scraping, KV events and the prefix indexes implement them.
Keeping the seam here lets each side be tested alone with a hand-written fake.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from smetric.core.names import ROLE_BOTH

if TYPE_CHECKING:
    from smetric.epp.kvevents.store import BlockStore


@dataclass(frozen=True, slots=True)
class EndpointInfo:
    """A Ready model-server endpoint. ``address`` is ``ip:port`` (the value Envoy routes to)."""

    address: str
    role: str = ROLE_BOTH
    pod_name: str = ""
    kv_events_endpoint: str = ""  # tcp://ip:port of the engine's ZMQ publisher, "" if none
    node: str = ""  # the node it runs on (pod spec.nodeName; standalone: ``node:``), "" if unknown

    @property
    def ip(self) -> str:
        return self.address.rsplit(":", 1)[0]


@dataclass(frozen=True, slots=True)
class EngineMetrics:
    """The scraped vLLM metrics of one endpoint (``vllm:*`` names) and their age."""

    running: int
    waiting: int
    kv_usage: float  # 0..1
    kv_capacity_tokens: int  # num_gpu_blocks * block_size from vllm:cache_config_info, 0 if unknown
    block_size: int
    prefix_cache_queries: float
    prefix_cache_hits: float
    scraped_at_s: float  # time.monotonic() of the scrape


class EndpointSource(Protocol):
    """Discovery + scraping: which endpoints exist and what they report."""

    def ready_endpoints(self) -> Sequence[EndpointInfo]: ...

    def metrics(self, address: str) -> EngineMetrics | None: ...


@dataclass(frozen=True, slots=True)
class PromptKey:
    """What a prefix index needs of one prompt: the text that is cached (chat template applied
    where the index knows it) and its length in tokens (estimated as chars/4 without tokenizer)."""

    text: str
    prompt_tokens: int
    token_ids: tuple[int, ...] = ()
    block_keys: tuple[int, ...] = ()  # the index's own chained block keys for this prompt
    exact_tokens: bool = False  # prompt_tokens was counted by a tokenizer, not estimated


class PrefixIndex(Protocol):
    """Local (GPU-tier) prefix-hit estimates c[i] per endpoint."""

    def key(self, prompt_text: str, token_ids: Sequence[int] | None = None) -> PromptKey: ...

    def local_hits(self, key: PromptKey, addresses: Sequence[str]) -> dict[str, int]:
        """Hit length in tokens per address (0 where nothing is cached)."""
        ...

    def on_routed(self, key: PromptKey, address: str) -> None:
        """The request was sent to ``address`` (the approximate index learns from this)."""
        ...


class PoolIndex(PrefixIndex, Protocol):
    """A prefix index the datastore keeps in step with the pool (both built-in indexes are)."""

    @property
    def engine_block_size(self) -> int | None:
        """The KV block size the engines must report for the hits to be right (``--block-size``),
        or ``None`` when the index does not depend on it."""
        ...

    @property
    def reads_kv_events(self) -> bool:
        """Hits come from the engines' KV events (an endpoint without a publisher stays at 0)."""
        ...

    @property
    def tokens_per_key(self) -> int:
        """Prompt tokens one of its block keys stands for."""
        ...

    @property
    def store(self) -> BlockStore | None:
        """The engines' KV block sets it reads (from their KV events), if any."""
        ...

    def forget(self, address: str) -> None:
        """The endpoint left the pool."""
        ...
