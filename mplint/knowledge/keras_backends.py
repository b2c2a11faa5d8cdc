"""Keras 3's backends, and what to install for each (the one-line errors of the runtime companion and of
``mplint verify`` where Keras or its backend is missing)."""

from __future__ import annotations

BACKENDS = ("tensorflow", "jax", "torch")
DEFAULT_BACKEND = "tensorflow"  # Keras 3 without KERAS_BACKEND or keras.json
# What pip installs for each module, and how to choose a build.
_PACKAGES = {"keras": "keras", "tensorflow": "tensorflow", "jax": '"jax[cpu]"', "torch": "torch"}
_BUILDS = {
    "jax": '"jax[cuda12]" in place of "jax[cpu]" for NVIDIA GPUs',
    "torch": "a CPU-only torch: python3 -m pip install torch --index-url https://download.pytorch.org/whl/cpu",
}


def install_command(modules: list[str]) -> str:
    """``python3 -m pip install keras "jax[cpu]" ("jax[cuda12]" ... for NVIDIA GPUs)`` for the missing ``modules``."""
    command = "python3 -m pip install " + " ".join(_PACKAGES.get(m, m) for m in modules)
    builds = [_BUILDS[m] for m in modules if m in _BUILDS]
    return f"{command} ({'; '.join(builds)})" if builds else command
