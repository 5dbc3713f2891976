"""Builds a tiny random Llama model that a real vLLM engine can serve on the CPU (no downloads).

Run with the vLLM tier's interpreter (it needs ``torch``, ``transformers`` and ``tokenizers``)::

    .venv-vllm/bin/python tests/integration/vllm/vllm_model.py OUT_DIR

The tokenizer is a byte-level BPE trained here on generated code-like text (no special tokens are
added when encoding, so the picker's ``HFTokenizer`` and the engine agree on ids); the model is a
``LlamaConfig`` with 2 layers, random weights, saved with ``save_pretrained``. Output quality is
irrelevant: the tests look at caching, hashing, metrics and routing.
"""

from __future__ import annotations

import json
import random
import sys
from pathlib import Path

CHAT_TEMPLATE = (
    "{% for m in messages %}<|{{ m['role'] }}|>{{ m['content'] }}\n{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>{% endif %}"
)
WORDS = (
    "def", "class", "return", "import", "from", "self", "value", "index", "cache", "block", "token",
    "request", "session", "engine", "prefix", "hash", "route", "policy", "error", "none", "true", "false",
    "list", "dict", "print", "for", "while", "if", "else", "with", "as", "the", "a", "an", "of", "to", "in",
    "is", "it", "that", "this", "be", "on", "at", "by", "we", "you", "they", "fix", "bug", "test", "file",
)  # fmt: skip


def corpus(n_lines: int = 3000, seed: int = 0) -> list[str]:
    rng = random.Random(seed)
    return [" ".join(rng.choice(WORDS) for _ in range(rng.randint(4, 16))) + "\n" for _ in range(n_lines)]


def build(out: Path, vocab_size: int = 512) -> Path:
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    out.mkdir(parents=True, exist_ok=True)
    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    specials = ["<unk>", "<s>", "</s>"]
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=specials,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    tok.train_from_iterator(corpus(), trainer=trainer)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok, unk_token="<unk>", bos_token="<s>", eos_token="</s>", pad_token="</s>"
    )
    fast.chat_template = CHAT_TEMPLATE
    fast.save_pretrained(out)

    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=tok.get_vocab_size(),
        hidden_size=128,
        intermediate_size=256,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=2,
        head_dim=64,
        max_position_embeddings=4096,
        bos_token_id=tok.token_to_id("<s>"),
        eos_token_id=tok.token_to_id("</s>"),
        tie_word_embeddings=True,
        torch_dtype="float32",
    )
    LlamaForCausalLM(config).save_pretrained(out, safe_serialization=True)
    (out / "smetric-tiny.json").write_text(json.dumps({"vocab_size": tok.get_vocab_size()}))
    return out


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: vllm_model.py OUT_DIR")
    print(build(Path(sys.argv[1])))
