"""Which Keras a program uses: 3 (``keras``) or 2 (``tf_keras`` / ``TF_USE_LEGACY_KERAS=1``)."""

from __future__ import annotations

import importlib
import os
import sys

from mplint.project.generation import legacy_keras_value


def legacy_keras_requested() -> bool:
    return legacy_keras_value(os.environ.get("TF_USE_LEGACY_KERAS", ""))


def generation_in_use(generation: int | None = None) -> int:
    """``generation`` (2 or 3), checked; by default the one this process uses."""
    if generation is None:
        generation = 2 if legacy_keras_requested() or ("tf_keras" in sys.modules and "keras" not in sys.modules) else 3
    if generation not in (2, 3):
        raise ValueError(f"keras generation must be 2 or 3, not {generation!r}")
    return generation


def package(generation: int) -> str:
    return "tf_keras" if generation == 2 else "keras"


def keras_module(generation: int | None = None):
    """The Keras module of ``generation`` (2 or 3); by default the one this process uses."""
    return importlib.import_module(package(generation_in_use(generation)))


def generation_of(obj) -> int:
    """2 for tf_keras objects, 3 for Keras 3 ones."""
    module = type(obj).__module__ or ""
    return 2 if module.startswith("tf_keras") or module.startswith("tensorflow.python.keras") else 3
