"""Applying fixes to a parsed module: non-overlapping replacements, then needed imports."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import libcst as cst

from mplint.diagnostics import Finding, ImportSpec
from mplint.engine.names import dotted


class _ReplaceNodes(cst.CSTTransformer):
    def __init__(self, replacements: dict[int, object]):
        super().__init__()
        self._replacements = replacements

    def on_leave(self, original_node, updated_node):
        return self._replacements.get(id(original_node), updated_node)


def choose_non_overlapping(findings: Sequence[Finding], span_of) -> list[Finding]:
    """Greedy by position; a fix touching a span already taken waits for the next round."""
    taken: list[tuple] = []
    chosen: list[Finding] = []
    for finding in sorted(findings, key=lambda f: span_of(f.node)):
        spans = [span_of(node) for node in finding.fix.replacements]
        if any(_overlap(s, t) for s in spans for t in taken):
            continue
        taken.extend(spans)
        chosen.append(finding)
    return chosen


def _overlap(a, b) -> bool:
    return a[0] < b[1] and b[0] < a[1] or a == b


def apply_fixes(module: cst.Module, findings: Iterable[Finding]) -> cst.Module:
    replacements: dict[int, object] = {}
    imports = []
    for finding in findings:
        for node, new in finding.fix.replacements.items():
            replacements[id(node)] = new
        imports.extend(finding.fix.imports)
    module = module.visit(_ReplaceNodes(replacements))
    return add_imports(module, imports) if imports else module


def add_imports(module: cst.Module, imports: Iterable[ImportSpec]) -> cst.Module:
    """``module`` with ``imports`` added as libcst's ``AddImportsVisitor`` adds them, visiting only the
    statements it reads or changes: the docstring, the leading imports and the statement after them (it may
    get a blank line above). Over a whole module of a few hundred lines its matchers take a second. An import the
    module already makes further down at its top level (after a second string, a ``sys.path`` line) is not added
    twice: the visitor never reads that far."""
    # Imported here: libcst.codemod pulls in libcst.matchers, a large import that checks without fixes skip.
    from libcst.codemod import CodemodContext
    from libcst.codemod.visitors import AddImportsVisitor

    imports = [spec for spec in imports if not _imported_at_top_level(module.body, spec)]
    if not imports:
        return module
    context = CodemodContext()
    for spec in imports:
        AddImportsVisitor.add_needed_import(context, spec.module, spec.obj, spec.asname)
    head = _head_length(module.body)
    added = AddImportsVisitor(context).transform_module(module.with_changes(body=module.body[:head]))
    return module.with_changes(body=(*added.body, *module.body[head:]))


def _imported_at_top_level(body: Sequence[cst.BaseStatement], spec: ImportSpec) -> bool:
    """``import module [as asname]`` or ``from module import obj [as asname]`` as a statement of the module's body."""
    for statement in body:
        if not isinstance(statement, cst.SimpleStatementLine):
            continue
        for small in statement.body:
            if isinstance(small, cst.Import) and spec.obj is None:
                if (spec.module, spec.asname) in _bindings(small.names):
                    return True
            elif (
                isinstance(small, cst.ImportFrom)
                and spec.obj is not None
                and not small.relative
                and small.module is not None
                and dotted(small.module) == spec.module
                and not isinstance(small.names, cst.ImportStar)
                and (spec.obj, spec.asname) in _bindings(small.names)
            ):
                return True
    return False


def _bindings(aliases: Sequence[cst.ImportAlias]) -> set[tuple[str | None, str | None]]:
    """(the imported name, its ``as`` name or None) of each alias."""
    return {
        (dotted(a.name), a.asname.name.value if a.asname and isinstance(a.asname.name, cst.Name) else None)
        for a in aliases
    }


def _head_length(body: Sequence[cst.BaseStatement]) -> int:
    """How many statements ``AddImportsVisitor`` may touch: as its ``_split_module`` counts them, plus one."""
    start = 1 if body and (_is_docstring(body[0]) or _is_strict_flag(body[0])) else 0
    end = start
    while end < len(body) and _single(body[end], (cst.Import, cst.ImportFrom)):
        end += 1
    return min(end + 1, len(body))


def _single(statement: cst.BaseStatement, kinds) -> cst.BaseSmallStatement | None:
    if (
        isinstance(statement, cst.SimpleStatementLine)
        and len(statement.body) == 1
        and isinstance(statement.body[0], kinds)
    ):
        return statement.body[0]
    return None


def _is_docstring(statement: cst.BaseStatement) -> bool:
    expr = _single(statement, cst.Expr)
    return expr is not None and isinstance(expr.value, cst.SimpleString)


def _is_strict_flag(statement: cst.BaseStatement) -> bool:
    assign = _single(statement, cst.Assign)
    return (
        assign is not None
        and len(assign.targets) == 1
        and isinstance(assign.targets[0].target, cst.Name)
        and assign.targets[0].target.value == "__strict__"
    )
