"""API names: folding the many spellings of a Keras/TensorFlow/PyTorch API into one.

``canonical`` maps a dotted import path (``tensorflow.keras.layers.Dense``,
``keras.src.layers.core.dense.Dense``, ``tf_keras.layers.Dense``...) to a
namespace plus a path such as ``layers.Dense``, applying the project's
re-exports (``from pkg.backend import keras``). The project-facts pass uses it
without parsing; ``mplint.engine.names`` adds resolution of names in parsed files.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

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
# The module a fix imports to reach each Keras namespace.
NAMESPACE_MODULES = {"keras": "keras", "tf.keras": "tensorflow.keras", "tf_keras": "tf_keras"}
# PyTorch and NVIDIA apex, kept apart from the table above: the Keras rules and analyses read any name
# ``canonical`` resolves as Keras, TensorFlow or NumPy (``torch.where`` is not ``tf.where``), so the MPT
# rules ask ``torch_canonical`` instead. ``torch.cuda.amp.autocast`` stays ``torch`` + ``cuda.amp.autocast``.
_TORCH_NAMESPACES: tuple[tuple[str, str], ...] = (("torch", "torch"), ("apex", "apex"))
TORCH_NAMESPACES = frozenset(ns for _, ns in _TORCH_NAMESPACES)

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
    """An API reference: ``ns`` is keras, tf.keras, tf_keras, tf, np (``canonical``) or torch, apex
    (``torch_canonical``); ``path`` the dotted rest."""

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
    if reexports:
        # Longest re-exported prefix first: one dict lookup per dotted prefix.
        parts = qualified.split(".")
        for end in range(len(parts), 0, -1):
            target = reexports.get(".".join(parts[:end]))
            if target is not None:
                qualified = ".".join([target, *parts[end:]])
                break
    for prefix, ns in _NAMESPACES:
        if qualified == prefix:
            return KName(ns, "")
        if qualified.startswith(prefix + "."):
            rest = qualified[len(prefix) + 1 :]
            if ns == "tf" and rest.startswith("keras."):
                continue
            return KName(ns, _normalize_path(rest))
    return None


def keras_namespace(module: str) -> str | None:
    """The Keras namespace a module path belongs to (keras, tf.keras, tf_keras), read from the one table of
    prefixes ``canonical`` uses; None for other modules."""
    k = canonical(module)
    return k.ns if k is not None and k.is_keras else None


def torch_canonical(qualified: str) -> KName | None:
    """``torch.nn.functional.softmax`` -> torch + ``nn.functional.softmax``; ``apex.amp.initialize`` -> apex
    + ``amp.initialize``. Paths are kept as written: PyTorch has no flattened re-export scheme to fold."""
    for prefix, ns in _TORCH_NAMESPACES:
        if qualified == prefix:
            return KName(ns, "")
        if qualified.startswith(prefix + "."):
            return KName(ns, qualified[len(prefix) + 1 :])
    return None
