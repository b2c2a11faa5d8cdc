"""Version guards: the framework versions an arm of ``if <version test>:`` runs on.

``if version.parse(torch.__version__) < version.parse("2.4.0"):`` runs its body on torch < 2.4 and its
``else`` on torch >= 2.4; so do ``torch.__version__ >= "2.4"``, ``LooseVersion(tf.__version__) < "2.9"``
and the reversed comparisons. Tests of any other shape are guards too (``hasattr(...)``), of unknown range.
"""

from __future__ import annotations

import ast

import libcst as cst
from packaging.specifiers import InvalidSpecifier, SpecifierSet

_FLIP = {"<": ">", "<=": ">=", ">": "<", ">=": "<=", "==": "==", "!=": "!="}
_NEGATE = {"<": ">=", "<=": ">", ">": "<=", ">=": "<", "==": "!=", "!=": "=="}
_OPS = {ast.Lt: "<", ast.LtE: "<=", ast.Gt: ">", ast.GtE: ">=", ast.Eq: "==", ast.NotEq: "!="}


def _mentions_version(node: ast.AST, package: str) -> bool:
    """``<package>.__version__`` anywhere in ``node``."""
    return any(isinstance(n, ast.Attribute) and n.attr == "__version__" and isinstance(n.value, ast.Name)
               and n.value.id == package for n in ast.walk(node))


def _literal_version(node: ast.AST) -> str | None:
    """The version a literal names: ``"2.4.0"``, ``version.parse("2.4")``, ``(2, 4)``."""
    for n in ast.walk(node):
        if isinstance(n, ast.Constant) and isinstance(n.value, str):
            return n.value
        if isinstance(n, ast.Tuple) and n.elts and all(isinstance(e, ast.Constant) and isinstance(e.value, int) for e in n.elts):
            return ".".join(str(e.value) for e in n.elts)
    return None


def guard_specifier(test: str, package: str) -> SpecifierSet | None:
    """The versions of ``package`` on which the test ``test`` is true; None when it is no such comparison."""
    try:
        tree = ast.parse(test.strip(), mode="eval").body
    except SyntaxError:
        return None
    if not (isinstance(tree, ast.Compare) and len(tree.ops) == 1 and type(tree.ops[0]) in _OPS):
        return None
    op, left, right = _OPS[type(tree.ops[0])], tree.left, tree.comparators[0]
    if _mentions_version(right, package):
        op, left, right = _FLIP[op], right, left
    version = _literal_version(right) if _mentions_version(left, package) else None
    try:
        return SpecifierSet(f"{op}{version}") if version else None
    except InvalidSpecifier:
        return None


def branch_admits(context, node: cst.CSTNode, package: str, version: str) -> bool | None:
    """Whether the innermost version test of ``package`` around ``node`` lets it run on some ``package >= version``:
    False when the arm runs only below it, True when it may run there, None when no such test guards ``node``."""
    from packaging.version import Version

    child = node
    for ancestor in context.ancestors(node):
        if isinstance(ancestor, (cst.If, cst.IfExp)) and child is not ancestor.test:
            specifier = guard_specifier(context.module.code_for_node(ancestor.test), package)
            if specifier is not None:
                body = ancestor.body
                if child is not body:  # the else arm runs where the test is false
                    specifier = SpecifierSet(",".join(f"{_NEGATE[s.operator]}{s.version}" for s in specifier))
                probes = [Version(version), *(Version(f"{version.split('.')[0]}.{m}") for m in range(int(version.split('.')[1]), 40))]
                return any(specifier.contains(v, prereleases=True) for v in probes)
        if isinstance(ancestor, (cst.FunctionDef, cst.ClassDef)):
            return None
        child = ancestor
    return None
