"""Fixes written for a pinned target, executed: a Keras 2-pinned project fixed by ``mplint --fix`` still trains under
tf_keras (``TF_USE_LEGACY_KERAS=1``), a Keras 3-pinned one under Keras 3. Each script trains a few steps in a subprocess
and prints its last loss and how far the weights moved."""

from __future__ import annotations

import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

from mplint.verify.warm import run_python

pytestmark = pytest.mark.tensorflow
pytest.importorskip("tensorflow")

DATA = """\
import numpy as np
import tensorflow as tf

x = np.random.RandomState(0).randn(32, 4).astype("float32")
y = x.sum(axis=1, keepdims=True)
"""

MODEL = """\
model = tf.keras.Sequential([tf.keras.Input((4,)), tf.keras.layers.Dense(8, activation="relu"),
                             tf.keras.layers.Dense(1, dtype="float32")])
start = [v.numpy().copy() for v in model.trainable_variables]
"""

REPORT = """\
for _ in range(12):
    last = step()
print("LOSS", float(last))
print("MOVED", max(float(np.abs(a - v.numpy()).max()) for a, v in zip(start, model.trainable_variables)))
"""

# MP201: a custom loop under mixed_float16 with no LossScaleOptimizer
UNSCALED_LOOP = (
    DATA
    + """\
tf.keras.mixed_precision.set_global_policy("mixed_float16")
"""
    + MODEL
    + """\
optimizer = tf.keras.optimizers.SGD(0.01)


def step():
    with tf.GradientTape() as tape:
        loss = tf.reduce_mean(tf.square(model(x) - y))
    grads = tape.gradient(loss, model.trainable_variables)
    optimizer.apply_gradients(zip(grads, model.trainable_variables))
    return loss


"""
    + REPORT
)

# MP501: TF 2.1-2.3's experimental API (ImportError from TF 2.9)
EXPERIMENTAL = (
    DATA.replace(
        "import tensorflow as tf\n",
        "import tensorflow as tf\nfrom tensorflow.keras.mixed_precision import experimental as mixed_precision\n",
    )
    + """\
mixed_precision.set_policy("mixed_float16")
"""
    + MODEL
    + """\
optimizer = mixed_precision.LossScaleOptimizer(tf.keras.optimizers.SGD(0.01), "dynamic")


def step():
    with tf.GradientTape() as tape:
        loss = tf.reduce_mean(tf.square(model(x) - y))
        scaled_loss = optimizer.get_scaled_loss(loss)
    grads = tape.gradient(scaled_loss, model.trainable_variables)
    grads = optimizer.get_unscaled_gradients(grads)
    optimizer.apply_gradients(zip(grads, model.trainable_variables))
    return loss


"""
    + REPORT
)

# MP502's subject: the Keras 2 scaling API (right on Keras 2, AttributeError on Keras 3)
KERAS2_SCALING = (
    DATA
    + """\
tf.keras.mixed_precision.set_global_policy("mixed_float16")
"""
    + MODEL
    + """\
optimizer = tf.keras.mixed_precision.LossScaleOptimizer(tf.keras.optimizers.SGD(0.01))


def step():
    with tf.GradientTape() as tape:
        loss = tf.reduce_mean(tf.square(model(x) - y))
        scaled_loss = optimizer.get_scaled_loss(loss)
    grads = tape.gradient(scaled_loss, model.trainable_variables)
    grads = optimizer.get_unscaled_gradients(grads)
    optimizer.apply_gradients(zip(grads, model.trainable_variables))
    return loss


"""
    + REPORT
)

KERAS2 = {"requirements.txt": "tensorflow==2.15.*\n"}
KERAS3 = {"requirements.txt": "tensorflow>=2.16\n"}
LEGACY = {"TF_USE_LEGACY_KERAS": "1"}


def _project(tmp_path: Path, code: str, pins: dict[str, str]) -> Path:
    (tmp_path / ".mplint.yaml").write_text("{}\n", encoding="utf-8")
    for name, text in pins.items():
        (tmp_path / name).write_text(text, encoding="utf-8")
    (tmp_path / "train.py").write_text(code, encoding="utf-8")
    return tmp_path / "train.py"


def _train(script: Path, env: dict[str, str]) -> subprocess.CompletedProcess:
    inherited = {k: v for k, v in os.environ.items() if k != "TF_USE_LEGACY_KERAS"}  # the test picks the Keras
    env = {**inherited, "TF_CPP_MIN_LOG_LEVEL": "3", "CUDA_VISIBLE_DEVICES": "", **env}
    return run_python([script.name], module="tensorflow", cwd=script.parent, env=env)


def _trains(done: subprocess.CompletedProcess) -> None:
    assert done.returncode == 0, done.stderr[-3000:]
    values = dict(line.split() for line in done.stdout.splitlines() if line.startswith(("LOSS ", "MOVED ")))
    assert math.isfinite(float(values["LOSS"])), done.stdout
    assert float(values["MOVED"]) > 0, done.stdout


