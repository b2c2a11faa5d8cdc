"""MP501/MP502 through the CLI: the target generation decides, and the fixed scripts run on Keras 3."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from mplint.cli import main
from mplint.testing import copy_tree, lint_code
from mplint.verify.warm import run_python

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"

KERAS2_LOOP = """\
import tensorflow as tf

optimizer = tf.keras.mixed_precision.LossScaleOptimizer(tf.keras.optimizers.Adam())


def step(tape, loss, variables):
    grads = tape.gradient(optimizer.get_scaled_loss(loss), variables)
    grads = optimizer.get_unscaled_gradients(grads)
    optimizer.apply_gradients(zip(grads, variables))
"""
KERAS2_LOOP_FINDINGS = [("MP502", 7, 37), ("MP502", 8, 23)]

G1_SCRIPT = """\
from tensorflow.keras.mixed_precision import experimental as mixed_precision

mixed_precision.set_policy("mixed_float16")
"""


def _project(root: Path, code: str, **files: str) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    (root / ".mplint.yaml").write_text("{}\n", encoding="utf-8")
    for name, text in files.items():
        (root / name).write_text(text, encoding="utf-8")
    (root / "train.py").write_text(code, encoding="utf-8")
    return root


def _check(capsys, *args: str) -> tuple[int, dict]:
    capsys.readouterr()
    code = main([*args, "--format", "json"])
    return code, json.loads(capsys.readouterr().out)


def _found(report: dict) -> list[tuple[str, int, int]]:
    return [(d["rule"], d["start"]["line"], d["start"]["column"]) for d in report["diagnostics"]]


def test_keras3_by_default_reports_keras2_loss_scale_api(tmp_path, capsys):
    project = _project(tmp_path / "p", KERAS2_LOOP)
    code, report = _check(capsys, str(project), "--select", "MP502")
    assert code == 1
    assert _found(report) == KERAS2_LOOP_FINDINGS
    assert {d["context"]["keras_generation"] for d in report["diagnostics"]} == {3}
    assert report["projects"][0]["keras_generation"] is None  # no pin: each program's own imports decide


def test_keras2_option_silences_mp502(tmp_path, capsys):
    project = _project(tmp_path / "p", KERAS2_LOOP)
    code, report = _check(capsys, str(project), "--select", "MP502", "--keras", "2")
    assert (code, _found(report)) == (0, [])


def test_requirements_pin_below_2_16_silences_mp502(tmp_path, capsys):
    project = _project(tmp_path / "p", KERAS2_LOOP, **{"requirements.txt": "numpy\ntensorflow<2.16\n"})
    code, report = _check(capsys, str(project), "--select", "MP502")
    assert (code, _found(report)) == (0, [])
    assert report["projects"][0]["keras_generation"] == {
        "value": 2,
        "oldest": 1,
        "label": "G1 (TF 2.1-2.3) or Keras 2 (TF 2.0-2.15)",
        "source": "requirements.txt pins tensorflow<2.16",
    }


def test_pyproject_dependency_keeps_mp502(tmp_path, capsys):
    pyproject = '[project]\nname = "trainer"\ndependencies = ["tensorflow>=2.16", "numpy"]\n'
    project = _project(tmp_path / "p", KERAS2_LOOP, **{"pyproject.toml": pyproject})
    code, report = _check(capsys, str(project), "--select", "MP502")
    assert code == 1
    assert _found(report) == KERAS2_LOOP_FINDINGS
    assert all("pyproject.toml pins tensorflow>=2.16" in d["message"] for d in report["diagnostics"])


def test_tf23_pin_silences_mp501_and_config_overrides_it(tmp_path, capsys):
    project = _project(tmp_path / "p", G1_SCRIPT, **{"requirements.txt": "tensorflow==2.3.0\n"})
    code, report = _check(capsys, str(project), "--select", "MP501")
    assert (code, _found(report), report["projects"][0]["keras_generation"]["value"]) == (0, [], 1)
    code, report = _check(capsys, str(project), "--select", "MP501", "--keras", "3")
    assert (code, _found(report)) == (1, [("MP501", 1, 1)])
    assert "keras = 3" in report["diagnostics"][0]["message"]


def test_fixed_scale_under_keras3_holds_back_the_import_rewrite(tmp_path, capsys):
    code_text = (
        "import tensorflow as tf\n"
        "from tensorflow.keras.mixed_precision import experimental as mixed_precision\n"
        "\n"
        "opt = mixed_precision.LossScaleOptimizer(tf.keras.optimizers.SGD(), 128)\n"
    )
    project = _project(tmp_path / "p", code_text)
    code, report = _check(capsys, str(project), "--select", "MP501", "--fix")
    assert code == 1
    assert (project / "train.py").read_text(encoding="utf-8") == code_text
    assert _found(report) == [("MP501", 2, 1), ("MP501", 4, 69)]
    assert "loss_scale_factor=128" in report["diagnostics"][1]["message"]


@pytest.mark.parametrize(
    "scenario,expected",
    [
        (
            "tf23_legacy_script",
            [
                "from tensorflow.keras import mixed_precision",
                "set_global_policy(policy)",
                "LossScaleOptimizer(tf.keras.optimizers.Adam(1e-3))",
                "gradients = scaled_gradients",
                "optimizer.scale_loss(loss)",
                "float(optimizer.dynamic_scale)",
            ],
        ),
        ("keras2_loop_on_keras3", ["optimizer.scale_loss(loss)", "float(optimizer.dynamic_scale)"]),
    ],
)
def test_fixed_fixture_runs_on_keras3(scenario, expected, tmp_path, capsys):
    tf = pytest.importorskip("tensorflow")
    if int(tf.keras.__version__.split(".")[0]) < 3:
        pytest.skip("needs Keras 3 behind tf.keras")
    project = tmp_path / scenario
    copy_tree(FIXTURES / scenario, project)
    script = project / "train.py"
    code, report = _check(capsys, str(project), "--select", "MP501,MP502")
    assert code == 1 and {d["rule"] for d in report["diagnostics"]} >= {"MP502"}

    code, report = _check(capsys, str(project), "--select", "MP501,MP502", "--fix")
    assert (code, report["diagnostics"]) == (0, [])
    fixed = script.read_text(encoding="utf-8")
    for text in expected:
        assert text in fixed
    for gone in ("experimental", "set_policy(", "get_scaled_loss", "get_unscaled_gradients", "loss_scale()"):
        assert gone not in fixed
    assert "grads = optimizer.get_unscaled_gradients(grads)" not in fixed

    env = {**os.environ, "TRAIN_STEPS": "3", "CUDA_VISIBLE_DEVICES": "", "TF_CPP_MIN_LOG_LEVEL": "2"}
    run = run_python([str(script)], module="tensorflow", cwd=project, env=env)
    assert run.returncode == 0, run.stderr[-3000:]
    assert "step 2 loss" in run.stdout
    assert "loss scale 32768" in run.stdout


def test_unfixed_tf23_script_fails_on_keras3(tmp_path):
    pytest.importorskip("tensorflow")
    env = {**os.environ, "TRAIN_STEPS": "1", "CUDA_VISIBLE_DEVICES": "", "TF_CPP_MIN_LOG_LEVEL": "2"}
    script = FIXTURES / "tf23_legacy_script" / "train.py"
    run = run_python([str(script)], module="tensorflow", cwd=tmp_path, env=env)
    assert run.returncode != 0
    assert "ImportError" in run.stderr and "experimental" in run.stderr


EXPERIMENTAL_LOOP = """\
import tensorflow as tf

