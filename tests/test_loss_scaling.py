"""MP201-MP207 on the fixture projects and on the shapes the YAML examples do not cover."""

from __future__ import annotations

from pathlib import Path

import pytest

from mplint.diagnostics import FixSafety
from mplint.runner import RunOptions, run
from mplint.testing import copy_tree, lint_code

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"

EXPECTED = {
    "keras3_custom_loop": [("MP201", 33, 5)],
    "keras2_custom_loop": [("MP202", 41, 5)],
    "train_step_override": [("MP202", 24, 21)],
    "gan": [("MP204", 41, 22), ("MP201", 42, 9)],
    "optimizer_factory": [("MP202", 15, 21)],
    "scaling_helpers": [("MP202", 32, 17)],
}


def _project(fixture: str, tmp_path: Path) -> Path:
    work = tmp_path / fixture  # outside the repository, whose config excludes fixtures/
    copy_tree(FIXTURES / fixture, work)
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


@pytest.mark.parametrize("with_example", [True, False])
def test_library_train_step_override_is_reported_with_or_without_a_mixed_precision_program(with_example, tmp_path):
    """With the example script that fits it under mixed_float16 the library is in MP context; without it
    (tests only) it is library context, which every user may compile under mixed_float16 on Keras 3."""
    work = _project("fit_library", tmp_path)
    if not with_example:
        (work / "train.py").unlink()
    found = run(RunOptions(paths=[work], select=["MP2"], cache=False))
    assert [(Path(d.path).name, d.rule_id, d.line, d.column) for d in found.remaining] == [
        ("models.py", "MP202", 13, 21)
    ]
    assert found.remaining[0].message.startswith(
        "compile() wraps" if with_example else "in library code, compile() wraps"
    )


def test_optimizer_from_another_module_is_read_through_its_summary(tmp_path):
    """``build_optimizer`` of trainer/optim.py returns a LossScaleOptimizer: the loop in trainer/loop.py is
    MP202 (loss never scaled), not MP201, whose fix would wrap the optimizer a second time."""
    work = _project("optimizer_factory", tmp_path)
    found = run(RunOptions(paths=[work], select=["MP2"], cache=False))
    [diagnostic] = found.remaining
    assert diagnostic.message.startswith("the optimizer is a LossScaleOptimizer (returned by `build_optimizer` at ")
    assert "trainer/optim.py:6), but the loss is never scaled" in diagnostic.message


def test_loss_scaled_by_helpers_of_another_module(tmp_path):
    """trainer/amp.py scales and unscales; the loop that calls both is correct, the one that only unscales
    differentiates the unscaled loss (before the "loss_scaling" summaries both loops were MP202)."""
    work = _project("scaling_helpers", tmp_path)
    found = run(RunOptions(paths=[work], select=["MP2"], cache=False))
    [diagnostic] = found.remaining
    assert (diagnostic.line, diagnostic.message) == (
        32,
        (
            "the optimizer is a LossScaleOptimizer; the gradients are unscaled but the tape differentiates the "
            "unscaled loss: updates 32768x too small"
        ),
    )
    fixed = run(RunOptions(paths=[work], select=["MP2"], fix=True, cache=False))
    assert fixed.fixed_count == 1
    assert (work / "train.py").read_text(encoding="utf-8").splitlines()[30:33] == [
        "        loss = tf.reduce_mean(tf.abs(model(x, training=True) - y))",
        "        scaled_loss = optimizer.get_scaled_loss(loss)",
        "    gradients = tape.gradient(scaled_loss, model.trainable_variables)",
    ]


