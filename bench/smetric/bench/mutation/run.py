"""Mutation testing of the routing, admission and rendering modules (docs/mutation.md).

    python -m smetric.bench.mutation.run                      # every module in MODULES
    python -m smetric.bench.mutation.run policy.estimates     # one module (its short name)
    python -m smetric.bench.mutation.run --list policy.smetric  # print the mutants, run nothing
    python -m smetric.bench.mutation.run --json out/mut.json  # also write every mutant's outcome

Why a project script and not ``mutmut run``: mutmut 3 mutates function bodies only (its trampoline
swaps whole functions), so module-level tuples such as the trusted-header list and class-level
pydantic settings such as ``extra="forbid"`` are never mutated, and it names mutants after the file
path, which does not match the module names of this multi-folder namespace package; mutmut 2
rewrites the file in place and starts a fresh pytest per mutant. This script applies mutmut's
operator set (plus keyword, element and statement removal) to the AST and never writes a source
file: each mutant is compiled in memory and served by an import hook in a forked child, which runs
the module's mapped unit tests with ``pytest -x``. A test failure, collection error or timeout
kills the mutant; a clean pass lets it survive. Mutants named in ``bench/smetric/bench/mutation/equivalent.txt``
(argued equivalent in docs/mutation.md) are left out of the score.
"""

from __future__ import annotations

import argparse
import ast
import contextlib
import gc
import importlib.abc
import importlib.machinery
import importlib.metadata
import importlib.util
import json
import os
import signal
import sys
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from types import ModuleType

from smetric.bench.mutation.ops import mutants, mutated_source
from smetric.bench.procs import stopped
from smetric.core.outputs import check_writable
from smetric.core.stopping import sigterm_raises_interrupt

ROOT = Path(__file__).resolve().parents[4]  # the repository: the mutated modules and their tests
EQUIVALENT_FILE = Path(__file__).resolve().parent / "equivalent.txt"
PROG = "python -m smetric.bench.mutation.run"
STOP_GRACE_S = 5.0  # a module's child, signalled, kills its mutant's group and ends

# Module (short name) -> (source file, its focused tests, the other unit tests that exercise it).
# A mutant runs against the focused tests first; only their survivors run the rest (same verdict as
# running all of them, at a fraction of the cost: a kill needs one failing test).
MODULES: dict[str, tuple[str, tuple[str, ...], tuple[str, ...]]] = {
    "operator.render_picker": (
        "operator/smetric/operator/render_picker.py",
        ("tests/unit/operator/test_render_picker_values.py",),
        (
            "tests/unit/operator/test_operator_render_picker.py",
            "tests/unit/operator/test_operator_gateway_retry.py",
            "tests/unit/operator/test_operator_flow_control.py",
            "tests/unit/operator/test_operator_deploy.py",
        ),
    ),
    "operator.spec": (
        "operator/smetric/operator/spec.py",
        ("tests/unit/operator/test_spec_values.py",),
        # the CRD is generated from the spec: the drift test sees its schema settings
        ("tests/unit/operator/test_operator_spec.py", "tests/unit/operator/test_operator_gencrd.py"),
    ),
    # spec.py's quantities, cross-field rules and their CEL twins (split out of spec.py)
    "operator.spec_rules": (
        "operator/smetric/operator/spec_rules.py",
        ("tests/unit/operator/test_spec_values.py",),
        ("tests/unit/operator/test_operator_spec.py", "tests/unit/operator/test_operator_gencrd.py"),
    ),
    # the spec's shared base model (extra="forbid", frozen) and router.parameters
    "operator.spec_params": (
        "operator/smetric/operator/spec_params.py",
        ("tests/unit/operator/test_spec_values.py",),
        ("tests/unit/operator/test_operator_spec.py", "tests/unit/operator/test_operator_gencrd.py"),
    ),
    "epp.parse.headers": (
        "epp/smetric/epp/parse/headers.py",
        ("tests/unit/epp/test_epp_parse_values.py",),
        ("tests/unit/epp/test_epp_parse.py",),
    ),
    "epp.parse.body": (
        "epp/smetric/epp/parse/body.py",
        ("tests/unit/epp/test_epp_parse_values.py",),
        ("tests/unit/epp/test_epp_parse.py",),
    ),
    "router.work": (
        "core/smetric/router/work.py",
        ("tests/unit/policy/test_ledger_values.py",),
        ("tests/unit/policy/test_router_state.py",),
    ),
    "router.ledger": (
        "core/smetric/router/ledger.py",
        ("tests/unit/policy/test_ledger_values.py",),
        ("tests/unit/epp/test_epp_ledger.py", "tests/unit/policy/test_router_state.py"),
    ),
    "policy.sessioncentric": (
        "core/smetric/policy/sessioncentric.py",
        ("tests/unit/policy/test_sessioncentric_boundaries.py",),
        ("tests/unit/policy/test_policy_ablations.py", "tests/unit/policy/test_policy_smetric.py"),
    ),
    "policy.smetric": (
        "core/smetric/policy/smetric.py",
        ("tests/unit/policy/test_sessioncentric_boundaries.py",),
        ("tests/unit/policy/test_policy_smetric.py", "tests/unit/policy/test_policy_ablations.py"),
    ),
    # other people change these two most: they run last
    "policy.estimates": (
        "core/smetric/policy/estimates.py",
        ("tests/unit/policy/test_estimates_values.py",),
        (
            "tests/unit/policy/test_policy_estimates_tier.py",
            "tests/unit/policy/test_policy_smetric.py",
            "tests/unit/policy/test_policy_ablations.py",
            "tests/unit/policy/test_policy_tiered.py",
        ),
    ),
    "epp.server.guard": (
        "epp/smetric/epp/server/guard.py",
        ("tests/unit/epp/test_epp_guard_bounds.py",),
        (
            "tests/unit/epp/test_epp_hostile.py",
            "tests/unit/epp/test_epp_admission.py",
            "tests/unit/epp/test_epp_body_fairness.py",
        ),
    ),
    "epp.server.outlier": (
        "epp/smetric/epp/server/outlier.py",
        ("tests/unit/epp/test_epp_outlier.py",),
        (),
    ),
    "epp.server.feedback": (
        "epp/smetric/epp/server/feedback.py",
        ("tests/unit/epp/test_epp_feedback.py",),
        ("tests/unit/epp/test_epp_outlier.py", "tests/unit/epp/test_epp_learned_speed.py"),
    ),
    "router.prefill_rate": (
        "core/smetric/router/prefill_rate.py",
        ("tests/unit/epp/test_epp_ledger.py",),
        ("tests/unit/epp/test_epp_outlier.py",),
    ),
    "policy.flowcontrol": (
        "core/smetric/policy/flowcontrol.py",
        ("tests/unit/policy/test_policy_flowcontrol.py",),
        ("tests/unit/epp/test_epp_flow_gate_where.py", "tests/unit/epp/test_epp_flow_control.py"),
    ),
}

