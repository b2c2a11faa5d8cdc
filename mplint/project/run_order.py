"""Where a script's or notebook's top-level code runs its functions, read from CPython's ``ast``.

A Keras policy governs only the layers built after its setter runs. Top-level statements run in source order (a
notebook's cells joined in order), each named by its first line, and a function runs where top-level code calls
it: ``build_model`` called only by statements above ``set_global_policy`` builds its layers in float32. A function
handed to an object (``tuner = Tuner(build_model)``) runs wherever that object is used next. Where the order
cannot be told, a function has no line and may run anywhere: a decorated function (a decorator may register it), a
generator or coroutine, one referenced from a class, a lambda or a nested function, or stored where no name says
when it is called (``callbacks.append(f)``), or one nothing in the file names (another module may call it).
"""

from __future__ import annotations

import ast
import math
from collections.abc import Iterator

from mplint.engine.summaries import own_nodes

_NESTED = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)
_ANYWHERE = math.inf

# What a reference to a name contributes to when it runs: a top-level line, the runs of a function it sits in, the
# uses of a name its value is bound to, or anywhere.
_Line = int
_In = tuple[str, str]  # ("in", function) or ("bound", name)


def _plain(function: ast.stmt) -> bool:
    """A function that runs only where it is called: no decorator, no generator or coroutine."""
    return (
        isinstance(function, ast.FunctionDef)
        and not function.decorator_list
        and not any(isinstance(n, (ast.Yield, ast.YieldFrom, ast.Await)) for n in own_nodes(function))
    )


def _own(stmt: ast.stmt) -> Iterator[tuple[ast.AST, ast.AST | None]]:
    """(node, parent) under a top-level statement, not under the functions, classes and lambdas nested in it
    (those are yielded, their insides are not)."""
    stack: list[tuple[ast.AST, ast.AST | None]] = [(stmt, None)]
    while stack:
        node, parent = stack.pop()
        yield node, parent
        if node is stmt or not isinstance(node, _NESTED):
            stack.extend((child, node) for child in ast.iter_child_nodes(node))


def _nested_names(node: ast.AST) -> Iterator[str]:
    for inner in ast.walk(node):
        if isinstance(inner, ast.Name):
            yield inner.id


def _called_now(name: ast.Name, parents: dict[int, ast.AST | None]) -> bool:
    """``f(...)``, ``obj.method(...)`` or ``pkg.mod.f(...)``: the reference runs the function (or the object's
    method) right here."""
    node: ast.AST = name
    parent = parents.get(id(node))
    while isinstance(parent, ast.Attribute) and parent.value is node:
        node, parent = parent, parents.get(id(parent))
    return isinstance(parent, ast.Call) and parent.func is node


def _assigned_names(stmt: ast.AST) -> list[str] | None:
    """The plain names an assignment binds, None where it stores anywhere else (an attribute, a subscript)."""
    if isinstance(stmt, ast.Assign):
        targets = stmt.targets
    elif isinstance(stmt, ast.AnnAssign) and stmt.value is not None:
        targets = [stmt.target]
    else:
        return None
    names: list[str] = []
    for target in targets:
        parts = target.elts if isinstance(target, (ast.Tuple, ast.List)) else [target]
        if not all(isinstance(p, ast.Name) for p in parts):
            return None
        names += [p.id for p in parts]  # type: ignore[attr-defined]
    return names


class _Contributions:
    def __init__(self) -> None:
        self.by_name: dict[str, list[_Line | _In | float]] = {}

    def add(self, name: str, what: _Line | _In | float) -> None:
        self.by_name.setdefault(name, []).append(what)

    def anywhere(self, node: ast.AST) -> None:
        for name in _nested_names(node):
            self.add(name, _ANYWHERE)


def _read_statement(stmt: ast.stmt, found: _Contributions) -> None:
    line = stmt.lineno
    parents: dict[int, ast.AST | None] = {}
    statements: dict[int, ast.AST] = {}  # node -> the innermost simple statement holding it
    for node, parent in _own(stmt):
        parents[id(node)] = parent
        if node is not stmt and isinstance(node, _NESTED):
            found.anywhere(node)
            continue
        if isinstance(node, ast.stmt):
            statements[id(node)] = node
        elif parent is not None:
            statements[id(node)] = statements.get(id(parent), stmt)
        if not isinstance(node, ast.Name) or not isinstance(node.ctx, ast.Load):
            continue
        found.add(node.id, line)
        if _called_now(node, parents):
            continue
        bound = _assigned_names(statements.get(id(node), stmt))
        if bound is None:
            found.add(node.id, _ANYWHERE)
        for name in bound or ():
            found.add(node.id, ("bound", name))


