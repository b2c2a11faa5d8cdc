"""Reading import statements and calls on CPython's tree, without libcst.

The pre-filter's summary (``code_summary``), the project facts (``mplint.project.extract``) and the rules' name
resolver (``names``, on libcst's tree) share these, so the three read an import the same way.
"""

from __future__ import annotations

import ast
from collections.abc import Iterable


def callee_name(call: ast.Call) -> str:
    """The last name of what a call on CPython's tree calls (``fit`` for ``model.fit(...)``), "" for other callees."""
    func = call.func
    return func.attr if type(func) is ast.Attribute else func.id if type(func) is ast.Name else ""


def dotted_name(node: ast.AST) -> str | None:
    """``a.b.c`` for a Name/Attribute chain on CPython's tree (``names.dotted`` on libcst's), else None."""
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if not isinstance(node, ast.Name):
        return None
    parts.append(node.id)
    return ".".join(reversed(parts))


def import_bindings(
    names: Iterable[tuple[str, str | None]], level: int | None = None, module: str = ""
) -> list[tuple[str, str]]:
    """The local names an import statement binds and the dotted path each stands for, as written (relative
    paths keep their dots: ``resolve_relative`` places them). ``names`` are (name, asname) pairs; ``level``
    None is ``import a.b`` (binds ``a`` to ``a``, or the alias to ``a.b``), an int is ``from <dots><module>
    import ...``. A star import binds no name it shows. The one reading of import statements: the pre-filter's
    summary and the project facts (CPython's tree) and the rules' name resolver (libcst's) all use it."""
    if level is None:
        return [(asname, name) if asname else (name.split(".")[0], name.split(".")[0]) for name, asname in names]
    base = "." * level + module
    return [
        (asname or name, f"{base}.{name}" if base and not base.endswith(".") else f"{base}{name}")
        for name, asname in names
        if name != "*"
    ]


def resolve_relative(qualified: str, module_name: str, is_package: bool) -> str:
    """``.backend.keras`` seen in module ``pkg.models`` is ``pkg.backend.keras``."""
    if not qualified.startswith("."):
        return qualified
    dots = len(qualified) - len(qualified.lstrip("."))
    base = module_name.split(".") if module_name else []
    if not is_package:
        base = base[:-1]
    if dots > 1:
        base = base[: len(base) - (dots - 1)] if dots - 1 <= len(base) else []
    rest = qualified[dots:]
    return ".".join([*base, rest] if rest else base)
