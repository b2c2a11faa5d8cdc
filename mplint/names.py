"""Qualified-name resolution: which Keras/TensorFlow API a piece of code refers to.

libcst's ScopeProvider gives each name the dotted import path it came from
(``import tensorflow.keras as k`` makes ``k.layers.Dense`` read
``tensorflow.keras.layers.Dense``). ``canonical`` folds the many spellings of
one API (``tf.keras``, ``keras``, ``tf_keras``, ``tensorflow.compat.v2.keras``,
``keras.src...``) into a namespace plus a path such as ``layers.Dense``, and
applies the project's re-exports (``from pkg.backend import keras``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Mapping

import libcst as cst
from libcst.metadata import MetadataWrapper, ScopeProvider

# Longest prefix first: the first match wins.
_NAMESPACES: tuple[tuple[str, str], ...] = (
    ("tensorflow.compat.v2.keras", "tf.keras"),
    ("tensorflow.compat.v1.keras", "tf.keras"),
    ("tensorflow._api.v2.keras", "tf.keras"),
    ("tensorflow.python.keras", "tf.keras"),
    ("tensorflow.keras", "tf.keras"),
    ("keras._tf_keras.keras", "keras"),
    ("keras.src", "keras"),
    ("keras.api", "keras"),
    ("keras", "keras"),
    ("tf_keras.src", "tf_keras"),
    ("tf_keras", "tf_keras"),
    ("tensorflow.compat.v2", "tf"),
    ("tensorflow.compat.v1", "tf"),
    ("tensorflow", "tf"),
    ("numpy", "np"),
)
KERAS_NAMESPACES = frozenset({"keras", "tf.keras", "tf_keras"})

# Deep module paths of the same public object.
_PATH_ALIASES = {
    "models.Sequential": "Sequential",
    "models.Model": "Model",
    "engine.sequential.Sequential": "Sequential",
    "engine.training.Model": "Model",
    "models.sequential.Sequential": "Sequential",
    "models.model.Model": "Model",
    "models.functional.Functional": "Model",
    "dtype_policies.DTypePolicy": "mixed_precision.Policy",
    "dtype_policies.dtype_policy.DTypePolicy": "mixed_precision.Policy",
    "mixed_precision.DTypePolicy": "mixed_precision.Policy",
    "optimizers.loss_scale_optimizer.LossScaleOptimizer": "optimizers.LossScaleOptimizer",
    "mixed_precision.LossScaleOptimizer": "optimizers.LossScaleOptimizer",
    "mixed_precision.loss_scale_optimizer.LossScaleOptimizer": "optimizers.LossScaleOptimizer",
}
# Package paths whose public objects are re-exported from their first segment.
_FLATTENED = ("layers", "activations", "losses", "optimizers")


@dataclass(frozen=True)
class KName:
    """An API reference: ``ns`` is keras, tf.keras, tf_keras, tf or np; ``path`` the dotted rest."""

    ns: str
    path: str

    @property
    def is_keras(self) -> bool:
        return self.ns in KERAS_NAMESPACES

    @property
    def last(self) -> str:
        return self.path.rsplit(".", 1)[-1]

    def __str__(self) -> str:
        return f"{self.ns}.{self.path}" if self.path else self.ns


def _normalize_path(path: str) -> str:
    if path in _PATH_ALIASES:
        return _PATH_ALIASES[path]
    parts = path.split(".")
    if len(parts) > 2 and parts[0] in _FLATTENED and parts[1] != "schedules":
        return f"{parts[0]}.{parts[-1]}"
    return path


def canonical(qualified: str, reexports: Mapping[str, str] = {}) -> KName | None:
    for alias in sorted(reexports, key=len, reverse=True):
        if qualified == alias or qualified.startswith(alias + "."):
            qualified = reexports[alias] + qualified[len(alias):]
            break
    for prefix, ns in _NAMESPACES:
        if qualified == prefix:
            return KName(ns, "")
        if qualified.startswith(prefix + "."):
            rest = qualified[len(prefix) + 1:]
            if ns == "tf" and rest.startswith("keras."):
                continue
            return KName(ns, _normalize_path(rest))
    return None


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


def dotted(node: cst.CSTNode) -> str | None:
    """``a.b.c`` for a Name/Attribute chain, else None."""
    if isinstance(node, cst.Name):
        return node.value
    if isinstance(node, cst.Attribute):
        head = dotted(node.value)
        return f"{head}.{node.attr.value}" if head else None
    return None


class NameResolver:
    """Per-file resolver; resolves libcst's ScopeProvider only on first use."""

    def __init__(self, wrapper: MetadataWrapper, module_name: str, is_package: bool, reexports: Mapping[str, str]):
        self._wrapper = wrapper
        self._module_name = module_name
        self._is_package = is_package
        self._reexports = reexports
        self._scopes = None

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

    def knames(self, node: cst.CSTNode) -> set[KName]:
        out = set()
        for q in self.qualified(node):
            k = canonical(q, self._reexports)
            if k is not None:
                out.add(k)
        return out

    def kname(self, node: cst.CSTNode) -> KName | None:
        found = self.knames(node)
        return min(found, key=str) if found else None

    def matches(self, node: cst.CSTNode, paths: Iterable[str], namespaces: Iterable[str] | None = None) -> KName | None:
        """The KName of ``node`` if its path is one of ``paths`` (any Keras namespace by default)."""
        wanted = set(paths)
        allowed = set(namespaces) if namespaces is not None else KERAS_NAMESPACES
        for k in self.knames(node):
            if k.path in wanted and k.ns in allowed:
                return k
        return None

    def callee(self, call: cst.Call, paths: Iterable[str], namespaces: Iterable[str] | None = None) -> KName | None:
        return self.matches(call.func, paths, namespaces) if isinstance(call, cst.Call) else None
