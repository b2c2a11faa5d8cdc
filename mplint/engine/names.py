"""Qualified-name resolution: which Keras/TensorFlow API a piece of code refers to.

libcst's ScopeProvider gives each name the dotted import path it came from
(``import tensorflow.keras as k`` makes ``k.layers.Dense`` read
``tensorflow.keras.layers.Dense``). ``canonical`` folds the many spellings of
one API (``tf.keras``, ``keras``, ``tf_keras``, ``tensorflow.compat.v2.keras``,
``keras.src...``) into a namespace plus a path such as ``layers.Dense``, and
applies the project's re-exports (``from pkg.backend import keras``).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator, Mapping

import libcst as cst
from libcst.metadata import MetadataWrapper, ScopeProvider

from mplint.engine.imports import import_bindings, resolve_relative  # noqa: F401 (re-exported)
from mplint.knowledge.apinames import KERAS_NAMESPACES, KName, canonical, torch_canonical  # noqa: F401 (re-exported)


def last_name(node: cst.CSTNode) -> str | None:
    """``c`` for a name ``c`` or an attribute ``a.b.c`` (what a call's callee is called), else None."""
    if isinstance(node, cst.Name):
        return node.value
    if isinstance(node, cst.Attribute):
        return node.attr.value
    return None


def dotted(node: cst.CSTNode) -> str | None:
    """``a.b.c`` for a Name/Attribute chain, else None."""
    if isinstance(node, cst.Name):
        return node.value
    if isinstance(node, cst.Attribute):
        head = dotted(node.value)
        return f"{head}.{node.attr.value}" if head else None
    return None


def assigned_name(statement: cst.CSTNode) -> str | None:
    """``x`` of ``x = <value>``: the one plain name an assignment binds; None for any other node."""
    if isinstance(statement, cst.Assign) and len(statement.targets) == 1:
        target = statement.targets[0].target
        if isinstance(target, cst.Name):
            return target.value
    return None


def _target_names(node) -> Iterator[str]:
    """Names bound by an assignment target (``a``, ``a, (b, *c)``); attributes and subscripts bind none."""
    if isinstance(node, cst.Name):
        yield node.value
    elif isinstance(node, (cst.Tuple, cst.List)):
        for element in node.elements:
            yield from _target_names(element.value)
    elif isinstance(node, cst.StarredElement):
        yield from _target_names(node.value)


class _FileBindings:
    """One walk over the statements (never the expressions) of a file.

    ``imports``: local name -> the dotted paths imports bind it to.
    ``rebound``: names something other than an import also binds (assignments,
    parameters, defs, loops, ``with``/``except`` targets, globals).
    """

    def __init__(self, module: cst.Module, source: bytes):
        self.imports: dict[str, set[str]] = {}
        self.rebound: set[str] = set()
        self._statements(module.body)
        # Expression-level bindings a statement walk cannot see: lambda parameters, walrus, comprehension targets.
        for match in _EXPRESSION_BINDINGS.finditer(source):
            bound = next(g for g in match.groups() if g is not None)
            self.rebound.update(n.decode() for n in re.findall(rb"[A-Za-z_]\w*", bound))

    def _statements(self, body) -> None:
        for stmt in body:
            if isinstance(stmt, cst.SimpleStatementLine):
                for small in stmt.body:
                    self._small(small)
            elif isinstance(stmt, cst.BaseCompoundStatement):
                self._compound(stmt)

    def _block(self, part) -> None:
        if isinstance(part, cst.SimpleStatementSuite):
            for small in part.body:
                self._small(small)
        elif isinstance(part, cst.IndentedBlock):
            self._statements(part.body)

    def _compound(self, node) -> None:
        if isinstance(node, (cst.FunctionDef, cst.ClassDef)):
            self.rebound.add(node.name.value)
        if isinstance(node, cst.FunctionDef):
            params = node.params
            for param in [*params.posonly_params, *params.params, *params.kwonly_params]:
                self.rebound.add(param.name.value)
            for star in (params.star_arg, params.star_kwarg):
                if isinstance(star, cst.Param):
                    self.rebound.add(star.name.value)
        elif isinstance(node, cst.For):
            self.rebound.update(_target_names(node.target))
        elif isinstance(node, cst.With):
            for item in node.items:
                if item.asname is not None:
                    self.rebound.update(_target_names(item.asname.name))
        elif isinstance(node, cst.Try):
            for handler in node.handlers:
                if handler.name is not None:
                    self.rebound.update(_target_names(handler.name.name))
        self._block(getattr(node, "body", None))
        for handler in getattr(node, "handlers", ()):
            self._block(handler.body)
        for part in (getattr(node, "orelse", None), getattr(node, "finalbody", None)):
            if isinstance(part, cst.If):
                self._compound(part)
            elif part is not None:
                self._block(part.body)

    def _small(self, small) -> None:
        if isinstance(small, (cst.Import, cst.ImportFrom)):
            for local, path in statement_bindings(small):
                self.imports.setdefault(local, set()).add(path)
        elif isinstance(small, cst.Assign):
            for target in small.targets:
                self.rebound.update(_target_names(target.target))
        elif isinstance(small, (cst.AnnAssign, cst.AugAssign)):
            self.rebound.update(_target_names(small.target))
        elif isinstance(small, (cst.Global, cst.Nonlocal)):
            self.rebound.update(item.name.value for item in small.names)


def statement_bindings(small: cst.Import | cst.ImportFrom) -> list[tuple[str, str]]:
    """(local name, dotted path) of each name an import statement on libcst's tree binds, read by
    ``import_bindings`` as on CPython's tree (a relative path keeps its dots; a star import binds none)."""
    if isinstance(small, cst.Import):
        return import_bindings((dotted(a.name) or "", _asname(a)) for a in small.names)
    if isinstance(small.names, cst.ImportStar):
        return []
    module = (dotted(small.module) or "") if small.module else ""
    return import_bindings(((dotted(a.name) or "", _asname(a)) for a in small.names), len(small.relative), module)


def module_imports(module: cst.Module) -> Iterator[tuple[str, str]]:
    """(local name, dotted path) of each absolute import among the module-level statements, in order (the ones
    under ``if``/``try`` left out)."""
    for stmt in module.body:
        for small in stmt.body if isinstance(stmt, cst.SimpleStatementLine) else ():
            if isinstance(small, cst.Import) or isinstance(small, cst.ImportFrom) and not small.relative:
                yield from statement_bindings(small)


def _asname(alias: cst.ImportAlias) -> str | None:
    return alias.asname.name.value if alias.asname is not None and isinstance(alias.asname.name, cst.Name) else None


_EXPRESSION_BINDINGS = re.compile(
    rb"\blambda\b([^:\n]*):"  # lambda parameters
    rb"|([A-Za-z_]\w*)\s*:=(?!=)"  # walrus target
    rb"|\bfor\s+([\w\s,()*]*?)\s+in\b"  # comprehension (and loop) targets
)


class NameResolver:
    """Per-file resolver of the import paths behind names.

    The fast path reads the file's statements once: a name no import binds has
    no import path, and a name that only imports bind resolves by its text.
    Names the file also binds otherwise (parameters, assignments, loops...)
    go to libcst's ScopeProvider, resolved once per file on first need.
    """

    def __init__(
        self,
        wrapper: MetadataWrapper,
        module_name: str,
        is_package: bool,
        reexports: Mapping[str, str],
        source: bytes | None = None,
    ):
        self._wrapper = wrapper
        self._module_name = module_name
        self._is_package = is_package
        self._reexports = reexports
        self._source = source
        self._scopes = None
        self._bindings: _FileBindings | None = None

    @property
    def scopes(self):
        if self._scopes is None:
            self._scopes = self._wrapper.resolve(ScopeProvider)
        return self._scopes

    def qualified(self, node: cst.CSTNode) -> set[str]:
        scope = self.scopes.get(node)
        if scope is None:
            return set()
        try:
            names = scope.get_qualified_names_for(node)
        except Exception:  # libcst raises on nodes it cannot name
            return set()
        return {resolve_relative(q.name, self._module_name, self._is_package) for q in names}

    @property
    def bindings(self) -> _FileBindings:
        if self._bindings is None:
            self._bindings = _FileBindings(self._wrapper.module, self._source or b"")
        return self._bindings

    def _import_paths(self, node: cst.CSTNode) -> set[str] | None:
        """Import paths of a Name/Attribute chain by the fast path, or None when only scopes can tell."""
        if self._source is None:
            return None
        name = dotted(node)
        if name is None:
            return set()  # a call result, subscript or literal is no imported API
        head, _, rest = name.partition(".")
        bound = self.bindings.imports.get(head)
        if not bound:
            return set()
        if len(bound) > 1 or head in self.bindings.rebound:
            return None
        path = next(iter(bound))
        full = f"{path}.{rest}" if rest else path
        return {resolve_relative(full, self._module_name, self._is_package)}

    def project_paths(self, node: cst.CSTNode) -> set[str]:
        """What a Name/Attribute chain may stand for, as dotted paths: its import paths (libcst's scopes only
        where the fast path is unsure: they cost more than parsing a large file), else this module's own
        ``module.name`` (a function defined here)."""
        paths = self._import_paths(node)
        if paths is None:
            paths = self.qualified(node)
            return paths | {f"{self._module_name}.{q}" for q in paths}
        name = dotted(node)
        return paths or ({f"{self._module_name}.{name}"} if name else set())

    def knames(self, node: cst.CSTNode) -> set[KName]:
        paths = self._import_paths(node)
        out = set()
        for q in self.qualified(node) if paths is None else paths:
            k = canonical(q, self._reexports)
            if k is not None:
                out.add(k)
        return out

    def torch_names(self, node: cst.CSTNode) -> set[KName]:
        """The PyTorch/apex APIs ``node`` can name (``torch_canonical`` of its import paths)."""
        paths = self._import_paths(node)
        return {k for q in (self.qualified(node) if paths is None else paths) if (k := torch_canonical(q)) is not None}

    def torch_api(self, node: cst.CSTNode, paths: Iterable[str]) -> KName | None:
        """The torch/apex KName of ``node`` if its path is one of ``paths`` (``nn.Linear``, ``amp.initialize``)."""
        wanted = set(paths)
        if not self.could_be(node, {p.rsplit(".", 1)[-1] for p in wanted}):
            return None
        return next((k for k in sorted(self.torch_names(node), key=str) if k.path in wanted), None)

    def kname(self, node: cst.CSTNode) -> KName | None:
        found = self.knames(node)
        return min(found, key=str) if found else None

    def could_be(self, node: cst.CSTNode, last_names: Iterable[str]) -> bool:
        """Cheap textual test: can ``node`` name an API whose last segment is one of ``last_names``?

        False only when it certainly cannot (the written name differs and is not an import alias).
        """
        name = dotted(node)
        if name is None:
            return True
        last = name.rsplit(".", 1)[-1]
        wanted = set(last_names)
        if last in wanted:
            return True
        if "." in name:
            return False
        for path in self.bindings.imports.get(name, ()):
            target = self._reexports.get(resolve_relative(path, self._module_name, self._is_package), path)
            if target.rsplit(".", 1)[-1] in wanted:
                return True
        return False

    def matches(self, node: cst.CSTNode, paths: Iterable[str], namespaces: Iterable[str] | None = None) -> KName | None:
        """The KName of ``node`` if its path is one of ``paths`` (any Keras namespace by default)."""
        wanted = set(paths)
        if not self.could_be(node, {p.rsplit(".", 1)[-1] for p in wanted}):
            return None
        allowed = set(namespaces) if namespaces is not None else KERAS_NAMESPACES
        for k in self.knames(node):
            if k.path in wanted and k.ns in allowed:
                return k
        return None

    def callee(self, call: cst.Call, paths: Iterable[str], namespaces: Iterable[str] | None = None) -> KName | None:
        return self.matches(call.func, paths, namespaces) if isinstance(call, cst.Call) else None
