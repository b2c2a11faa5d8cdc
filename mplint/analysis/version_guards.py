"""Version guards: the framework versions an arm of ``if <version test>:`` runs on.

``if version.parse(torch.__version__) < version.parse("2.4.0"):`` runs its body on torch < 2.4 and its
``else`` on torch >= 2.4; so do ``torch.__version__ >= "2.4"``, ``LooseVersion(tf.__version__) < "2.9"``
and the reversed comparisons. Feature tests of a name the API table dates are guards of that range:
``hasattr(torch.amp, "GradScaler")`` runs its body on torch >= 2.3 and its ``else`` below, ``not``/``and``/``or``
combine them, and ``try: from torch.amp import GradScaler`` runs the rest of its body on torch >= 2.3 and its
``except ImportError`` fallback below. Code past an early exit (``if <test>: return``, ``raise``,
``continue``) runs where the test is false. Tests of any other shape are guards too (``hasattr(opt, ...)``), of
unknown range.
"""

from __future__ import annotations

import ast
import functools
from collections.abc import Iterator

import libcst as cst
from packaging.specifiers import InvalidSpecifier, SpecifierSet

from mplint.engine.early_exits import exits_before
from mplint.engine.names import dotted

_FLIP = {"<": ">", "<=": ">=", ">": "<", ">=": "<=", "==": "==", "!=": "!="}
_NEGATE = {"<": ">=", "<=": ">", ">": "<=", ">=": "<", "==": "!=", "!=": "=="}
_OPS = {ast.Lt: "<", ast.LtE: "<=", ast.Gt: ">", ast.GtE: ">=", ast.Eq: "==", ast.NotEq: "!="}


def _mentions_version(node: ast.AST, package: str) -> bool:
    """``<package>.__version__`` anywhere in ``node``."""
    return any(
        isinstance(n, ast.Attribute)
        and n.attr == "__version__"
        and isinstance(n.value, ast.Name)
        and n.value.id == package
        for n in ast.walk(node)
    )


def _literal_version(node: ast.AST) -> str | None:
    """The version a literal names: ``"2.4.0"``, ``version.parse("2.4")``, ``(2, 4)``."""
    for n in ast.walk(node):
        if isinstance(n, ast.Constant) and isinstance(n.value, str):
            return n.value
        if (
            isinstance(n, ast.Tuple)
            and n.elts
            and all(isinstance(e, ast.Constant) and isinstance(e.value, int) for e in n.elts)
        ):
            return ".".join(str(e.value) for e in n.elts)
    return None


def guard_specifier(test: str, package: str) -> SpecifierSet | None:
    """The versions of ``package`` on which the test ``test`` is true; None when it is no such test."""
    return guard_arms(test, package)[0]


Arms = tuple[SpecifierSet | None, SpecifierSet | None]  # where a test is true, where it is false; None: unknown


def guard_arms(test: str, package: str) -> Arms:
    """The versions of ``package`` on which ``test`` is true and those on which it is false."""
    try:
        tree = ast.parse(test.strip(), mode="eval").body
    except SyntaxError:
        return None, None
    return _arms(tree, package)


def _arms(tree: ast.AST, package: str) -> Arms:
    if isinstance(tree, ast.UnaryOp) and isinstance(tree.op, ast.Not):
        true, false = _arms(tree.operand, package)
        return false, true
    if isinstance(tree, ast.BoolOp):
        parts = [_arms(value, package) for value in tree.values]
        trues, falses = [p[0] for p in parts], [p[1] for p in parts]
        if isinstance(tree.op, ast.And):  # true where every part is, false where any part is
            return _intersection(trues), _union(falses)
        return _union(trues), _intersection(falses)
    if isinstance(tree, ast.Call) and isinstance(tree.func, ast.Name) and tree.func.id == "hasattr":
        since = _feature_since(tree, package)
        return (SpecifierSet(f">={since}"), SpecifierSet(f"<{since}")) if since else (None, None)
    specifier = _comparison(tree, package)
    if specifier is None:
        return None, None
    return specifier, SpecifierSet(",".join(f"{_NEGATE[s.operator]}{s.version}" for s in specifier))


def _intersection(specifiers: list[SpecifierSet | None]) -> SpecifierSet | None:
    """Where all hold: bounded by each one known (an unknown part only narrows it further)."""
    known = [s for s in specifiers if s is not None]
    return functools.reduce(lambda a, b: a & b, known) if known else None


