"""Keras 3 tensors of any backend as the recorder reads them: NumPy arrays on the CPU (a torch tensor on a GPU or with
gradients, a JAX array, a TensorFlow tensor), and whether a value is being traced by ``jax.jit`` or ``jax.grad``
(only known when the step runs: recorded through ``jax.debug.callback``)."""

from __future__ import annotations

import sys

import numpy as np


def to_numpy(x) -> np.ndarray:
    """``x`` as a NumPy array, 16-bit floats widened to float32 (bfloat16 has no NumPy arithmetic of its own)."""
    keras = sys.modules.get("keras")
    convert = getattr(getattr(keras, "ops", None), "convert_to_numpy", None)
    tensorflow_value = type(x).__module__.startswith("tensorflow")
    value = np.asarray(convert(x) if convert is not None and not tensorflow_value else x)
    if value.dtype.kind == "f" or value.dtype.name == "bfloat16":
        return value.astype(np.float32)
    return value


def traced(values) -> bool:
    """Whether any of ``values`` is a JAX tracer (inside ``jax.jit``, ``jax.grad`` or ``lax.cond``)."""
    jax = sys.modules.get("jax")
    if jax is None:
        return False
    tracer = jax.core.Tracer
    return any(isinstance(v, tracer) for v in jax.tree_util.tree_leaves(values))


def backend(model=None) -> str:
    """The backend the Keras 3 of this process runs on; TensorFlow for a Keras 2 (tf_keras) ``model``, or where no
    Keras 3 was imported."""
    if model is not None and any(c.__module__.startswith("tf_keras") for c in type(model).__mro__):
        return "tensorflow"
    config = sys.modules.get("keras.src.backend.config")
    return str(config.backend()) if config is not None else "tensorflow"
