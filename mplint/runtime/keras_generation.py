"""Which Keras a program uses: 3 (``keras``) or 2 (``tf_keras`` / ``TF_USE_LEGACY_KERAS=1``), and Keras 3's backend."""

from __future__ import annotations

import importlib
import os
import sys

from mplint.knowledge.keras_backends import BACKENDS, DEFAULT_BACKEND, install_command
from mplint.project.generation import legacy_keras_value
from mplint.runtime.install_hints import RUNTIME_EXTRA


def legacy_keras_requested() -> bool:
    return legacy_keras_value(os.environ.get("TF_USE_LEGACY_KERAS", ""))


def keras_module(generation: int | None = None):
    """The Keras module of ``generation`` (2 or 3); by default the one this process uses. Where it or its backend
    is not installed, a ModuleNotFoundError whose one line says what to install (without the import's chain)."""
    if generation is None:
        legacy = sys.modules.get("tf_keras") is not None and "keras" not in sys.modules  # None: blocked, not imported
        generation = 2 if legacy_keras_requested() or legacy else 3
    if generation not in (2, 3):
        raise ValueError(f"keras generation must be 2 or 3, not {generation!r}")
    name = "tf_keras" if generation == 2 else "keras"
    try:
        return importlib.import_module(name)
    except ModuleNotFoundError as exc:
        missing = (exc.name or name).split(".")[0]
        if missing not in (name, *BACKENDS):
            raise
        raise ModuleNotFoundError(_missing(generation, missing), name=missing) from None


def _missing(generation: int, missing: str) -> str:
    if generation == 2:
        return (
            f"mplint.runtime runs Keras 2 with TensorFlow, and {missing} is not installed in this environment: "
            f"{RUNTIME_EXTRA}"
        )
    if missing == "keras":
        return (
            "mplint.runtime needs Keras, and keras is not installed in this environment: install it with a backend, "
            f"jax, torch or tensorflow: {install_command(['keras', 'jax'])}"
        )
    chosen = os.environ.get("KERAS_BACKEND", "")
    how = f"KERAS_BACKEND={chosen}" if chosen else "the backend Keras is configured with"
    return (
        f"mplint.runtime runs Keras 3 on the {missing} backend ({how}), and {missing} is not installed in this "
        f"environment: install it, {install_command([missing])}, or set KERAS_BACKEND to an installed backend"
    )


def backend_of(module) -> str:
    """The backend a Keras module runs on: Keras 2 always TensorFlow; Keras 3 the one it was imported with."""
    if module.__name__ == "tf_keras":
        return DEFAULT_BACKEND
    return str(module.backend.backend())


def generation_of(obj) -> int:
    """2 for tf_keras objects, 3 for Keras 3 ones."""
    module = type(obj).__module__ or ""
    return 2 if module.startswith("tf_keras") or module.startswith("tensorflow.python.keras") else 3