@pytest.mark.parametrize("keras", [2, 3])
@pytest.mark.parametrize(
    "imports, scaled_by, unscaled_by",
    [
        ("import amp", "amp.scale", "amp.unscale"),
        ("from amp import scale as scaled_for, unscale", "scaled_for", "unscale"),  # as the calling module names them
    ],
)
def test_helper_of_another_module_that_scales_the_loss_is_no_missing_scaling(keras, imports, scaled_by, unscaled_by):
    scale = "get_scaled_loss" if keras == 2 else "scale_loss"
    files = {
        "amp.py": f"def scale(optimizer, loss):\n    return optimizer.{scale}(loss)\n\n"
        "def unscale(optimizer, grads):\n    return optimizer.get_unscaled_gradients(grads)\n"
    }
    unscale = f"    grads = {unscaled_by}(optimizer, grads)\n" if keras == 2 else ""
    code = (
        f"import tensorflow as tf\n{imports}\n\n"
        'tf.keras.mixed_precision.set_global_policy("mixed_float16")\n'
        "model = tf.keras.Sequential([tf.keras.layers.Dense(8, dtype='float32')])\n"
        "optimizer = tf.keras.mixed_precision.LossScaleOptimizer(tf.keras.optimizers.Adam())\n\n"
        "def step(x, y):\n"
        "    with tf.GradientTape() as tape:\n"
        "        loss = tf.reduce_mean(tf.square(model(x) - y))\n"
        f"        scaled = {scaled_by}(optimizer, loss)\n"
        "    grads = tape.gradient(scaled, model.trainable_variables)\n"
        + unscale
        + "    optimizer.apply_gradients(zip(grads, model.trainable_variables))\n"
    )
    assert lint_code(code, path="train.py", files=files, keras=keras, select=["MP2"]).diagnostics == []
    # the same loop without the helper's scaling: the unscaled loss is differentiated
    plain = code.replace(f"{scaled_by}(optimizer, loss)", "loss")
    found = lint_code(plain, path="train.py", files=files, keras=keras, select=["MP2"]).diagnostics
    assert [(d.rule_id, d.line, d.column) for d in found] == [("MP202", 12, 13)]


def test_loss_scaling_summaries():
    import ast

    from mplint.checks.loss_scaling.optimizer_summaries import LOSS_SCALING
    from mplint.engine.summaries import Summary

    code = (
        "def scale(opt, loss):\n    return opt.get_scaled_loss(loss)\n"
        "def scale3(opt, loss):\n    return opt.scale_loss(loss)\n"
        "def unscale(opt, grads):\n    return opt.get_unscaled_gradients(grads)\n"
        "def divide(opt, grads):\n    return [g / opt.loss_scale for g in grads]\n"
        "def step(opt, loss, grads):\n    return opt.get_scaled_loss(loss), opt.get_unscaled_gradients(grads)\n"
        "def nested():\n    def inner(opt, loss):\n        return opt.get_scaled_loss(loss)\n    return inner\n"
        "def plain(loss):\n    return loss * 2\n"
    )
    assert LOSS_SCALING.summarize(ast.parse(code).body, code.encode()) == {
        "scale": Summary("scale", -1, None, 1, 1),
        "scale3": Summary("scale", -1, None, 3, 1),
        "unscale": Summary("unscale", -1, None, 5, 1),
        "divide": Summary("manual_unscale", -1, None, 7, 1),
        "step": Summary("scale+unscale", -1, None, 9, 1),
    }


def test_plain_optimizer_from_another_module_is_wrapped_where_the_loop_gets_it():
    files = {
        "optim.py": "import tensorflow as tf\n\ndef build_optimizer(lr):\n    return tf.keras.optimizers.Adam(lr)\n"
    }
    code = (
        "import tensorflow as tf\nfrom optim import build_optimizer\n\n"
        'tf.keras.mixed_precision.set_global_policy("mixed_float16")\n'
        "model = tf.keras.Sequential([tf.keras.layers.Dense(8, dtype='float32')])\n"
        "optimizer = build_optimizer(1e-3)\n\n"
        "def step(x, y):\n"
        "    with tf.GradientTape() as tape:\n"
        "        loss = tf.reduce_mean(tf.square(model(x) - y))\n"
        "    grads = tape.gradient(loss, model.trainable_variables)\n"
        "    optimizer.apply_gradients(zip(grads, model.trainable_variables))\n"
    )
    found = lint_code(code, path="train.py", files=files, keras=2, select=["MP201", "MP202"])
    assert [(d.rule_id, d.line, d.column) for d in found.diagnostics] == [("MP201", 12, 5)]
    assert found.diagnostics[0].message.endswith("(`build_optimizer` at optim.py:3 returns a plain optimizer)")
    fixed = lint_code(code, path="train.py", files=files, keras=2, select=["MP201"], fix=True).fixed_code
    assert "optimizer = tf.keras.mixed_precision.LossScaleOptimizer(build_optimizer(1e-3))\n" in fixed
    assert "scaled_loss = optimizer.get_scaled_loss(loss)" in fixed


