"""Tokenizers shared by the picker's precise prefix index and the emulator.

* :class:`HFTokenizer` wraps a HuggingFace ``tokenizers`` fast tokenizer loaded from a local
  ``tokenizer.json`` (or a model directory holding one; :func:`load_tokenizer` also resolves a
  Hugging Face model id through the hub cache or the network); the chat template (``chat_template`` in
  ``tokenizer_config.json``, or ``chat_template.jinja`` beside it) is rendered with ``jinja2`` when
  both are present. Both packages are optional.
* :class:`FallbackTokenizer` needs nothing: regex word pieces (runs of word characters cut to at most
  ``max_piece_chars``, single punctuation marks, whitespace runs) mapped to ids by CRC-32 modulo the
  vocabulary size. It is deterministic across processes and Python versions, so the picker and the
  emulator agree on token ids and therefore on block hashes, and gives roughly 1 token per 3-4
  characters of English or code (the chars/4 rule of thumb).

Without a chat template, chat messages are rendered as the raw concatenation of their text contents
in order (see :func:`concat_messages`): prefixes still line up turn over turn, only the absolute token
counts differ from the engine's.
"""

from __future__ import annotations

import json
import re
import zlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol


class Tokenizer(Protocol):
    """Text -> token ids, plus the chat rendering that goes with it."""

    @property
    def name(self) -> str: ...

    def encode(self, text: str) -> list[int]:
        """Token ids of ``text`` without special tokens (vLLM tokenizes rendered chats that way)."""
        ...

    def render_chat(self, messages: Sequence[Mapping[str, Any]]) -> str:
        """The prompt text the engine caches for ``messages`` (chat template or raw concatenation)."""
        ...


def message_text(content: Any) -> str:
    """The text of an OpenAI/Anthropic message ``content`` (a string or a list of typed parts)."""
    if isinstance(content, str):
        return content
    if isinstance(content, Sequence):
        parts: list[str] = []
        for part in content:
            if isinstance(part, str):
                parts.append(part)
            elif isinstance(part, Mapping):
                text = part.get("text")
                if isinstance(text, str):
                    parts.append(text)
                elif "content" in part:
                    parts.append(message_text(part["content"]))
        return "".join(parts)
    return ""


def concat_messages(messages: Sequence[Mapping[str, Any]]) -> str:
    """Raw concatenation of the messages' text contents (the documented no-template rendering)."""
    return "".join(message_text(m.get("content", "")) for m in messages)


class _PieceIds(dict[str, int]):
    """Memo of piece -> id; computes CRC-32 ids on a miss (bounded: past ``limit`` it stops storing)."""

    __slots__ = ("limit", "vocab")

    def __init__(self, vocab: int, limit: int) -> None:
        super().__init__()
        self.vocab = vocab
        self.limit = limit

    def __missing__(self, piece: str) -> int:
        tok = zlib.crc32(piece.encode("utf-8")) % self.vocab
        if len(self) < self.limit:
            self[piece] = tok
        return tok


@dataclass(frozen=True, slots=True)
class FallbackTokenizer:
    """Dependency-free deterministic tokenizer (regex word pieces -> CRC-32 ids)."""

    vocab_size: int = 32_000
    max_piece_chars: int = 4
    _ids: _PieceIds = field(init=False, repr=False, compare=False)
    _re: re.Pattern[str] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if self.vocab_size <= 0 or self.max_piece_chars <= 0:
            raise ValueError("vocab_size and max_piece_chars must be positive")
        n = self.max_piece_chars
        object.__setattr__(self, "_ids", _PieceIds(self.vocab_size, 200_000))
        # Word runs and whitespace runs cut into pieces of at most n characters; punctuation alone.
        object.__setattr__(self, "_re", re.compile(rf"\w{{1,{n}}}|\s{{1,{n}}}|[^\w\s]", re.UNICODE))

    @property
    def name(self) -> str:
        return f"fallback-crc32-v{self.vocab_size}-p{self.max_piece_chars}"

    def pieces(self, text: str) -> list[str]:
        return self._re.findall(text)

    def encode(self, text: str) -> list[int]:
        return list(map(self._ids.__getitem__, self._re.findall(text)))

    def render_chat(self, messages: Sequence[Mapping[str, Any]]) -> str:
        return concat_messages(messages)


