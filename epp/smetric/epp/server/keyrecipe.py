"""How a worker process keys a large request body the way the running picker does.

The servicer keys a prompt with the picker's prefix index (``Picker.prompt_key``) after rendering
its chat with the engines' template (``ExtProcServicer.renderer``). A parse worker process has
neither object: :class:`KeyRecipe` is the small, picklable description it builds them from, once
per process (:meth:`KeyRecipe.build`), from the same settings the picker built its own from
(:func:`smetric.epp.datastore.build_datastore`, :func:`smetric.epp.main.build`). ``key()`` reads
no index state (the approximate index's LRUs, the precise index's block store), so a fresh index
in the worker keys exactly as the picker's does (``tests/unit/epp/test_epp_parse_processes.py``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from smetric.epp.contracts import PromptKey
from smetric.epp.parse.body import ParsedBody

if TYPE_CHECKING:
    from smetric.core.tokenizer import Tokenizer
    from smetric.epp.index.precise import PreciseIndex
    from smetric.epp.kvevents.store import BlockStore
    from smetric.epp.settings import PickerSettings

Keyer = Callable[[ParsedBody], tuple[str, PromptKey]]


@dataclass(frozen=True, slots=True)
class KeyRecipe:
    """``index``: ``approximate`` | ``precise``; the rest as the picker's flags of the same names.
    The precise index renders chats with the tokenizer's chat template (the servicer's renderer)."""

    index: str
    block_size: int
    tokenizer: str
    hash_seed: str
    hash_algo: str

    @classmethod
    def of(cls, settings: PickerSettings) -> KeyRecipe:
        """The recipe of the running picker's flags (the same ones its index was built from)."""
        s = settings
        return cls(s.prefix_index, s.block_size, s.tokenizer, s.hash_seed, s.hash_algo)

    def precise_index(self, tokenizer: Tokenizer, store: BlockStore) -> PreciseIndex:
        """The precise index of these settings over ``store``: the picker's own (its store fed by
        KV events, ``datastore.build_datastore``) and a worker's (an empty store) alike."""
        from smetric.core.blockhash import BlockHasher
        from smetric.epp.index.precise import PreciseIndex

        hasher = BlockHasher(block_size=self.block_size, seed=self.hash_seed or None, algo=self.hash_algo)
        return PreciseIndex(tokenizer, hasher, store)

    def build(self) -> Keyer:
        """The keyer: ``parsed`` -> (prompt text the index sees, its key)."""
        if self.index == "approximate":
            from smetric.epp.index.approximate import ApproximateIndex

            approx = ApproximateIndex(block_tokens=self.block_size)

            def key_text(parsed: ParsedBody) -> tuple[str, PromptKey]:
                text = parsed.prompt_text
                return text, approx.key(text, parsed.token_ids or None)

            return key_text
        if self.index == "precise":
            from smetric.core.tokenizer import load_tokenizer
            from smetric.epp.kvevents.store import BlockStore

            tokenizer = load_tokenizer(self.tokenizer)
            precise = self.precise_index(tokenizer, BlockStore())

            def key_rendered(parsed: ParsedBody) -> tuple[str, PromptKey]:
                text = tokenizer.render_chat(parsed.messages) if parsed.messages else parsed.prompt_text
                return text, precise.key(text, parsed.token_ids or None)

            return key_rendered
        raise ValueError(f"unknown prefix index {self.index!r} (approximate | precise)")


def slim(parsed: ParsedBody, key: PromptKey) -> tuple[ParsedBody, PromptKey]:
    """What crosses back from a worker: the parse's facts and the key's numbers, without the texts
    and the messages (the decision needs neither once the prompt is keyed; a 15 MiB prompt would
    otherwise be pickled, piped and unpickled on the way back)."""
    return (
        dataclasses.replace(parsed, prompt_text="", messages=()),
        dataclasses.replace(key, text=""),
    )