def test_gan_fix_wraps_the_generator_optimizer_at_its_call_site(tmp_path):
    work = _project("gan", tmp_path)
    run(RunOptions(paths=[work], select=["MP2"], fix=True))
    text = (work / "train.py").read_text(encoding="utf-8")
    assert (
        "gan = GAN(generator, discriminator, keras.optimizers.LossScaleOptimizer(keras.optimizers.Adam(2e-4)), keras.optimizers.Adam(2e-4, global_clipnorm=5.0))"
        in text
    )
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


# --- paths: flags, conditional expressions and optimizer tests ------------------------------------------

KERAS2_HEAD = (
    "import tensorflow as tf\n"
    "from tensorflow.keras import mixed_precision\n\n"
    'mixed_precision.set_global_policy("mixed_float16")\n'
    "optimizer = mixed_precision.LossScaleOptimizer(tf.keras.optimizers.Adam())\n\n\n"
    "def train_step(model, x, y, amp):\n"
    "    with tf.GradientTape() as tape:\n"
    "        loss = tf.reduce_mean(tf.square(y - model(x)))\n"
)


def _found(code: str, keras: int) -> list[tuple[str, int, int, str, FixSafety]]:
    out = lint_code(code, keras=keras, select=["MP2"]).diagnostics
    return [(d.rule_id, d.line, d.column, d.message, d.fix_safety) for d in out]


def test_the_message_names_the_path_that_is_not_scaled():
    code = KERAS2_HEAD + (
        "        scaled_loss = optimizer.get_scaled_loss(loss) if amp else loss\n"
        "    grads = tape.gradient(scaled_loss, model.trainable_variables)\n"
        "    grads = optimizer.get_unscaled_gradients(grads)\n"
        "    optimizer.apply_gradients(zip(grads, model.trainable_variables))\n"
    )
    assert _found(code, 2) == [
        (
            "MP202",
            12,
            13,
            "the optimizer is a LossScaleOptimizer; when `amp` is false, the gradients are unscaled but the tape "
            "differentiates the unscaled loss: updates 32768x too small",
            FixSafety.NONE,
        )
    ]


def test_both_flag_gated_steps_are_silent_and_one_missing_step_is_named():
    both = KERAS2_HEAD + (
        "        if amp:\n"
        "            loss = optimizer.get_scaled_loss(loss)\n"
        "    grads = tape.gradient(loss, model.trainable_variables)\n"
        "    if amp:\n"
        "        grads = optimizer.get_unscaled_gradients(grads)\n"
        "    optimizer.apply_gradients(zip(grads, model.trainable_variables))\n"
    )
    assert _found(both, 2) == []
    missing = both.replace("    if amp:\n        grads = optimizer.get_unscaled_gradients(grads)\n", "")
    [(rule, line, column, message, _)] = _found(missing, 2)
    assert (rule, line, column) == ("MP202", 14, 5)
    assert (
        "when `amp` is true, the tape differentiates the scaled loss but get_unscaled_gradients is never called"
        in message
    )


def test_negated_flags_and_elif_chains():
    code = KERAS2_HEAD + (
        "        if not amp:\n"
        "            scaled = loss\n"
        "        elif FLAGS.loss_scale == 'dynamic':\n"
        "            scaled = optimizer.get_scaled_loss(loss)\n"
        "        else:\n"
        "            scaled = loss * 128.0\n"
        "    grads = tape.gradient(scaled, model.trainable_variables)\n"
        "    if amp:\n"
        "        grads = optimizer.get_unscaled_gradients(grads)\n"
        "    optimizer.apply_gradients(zip(grads, model.trainable_variables))\n"
    )
    [(rule, line, column, message, _)] = _found(code, 2)
    assert (rule, line, column) == ("MP202", 17, 13)
    assert "when `amp` is true and `FLAGS.loss_scale == 'dynamic'` is false, the gradients are unscaled" in message