def _fix(script: Path, rules: str) -> str:
    done = subprocess.run(
        [sys.executable, "-m", "mplint", "--no-cache", "--fix", "--select", rules, "."],
        cwd=script.parent,
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr  # everything found was fixed (safely)
    return script.read_text(encoding="utf-8")


def _keras_env(pins: dict[str, str]) -> dict[str, str]:
    if pins is KERAS2:
        pytest.importorskip("tf_keras")
        return LEGACY
    return {}


@pytest.mark.parametrize("pins, scaling", [(KERAS2, "get_scaled_loss"), (KERAS3, "scale_loss")])
def test_mp201_fix_trains_on_the_pinned_generation(tmp_path, pins, scaling):
    env = _keras_env(pins)
    script = _project(tmp_path, UNSCALED_LOOP, pins)
    fixed = _fix(script, "MP201")
    assert "optimizer = tf.keras.mixed_precision.LossScaleOptimizer(tf.keras.optimizers.SGD(0.01))\n" in fixed
    assert f"scaled_loss = optimizer.{scaling}(loss)" in fixed
    assert ("get_unscaled_gradients" in fixed) is (pins is KERAS2)
    _trains(_train(script, env))


def test_mp501_fix_makes_the_experimental_api_run_on_keras2(tmp_path):
    env = _keras_env(KERAS2)
    script = _project(tmp_path, EXPERIMENTAL, KERAS2)
    assert _train(script, env).returncode != 0  # the experimental module is gone from TF >= 2.9's Keras 2
    fixed = _fix(script, "MP501")
    assert "experimental" not in fixed and "set_global_policy(" in fixed
    _trains(_train(script, env))


def test_keras2_scaling_is_left_alone_on_keras2_and_rewritten_for_keras3(tmp_path):
    env = _keras_env(KERAS2)
    (tmp_path / "k2").mkdir()
    (tmp_path / "k3").mkdir()
    keras2 = _project(tmp_path / "k2", KERAS2_SCALING, KERAS2)
    assert _fix(keras2, "MP502") == KERAS2_SCALING  # right on the pinned Keras 2: no finding, nothing written
    _trains(_train(keras2, env))
    keras3 = _project(tmp_path / "k3", KERAS2_SCALING, KERAS3)
    assert _train(keras3, {}).returncode != 0  # get_scaled_loss does not exist on Keras 3
    fixed = _fix(keras3, "MP502")
    assert "scaled_loss = optimizer.scale_loss(loss)" in fixed and "get_unscaled_gradients" not in fixed
    _trains(_train(keras3, {}))


# One file, a loop per generation behind a feature test: Keras 3's arm where tf.keras has
# optimizers.LossScaleOptimizer, Keras 2's (tf_keras) in the else.
GUARDED_ARMS = (
    DATA
    + """\
tf.keras.mixed_precision.set_global_policy("mixed_float16")
"""
    + MODEL
    + """\

if hasattr(tf.keras.optimizers, "LossScaleOptimizer"):
    optimizer = {k3_opt}

    def step():
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.square(model(x) - y))
{k3_body}
        optimizer.apply_gradients(zip(grads, model.trainable_variables))
        return loss
else:
    optimizer = {k2_opt}

    def step():
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.square(model(x) - y))
{k2_body}
        optimizer.apply_gradients(zip(grads, model.trainable_variables))
        return loss


"""
    + REPORT
)
SGD = "tf.keras.optimizers.SGD(0.01)"
PLAIN_GRADS = "        grads = tape.gradient(loss, model.trainable_variables)"
K3_CLIPS = (
    "            scaled_loss = optimizer.scale_loss(loss)\n"
    "        grads = tape.gradient(scaled_loss, model.trainable_variables)\n"
    "        grads, _ = tf.clip_by_global_norm(grads, 1.0)"
)
K2_CLIPS = (
    "            scaled_loss = optimizer.get_scaled_loss(loss)\n"
    "        grads = tape.gradient(scaled_loss, model.trainable_variables)\n"
    "        grads, _ = tf.clip_by_global_norm(grads, 1.0)\n"
    "        grads = optimizer.get_unscaled_gradients(grads)"
)


@pytest.mark.parametrize(
    "rule, arms, written",
    [
        (
            "MP201",
            dict(k3_opt=SGD, k2_opt=SGD, k3_body=PLAIN_GRADS, k2_body=PLAIN_GRADS),
            [
                "optimizer.scale_loss(loss)",
                "optimizer.get_scaled_loss(loss)",
                "optimizer.get_unscaled_gradients(grads)",
            ],
        ),
        (
            "MP204",
            dict(
                k3_opt=f"tf.keras.optimizers.LossScaleOptimizer({SGD})",
                k2_opt=f"tf.keras.mixed_precision.LossScaleOptimizer({SGD})",
                k3_body=K3_CLIPS,
                k2_body=K2_CLIPS,
            ),
            [
                "SGD(0.01, global_clipnorm=1.0)",
                "get_unscaled_gradients(grads)\n        grads, _ = tf.clip_by_global_norm",
            ],
        ),
    ],
)
def test_guarded_arms_fixed_for_a_keras2_and_keras3_range_train_on_both(tmp_path, rule, arms, written):
    """TF >= 2.6 admits both generations; each arm runs on one, so each gets its generation's fix, safe there: the
    fixed file trains on Keras 3 and, with the same code, under tf_keras."""
    legacy = _keras_env(KERAS2)
    script = _project(tmp_path, GUARDED_ARMS.format(**arms), {"requirements.txt": "tensorflow>=2.6\n"})
    fixed = _fix(script, rule)
    assert all(text in fixed for text in written), fixed
    _trains(_train(script, {}))
    _trains(_train(script, legacy))