def _read_function(function: ast.FunctionDef | ast.AsyncFunctionDef, found: _Contributions) -> None:
    for extra in [*function.decorator_list, *function.args.defaults, *function.args.kw_defaults]:
        if extra is not None:
            for name in _nested_names(extra):
                found.add(name, function.lineno)
    plain = _plain(function)
    parents: dict[int, ast.AST | None] = {}
    for node in own_nodes(function):  # type: ignore[arg-type]  # async bodies read the same way
        for child in ast.iter_child_nodes(node):
            parents[id(child)] = node
        if isinstance(node, _NESTED):
            found.anywhere(node)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load):
            now = plain and _called_now(node, parents)
            found.add(node.id, ("in", function.name) if now else _ANYWHERE)


def _solve(found: _Contributions, functions: set[str], pick, start: float, anywhere: float) -> dict[str, float]:
    """Each name's line (``pick``: max for the last run, min for the first; ``anywhere`` where it may run at any
    time), to a fixed point (calls may recur)."""
    value: dict[str, float] = {name: start for name in found.by_name}
    changed = True
    while changed:
        changed = False
        for name, items in found.by_name.items():
            lines = []
            for item in items:
                if isinstance(item, tuple):
                    kind, other = item
                    if kind == "in":
                        lines.append(value.get(other, anywhere) if other in functions else anywhere)
                    elif pick is max:  # a value bound to a name runs where that name is used next
                        lines.append(value.get(other, start))
                else:
                    lines.append(anywhere if item == _ANYWHERE else float(item))
            new = pick(lines, default=start)
            if new != value[name]:
                value[name], changed = new, True
    return value


def run_lines(tree: ast.Module) -> tuple[dict[str, int], dict[str, int]]:
    """For each top-level function, and each name a top-level import binds, whose runs top-level code tells: the
    line of the last top-level statement that may run it (-1 for an import nothing names), and of the first."""
    found = _Contributions()
    functions: set[str] = set()
    imported: set[str] = set()
    for stmt in tree.body:
        if isinstance(stmt, (ast.Import, ast.ImportFrom)):
            imported.update((a.asname or a.name).partition(".")[0] for a in stmt.names if a.name != "*")
        elif isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)):
            _read_function(stmt, found)
            if _plain(stmt):
                functions.add(stmt.name)
        elif isinstance(stmt, ast.ClassDef):
            found.anywhere(stmt)
        else:
            _read_statement(stmt, found)
    functions |= imported  # an imported function or module runs where it is called, as the file's own do
    last = _solve(found, functions, max, -1.0, _ANYWHERE)
    first = _solve(found, functions, min, _ANYWHERE, -_ANYWHERE)
    known = [f for f in functions if (f in found.by_name or f in imported) and last.get(f, -1) < _ANYWHERE]
    return {f: int(last.get(f, -1)) for f in known}, {
        f: int(first[f]) for f in known if -_ANYWHERE < first.get(f, _ANYWHERE) < _ANYWHERE
    }


def setter_line(tree: ast.Module, line: int, first: dict[str, int]) -> int | None:
    """The top-level line at which the call on ``line`` first runs: its own top-level statement's, or the first
    call of the plain top-level function it sits in directly; None where that cannot be told."""
    for stmt in tree.body:
        if not stmt.lineno <= line <= (stmt.end_lineno or stmt.lineno):
            continue
        if isinstance(stmt, ast.ClassDef):
            return None
        if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)):
            direct = any(isinstance(n, ast.Call) and n.lineno == line for n in own_nodes(stmt))  # type: ignore[arg-type]
            return first.get(stmt.name) if direct else None
        direct = any(
            isinstance(n, ast.Call) and n.lineno == line
            for n, _ in _own(stmt)
            if not (n is not stmt and isinstance(n, _NESTED))
        )
        return stmt.lineno if direct else None
    return None
