"""``smetric-operator``: ``render FILE`` (offline, YAML stream), ``run`` (the kopf controller) or
``gen-crd`` (the CRD from the spec model and the policy registry, :mod:`smetric.operator.gencrd`)."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

import yaml

from smetric.core.version import version_line
from smetric.operator.advice import context_warnings, deprecation_warnings
from smetric.operator.render import render_resource
from smetric.operator.render_client_limits import client_limit_warnings
from smetric.operator.spec import InvalidSpecError, parse_spec


def _parser() -> argparse.ArgumentParser:
    fmt = argparse.ArgumentDefaultsHelpFormatter
    parser = argparse.ArgumentParser(
        prog="smetric-operator", description="SMetricPool operator", formatter_class=fmt
    )
    parser.add_argument("--version", action="version", version=version_line("smetric-operator"))
    sub = parser.add_subparsers(dest="command", required=True)
    render = sub.add_parser(
        "render",
        help="print the child manifests of SMetricPool CR(s) in FILE (- = stdin)",
        formatter_class=fmt,
    )
    render.add_argument("file")
    render.add_argument("--namespace", default="default", help="namespace for CRs that name none")
    run = sub.add_parser("run", help="run the controller", formatter_class=fmt)
    scope = run.add_mutually_exclusive_group()
    scope.add_argument("--namespace", action="append", default=[], help="watch this namespace (repeatable)")
    scope.add_argument("--all-namespaces", action="store_true", help="watch the whole cluster (default)")
    run.add_argument("--api-server", default=None, help="API URL without auth (kubectl proxy, tests)")
    run.add_argument(
        "--liveness", default=None, help="kopf liveness endpoint, e.g. http://0.0.0.0:8080/healthz"
    )
    run.add_argument("--verbose", action="store_true")
    gen = sub.add_parser(
        "gen-crd", help="write the CRD and its chart copy from the spec model and the policy registry"
    )
    gen.add_argument("--write", action="store_true", help="rewrite both copies in place")
    gen.add_argument("--check", action="store_true", help="exit 1 when a copy is out of date")
    return parser


class _BlockDumper(yaml.SafeDumper):
    """Multi-line strings (config files, launcher scripts) as ``|`` blocks; no anchors/aliases
    (``&id001``): shared sub-objects are written out in full, as kubectl would show them."""

    def ignore_aliases(self, data: object) -> bool:
        return True


def _str(dumper: yaml.SafeDumper, value: str) -> yaml.ScalarNode:
    style = "|" if "\n" in value else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)


_BlockDumper.add_representer(str, _str)


def _render(path: str, namespace: str) -> int:
    try:
        text = sys.stdin.read() if path == "-" else Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        print(
            f"smetric-operator: {path}: cannot read: {getattr(exc, 'strerror', None) or exc}", file=sys.stderr
        )
        return 2
    try:
        documents = [d for d in yaml.safe_load_all(text) if d]
    except yaml.YAMLError as exc:
        print(f"smetric-operator: {path}: not YAML: {exc}", file=sys.stderr)
        return 2
    pools = [d for d in documents if isinstance(d, dict) and d.get("kind") == "SMetricPool"]
    if not pools:
        print(f"smetric-operator: {path}: no SMetricPool found", file=sys.stderr)
        return 2
    manifests = []
    for pool in pools:
        try:
            manifests += render_resource(pool, namespace)
            name = (pool.get("metadata") or {}).get("name", "?")
            spec = parse_spec(pool.get("spec"))
            pool_ns = (pool.get("metadata") or {}).get("namespace") or namespace
            warnings = [*deprecation_warnings(str(name), spec), *context_warnings(str(name), spec)]
            warnings += client_limit_warnings(str(name), str(pool_ns), spec)
            for warning in warnings:
                print(f"smetric-operator: warning: {warning}", file=sys.stderr)
        except (InvalidSpecError, ValueError) as exc:
            name = (pool.get("metadata") or {}).get("name", "?")
            print(f"smetric-operator: SMetricPool {name}: invalid spec: {exc}", file=sys.stderr)
            return 1
    sys.stdout.write(yaml.dump_all(manifests, Dumper=_BlockDumper, sort_keys=False))
    return 0


def _run(args: argparse.Namespace) -> int:
    import asyncio
    import logging

    import kopf

    from smetric.operator.handlers import OperatorState, build_registry

    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    registry = build_registry(OperatorState(api_server=args.api_server))
    asyncio.run(
        kopf.operator(
            registry=registry,
            standalone=True,  # one replica (Recreate strategy): no peering objects needed
            clusterwide=not args.namespace,
            namespaces=args.namespace,
            liveness_endpoint=args.liveness,
        )
    )
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.command == "render":
        return _render(args.file, args.namespace)
    if args.command == "gen-crd":
        from smetric.operator import gencrd

        return gencrd.main([*(["--write"] if args.write else []), *(["--check"] if args.check else [])])
    return _run(args)


if __name__ == "__main__":
    raise SystemExit(main())
