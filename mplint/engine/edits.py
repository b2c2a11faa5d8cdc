"""Applying fixes to a parsed module: non-overlapping replacements, then needed imports."""

from __future__ import annotations

from typing import Iterable, Sequence

import libcst as cst

from mplint.diagnostics import Finding


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
    # Imported here: libcst.codemod pulls in libcst.matchers, a large import that checks without fixes skip.
    from libcst.codemod import CodemodContext
    from libcst.codemod.visitors import AddImportsVisitor

    replacements: dict[int, object] = {}
    context = CodemodContext()
    needs_imports = False
    for finding in findings:
        for node, new in finding.fix.replacements.items():
            replacements[id(node)] = new
        for spec in finding.fix.imports:
            AddImportsVisitor.add_needed_import(context, spec.module, spec.obj, spec.asname)
            needs_imports = True
    module = module.visit(_ReplaceNodes(replacements))
    if needs_imports:
        module = AddImportsVisitor(context).transform_module(module)
    return module
