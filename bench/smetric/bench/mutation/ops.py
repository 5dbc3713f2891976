"""The mutation operators of ``smetric.bench.mutation.run`` (docs/mutation.md): which nodes of a module's
AST change, how, and the source of one mutant. Pure functions of the source text."""

from __future__ import annotations

import ast
import copy
import hashlib
from collections.abc import Iterator
from dataclasses import dataclass

_LOG_METHODS = frozenset({"debug", "info", "warning", "error", "exception", "critical"})
_DOC_KEYWORDS = frozenset({"description", "title", "help"})
_CMP_SWAP: dict[type[ast.cmpop], type[ast.cmpop]] = {
    ast.Lt: ast.LtE,
    ast.LtE: ast.Lt,
    ast.Gt: ast.GtE,
    ast.GtE: ast.Gt,
    ast.Eq: ast.NotEq,
    ast.NotEq: ast.Eq,
    ast.Is: ast.IsNot,
    ast.IsNot: ast.Is,
    ast.In: ast.NotIn,
    ast.NotIn: ast.In,
}
_BIN_SWAP: dict[type[ast.operator], type[ast.operator]] = {
    ast.Add: ast.Sub,
    ast.Sub: ast.Add,
    ast.Mult: ast.Div,
    ast.Div: ast.Mult,
    ast.FloorDiv: ast.Div,
    ast.Mod: ast.Div,
    ast.Pow: ast.Mult,
    ast.BitOr: ast.BitAnd,
    ast.BitAnd: ast.BitOr,
}
_SYMBOL = {
    ast.Lt: "<",
    ast.LtE: "<=",
    ast.Gt: ">",
    ast.GtE: ">=",
    ast.Eq: "==",
    ast.NotEq: "!=",
    ast.Is: "is",
    ast.IsNot: "is not",
    ast.In: "in",
    ast.NotIn: "not in",
    ast.Add: "+",
    ast.Sub: "-",
    ast.Mult: "*",
    ast.Div: "/",
    ast.FloorDiv: "//",
    ast.Mod: "%",
    ast.Pow: "**",
    ast.BitOr: "|",
    ast.BitAnd: "&",
}

Path_ = tuple[tuple[str, int | None], ...]  # (field, index) steps from the module node


@dataclass(frozen=True, slots=True)
class Mutant:
    key: str  # stable id: hash of module, line text, operator and occurrence
    module: str
    line: int
    op: str
    source_line: str
    path: Path_
    variant: int  # which change at that node (a Compare has one per operator)


def _skip_ids(tree: ast.Module) -> set[int]:
    """Nodes never mutated: docstrings, annotations, ``__future__``, logging calls, ``TYPE_CHECKING``."""
    skip: set[int] = set()

    def mark(node: ast.AST | None) -> None:
        if node is not None:
            skip.update(id(n) for n in ast.walk(node))

    for node in ast.walk(tree):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
                mark(body[0])
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            mark(node.returns)
            every = [*node.args.args, *node.args.kwonlyargs, *node.args.posonlyargs]
            every += [a for a in (node.args.vararg, node.args.kwarg) if a is not None]
            for arg in every:
                mark(arg.annotation)
        elif isinstance(node, ast.AnnAssign):
            mark(node.annotation)
        elif isinstance(node, ast.ImportFrom | ast.Import):
            mark(node)
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            if node.func.attr in _LOG_METHODS:
                mark(node)
        elif isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            mark(node)
        elif isinstance(node, ast.keyword) and node.arg in _DOC_KEYWORDS:
            mark(node.value)  # schema documentation, not behaviour
        elif isinstance(node, ast.JoinedStr):
            mark(node)  # message text: mutating f-string parts only rewords messages
    return skip


def _walk(node: ast.AST, path: Path_) -> Iterator[tuple[ast.AST, Path_]]:
    yield node, path
    for field, value in ast.iter_fields(node):
        if isinstance(value, list):
            for i, item in enumerate(value):
                if isinstance(item, ast.AST):
                    yield from _walk(item, (*path, (field, i)))
        elif isinstance(value, ast.AST):
            yield from _walk(value, (*path, (field, None)))


