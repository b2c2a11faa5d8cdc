"""MP601/MPT601 on constants reached through arithmetic of literals, operator functions, casts and autocast,
executed: what the findings claim is what float16 does, and mplint's own fixes are finite under float16 and
bit-identical in float32.

Keras runs in subprocesses (each picks its own global policy) with the TensorFlow backend on CPU; torch runs here
under float16 CPU autocast, which runs Linear in float16 as CUDA autocast does.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from mplint.testing import lint_code
from mplint.verify.warm import run_python

np = pytest.importorskip("numpy")

# --- what float16 does to the constants ------------------------------------------------------------------------


def test_float16_turns_the_power_padding_and_float32_min_into_inf_and_flushes_the_epsilons():
    pytest.importorskip("tensorflow")
    probe = (
        "import json\nimport numpy as np\nimport tensorflow as tf\nfrom keras import ops\n"
        "half = tf.zeros((2,), tf.float16)\n"
        "print(json.dumps([\n"
        "    float((tf.ones_like(half) * (-2 ** 32 + 1))[0]),\n"
        "    float(ops.cast(np.finfo(np.float32).min, half.dtype)),\n"
        "    float(ops.full_like(half, -1e9)[0]),\n"
        "    float(ops.add(half, 1e-8)[0]),\n"
        "    float(ops.add(half, 6.104e-05)[0]),\n"
        "    float(ops.add(half, 3.1e-8)[0]),\n"
        "]))\n"
    )
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": "", "TF_CPP_MIN_LOG_LEVEL": "3", "KERAS_BACKEND": "tensorflow"}
    done = run_python(["-c", probe], module="tensorflow", env=env)
    assert done.returncode == 0, done.stderr[-3000:]
    padding, minimum, full, flushed, smallest_normal, rounded_up = json.loads(done.stdout.splitlines()[-1])
    assert padding == minimum == full == float("-inf")
    assert flushed == 0.0 and smallest_normal > 0.0
    assert rounded_up == pytest.approx(5.96e-8, rel=1e-2)  # between 3e-8 and 6e-8 a constant rounds up, not to 0


# --- MP601's fixes at the new sites, executed ------------------------------------------------------------------

LAYERS = """\
import keras
import numpy as np
import tensorflow as tf
from keras import ops


class AttentionPooling(tf.keras.layers.Layer):
    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.score = tf.keras.layers.Dense(1, kernel_initializer="ones")

    def call(self, keys, key_masks):
        outputs = tf.transpose(self.score(keys), (0, 2, 1))
        paddings = tf.ones_like(outputs) * (-2 ** 32 + 1)
        outputs = tf.where(key_masks, outputs, paddings)
        return tf.matmul(tf.nn.softmax(outputs), keys)


class MaskedScores(keras.layers.Layer):
    def call(self, scores, mask):
        floor = ops.cast(np.finfo(np.float32).min, scores.dtype)
        return ops.softmax(ops.where(mask, scores, floor))


class BinaryEntropy(keras.layers.Layer):
    def call(self, logits):
        p = ops.sigmoid(logits)
        return -ops.log(ops.add(p, 1e-8))
"""

PROBE = """\
import sys
import numpy as np
import keras

keras.mixed_precision.set_global_policy(sys.argv[1])
import layers

