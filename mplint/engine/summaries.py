"""Function summaries: what a function does with its parameters, read off CPython's tree of its own file so that a
rule can judge a call of it in another file (``FileContext.summary``).

A kind of summary is declared where it is read: the rule that needs it (or the analysis several rules share)
declares a ``SummaryKind`` with the function that reads it, and names it in ``Rule.summary_triggers``. The project
facts phase runs every declared kind on every file (``declared``); the engine and the project layer name none.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import NamedTuple


class Summary(NamedTuple):
    """One function's summary of one kind, in its own file."""

    value: str  # the parameter concerned (or what the function does, for the kinds that say so)
    position: int  # the parameter's position among the arguments its callers pass; -1: keyword only, or none
    default: str | None  # the parameter's default, or the operation concerned, as the kind says
    line: int
    column: int  # 1-based


class FunctionSummary(NamedTuple):
    """A summary as the project's table holds it, for every name the function is imported under."""

    value: str
    position: int
    default: str | None
    path: str  # the file of the function, as displayed
    line: int


Summarize = Callable[[list[ast.stmt], bytes], dict[str, Summary]]


@dataclass(frozen=True)
class SummaryKind:
    #: the key of the project's tables (``ProjectFacts.summaries_of``) and of the facts cache
    name: str
    #: what a file (or, with ``per_definition``, each top-level function or class) must contain for the kind to
    #: find anything there: most files of a project are skipped by these words alone
    words: tuple[bytes | re.Pattern[bytes], ...]
    per_definition: bool
    #: top-level statements and the file's bytes -> function (or ``Class.method``) name -> its summary
    summarize: Summarize

    def __repr__(self) -> str:
        return f"SummaryKind({self.name!r})"


_DECLARED: dict[str, SummaryKind] = {}
_by_name: tuple[SummaryKind, ...] = ()  # the declared kinds in name order (asked for once per file read)
_loader: Callable[[], object] | None = None


def declare(kind: SummaryKind) -> SummaryKind:
    """Register ``kind`` (at the import of the module that reads it)."""
    global _by_name
    known = _DECLARED.setdefault(kind.name, kind)
    if known is not kind:
        raise ValueError(f"summary kind {kind.name!r} is declared twice")
    _by_name = tuple(_DECLARED[name] for name in sorted(_DECLARED))
    return kind


def load_with(loader: Callable[[], object]) -> None:
    """How the modules that declare summary kinds are imported (``mplint.checks.all_rules``), once some file's
    facts are read: said by the entry points, which know the rules, so that a run whose facts all come from the
    cache imports no rule."""
    global _loader
    _loader = loader


def declared() -> tuple[SummaryKind, ...]:
    """Every declared kind, by name. Fails when none is: facts read without the rules' kinds would lack every
    summary, and the rules that read them would stay silent."""
    global _loader
    if _loader is not None:
        loader, _loader = _loader, None
        loader()
    if not _by_name:
        raise RuntimeError("no function summary kind is declared: load the rules first (mplint.checks.all_rules)")
    return _by_name


# --- what summaries read functions with ---------------------------------------------------------------------

# Fields holding operator and context singletons (``ast.Load()``, ``ast.Add()``): read off their parent
# (``type(node.op)``), never visited by any fact, a third of all nodes.
SINGLETON_FIELDS = frozenset({"ctx", "op", "ops"})
CHILD_FIELDS: dict[type, tuple[str, ...]] = {}  # node type -> its fields, less the singletons


def child_fields(kind: type[ast.AST]) -> tuple[str, ...]:
    fields = CHILD_FIELDS.get(kind)
    if fields is None:
        fields = CHILD_FIELDS[kind] = tuple(f for f in kind._fields if f not in SINGLETON_FIELDS)
    return fields


def walk(root: ast.AST) -> list[ast.AST]:
    """``ast.walk``'s nodes in its order (breadth first), less the operator and context singletons: one
    loop instead of three generators per node (the facts and the pre-filter walk every file)."""
    nodes = [root]
    append, node_type, known = nodes.append, ast.AST, CHILD_FIELDS
    for node in nodes:  # grows as it goes: breadth first
        fields = known.get(type(node))
        if fields is None:
            fields = child_fields(type(node))
        for name in fields:
            value = getattr(node, name, None)
            if type(value) is list:
                for item in value:
                    if isinstance(item, node_type):
                        append(item)
            elif isinstance(value, node_type):
                append(value)
    return nodes


def own_nodes(function: ast.FunctionDef) -> Iterator[ast.AST]:
    """The nodes of a function's body, not of the functions and classes nested in it."""
    stack: list[ast.AST] = list(function.body)
    while stack:
        node = stack.pop()
        yield node
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)):
            stack.extend(ast.iter_child_nodes(node))


def parameters(function: ast.FunctionDef) -> tuple[list[str], set[str], list[ast.AST], set[str]]:
    """A function's positional parameters (in order), all its parameters, its own nodes (``own_nodes``) and the
    names its own code binds (a parameter among them no longer holds what the caller passed)."""
    positional = [a.arg for a in (*function.args.posonlyargs, *function.args.args)]
    own = list(own_nodes(function))
    rebound = {n.id for n in own if isinstance(n, ast.Name) and not isinstance(n.ctx, ast.Load)}
    return positional, set(positional) | {a.arg for a in function.args.kwonlyargs}, own, rebound


def parameter_defaults(function: ast.FunctionDef) -> dict[str, ast.expr]:
    """Each parameter with a default, and its default (positional ones take the last defaults, in order)."""
    args = function.args
    positional = [*args.posonlyargs, *args.args]
    defaults = dict(zip([a.arg for a in positional[len(positional) - len(args.defaults) :]], args.defaults))
    defaults.update({a.arg: d for a, d in zip(args.kwonlyargs, args.kw_defaults) if d is not None})
    return defaults


def first_line_text(source: bytes, node: ast.expr | ast.stmt) -> str:
    """The node's source text on its first line, whitespace collapsed (bytes offsets: CPython's columns)."""
    line = source.splitlines()[node.lineno - 1]
    end = node.end_col_offset if node.end_lineno == node.lineno else len(line)
    return " ".join(line[node.col_offset : end].decode("utf-8", "replace").split())


def summary_at(node: ast.expr | ast.stmt, value: str, position: int, default: str | None) -> Summary:
    """The summary whose site is ``node``."""
    return Summary(value, position, default, node.lineno, node.col_offset + 1)
