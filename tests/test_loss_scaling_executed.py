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
    fits it under mixed_float16. The fix lands in the library, and the example then trains like float32."""
    work = tmp_path / "fit_library"
    copy_tree(FIXTURES / "fit_library", work)
    library = work / "robustfit" / "models.py"
    original = library.read_text(encoding="utf-8")
    before = _run(work / "train.py")
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
    reference = work / "train_float32.py"
    reference.write_text(
        (work / "train.py").read_text(encoding="utf-8").replace('"mixed_float16"', '"float32"'), encoding="utf-8"
    )
    float32 = _run(reference)
    assert 0.5 < before * LOSS_SCALE / float32 < 2
    assert 0.5 < after / float32 < 2
