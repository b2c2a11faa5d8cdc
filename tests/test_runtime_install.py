"""``mplint.runtime`` where the install left TensorFlow, Keras or torch out: one error that says what to install, in
place of a bare ModuleNotFoundError from inside an import (as ``mplint verify`` says it: test_verify_install.py).
Runs without the frameworks: each case hides them in a fresh interpreter, as if they were not installed."""

from __future__ import annotations

import subprocess
import sys

import pytest
from conftest import REPO

RUNTIME_EXTRA = "install mplint's runtime extra (python3 -m pip install \".[runtime]\" in mplint's folder)"


def run_hidden(hidden: tuple[str, ...], call: str) -> subprocess.CompletedProcess:
    hide = "".join(f"sys.modules[{name!r}] = None\n" for name in hidden)  # find_spec answers None, import fails
    code = f"import sys\n{hide}from mplint import runtime\nfrom mplint.runtime import torch_precision\n{call}\n"
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, timeout=120)


@pytest.mark.parametrize(
    ("hidden", "call", "message"),
    [
        (
            ("keras",),
            "runtime.enable()",
            "mplint.runtime needs Keras, and keras is not installed in this environment: install it with a backend, "
            'jax, torch or tensorflow: python3 -m pip install keras "jax[cpu]" ("jax[cuda12]" in place of "jax[cpu]" '
            "for NVIDIA GPUs)",
        ),
        (
            ("tensorflow",),
            "import os\nos.environ['KERAS_BACKEND'] = 'tensorflow'\nruntime.enable(keras=3)",
            "mplint.runtime runs Keras 3 on the tensorflow backend (KERAS_BACKEND=tensorflow), and tensorflow is not "
            "installed in this environment: install it, python3 -m pip install tensorflow, or set KERAS_BACKEND to an "
            "installed backend",
        ),
        (
            ("tf_keras",),
            "runtime.enable(keras=2)",
            "mplint.runtime runs Keras 2 with TensorFlow, and tf_keras is not installed in this environment: "
            + RUNTIME_EXTRA,
        ),
        (
            ("torch",),
            "torch_precision.choose()",
            "mplint.runtime.torch_precision.choose() needs PyTorch, and torch is not installed in this environment: "
            "install torch (python3 -m pip install torch; for a CPU-only build add "
            "--index-url https://download.pytorch.org/whl/cpu)",
        ),
    ],
)
def test_a_missing_framework_is_one_error_that_says_what_to_install(hidden, call, message):
    done = run_hidden(hidden, call)
    assert (done.returncode, done.stdout) == (1, "")
    assert done.stderr.splitlines()[-1] == f"ModuleNotFoundError: {message}"
    assert done.stderr.count("Traceback") == 1 and "During handling" not in done.stderr


def test_the_error_is_still_an_import_error_with_the_missing_name():
    done = run_hidden(
        ("keras",),
        "try:\n    runtime.enable()\nexcept ImportError as exc:\n    print(type(exc).__name__, exc.name)",
    )
    assert (done.returncode, done.stdout, done.stderr) == (0, "ModuleNotFoundError keras\n", "")