opt = tf.keras.mixed_precision.experimental.LossScaleOptimizer(tf.keras.optimizers.Adam(), "dynamic")


def step(tape, loss, variables):
    grads = tape.gradient(opt.get_scaled_loss(loss), variables)
    opt.apply_gradients(zip(opt.get_unscaled_gradients(grads), variables))


step(None, None, None)
"""


def test_keras2_scaling_beside_the_experimental_api_is_mp501s_migration_not_an_mp502_finding(tmp_path, capsys):
    # Code that uses TF 2.1-2.3's experimental API never reaches Keras 3 before MP501 migrates it: MP501 alone
    project = _project(tmp_path / "p", EXPERIMENTAL_LOOP)
    code, report = _check(capsys, str(project), "--select", "MP501,MP502")
    assert (code, _found(report)) == (1, [("MP501", 3, 7), ("MP501", 3, 92)])
    # behind a version test, the experimental arm is a shim, and the Keras 2 names outside it are MP502's again
    shim = EXPERIMENTAL_LOOP.replace(
        'opt = tf.keras.mixed_precision.experimental.LossScaleOptimizer(tf.keras.optimizers.Adam(), "dynamic")',
        'if hasattr(tf.keras.mixed_precision, "experimental"):\n'
        '    opt = tf.keras.mixed_precision.experimental.LossScaleOptimizer(tf.keras.optimizers.Adam(), "dynamic")\n'
        "else:\n"
        "    opt = tf.keras.mixed_precision.LossScaleOptimizer(tf.keras.optimizers.Adam())",
    )
    project = _project(tmp_path / "q", shim)
    code, report = _check(capsys, str(project), "--select", "MP502")
    assert (code, _found(report)) == (1, [("MP502", 10, 31), ("MP502", 11, 33)])


def test_a_g1_loss_scale_feeding_the_graph_rewrite_is_told_its_kept_name():
    # A TF 1-style Estimator program: the graph rewrite takes a loss-scale object, never a Keras LossScaleOptimizer
    code = (
        "import tensorflow as tf\n\n\ndef create_optimizer(optimizer, use_fp16):\n    if use_fp16:\n"
        "        loss_scaler = tf.train.experimental.DynamicLossScale(initial_loss_scale=2**15)\n"
        "        optimizer = tf.train.experimental.enable_mixed_precision_graph_rewrite(optimizer, loss_scaler)\n"
        "    return optimizer\n"
    )
    found = lint_code(code, select=["MP501"], files={"requirements.txt": "tensorflow==2.5.0\n"}).diagnostics
    assert [(d.line, d.column, d.fix_safety.value) for d in found] == [(6, 23, "none")]
    assert found[0].message == (
        "`DynamicLossScale` is a G1 loss-scale object, deprecated from TF 2.4 under this name: "
        "the graph rewrite it feeds takes no Keras `LossScaleOptimizer`; use the name TF keeps for it, "
        "`tf.compat.v1.mixed_precision.DynamicLossScale` (target Keras 2 (TF 2.5), from requirements.txt pins "
        "tensorflow==2.5.0)"
    )
