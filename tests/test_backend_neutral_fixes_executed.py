"""MP601's fixes in Keras 3 code executed on each backend (TensorFlow, JAX, torch; CPU, TensorFlow hidden from the JAX
and torch runs): a mean-pooling layer guards its division by ``ops.maximum(count, 1e-9)``, which is 0 in float16, so
an all-padding row pools to 0/0 = NaN under mixed_float16. The fix tests the dtype with
``keras.backend.standardize_dtype``: the test the fix used to write, ``count.dtype == "float16"``, is False on torch,
where a dtype is ``torch.float16``, and left the NaN there."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from conftest import REPO
from keras_backends import backend_env, backend_params, warm_module

from mplint.verify.warm import run_python

POOLING = """\
from keras import layers, ops


class MeanPooling(layers.Layer):
    def call(self, inputs, padding_mask):
        mask = ops.cast(ops.expand_dims(padding_mask, -1), inputs.dtype)
        total = ops.sum(inputs * mask, axis=1)
        count = ops.sum(mask, axis=1)
        return total / ops.maximum(count, 1e-9)
"""
FIXED = (POOLING.replace("from keras import layers, ops\n", "from keras import layers, ops\nimport keras\n")).replace(
    "ops.maximum(count, 1e-9)",
    'ops.maximum(count, (6.104e-05 if keras.backend.standardize_dtype(count.dtype) == "float16" else 1e-9))',
)
# what the fix wrote before it was backend-neutral
FORMER_FIX = POOLING.replace(
    "ops.maximum(count, 1e-9)", 'ops.maximum(count, (6.104e-05 if count.dtype == "float16" else 1e-9))'
)

# Pools a batch whose second row is all padding, under each policy, with each version of the layer.
RUN = """\
import json, sys
import keras
import numpy as np

results = {}
for name, source in json.loads(sys.argv[1]).items():
    namespace = {}
    exec(compile(source, name, "exec"), namespace)
    for policy in ("mixed_float16", "float32"):
        keras.mixed_precision.set_global_policy(policy)
        tokens = np.arange(24, dtype="float32").reshape(2, 4, 3) / 10
        padding = np.array([[1, 1, 0, 0], [0, 0, 0, 0]], "float32")
        pooled = keras.ops.convert_to_numpy(namespace["MeanPooling"]()(tokens, padding)).astype("float32")
        results[f"{name} {policy}"] = pooled.tolist()
print("RESULT " + json.dumps(results))
"""


def test_the_fix_tests_the_dtype_the_same_way_on_every_backend(tmp_path):
    (tmp_path / "pooling.py").write_text(POOLING, encoding="utf-8")
    (tmp_path / "pyproject.toml").write_text(
        '[project]\nname = "pool"\ndependencies = ["keras>=3"]\n', encoding="utf-8"
    )
    fixed = subprocess.run(
        [sys.executable, "-m", "mplint", "--fix", "--select", "MP601", "--no-cache", "pooling.py"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert fixed.returncode == 0, fixed.stdout + fixed.stderr
    assert (tmp_path / "pooling.py").read_text(encoding="utf-8") == FIXED


@pytest.fixture(scope="module")
def pooled() -> dict:
    return {}


def _pooled(backend: str, pooled: dict, tmp_path_factory) -> dict:
    if backend not in pooled:
        sources = json.dumps({"original": POOLING, "fixed": FIXED, "former fix": FORMER_FIX})
        done = run_python(
            ["-c", RUN, sources],
            module=warm_module(backend),
            cwd=REPO,
            env=backend_env(backend, tmp_path_factory.mktemp(backend)),
        )
        assert done.returncode == 0, done.stderr[-3000:]
        line = next(line for line in done.stdout.splitlines() if line.startswith("RESULT "))
        pooled[backend] = json.loads(line[len("RESULT ") :])
    return pooled[backend]


PADDED = [[0.15, 0.25, 0.35], [0.0, 0.0, 0.0]]  # the mean of the first row's two tokens; the padding row pools to 0
NAN = [[0.15, 0.25, 0.35], [float("nan")] * 3]


def _rounded(rows):
    return [[round(v, 2) if v == v else v for v in row] for row in rows]


@pytest.mark.parametrize("backend", backend_params())
def test_the_original_pools_padding_to_nan_under_mixed_float16(backend, pooled, tmp_path_factory):
    results = _pooled(backend, pooled, tmp_path_factory)
    assert str(_rounded(results["original mixed_float16"])) == str(NAN)
    assert _rounded(results["original float32"]) == PADDED


@pytest.mark.parametrize("backend", backend_params())
def test_the_fixed_layer_pools_padding_to_zero_and_keeps_float32(backend, pooled, tmp_path_factory):
    results = _pooled(backend, pooled, tmp_path_factory)
    assert _rounded(results["fixed mixed_float16"]) == PADDED
    assert results["fixed float32"] == results["original float32"]  # float32 computes exactly what it computed


@pytest.mark.parametrize("backend", backend_params())
def test_the_former_fix_did_nothing_on_torch(backend, pooled, tmp_path_factory):
    expected = NAN if backend == "torch" else PADDED
    assert str(_rounded(_pooled(backend, pooled, tmp_path_factory)["former fix mixed_float16"])) == str(expected)
