"""MP201-MP207 on the fixture projects and on the shapes the YAML examples do not cover."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from mplint.diagnostics import FixSafety
from mplint.runner import RunOptions, run
from mplint.testing import lint_code

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"

EXPECTED = {
    "keras3_custom_loop": [("MP201", 33, 5)],
    "keras2_custom_loop": [("MP202", 41, 5)],
    "train_step_override": [("MP202", 24, 21)],
    "gan": [("MP204", 41, 22), ("MP201", 42, 9)],
}


def _project(fixture: str, tmp_path: Path) -> Path:
    work = tmp_path / fixture  # outside the repository, whose config excludes fixtures/
    shutil.copytree(FIXTURES / fixture, work)
    return work


@pytest.mark.parametrize("fixture", sorted(EXPECTED))
def test_fixture_findings_and_fix(fixture, tmp_path):
    work = _project(fixture, tmp_path)
    found = run(RunOptions(paths=[work], select=["MP2"]))
    assert [(d.rule_id, d.line, d.column) for d in found.remaining] == EXPECTED[fixture]
    assert all(d.fix_safety is FixSafety.SAFE for d in found.remaining)
    fixed = run(RunOptions(paths=[work], select=["MP2"], fix=True))
    assert fixed.remaining == [] and fixed.fixed_count == len(EXPECTED[fixture])
    text = (work / "train.py").read_text(encoding="utf-8")
    compile(text, "train.py", "exec")
    again = run(RunOptions(paths=[work], select=["MP2"], fix=True))
    assert again.fixed_count == 0 and (work / "train.py").read_text(encoding="utf-8") == text


def test_gan_fix_wraps_the_generator_optimizer_at_its_call_site(tmp_path):
    work = _project("gan", tmp_path)
    run(RunOptions(paths=[work], select=["MP2"], fix=True))
    text = (work / "train.py").read_text(encoding="utf-8")
    assert "gan = GAN(generator, discriminator, keras.optimizers.LossScaleOptimizer(keras.optimizers.Adam(2e-4)), keras.optimizers.Adam(2e-4, global_clipnorm=5.0))" in text
    assert "scaled_g_loss = self.g_optimizer.scale_loss(g_loss)" in text
    assert "clip_by_global_norm" not in text


LOOP = """\
import tensorflow as tf
{imports}
{policy}
optimizer = {optimizer}
{helper}
with tf.GradientTape() as tape:
    loss = tf.reduce_mean(tf.square(y - model(x)))
    scaled_loss = optimizer.get_scaled_loss(loss)
grads = {grads}
optimizer.apply_gradients(zip(grads, model.trainable_variables))
"""


def _loop(grads: str, helper: str = "") -> str:
    return LOOP.format(
        imports="from tensorflow.keras import mixed_precision",
        policy='mixed_precision.set_global_policy("mixed_float16")',
        optimizer="mixed_precision.LossScaleOptimizer(tf.keras.optimizers.Adam())",
        helper=helper,
        grads=grads,
    )


def test_unscale_helper_counts_only_if_it_unscales():
    unscales = "def post(g):\n    return optimizer.get_unscaled_gradients(g)\n"
    other = "def post(g):\n    return [tf.identity(x) for x in g]\n"
    grads = "post(tape.gradient(scaled_loss, model.trainable_variables))"
    assert lint_code(_loop(grads, unscales), keras=2, select=["MP202"]).diagnostics == []
    found = lint_code(_loop(grads, other), keras=2, select=["MP202"]).diagnostics
    assert [(d.rule_id, d.line, d.column) for d in found] == [("MP202", 12, 1)]


def test_keras3_fix_adds_the_keras_import_when_the_file_has_none():
    code = (
        "from tensorflow import GradientTape\n\n"
        "def train(model, optimizer, x, y):\n"
        "    with GradientTape() as tape:\n"
        "        loss = model.compute_loss(x, y)\n"
        "    grads = tape.gradient(loss, model.trainable_variables)\n"
        "    optimizer.apply_gradients(zip(grads, model.trainable_variables))\n\n"
        "train(model, make_optimizer(), x, y)\n"
    )
    out = lint_code(code, keras=3, policy="mixed_float16", select=["MP201"], fix=True)
    assert out.fixed_code.startswith("from tensorflow import GradientTape\nimport keras\n")
    assert "train(model, keras.optimizers.LossScaleOptimizer(make_optimizer()), x, y)" in out.fixed_code
    assert "        scaled_loss = optimizer.scale_loss(loss)\n" in out.fixed_code


def test_no_fix_when_the_loss_is_not_a_name_assigned_in_the_tape():
    code = (
        "import keras\nimport tensorflow as tf\n\n"
        'keras.mixed_precision.set_global_policy("mixed_float16")\n'
        "optimizer = keras.optimizers.LossScaleOptimizer(keras.optimizers.Adam())\n"
        "with tf.GradientTape() as tape:\n"
        "    pred = model(x)\n"
        "grads = tape.gradient(tf.reduce_mean(tf.square(y - pred)), model.trainable_variables)\n"
        "optimizer.apply_gradients(zip(grads, model.trainable_variables))\n"
    )
    found = lint_code(code, keras=3, select=["MP202"]).diagnostics
    assert [(d.rule_id, d.line, d.column, d.fix_safety) for d in found] == [("MP202", 8, 9, FixSafety.NONE)]


def test_unknown_optimizer_is_not_guessed():
    code = (
        "import tensorflow as tf\n\n"
        "def step(model, optimizer, x, y):\n"
        "    with tf.GradientTape() as tape:\n"
        "        loss = model.compute_loss(x, y)\n"
        "    grads = tape.gradient(loss, model.trainable_variables)\n"
        "    optimizer.apply_gradients(zip(grads, model.trainable_variables))\n"
    )
    assert lint_code(code, keras=3, policy="mixed_float16", select=["MP2"]).diagnostics == []