class HFTokenizer:
    """A HuggingFace fast tokenizer from local files (``tokenizers`` package; ``jinja2`` for templates)."""

    def __init__(self, path: str | Path) -> None:
        try:
            from tokenizers import Tokenizer as _HFTokenizer
        except ImportError as exc:  # pragma: no cover - depends on the environment
            raise RuntimeError(
                "the 'tokenizers' package is needed for a real tokenizer (pip install tokenizers)"
            ) from exc
        p = Path(path)
        file = p / "tokenizer.json" if p.is_dir() else p
        if not file.is_file():
            raise FileNotFoundError(f"no tokenizer.json at {p}")
        self._tok = _HFTokenizer.from_file(str(file))
        self._name = str(p)
        self._template: Any = None
        self._special: dict[str, str] = {}
        config_file = file.parent / "tokenizer_config.json"
        config = json.loads(config_file.read_text(encoding="utf-8")) if config_file.is_file() else {}
        jinja_file = file.parent / "chat_template.jinja"  # where recent transformers save it
        if jinja_file.is_file() and not config.get("chat_template"):
            config["chat_template"] = jinja_file.read_text(encoding="utf-8")
        self._load_template(config)

    @classmethod
    def from_tokenizer(cls, tok: Any, name: str) -> HFTokenizer:
        """Wrap an already loaded ``tokenizers.Tokenizer`` (no chat template: raw concatenation)."""
        self = cls.__new__(cls)
        self._tok, self._name, self._template, self._special = tok, name, None, {}
        return self

    def _load_template(self, config: Mapping[str, Any]) -> None:
        source = config.get("chat_template")
        if isinstance(source, list):  # named templates: take "default"
            source = next((t.get("template") for t in source if t.get("name") == "default"), None)
        if not isinstance(source, str):
            return
        try:
            import jinja2
            from jinja2.sandbox import ImmutableSandboxedEnvironment
        except ImportError:
            return  # documented fallback: raw concatenation
        env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, undefined=jinja2.Undefined)
        self._template = env.from_string(source)
        for key in ("bos_token", "eos_token"):
            value = config.get(key)
            if isinstance(value, Mapping):
                value = value.get("content")
            if isinstance(value, str):
                self._special[key] = value

    @property
    def name(self) -> str:
        return self._name

    @property
    def has_chat_template(self) -> bool:
        return self._template is not None

    def encode(self, text: str) -> list[int]:
        return list(self._tok.encode(text, add_special_tokens=False).ids)

    def render_chat(self, messages: Sequence[Mapping[str, Any]]) -> str:
        if self._template is None:
            return concat_messages(messages)
        rendered = self._template.render(messages=list(messages), add_generation_prompt=True, **self._special)
        return str(rendered)


_HUB_FILES: tuple[str, ...] = ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja")
_REPO_ID = re.compile(r"^[A-Za-z0-9][\w.-]*(/[\w.-]+)?$")


class TokenizerLoadError(RuntimeError):
    """The tokenizer named by ``--tokenizer`` cannot be loaded; the message says what to do."""


def _from_hub(repo_id: str) -> HFTokenizer:
    """A Hugging Face model id: its ``tokenizer.json`` (+ config/template) from the hub cache.

    ``huggingface_hub`` (a dependency of ``tokenizers``) resolves ``HF_HOME`` (a mounted model
    volume that holds the hub cache works offline with ``HF_HUB_OFFLINE=1``) and ``HF_TOKEN``
    (gated models). Without it, ``tokenizers.Tokenizer.from_pretrained`` (network) is the fallback.
    """
    try:
        from huggingface_hub import hf_hub_download
    except ImportError:
        try:
            from tokenizers import Tokenizer as _HFTokenizer
        except ImportError as exc:
            raise TokenizerLoadError(
                "pip install 'smetric[tokenizer]' to load a tokenizer by model id"
            ) from exc
        return HFTokenizer.from_tokenizer(_HFTokenizer.from_pretrained(repo_id), repo_id)
    main = Path(hf_hub_download(repo_id, "tokenizer.json"))
    for extra in _HUB_FILES[1:]:
        try:
            hf_hub_download(repo_id, extra)
        except Exception:  # optional files: absent in many repos
            continue
    return HFTokenizer(main.parent)


def load_tokenizer(spec: str) -> Tokenizer:
    """``""`` -> :class:`FallbackTokenizer`; a local tokenizer.json file or model directory; else a
    Hugging Face model id (``Qwen/Qwen3-Coder-30B-A3B-Instruct``) resolved through the hub cache
    (``HF_HOME``; offline from a mounted model volume) or downloaded (network, ``HF_TOKEN``).

    Raises :class:`TokenizerLoadError` with an actionable message (never a bare traceback).
    """
    if not spec:
        return FallbackTokenizer()
    path = Path(spec)
    if path.exists():
        try:
            return HFTokenizer(path)
        except FileNotFoundError as exc:
            raise TokenizerLoadError(
                f"{exc}: point --tokenizer at a tokenizer.json or model directory"
            ) from None
    if spec.startswith(("/", ".")) or not _REPO_ID.match(spec):
        raise TokenizerLoadError(
            f"--tokenizer={spec}: no such file or directory (is the model volume mounted?)"
        )
    try:
        return _from_hub(spec)
    except TokenizerLoadError:
        raise
    except Exception as exc:  # network down, gated repo without HF_TOKEN, offline cache miss
        raise TokenizerLoadError(
            f"--tokenizer={spec}: cannot load from the Hugging Face hub or cache ({type(exc).__name__}: {exc}); "
            "mount the model's files and pass their path, or set HF_HOME to a volume holding the hub cache, "
            "or allow network access (and HF_TOKEN for gated models)"
        ) from None