def _union(specifiers: list[SpecifierSet | None]) -> SpecifierSet | None:
    """Where any holds: known only when every part is, and all are bounds on the same side (``<2.3`` or ``<2.4``)."""
    from packaging.version import Version

    if any(s is None or len(s) != 1 for s in specifiers):
        return None
    bounds = [next(iter(s)) for s in specifiers]
    operators = {b.operator for b in bounds}
    if operators <= {"<", "<="} and len(operators) == 1:
        return SpecifierSet(f"{bounds[0].operator}{max(bounds, key=lambda b: Version(b.version)).version}")
    if operators <= {">", ">="} and len(operators) == 1:
        return SpecifierSet(f"{bounds[0].operator}{min(bounds, key=lambda b: Version(b.version)).version}")
    return None


def _feature_since(call: ast.Call, package: str) -> str | None:
    """``hasattr(torch.amp, "GradScaler")``: the first version that has the name, when the API table dates it."""
    from mplint.knowledge.api_versions import TORCH_SINCE

    if package != "torch" or len(call.args) != 2:
        return None
    owner, name = call.args
    if not (isinstance(name, ast.Constant) and isinstance(name.value, str)):
        return None
    return TORCH_SINCE.get(f"{ast.unparse(owner)}.{name.value}")


def _comparison(tree: ast.AST, package: str) -> SpecifierSet | None:
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


_IMPORT_ERRORS = frozenset({"ImportError", "ModuleNotFoundError", "AttributeError", "Exception"})


def try_imports(node: cst.Try) -> Iterator[tuple[str, str]]:
    """``(module, name)`` of each absolute ``from module import name`` (and ``import module.name``) among the small
    statements of a ``try`` body: the names whose absence sends the ``try`` to its handlers. The torch and Keras
    readers look them up in their own tables."""
    for statement in node.body.body:
        for small in statement.body if isinstance(statement, cst.SimpleStatementLine) else ():
            if (
                isinstance(small, cst.ImportFrom)
                and small.module is not None
                and not small.relative
                and not isinstance(small.names, cst.ImportStar)
            ):
                module = dotted(small.module) or ""
                yield from ((module, dotted(alias.name) or "") for alias in small.names)
            elif isinstance(small, cst.Import):
                yield from (
                    tuple((dotted(a.name) or "").rsplit(".", 1)) for a in small.names if "." in (dotted(a.name) or "")
                )


def _import_arms(context, node: cst.Try, package: str) -> Arms:
    """``try: from torch.amp import GradScaler ... except ImportError:``: the rest of the body runs where the
    import succeeds (from the version that has the name), the handlers where it fails."""
    from mplint.knowledge.api_versions import TORCH_SINCE

    if package != "torch":
        return None, None
    caught = set()
    for handler in node.handlers:
        types = [e.value for e in handler.type.elements] if isinstance(handler.type, cst.Tuple) else [handler.type]
        caught |= {dotted(t) or "" if t is not None else "Exception" for t in types}  # a bare except catches all
    if not caught & _IMPORT_ERRORS:
        return None, None
    since = [TORCH_SINCE[f"{module}.{name}"] for module, name in try_imports(node) if f"{module}.{name}" in TORCH_SINCE]
    if not since:
        return None, None
    from packaging.version import Version

    newest = max(since, key=Version)  # the body gets past every import from the newest one on
    return SpecifierSet(f">={newest}"), SpecifierSet(f"<{newest}")


def branch_admits(context, node: cst.CSTNode, package: str, version: str) -> bool | None:
    """Whether the version tests of ``package`` around ``node`` (within its function) let it run on some
    ``package >= version``: False when its arms run only below it, True when they may run there, None when no such
    test guards ``node``. Code past an early exit (``if <test>: return``, ``raise``, ``continue``) runs in the test's
    false arm."""
    from packaging.version import Version

    specifiers = []
    child = node
    for ancestor in context.ancestors(node):
        if isinstance(ancestor, (cst.If, cst.IfExp)) and child is not ancestor.test:
            true, false = guard_arms(context.module.code_for_node(ancestor.test), package)
            specifiers.append(true if child is ancestor.body else false)  # the else arm runs where the test is false
        elif isinstance(ancestor, cst.Try) and (child is ancestor.body or child in ancestor.handlers):
            true, false = _import_arms(context, ancestor, package)
            specifiers.append(true if child is ancestor.body else false)
        elif isinstance(ancestor, (cst.Module, cst.IndentedBlock)):
            tests = [context.module.code_for_node(e.guard.test) for e in exits_before(ancestor, child)]
            specifiers += [guard_arms(test, package)[1] for test in tests]  # past the exit: where the test is false
        if isinstance(ancestor, (cst.FunctionDef, cst.ClassDef)):
            break
        child = ancestor
    known = [s for s in specifiers if s is not None]
    if not known:
        return None
    probes = [
        Version(version),
        *(Version(f"{version.split('.')[0]}.{m}") for m in range(int(version.split(".")[1]), 40)),
    ]
    return any(all(s.contains(v, prereleases=True) for s in known) for v in probes)