def test_isinstance_on_another_optimizer_does_not_decide_this_one():
    code = KERAS2_HEAD + (
        "    if isinstance(other_optimizer, mixed_precision.LossScaleOptimizer):\n"
        "        loss = optimizer.get_scaled_loss(loss)\n"
        "    grads = tape.gradient(loss, model.trainable_variables)\n"
        "    optimizer.apply_gradients(zip(grads, model.trainable_variables))\n"
    )
    found = _found(code, 2)
    assert [(rule, line) for rule, line, *_ in found] == [("MP202", 13), ("MP202", 14)]
    assert (
        "but when `isinstance(other_optimizer, LossScaleOptimizer)` is false, the loss is never scaled" in found[0][3]
    )
    assert (
        "when `isinstance(other_optimizer, LossScaleOptimizer)` is true, the tape differentiates the scaled loss"
        in found[1][3]
    )


def test_optimizer_from_a_call_handed_float16_options_may_be_wrapped():
    """transformer_main.py's shape: configure_optimizer(opt, use_float16=...) may return a LossScaleOptimizer;
    a loop that never scales is broken either way (MP202, not MP201's "not a LossScaleOptimizer")."""
    code = (
        "import tensorflow as tf\n"
        "from official.modeling import performance\n\n"
        'tf.keras.mixed_precision.set_global_policy("mixed_float16")\n\n\n'
        "class Task:\n"
        "    def _create_optimizer(self):\n"
        "        opt = tf.keras.optimizers.Adam(1e-3)\n"
        "        opt = performance.configure_optimizer(opt, use_float16=self.dtype == 'float16')\n"
        "        return opt\n\n"
        "    def train(self, model, x, y):\n"
        "        opt = self._create_optimizer()\n"
        "        with tf.GradientTape() as tape:\n"
        "            loss = tf.reduce_mean(tf.square(y - model(x)))\n"
        "        grads = tape.gradient(loss, model.trainable_variables)\n"
        "        opt.apply_gradients(zip(grads, model.trainable_variables))\n"
    )
    [(rule, line, column, message, safety)] = _found(code, 2)
    assert (rule, line, column, safety) == ("MP202", 17, 17, FixSafety.NONE)
    assert message.startswith(
        "the optimizer comes from `performance.configure_optimizer(...)`, which is handed float16 "
        "options and may wrap it in a LossScaleOptimizer, but the loss is never scaled"
    )
    scaled = code.replace(
        "        grads = tape.gradient(loss, model.trainable_variables)\n",
        "            scaled_loss = opt.get_scaled_loss(loss)\n"
        "        grads = opt.get_unscaled_gradients(tape.gradient(scaled_loss, model.trainable_variables))\n",
    )
    assert _found(scaled, 2) == []
    plain = code.replace(
        "        opt = performance.configure_optimizer(opt, use_float16=self.dtype == 'float16')\n", ""
    )
    assert [(r, line) for r, line, *_ in _found(plain, 2)] == [("MP201", 17)]


def test_too_many_flags_fall_back_to_one_path_without_a_fix():
    flags = "".join(f"        if f{i}:\n            loss = loss + 0.0\n" for i in range(8))
    code = (
        KERAS2_HEAD
        + flags
        + (
            "    grads = tape.gradient(loss, model.trainable_variables)\n"
            "    optimizer.apply_gradients(zip(grads, model.trainable_variables))\n"
        )
    )
    assert [(r, line, safety) for r, line, _, _, safety in _found(code, 2)] == [("MP202", 27, FixSafety.NONE)]