# Third-party imports the forked children share with the parent (import cost paid once).
PRELOAD = (
    "pytest",
    "_pytest.python",
    "pytest_asyncio",
    "hypothesis",
    "numpy",
    "pydantic",
    "yaml",
    "orjson",
    "msgspec",
    "grpc",
    "google.protobuf",
    "aiohttp",
    "prometheus_client",
    "zmq",
)


@dataclass(frozen=True, slots=True)
class Outcome:
    key: str
    module: str
    line: int
    op: str
    source_line: str
    status: str  # killed | survived | timeout | equivalent
    seconds: float


class _Finder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Serves one module from in-memory source; every other import is left to the normal finders."""

    def __init__(self, name: str, path: str, source: str) -> None:
        self.name, self.path, self.source = name, path, source

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname != self.name:
            return None
        return importlib.util.spec_from_loader(fullname, self, origin=self.path)

    def create_module(self, spec: object) -> None:
        return None

    def exec_module(self, module: ModuleType) -> None:
        module.__file__ = self.path
        exec(compile(self.source, self.path, "exec"), module.__dict__)


def _child(full_name: str, path: str, source: str, tests: Sequence[str]) -> int:
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 1)
    os.dup2(devnull, 2)
    sys.meta_path.insert(0, _Finder(full_name, path, source))
    import pytest

    args = ["-x", "-q", "-p", "no:cacheprovider", "-p", "no:warnings", "-o", "addopts=", *tests]
    return int(pytest.main(args))


def run_one(
    full_name: str, path: str, source: str, tests: Sequence[str], timeout_s: float
) -> tuple[str, float]:
    t0 = time.monotonic()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        rc = 3
        with contextlib.suppress(BaseException):
            os.setpgid(0, 0)
            signal.signal(signal.SIGTERM, signal.SIG_DFL)  # not the parent's SIGTERM -> KeyboardInterrupt
            rc = _child(full_name, path, source, tests)
        os._exit(rc)
    _own_group(pid)
    try:
        while True:
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                rc = os.waitstatus_to_exitcode(status)
                return ("survived" if rc == 0 else "killed"), time.monotonic() - t0
            if time.monotonic() - t0 > timeout_s:
                _kill_group(pid)
                return "timeout", time.monotonic() - t0
            time.sleep(0.02)
    except BaseException:  # Ctrl-C, SIGTERM (main): the mutant's group goes too
        _kill_group(pid)
        raise


def _stop_forked(pid: int, grace_s: float) -> None:
    """SIGTERM forked child ``pid`` (it inherited :func:`main`'s SIGTERM handling: its ``finally``
    and ``except`` blocks run), SIGKILL after ``grace_s``; reaped either way."""
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    try:
        while time.monotonic() < deadline:
            if os.waitpid(pid, os.WNOHANG)[0]:
                return
            time.sleep(0.02)
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
    except ChildProcessError:  # reaped already
        return


def _own_group(pid: int) -> None:
    """Forked child ``pid`` leads its own process group before this returns (the child sets it too;
    whichever runs first wins), so a :func:`_kill_group` right after the fork reaches it."""
    with contextlib.suppress(OSError):  # the child has set it, or has ended already
        os.setpgid(pid, pid)


def _kill_group(pid: int) -> None:
    """SIGKILL the process group that forked child ``pid`` leads, and reap the child."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pid, signal.SIGKILL)
    with contextlib.suppress(ChildProcessError):
        os.waitpid(pid, 0)


