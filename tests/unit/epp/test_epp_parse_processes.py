"""Large bodies parsed and keyed in worker processes (server.offload, server.keyrecipe): the key a
worker computes is the one the picker computes itself, errors keep their status, a dead worker is a
503 and not a dead picker, and the picker's flags select the processes by default."""

from __future__ import annotations

import asyncio
import json
import os
import signal
from pathlib import Path

import orjson
import pytest

from smetric.core.blockhash import BlockHasher
from smetric.core.tokenizer import load_tokenizer
from smetric.epp.contracts import PromptKey
from smetric.epp.index.approximate import ApproximateIndex
from smetric.epp.index.precise import PreciseIndex
from smetric.epp.kvevents.store import BlockStore
from smetric.epp.parse.body import ParsedBody, parse_body
from smetric.epp.parse.errors import RequestError
from smetric.epp.server.keyrecipe import KeyRecipe
from smetric.epp.server.offload import ParseOffload
from smetric.epp.server.servicer import ServicerSettings
from smetric.epp.settings import PickerSettings
from tests.support.epp_harness import BASE_HEADERS, body_msgs, build, exchange, headers_msg

PATH = "/v1/chat/completions"


def _unused(parsed: ParsedBody) -> tuple[str, PromptKey]:
    raise AssertionError("a worker process keys with its recipe, not with the caller's keyer")


def agent_body(n: int = 400) -> bytes:
    msgs = [
        {"role": "user" if i % 2 == 0 else "assistant", "content": f"hello world step {i}: ls -la ok"}
        for i in range(n)
    ]
    return orjson.dumps({"model": "m", "stream": True, "messages": msgs})