def test_optimizer_factory_summaries():
    import ast

    from mplint.checks.loss_scaling.optimizer_summaries import OPTIMIZER
    from mplint.engine.summaries import Summary

    code = (
        "import tensorflow as tf\n"
        "def wrapped(lr):\n    return tf.keras.mixed_precision.LossScaleOptimizer(tf.keras.optimizers.Adam(lr))\n"
        "def configure_optimizer(optimizer, use_float16=False):\n"
        "    if use_float16:\n        optimizer = tf.keras.mixed_precision.LossScaleOptimizer(optimizer)\n"
        "    return optimizer\n"
        "def plain(lr):\n    opt = tf.keras.optimizers.SGD(lr)\n    return opt\n"
        "def build_optimizer(config):\n    return registry[config.name](config)\n"
        "def build_model(n):\n    return tf.keras.Sequential()\n"
        "def v1_optimizer(opt):\n    return tf.keras.mixed_precision.LossScaleOptimizerV1(opt, 'dynamic')\n"
    )
    assert OPTIMIZER.summarize(ast.parse(code).body, code.encode()) == {
        "wrapped": Summary("explicit", -1, None, 2, 1),
        "configure_optimizer": Summary("maybe", -1, None, 4, 1),
        "plain": Summary("none", -1, None, 8, 1),
        "build_optimizer": Summary("unknown", -1, None, 11, 1),
        "v1_optimizer": Summary("unknown", -1, None, 15, 1),  # a loss-scale optimizer too: never "none", wrapped again
    }


_PERFORMANCE = """def get_loss_scale(flags_obj, default_for_fp16):
    if flags_obj.loss_scale == "dynamic":
        return flags_obj.loss_scale
    elif flags_obj.loss_scale is not None:
        return float(flags_obj.loss_scale)
    return default_for_fp16
"""
_RUNNABLE = """import tensorflow as tf
from tf2_common.utils.flags import core as flags_core

tf.keras.mixed_precision.experimental.set_policy("mixed_float16")


class Runnable:
    def __init__(self, flags_obj, optimizer):
        if flags_obj.dtype == "fp16":
            loss_scale = flags_core.get_loss_scale(flags_obj, {passed})
            self.optimizer = tf.keras.mixed_precision.experimental.LossScaleOptimizer(optimizer, loss_scale)
        elif flags_obj.fp16_implementation == "graph_rewrite":
            loss_scale = flags_core.get_loss_scale(flags_obj, default_for_fp16="dynamic")
            self.optimizer = tf.keras.mixed_precision.experimental.LossScaleOptimizer(optimizer, loss_scale)
"""


@pytest.mark.parametrize("folder", ["", "resnet-tf2/tensorflow2/"])
@pytest.mark.parametrize(
    "passed, expected",
    [
        ("default_for_fp16=128", [(11, 98, "128")]),
        ("128", [(11, 98, "128")]),
        ('default_for_fp16="dynamic"', []),
    ],
)
def test_a_helper_that_returns_the_number_its_caller_passes_is_a_fixed_loss_scale(folder, passed, expected):
    """mlcommons' resnet-tf2: ``get_loss_scale`` of ``tf2_common/utils/flags/_performance.py`` returns its
    ``default_for_fp16`` unless ``--loss_scale`` is given; ``flags/core.py`` passes it on by an assignment and
    ``tf2_common/`` and ``utils/`` have no ``__init__.py``. The scale is then fixed at 128. In a sub-folder of the
    repository, ``tf2_common`` is found only from the folder of the script that runs (``main.py``)."""
    files = {
        f"{folder}tf2_common/utils/flags/__init__.py": "",
        f"{folder}tf2_common/utils/flags/_performance.py": _PERFORMANCE,
        f"{folder}tf2_common/utils/flags/core.py": "from tf2_common.utils.flags import _performance\n\n"
        "get_loss_scale = _performance.get_loss_scale\n",
        f"{folder}main.py": "import runnable\n\nif __name__ == '__main__':\n    runnable.Runnable(None, None)\n",
    }
    code = _RUNNABLE.format(passed=passed)
    found = lint_code(code, path=f"{folder}runnable.py", files=files, select=["MP205"]).diagnostics
    assert [(d.line, d.column) for d in found] == [(line, column) for line, column, _ in expected]
    for diagnostic, (_, _, number) in zip(found, expected):
        assert diagnostic.message == (
            "LossScaleOptimizer with a numeric loss scale: `flags_core.get_loss_scale` can return its "
            f"`default_for_fp16`, {number} here, and the scale then stays {number}: a fixed loss scale overflows "
            "to inf or lets gradients underflow as their range drifts; use dynamic loss scaling"
        )
        assert [(r.path, r.line) for r in diagnostic.related] == [
            (f"{folder}tf2_common/utils/flags/_performance.py", 6)
        ]