def _changes(node: ast.AST) -> list[str]:
    """Descriptions of the mutations at ``node`` (index = variant)."""
    out: list[str] = []
    if isinstance(node, ast.Compare):
        for op in node.ops:
            new = _CMP_SWAP.get(type(op))
            out.append(f"`{_SYMBOL[type(op)]}` -> `{_SYMBOL[new]}`" if new else "")
    elif isinstance(node, ast.BinOp | ast.AugAssign) and type(node.op) in _BIN_SWAP:
        out.append(f"`{_SYMBOL[type(node.op)]}` -> `{_SYMBOL[_BIN_SWAP[type(node.op)]]}`")
    elif isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not | ast.USub):
        out.append("drop `not`" if isinstance(node.op, ast.Not) else "drop unary `-`")
    elif isinstance(node, ast.BoolOp):
        out.append("`and` -> `or`" if isinstance(node.op, ast.And) else "`or` -> `and`")
    elif isinstance(node, ast.Constant):
        v = node.value
        if isinstance(v, bool):
            out.append(f"`{v}` -> `{not v}`")
        elif isinstance(v, int | float):
            out.append(f"`{v!r}` -> `{v + 1!r}`")
        elif isinstance(v, str):
            out.append(f"string {v[:30]!r} -> 'XX...XX'")
    elif isinstance(node, ast.Call):
        for kw in node.keywords:
            out.append(f"drop keyword `{kw.arg}=`" if kw.arg and kw.arg not in _DOC_KEYWORDS else "")
        if isinstance(node.func, ast.Name) and node.func.id in ("min", "max"):
            out.append(f"`{node.func.id}` -> `{'max' if node.func.id == 'min' else 'min'}`")
    elif isinstance(node, ast.Tuple | ast.List | ast.Set) and isinstance(
        getattr(node, "ctx", ast.Load()), ast.Load
    ):
        if len(node.elts) > 1 or isinstance(node, ast.Set):
            out.extend(f"drop element {i}" for i in range(len(node.elts)))
    elif isinstance(node, ast.Dict):
        out.extend(f"drop key {ast.unparse(k)}" if k is not None else "" for k in node.keys)
    elif isinstance(node, ast.Expr) and isinstance(node.value, ast.Call):
        out.append("drop call statement")
    elif isinstance(node, ast.Break | ast.Continue):
        out.append("`break` <-> `continue`")
    return out


def _apply(node: ast.AST, variant: int) -> ast.AST:
    """A mutated copy of ``node`` (variant as listed by :func:`_changes`)."""
    new = copy.deepcopy(node)
    if isinstance(new, ast.Compare):
        new.ops[variant] = _CMP_SWAP[type(new.ops[variant])]()
    elif isinstance(new, ast.BinOp | ast.AugAssign):
        new.op = _BIN_SWAP[type(new.op)]()
    elif isinstance(new, ast.UnaryOp):
        return new.operand
    elif isinstance(new, ast.BoolOp):
        new.op = ast.Or() if isinstance(new.op, ast.And) else ast.And()
    elif isinstance(new, ast.Constant):
        v = new.value
        if isinstance(v, bool):
            new.value = not v
        elif isinstance(v, int | float):
            new.value = v + 1
        else:
            new.value = f"XX{v!s}XX"
    elif isinstance(new, ast.Call):
        if variant < len(new.keywords):
            del new.keywords[variant]
        else:
            assert isinstance(new.func, ast.Name)
            new.func = ast.Name(id="max" if new.func.id == "min" else "min", ctx=ast.Load())
    elif isinstance(new, ast.Tuple | ast.List | ast.Set):
        del new.elts[variant]
        if isinstance(new, ast.Set) and not new.elts:
            return ast.Call(func=ast.Name(id="set", ctx=ast.Load()), args=[], keywords=[])
    elif isinstance(new, ast.Dict):
        del new.keys[variant]
        del new.values[variant]
    elif isinstance(new, ast.Expr):
        return ast.Pass()
    elif isinstance(new, ast.Break):
        return ast.Continue()
    elif isinstance(new, ast.Continue):
        return ast.Break()
    return new


def _locate(tree: ast.AST, path: Path_) -> tuple[ast.AST, str, int | None]:
    parent = tree
    for field, index in path[:-1]:
        value = getattr(parent, field)
        parent = value[index] if index is not None else value
    field, index = path[-1]
    return parent, field, index


def mutants(module: str, source: str) -> list[Mutant]:
    tree = ast.parse(source)
    skip = _skip_ids(tree)
    lines = source.splitlines()
    seen: dict[str, int] = {}
    out: list[Mutant] = []
    for node, path in _walk(tree, ()):
        if id(node) in skip or not path:
            continue
        for variant, op in enumerate(_changes(node)):
            if not op:
                continue
            line = getattr(node, "lineno", 0)
            text = lines[line - 1].strip() if line else ""
            if "pragma: no mutate" in text:
                continue
            base = f"{module}|{text}|{op}"
            n = seen.get(base, 0)
            seen[base] = n + 1
            key = hashlib.sha1(f"{base}|{n}".encode()).hexdigest()[:10]
            out.append(Mutant(key, module, line, op, text, path, variant))
    return out


def mutated_source(source: str, mutant: Mutant | None) -> str:
    tree = ast.parse(source)
    if mutant is not None:
        parent, field, index = _locate(tree, mutant.path)
        value = getattr(parent, field)
        node = value[index] if index is not None else value
        new = _apply(node, mutant.variant)
        if index is None:
            setattr(parent, field, new)
        else:
            value[index] = new
    return ast.unparse(ast.fix_missing_locations(tree))