def load_equivalent() -> dict[str, str]:
    """``key  module  reason`` lines from bench/smetric/bench/mutation/equivalent.txt (``#`` comments)."""
    out: dict[str, str] = {}
    if EQUIVALENT_FILE.exists():
        for raw in EQUIVALENT_FILE.read_text().splitlines():
            line = raw.split("#", 1)[0].strip()
            if line:
                out[line.split()[0]] = line
    return out


def _imports_target(module: str, full_name: str) -> bool:
    """Whether importing ``module`` imports ``full_name`` too (checked in a throwaway child)."""
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        code = 2
        with contextlib.suppress(BaseException):
            os.setpgid(0, 0)
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
            __import__(module)
            code = 1 if full_name in sys.modules else 0
        os._exit(code)
    _own_group(pid)
    try:
        _, status = os.waitpid(pid, 0)  # an import: bounded by the module's own import time
    except BaseException:
        _kill_group(pid)
        raise
    return os.waitstatus_to_exitcode(status) != 0


def _preload_dependencies(full_name: str, source: str) -> None:
    """Import the project modules the target imports, so forked children share them; a module
    whose import would import the target itself (a package ``__init__`` re-exporting it) is left
    to the children, or every child would test the unmutated copy."""
    for node in ast.walk(ast.parse(source)):
        module = node.module if isinstance(node, ast.ImportFrom) else None
        if module and module.startswith("smetric.") and not _imports_target(module, full_name):
            __import__(module)
    if full_name in sys.modules:
        raise SystemExit(f"{full_name} was imported while preloading; cannot mutate it in memory")


def run_module(
    short: str, equivalent: dict[str, str], verbose: bool, only: frozenset[str] = frozenset()
) -> list[Outcome]:
    rel, focused, others = MODULES[short]
    path = str(ROOT / rel)
    full_name = "smetric." + short
    source = Path(path).read_text()
    stage1 = [str(ROOT / t) for t in focused if (ROOT / t).exists()]
    stage2 = [*stage1, *(str(ROOT / t) for t in others if (ROOT / t).exists())]
    pid = os.fork()  # the dependencies are preloaded in a child that runs the whole module
    if pid == 0:  # pragma: no cover - the child
        rc = 1
        try:
            _preload_dependencies(full_name, source)
            gc.freeze()  # the children's collections skip everything preloaded
            results = _run_stages(short, full_name, path, source, stage1, stage2, equivalent, verbose, only)
            Path(f"/tmp/smetric-mutation-{os.getpid()}.json").write_text(
                json.dumps([asdict(r) for r in results])
            )
            rc = 0
        except BaseException as exc:
            print(f"{short}: {exc}", file=sys.stderr, flush=True)
        os._exit(rc)
    try:
        _, status = os.waitpid(pid, 0)
    except BaseException:  # Ctrl-C, SIGTERM (main): the module's child kills its running mutant, then ends
        _stop_forked(pid, STOP_GRACE_S)
        raise
    out = Path(f"/tmp/smetric-mutation-{pid}.json")
    if os.waitstatus_to_exitcode(status) != 0 or not out.exists():
        raise SystemExit(f"{short}: the run failed")
    results = [Outcome(**r) for r in json.loads(out.read_text())]
    out.unlink()
    return results