def _hf_dir(tmp_path: Path) -> Path:
    tokenizers = pytest.importorskip("tokenizers")
    tok = tokenizers.Tokenizer(tokenizers.models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer = tokenizers.pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = tokenizers.decoders.ByteLevel()
    trainer = tokenizers.trainers.BpeTrainer(vocab_size=300, special_tokens=["<unk>", "<s>"])
    tok.train_from_iterator(["hello world step ls -la ok user assistant"] * 20, trainer=trainer)
    tok.save(str(tmp_path / "tokenizer.json"))
    template = "{{ bos_token }}{% for m in messages %}<{{ m.role }}>{{ m.content }}{% endfor %}"
    (tmp_path / "tokenizer_config.json").write_text(
        json.dumps({"bos_token": "<s>", "chat_template": template})
    )
    return tmp_path


def test_the_picker_parses_large_bodies_in_two_processes_by_default() -> None:
    s = PickerSettings.defaults()
    assert s.parse_processes == 2
    assert ServicerSettings.from_picker(s).parse_processes == 2
    assert KeyRecipe.of(s) == KeyRecipe(s.prefix_index, s.block_size, s.tokenizer, s.hash_seed, s.hash_algo)
    assert PickerSettings.from_argv(["--parse-processes=0"]).parse_processes == 0


async def test_a_worker_keys_an_approximate_prompt_as_the_picker_does() -> None:
    recipe = KeyRecipe("approximate", 16, "", "0", "sha256")
    offload = ParseOffload(recipe=recipe, processes=1)
    try:
        body = agent_body()
        parsed, text, key = await offload.parse(body, PATH, _unused)
        assert offload.in_processes and text == "" and key.text == ""
        own = parse_body(body, PATH)
        want = ApproximateIndex(block_tokens=16).key(own.prompt_text)
        assert key.block_keys == want.block_keys and key.prompt_tokens == want.prompt_tokens
        assert len(key.block_keys) > 50
        assert (parsed.model, parsed.turn, parsed.prompt_tokens) == (own.model, own.turn, own.prompt_tokens)
        assert parsed.messages == () and parsed.prompt_text == ""  # nothing large came back
    finally:
        await offload.close()


async def test_a_worker_keys_a_precise_prompt_with_the_chat_template(tmp_path: Path) -> None:
    tok_dir = str(_hf_dir(tmp_path))
    recipe = KeyRecipe("precise", 16, tok_dir, "0", "sha256")
    offload = ParseOffload(recipe=recipe, processes=1)
    try:
        body = agent_body()
        _parsed, _text, key = await offload.parse(body, PATH, _unused)
        tokenizer = load_tokenizer(tok_dir)
        index = PreciseIndex(tokenizer, BlockHasher(block_size=16, seed="0", algo="sha256"), BlockStore())
        rendered = tokenizer.render_chat(parse_body(body, PATH).messages)
        assert rendered.startswith("<s><user>hello world")  # the engine's template, not ours
        want = index.key(rendered)
        assert key.block_keys == want.block_keys and key.prompt_tokens == want.prompt_tokens
        assert key.exact_tokens
    finally:
        await offload.close()


async def test_a_workers_request_error_keeps_its_status() -> None:
    offload = ParseOffload(recipe=KeyRecipe("approximate", 16, "", "0", "sha256"), processes=1)
    try:
        with pytest.raises(RequestError) as bad:
            await offload.parse(b"{" * 70_000, PATH, _unused)
        assert bad.value.status == 400
    finally:
        await offload.close()


async def test_a_dead_worker_is_a_503_and_the_next_body_gets_a_new_worker() -> None:
    offload = ParseOffload(recipe=KeyRecipe("approximate", 16, "", "0", "sha256"), processes=1)
    try:
        await offload.parse(agent_body(10), PATH, _unused)
        (pid,) = offload.worker_pids
        os.kill(pid, signal.SIGKILL)
        with pytest.raises(RequestError) as dead:
            await offload.parse(agent_body(10), PATH, _unused)
        assert dead.value.status == 503 and "parse worker" in dead.value.message
        _p, _t, key = await offload.parse(agent_body(10), PATH, _unused)
        assert key.block_keys and offload.worker_pids and offload.worker_pids != [pid]
    finally:
        await offload.close()


async def _cancel_mid_exchange(offload: ParseOffload) -> int:
    """Start the one worker, cancel a parse while a large body is on its way to it; its pid."""
    await offload.parse(agent_body(10), PATH, _unused)
    (pid,) = offload.worker_pids
    task = asyncio.create_task(offload.parse(agent_body(200_000), PATH, _unused))
    await asyncio.sleep(0.05)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    return pid


async def test_a_cancelled_parse_replaces_its_worker_and_the_pool_stays_bounded() -> None:
    offload = ParseOffload(recipe=KeyRecipe("approximate", 16, "", "0", "sha256"), processes=1)
    try:
        pid = await _cancel_mid_exchange(offload)
        # the worker was mid-exchange: killed, and a new one serves the next body
        _p, _t, key = await offload.parse(agent_body(10), PATH, _unused)
        assert key.block_keys and len(offload.worker_pids) == 1 and offload.worker_pids != [pid]
        await asyncio.gather(*(offload.parse(agent_body(10), PATH, _unused) for _ in range(4)))
        assert len(offload.worker_pids) == 1  # never more workers than processes
    finally:
        await offload.close()


def _gone(pid: int) -> bool:
    """``pid`` is reaped (no /proc entry); a zombie ('Z') still has one."""
    return not Path(f"/proc/{pid}").exists()


async def test_a_worker_killed_mid_exchange_is_reaped_not_left_a_zombie() -> None:
    offload = ParseOffload(recipe=KeyRecipe("approximate", 16, "", "0", "sha256"), processes=1)
    try:
        pid = await _cancel_mid_exchange(offload)
        for _ in range(500):  # no other worker starts meanwhile (that would reap it in passing)
            if _gone(pid):
                break
            await asyncio.sleep(0.01)
        assert _gone(pid), f"worker {pid} left a zombie"
    finally:
        await offload.close()


async def test_the_servicer_routes_a_large_body_keyed_in_a_worker(serve: object) -> None:
    recipe = KeyRecipe("approximate", 16, "", "0", "sha256")
    settings = ServicerSettings(max_body_bytes=4 << 20, offload_parse_bytes=64 * 1024, parse_processes=1)
    servicer, *_ = build(settings=settings)
    await servicer.offload.close()
    servicer.offload = ParseOffload(settings.parse_workers, recipe, settings.parse_processes)
    try:
        stub = await serve(servicer)  # type: ignore[operator]

        body = agent_body(4000)
        assert len(body) > 64 * 1024
        out = await exchange(stub, [headers_msg(BASE_HEADERS), *body_msgs(body, 4)])
        assert out[0].HasField("request_headers") and servicer.offload.parsed == 1
        echoed = b"".join(r.request_body.response.body_mutation.streamed_response.body for r in out[1:])
        assert echoed == body  # the engine gets the client's body, untouched
        bad = await exchange(stub, [headers_msg(BASE_HEADERS), *body_msgs(b"{" * 70_000)])
        assert bad[0].immediate_response.status.code == 400
    finally:
        await servicer.offload.close()


_FORKS: list[int] = []  # this test module's record of the fork hook below (a test-only counter)
os.register_at_fork(before=lambda: _FORKS.append(os.getpid()))


def test_workers_start_without_forking_the_picker_under_uvloop() -> None:
    """uvloop's subprocess_exec forks this multi-threaded process and runs the at-fork hooks in
    the child (a child that crashed with SIGSEGV under load); the pool starts its workers with
    CPython's vfork + exec, which runs none. Fails with the loop's subprocess_exec."""
    uvloop = pytest.importorskip("uvloop")

    async def two_bodies() -> list[int]:
        offload = ParseOffload(recipe=KeyRecipe("approximate", 16, "", "0", "sha256"), processes=2)
        try:
            keys = await asyncio.gather(*(offload.parse(agent_body(10), PATH, _unused) for _ in range(2)))
            assert all(k[2].block_keys for k in keys)
            return offload.worker_pids
        finally:
            await offload.close()

    _FORKS.clear()
    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        pids = runner.run(two_bodies())
    assert len(pids) == 2 and _FORKS == []
    for pid in pids:  # closed: killed and reaped
        with pytest.raises(ChildProcessError):
            os.waitpid(pid, os.WNOHANG)
