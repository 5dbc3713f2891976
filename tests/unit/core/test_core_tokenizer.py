"""Tokenizers: the deterministic fallback and the HF wrapper (trained here, no downloads)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from smetric.core.tokenizer import FallbackTokenizer, HFTokenizer, concat_messages, load_tokenizer


def test_fallback_is_deterministic_and_prefix_stable() -> None:
    tok = FallbackTokenizer()
    a = tok.encode("def foo(x):\n    return x + 1\n")
    assert a == FallbackTokenizer().encode("def foo(x):\n    return x + 1\n")
    longer = tok.encode("def foo(x):\n    return x + 1\n# more text")
    assert longer[: len(a)] == a
    assert all(0 <= t < tok.vocab_size for t in a)


def test_fallback_pieces_are_short() -> None:
    tok = FallbackTokenizer(max_piece_chars=4)
    assert tok.pieces("internationalization!") == ["inte", "rnat", "iona", "liza", "tion", "!"]
    assert tok.pieces("a      b") == ["a", "    ", "  ", "b"]  # whitespace runs are cut too
    assert FallbackTokenizer().encode("x" * 9) == FallbackTokenizer().encode("xxxx") * 2 + tok.encode("x")
    text = "The quick brown fox jumps over the lazy dog. " * 50
    ratio = len(text) / len(tok.encode(text))
    assert 2.0 < ratio < 5.0


def test_concat_messages_handles_part_lists() -> None:
    msgs = [
        {"role": "system", "content": "S."},
        {"role": "user", "content": [{"type": "text", "text": "A"}, {"type": "text", "text": "B"}]},
        {"role": "assistant", "content": None},
    ]
    assert concat_messages(msgs) == "S.AB"
    assert FallbackTokenizer().render_chat(msgs) == "S.AB"


def _train(tmp_path: Path, template: str | None) -> Path:
    tokenizers = pytest.importorskip("tokenizers")
    tok = tokenizers.Tokenizer(tokenizers.models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer = tokenizers.pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = tokenizers.decoders.ByteLevel()
    trainer = tokenizers.trainers.BpeTrainer(vocab_size=300, special_tokens=["<unk>", "<s>", "</s>"])
    tok.train_from_iterator(["hello world, tokenizers are fun"] * 20, trainer=trainer)
    tok.save(str(tmp_path / "tokenizer.json"))
    config: dict[str, object] = {"bos_token": "<s>", "eos_token": "</s>"}
    if template is not None:
        config["chat_template"] = template
    (tmp_path / "tokenizer_config.json").write_text(json.dumps(config))
    return tmp_path


def test_hf_tokenizer_encodes_and_renders_template(tmp_path: Path) -> None:
    template = "{{ bos_token }}{% for m in messages %}<{{ m.role }}>{{ m.content }}{% endfor %}"
    tok = HFTokenizer(_train(tmp_path, template))
    assert tok.has_chat_template
    ids = tok.encode("hello world")
    assert ids and ids == load_tokenizer(str(tmp_path)).encode("hello world")
    assert tok.render_chat([{"role": "user", "content": "hi"}]) == "<s><user>hi"


def test_hf_tokenizer_without_template_concatenates(tmp_path: Path) -> None:
    tok = HFTokenizer(_train(tmp_path, None))
    assert not tok.has_chat_template
    assert tok.render_chat([{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}]) == "ab"


def test_missing_tokenizer_file_is_a_clear_error(tmp_path: Path) -> None:
    pytest.importorskip("tokenizers")
    with pytest.raises(FileNotFoundError, match=r"tokenizer\.json"):
        HFTokenizer(tmp_path)
    assert isinstance(load_tokenizer(""), FallbackTokenizer)


def test_hf_tokenizer_reads_chat_template_jinja(tmp_path: Path) -> None:
    _train(tmp_path, None)
    (tmp_path / "chat_template.jinja").write_text("{% for m in messages %}[{{ m.content }}]{% endfor %}")
    assert HFTokenizer(tmp_path).render_chat([{"role": "user", "content": "x"}]) == "[x]"


def test_a_model_id_loads_offline_from_a_mounted_hub_cache(tmp_path: Path) -> None:
    """The picker pod: ``--tokenizer=<HF model id>`` with the model volume holding the hub cache
    (``HF_HOME``, ``HF_HUB_OFFLINE=1``) - no network, no crash-loop."""
    import os
    import subprocess
    import sys

    snapshot = tmp_path / "hf" / "hub" / "models--org--tiny" / "snapshots" / ("a" * 40)
    snapshot.mkdir(parents=True)
    _train(snapshot, "{% for m in messages %}[{{ m.content }}]{% endfor %}")
    refs = tmp_path / "hf" / "hub" / "models--org--tiny" / "refs"
    refs.mkdir()
    (refs / "main").write_text("a" * 40)
    code = (
        "from smetric.core.tokenizer import load_tokenizer\n"
        "t = load_tokenizer('org/tiny')\n"
        "print(len(t.encode('hello world')) > 0, t.render_chat([{'role': 'user', 'content': 'x'}]))\n"
    )
    env = {**os.environ, "HF_HOME": str(tmp_path / "hf"), "HF_HUB_OFFLINE": "1"}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["True", "[x]"]
    missing = subprocess.run(
        [
            sys.executable,
            "-c",
            "from smetric.core.tokenizer import load_tokenizer; load_tokenizer('org/absent')",
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert missing.returncode != 0 and "TokenizerLoadError" in missing.stderr and "HF_HOME" in missing.stderr


def test_a_missing_path_is_a_clear_error() -> None:
    from smetric.core.tokenizer import TokenizerLoadError

    with pytest.raises(TokenizerLoadError, match="model volume"):
        load_tokenizer("/nonexistent/model")