keys = np.arange(24, dtype="float32").reshape(2, 3, 4) / 24
key_masks = np.array([[[True, True, False]], [[False, False, False]]])  # the second row: every key masked
scores = np.array([[0.5, -1.0, 2.0], [1.0, 1.0, 1.0]], dtype="float32")
mask = np.array([[True, False, True], [False, False, False]])
logits = np.array([[-30.0, 0.0, 3.0]], dtype="float32")  # sigmoid(-30) is 0 in float16
outputs = [
    layers.AttentionPooling()(keys, key_masks),
    layers.MaskedScores()(scores, mask),
    layers.BinaryEntropy()(logits),
]
np.savez(sys.argv[2], *[np.asarray(keras.ops.convert_to_numpy(o), dtype="float32") for o in outputs])
"""


def _outputs(folder: Path, source: str, policy: str) -> list:
    folder.mkdir(exist_ok=True)
    (folder / "layers.py").write_text(source, encoding="utf-8")
    (folder / "probe.py").write_text(PROBE, encoding="utf-8")
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": "", "TF_CPP_MIN_LOG_LEVEL": "3", "KERAS_BACKEND": "tensorflow"}
    out = folder / f"{policy}.npz"
    done = run_python(["probe.py", policy, str(out)], module="tensorflow", cwd=folder, env=env)
    assert done.returncode == 0, done.stderr[-3000:]
    with np.load(out) as saved:
        return [saved[f"arr_{i}"] for i in range(3)]


def test_mp601_fixes_of_a_power_padding_a_cast_minimum_and_an_ops_add_epsilon_executed(tmp_path):
    pytest.importorskip("tensorflow")
    result = lint_code(LAYERS, path="layers.py", select=["MP601"], fix=True)
    assert result.diagnostics == []
    fixed = result.fixed_code
    assert fixed == (
        LAYERS.replace(
            "(-2 ** 32 + 1)",
            '(-3e4 if keras.backend.standardize_dtype(outputs.dtype) == "float16" else (-2 ** 32 + 1))',
        )
        .replace(
            "ops.cast(np.finfo(np.float32).min, scores.dtype)",
            'ops.cast((-3e4 if keras.backend.standardize_dtype(scores.dtype) == "float16" else np.finfo(np.float32).min), scores.dtype)',
        )
        .replace(
            "ops.add(p, 1e-8)",
            'ops.add(p, (6.104e-05 if keras.backend.standardize_dtype(p.dtype) == "float16" else 1e-8))',
        )
    )
    original_mixed = _outputs(tmp_path / "original", LAYERS, "mixed_float16")
    original_float32 = _outputs(tmp_path / "original", LAYERS, "float32")
    fixed_mixed = _outputs(tmp_path / "fixed", fixed, "mixed_float16")
    fixed_float32 = _outputs(tmp_path / "fixed", fixed, "float32")
    # under mixed_float16 the fully masked rows are NaN and the flushed epsilon's log is inf; fixed, all finite
    assert [not np.isfinite(o).all() for o in original_mixed] == [True, True, True]
    assert all(np.isfinite(o).all() for o in fixed_mixed)
    # float32 computes exactly what it computed
    assert all(np.isfinite(o).all() for o in original_float32)
    assert all(np.array_equal(a, b) for a, b in zip(original_float32, fixed_float32))
    # the rows float16 handled before are unchanged up to float16's rounding
    assert np.allclose(fixed_mixed[0][0], original_float32[0][0], atol=1e-2)
    assert np.allclose(fixed_mixed[1][0], original_float32[1][0], atol=1e-3)


# --- MPT601: an epsilon after a float16 autocast op, executed ----------------------------------------------------

HEAD = """\
import torch
from torch import nn


class MultiLabelHead(nn.Module):
    def __init__(self, features, labels):
        super().__init__()
        self.fc = nn.Linear(features, labels)

    def forward(self, x, targets):
        probs = torch.sigmoid(self.fc(x))
        return -(targets * torch.log(probs + 1e-8)).mean()
"""


def _loss(source: str, autocast: bool):
    torch = pytest.importorskip("torch")
    namespace: dict = {}
    exec(compile(source, "head.py", "exec"), namespace)
    torch.manual_seed(0)
    head = namespace["MultiLabelHead"](4, 3)
    with torch.no_grad():
        head.fc.weight.fill_(0.0)
        head.fc.bias.copy_(torch.tensor([-30.0, 0.0, 3.0]))  # a confident negative: sigmoid(-30) is 0 in float16
    x, targets = torch.ones(2, 4), torch.ones(2, 3)
    if autocast:
        with torch.autocast("cpu", dtype=torch.float16):
            probs = torch.sigmoid(head.fc(x))
            assert probs.dtype == torch.float16 and (probs + 1e-8)[0, 0].item() == 0.0
            return head(x, targets)
    return head(x, targets)


def test_mpt601_epsilon_after_a_linear_is_lost_under_float16_autocast_and_the_fix_keeps_float32():
    torch = pytest.importorskip("torch")
    result = lint_code(HEAD, select=["MPT601"], fix=True)
    assert result.diagnostics == []
    fixed = result.fixed_code
    assert fixed == HEAD.replace("probs + 1e-8", "probs + (6.104e-05 if probs.dtype == torch.float16 else 1e-8)")
    assert torch.isinf(_loss(HEAD, autocast=True))
    assert torch.isfinite(_loss(fixed, autocast=True))
    assert torch.equal(_loss(fixed, autocast=False), _loss(HEAD, autocast=False))
