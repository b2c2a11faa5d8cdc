"""Keras 3's backends in tests: each check runs in a process of its own (Keras picks its backend once, at its import,
from KERAS_BACKEND), and a backend other than TensorFlow runs where TensorFlow cannot be imported, as on a machine
without it: a ``sitecustomize`` on the process's path puts None in ``sys.modules`` for tensorflow and tf_keras, so
their import fails and ``importlib.util.find_spec`` says they are not installed."""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

import pytest

BACKENDS = ("tensorflow", "jax", "torch")
HIDE_TENSORFLOW = "import sys\n\nfor _name in ('tensorflow', 'tf_keras'):\n    sys.modules[_name] = None\n"


def missing(backend: str) -> str | None:
    """Why ``backend`` cannot run here, or None."""
    for module in ("keras", backend):
        if importlib.util.find_spec(module) is None:
            return f"{module} is not installed"
    return None


def backend_params(*backends: str) -> list:
    """``backends`` (default: all three) as parameters, each skipped with the reason where it cannot run here."""
    return [
        pytest.param(name, id=name, marks=pytest.mark.skipif(missing(name) is not None, reason=str(missing(name))))
        for name in backends or BACKENDS
    ]


def backend_env(backend: str, folder: Path) -> dict[str, str]:
    """The environment of a process on ``backend``, on the CPU; TensorFlow hidden unless it is the backend (the
    ``sitecustomize`` is written under ``folder``)."""
    env = dict(os.environ, KERAS_BACKEND=backend, CUDA_VISIBLE_DEVICES="", TF_CPP_MIN_LOG_LEVEL="3")
    env.pop("TF_USE_LEGACY_KERAS", None)
    if backend != "tensorflow":
        hidden = folder / "without-tensorflow"
        hidden.mkdir(parents=True, exist_ok=True)
        (hidden / "sitecustomize.py").write_text(HIDE_TENSORFLOW, encoding="utf-8")
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(hidden), env.get("PYTHONPATH")]))
    return env


def warm_module(backend: str) -> str:
    """What a warm interpreter for programs on ``backend`` imports (``mplint.verify.warm.run_python``)."""
    return "tensorflow" if backend == "tensorflow" else "keras"