def _run_stages(
    short: str,
    full_name: str,
    path: str,
    source: str,
    stage1: list[str],
    stage2: list[str],
    equivalent: dict[str, str],
    verbose: bool,
    only: frozenset[str],
) -> list[Outcome]:
    base, base_s = run_one(full_name, path, mutated_source(source, None), stage2, 600.0)
    if base != "survived":
        raise SystemExit(f"{short}: the unmutated module fails its tests ({base}); fix that first")
    timeout_s = max(10.0, 4.0 * base_s)
    results: list[Outcome] = []
    for m in mutants(short, source):
        if only and m.key not in only:
            continue
        if m.key in equivalent:
            status, secs = "equivalent", 0.0
        else:
            code = mutated_source(source, m)
            status, secs = "survived", 0.0
            if stage1:
                status, secs = run_one(full_name, path, code, stage1, timeout_s)
            if status == "survived" and stage2 != stage1:
                status, more = run_one(full_name, path, code, stage2, timeout_s)
                secs += more
        results.append(Outcome(m.key, short, m.line, m.op, m.source_line, status, round(secs, 2)))
        if verbose and len(results) % 50 == 0:
            print(f"  {short}: {len(results)} mutants done", flush=True)
        if verbose and status == "survived":
            print(f"  SURVIVED {m.key} {short}:{m.line} {m.op}  | {m.source_line}", flush=True)
    return results


def summary(results: Sequence[Outcome]) -> str:
    rows = [
        "| module | mutants | killed | timeout | survived | equivalent | score |",
        "|---|---|---|---|---|---|---|",
    ]
    modules = list(dict.fromkeys(r.module for r in results))
    tot = {"killed": 0, "timeout": 0, "survived": 0, "equivalent": 0}
    for mod in [*modules, "total"]:
        sel = [r for r in results if mod in ("total", r.module)]
        c = {k: sum(1 for r in sel if r.status == k) for k in tot}
        denom = c["killed"] + c["timeout"] + c["survived"]
        score = 100.0 * (c["killed"] + c["timeout"]) / denom if denom else 100.0
        rows.append(
            f"| {mod} | {len(sel)} | {c['killed']} | {c['timeout']} | {c['survived']} | {c['equivalent']} | {score:.1f} % |"
        )
    return "\n".join(rows)


def main(argv: Sequence[str] | None = None) -> int:
    """:func:`run`; SIGTERM or SIGINT kills the running mutant's process group and exits 143 / 130."""
    try:
        with sigterm_raises_interrupt():
            return run(argv)
    except KeyboardInterrupt as exc:
        return stopped(PROG, exc)


def run(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("modules", nargs="*", help=f"short module names (default: all of {', '.join(MODULES)})")
    ap.add_argument("--list", action="store_true", help="print the mutants and exit")
    ap.add_argument("--json", type=Path, help="write every mutant's outcome here")
    ap.add_argument(
        "--only", type=Path, help="run only the mutant keys listed in this file (first word a line)"
    )
    ap.add_argument("-q", "--quiet", action="store_true", help="do not print survivors as they appear")
    args = ap.parse_args(argv)
    selected = args.modules or list(MODULES)
    unknown = [m for m in selected if m not in MODULES]
    if unknown:
        ap.error(f"unknown module(s) {unknown}; known: {list(MODULES)}")
    try:  # before any mutant runs: where the outcomes go, and the keys to run
        if args.json:
            check_writable("--json", args.json)
        only = (
            frozenset(line.split()[0] for line in args.only.read_text().splitlines() if line.strip())
            if args.only
            else frozenset()
        )
    except ValueError as exc:
        print(f"{PROG}: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:
        print(f"{PROG}: --only {args.only}: cannot read it ({exc.strerror or exc})",
              file=sys.stderr)  # fmt: skip
        return 2
    if args.list:
        for short in selected:
            for m in mutants(short, (ROOT / MODULES[short][0]).read_text()):
                print(f"{m.key} {short}:{m.line} {m.op}  | {m.source_line}")
        return 0
    for name in PRELOAD:
        with contextlib.suppress(ImportError):
            __import__(name)
    for plugin in importlib.metadata.entry_points(group="pytest11"):  # pytest's plugins, loaded once
        with contextlib.suppress(Exception):
            __import__(plugin.module)
    equivalent = load_equivalent()
    results: list[Outcome] = []
    failed = False
    for short in selected:
        t0 = time.monotonic()
        try:
            got = run_module(short, equivalent, not args.quiet, only)
        except SystemExit as exc:  # one module's failure does not hide the others' results
            print(exc, flush=True)
            failed = True
            continue
        results.extend(got)
        print(f"{short}: {len(got)} mutants in {time.monotonic() - t0:.0f} s", flush=True)
        if args.json:
            args.json.parent.mkdir(parents=True, exist_ok=True)
            args.json.write_text(json.dumps([asdict(r) for r in results], indent=1))
    print(summary(results))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
