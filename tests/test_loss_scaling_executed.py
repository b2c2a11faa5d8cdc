"""Loss-scaling fixes, executed: the weight update of a few real training steps.

Each fixture prints ``UPDATE <mean |delta kernel|>``. It runs as written (under
mixed_float16), after ``mplint --fix`` on a copy, and with its policy switched
to float32 as the reference (a safe fix keeps float32 behaviour). Every run is a subprocess, so policies never leak.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from mplint.testing import copy_tree
from mplint.verify.warm import run_python

pytest.importorskip("tensorflow")

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"
LOSS_SCALE = 2.0**15


def _run(script: Path, extra_env: dict | None = None) -> float:
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3", **(extra_env or {})}
    done = run_python([script.name], module="tensorflow", cwd=script.parent, env=env)
    assert done.returncode == 0, done.stderr[-3000:]
    lines = [line for line in done.stdout.splitlines() if line.startswith("UPDATE ")]
    assert lines, done.stdout
    return float(lines[-1].split()[1])


def _updates(fixture: str, tmp_path: Path, rules: str, env: dict | None = None) -> tuple[float, float, float]:
    """(as written, after mplint --fix, float32 reference)."""
    work = tmp_path / fixture
    copy_tree(FIXTURES / fixture, work)
    script = work / "train.py"
    original = script.read_text(encoding="utf-8")
    before = _run(script, env)
    fixed = subprocess.run(
        [sys.executable, "-m", "mplint", "--fix", "--select", rules, str(work)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert fixed.returncode == 0, fixed.stdout + fixed.stderr  # everything found was fixed
    assert script.read_text(encoding="utf-8") != original
    after = _run(script, env)
    reference = work / "train_float32.py"  # the fixed code keeps float32 behaviour, so it is the reference
    reference.write_text(script.read_text(encoding="utf-8").replace('"mixed_float16"', '"float32"'), encoding="utf-8")
    return before, after, _run(reference, env)


def test_keras3_train_step_override_trains_at_full_speed_after_fix(tmp_path):
    before, after, float32 = _updates("train_step_override", tmp_path, "MP202")
    assert 0.5 < before * LOSS_SCALE / float32 < 2  # apply() divided an unscaled gradient: ~1/32768
    assert 0.5 < after / float32 < 2  # float16 noise moves the update a little; 32768x is what breaks training


def test_keras2_loop_unscales_after_fix(tmp_path):
    pytest.importorskip("tf_keras")
    before, after, float32 = _updates("keras2_custom_loop", tmp_path, "MP202", {"TF_USE_LEGACY_KERAS": "1"})
    assert 0.5 < before / (float32 * LOSS_SCALE) < 2  # scaled gradients applied as they were: ~32768x
    assert 0.5 < after / float32 < 2


def test_library_train_step_override_trains_at_full_speed_after_fix(tmp_path):
    """The override lives in a library package (robustfit/models.py); the example script only compiles and
    fits it under mixed_float16. The fix lands in the library, and the example then trains like float32. A float32
    user of the library trains exactly as before: Keras 3's ``scale_loss`` is a method of every optimizer (a no-op
    without loss scaling), so the fix needs no test of the optimizer's type."""
    work = tmp_path / "fit_library"
    copy_tree(FIXTURES / "fit_library", work)
    library = work / "robustfit" / "models.py"
    original = library.read_text(encoding="utf-8")
    before = _run(work / "train.py")
    reference = work / "train_float32.py"
    reference.write_text(
        (work / "train.py").read_text(encoding="utf-8").replace('"mixed_float16"', '"float32"'), encoding="utf-8"
    )
    float32_before = _run(reference)
    fixed = subprocess.run(
        [sys.executable, "-m", "mplint", "--fix", "--select", "MP202", str(work)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert fixed.returncode == 0, fixed.stdout + fixed.stderr
    assert library.read_text(encoding="utf-8") == original.replace(
        "            loss = self.compute_loss(y=y, y_pred=y_pred)\n",
        "            loss = self.compute_loss(y=y, y_pred=y_pred)\n            scaled_loss = self.optimizer.scale_loss(loss)\n",
    ).replace("tape.gradient(loss, ", "tape.gradient(scaled_loss, ")
    after = _run(work / "train.py")
    float32 = _run(reference)
    assert 0.5 < before * LOSS_SCALE / float32 < 2
    assert 0.5 < after / float32 < 2
    assert float32 == float32_before


# A published Keras 2 library (TF 2.9-2.15 pinned) whose model class overrides train_step with a sharpness-aware
# update: an ascent step on the gradients of one tape, then the update from a second tape at the perturbed weights.
# Neither tape scales the loss, so under compile()'s automatic LossScaleOptimizer (mixed_float16) small float16
# gradients underflow. Its users train it under either policy.
SAM_LIBRARY = {
    "pyproject.toml": '[project]\nname = "samfit"\nversion = "0.3.0"\ndependencies = ["tensorflow>=2.9,<2.16"]\n',
    "samfit/__init__.py": "from samfit.models import SAMModel\n",
    "samfit/models.py": '''"""A model trained by sharpness-aware minimization; users compile and fit it."""

import tensorflow as tf


class SAMModel(tf.keras.Model):
    rho = 0.05

    def train_step(self, data):
        x, y = data
        with tf.GradientTape() as tape:
            loss = self.compiled_loss(y, self(x, training=True))
        gradients = tape.gradient(loss, self.trainable_variables)
        norm = tf.linalg.global_norm(gradients)
        perturbations = [g * (self.rho / (norm + 1e-6)) for g in gradients]
        for variable, perturbation in zip(self.trainable_variables, perturbations):
            variable.assign_add(perturbation)
        with tf.GradientTape() as tape:
            loss = self.compiled_loss(y, self(x, training=True))
        gradients = tape.gradient(loss, self.trainable_variables)
        for variable, perturbation in zip(self.trainable_variables, perturbations):
            variable.assign_sub(perturbation)
        self.optimizer.apply_gradients(zip(gradients, self.trainable_variables))
        return {"loss": loss}
''',
    # A user's script: the loss is small enough that its gradients underflow in float16 without loss scaling.
    "train.py": """import os

os.environ["TF_USE_LEGACY_KERAS"] = "1"

import numpy as np
import tensorflow as tf

from samfit import SAMModel

tf.keras.mixed_precision.set_global_policy("mixed_float16")
tf.keras.utils.set_random_seed(0)

rng = np.random.default_rng(0)
x = rng.normal(size=(256, 16)).astype("float32")
y = (x @ rng.normal(size=(16, 1)) + 0.1 * rng.normal(size=(256, 1))).astype("float32")

inputs = tf.keras.Input((16,))
hidden = tf.keras.layers.Dense(32, activation="relu")(inputs)
model = SAMModel(inputs, tf.keras.layers.Dense(1, dtype="float32")(hidden))
model.compile(optimizer=tf.keras.optimizers.SGD(1e4), loss=lambda t, p: 1e-8 * tf.reduce_mean(tf.square(t - p)))

kernel = model.layers[1].kernel
before = np.array(kernel.numpy())
model.fit(x, y, batch_size=64, epochs=1, verbose=0)
print(f"UPDATE {np.mean(np.abs(kernel.numpy() - before)):.6e}")
""",
}

SAM_FIXED = """        with tf.GradientTape() as tape:
            loss = self.compiled_loss(y, self(x, training=True))
            if hasattr(self.optimizer, "get_scaled_loss"):
                scaled_loss = self.optimizer.get_scaled_loss(loss)
            else:
                scaled_loss = loss
        gradients = tape.gradient(scaled_loss, self.trainable_variables)
        if hasattr(self.optimizer, "get_scaled_loss"):
            gradients = self.optimizer.get_unscaled_gradients(gradients)
        for variable, perturbation in zip(self.trainable_variables, perturbations):
            variable.assign_sub(perturbation)
"""


def test_keras2_library_train_step_scales_for_mixed_users_and_keeps_float32_users_after_fix(tmp_path):
    """MP202's fix in a Keras 2 library runs under a test of the optimizer's type: users under mixed_float16
    (compile() wraps their optimizer) get scaled, unscaled gradients; float32 users, whose optimizer has no
    get_scaled_loss, train exactly as before. Executed on Keras 2 (tf_keras) under both policies."""
    pytest.importorskip("tf_keras")
    work = tmp_path / "sam_library"
    for name, text in SAM_LIBRARY.items():
        (work / name).parent.mkdir(parents=True, exist_ok=True)
        (work / name).write_text(text, encoding="utf-8")
    float32_script = work / "train_float32.py"
    float32_script.write_text(SAM_LIBRARY["train.py"].replace('"mixed_float16"', '"float32"'), encoding="utf-8")
    library = work / "samfit" / "models.py"
    before, float32_before = _run(work / "train.py"), _run(float32_script)
    fixed = subprocess.run(
        [sys.executable, "-m", "mplint", "--fix", "--select", "MP202", str(work)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert fixed.returncode == 0, fixed.stdout + fixed.stderr
    second_tape = SAM_LIBRARY["samfit/models.py"].split("        with tf.GradientTape() as tape:\n")[2]
    assert library.read_text(encoding="utf-8") == SAM_LIBRARY["samfit/models.py"].replace(
        "        with tf.GradientTape() as tape:\n" + second_tape.split("        self.optimizer")[0], SAM_FIXED
    )
    after, float32_after = _run(work / "train.py"), _run(float32_script)
    assert before < float32_before / 100  # unscaled: the first kernel's float16 gradients underflow
    assert 0.5 < after / float32_before < 2  # scaled and unscaled: trains like float32
    assert float32_after == float32_before  # the float32 user's optimizer is no LossScaleOptimizer: untouched
