"""Loss-scaling rules in version-guarded arms: a custom loop written for Keras 3 in one arm and for Keras 2 in the
other, in one file. Each rule reads its site's own range (the program's, narrowed by the guards around it) as
MP501/MP502 do: the finding and the fix of each arm are those of its generation, safe where they hold on the whole
arm, and an arm that never runs on the target draws none."""

from __future__ import annotations

import json

import pytest
from conftest import write_files

from mplint.cli import main
from mplint.testing import lint_code

ARMS = """\
import tensorflow as tf

tf.keras.mixed_precision.set_global_policy("{policy}")

if hasattr(tf.keras.optimizers, "LossScaleOptimizer"):
    optimizer = {k3_opt}

    def step(model, x, y):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.square(model(x) - y))
{k3_body}
        optimizer.apply_gradients(zip(grads, model.trainable_variables))
else:
    optimizer = {k2_opt}

    def step(model, x, y):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.square(model(x) - y))
{k2_body}
        optimizer.apply_gradients(zip(grads, model.trainable_variables))
"""
K3_LSO = "tf.keras.optimizers.LossScaleOptimizer(tf.keras.optimizers.Adam())"
K2_LSO = "tf.keras.mixed_precision.LossScaleOptimizer(tf.keras.optimizers.Adam())"
ADAM = "tf.keras.optimizers.Adam()"
UNSCALED = "        grads = tape.gradient(loss, model.trainable_variables)"
K3_SCALED = (
    "            scaled_loss = optimizer.scale_loss(loss)\n"
    "        grads = tape.gradient(scaled_loss, model.trainable_variables)"
)
K2_SCALED = (
    "            scaled_loss = optimizer.get_scaled_loss(loss)\n"
    "        grads = tape.gradient(scaled_loss, model.trainable_variables)"
)
K2_UNSCALED = K2_SCALED + "\n        grads = optimizer.get_unscaled_gradients(grads)"
K3_ARM = 'the arm of `hasattr(tf.keras.optimizers, "LossScaleOptimizer")` (line 5)'
PIN = "within Keras 2 or Keras 3 (TF >= 2.6) from requirements.txt pins tensorflow>=2.6"


def _source(policy="mixed_float16", k3_opt=K3_LSO, k3_body=K3_SCALED, k2_opt=K2_LSO, k2_body=K2_UNSCALED) -> str:
    return ARMS.format(policy=policy, k3_opt=k3_opt, k3_body=k3_body, k2_opt=k2_opt, k2_body=k2_body)


def _check(tmp_path, capsys, rule: str, source: str, pin: str = "tensorflow>=2.6\n") -> tuple[int, list[tuple]]:
    write_files(tmp_path, {".mplint.yaml": "{}\n", "requirements.txt": pin, "train.py": source})
    capsys.readouterr()
    code = main(["--format", "json", "--no-cache", "--select", rule, str(tmp_path)])
    found = [
        (d["rule"], d["start"]["line"], d["message"], d["fix"]["safety"] if d.get("fix") else None)
        for d in json.loads(capsys.readouterr().out)["diagnostics"]
    ]
    return code, found


def _fixed(tmp_path, rule: str) -> str:
    main(["--no-cache", "--fix", "--select", rule, str(tmp_path)])
    return (tmp_path / "train.py").read_text()


def test_correct_loops_in_each_arm_draw_nothing(tmp_path, capsys):
    """Keras 3's loop scales only; Keras 2's scales and unscales: both right in their own arm."""
    for rule in ("MP201", "MP202", "MP203", "MP204"):
        assert _check(tmp_path, capsys, rule, _source()) == (0, []), rule


K3_DIVIDED = K3_SCALED + "\n        grads = [g / optimizer.dynamic_scale for g in grads]"
K2_DIVIDED = K2_UNSCALED + "\n        grads = [g / optimizer.loss_scale for g in grads]"
K3_CLIPPED = K3_SCALED + "\n        grads, _ = tf.clip_by_global_norm(grads, 1.0)"
K2_CLIPPED = (
    K2_SCALED + "\n        grads, _ = tf.clip_by_global_norm(grads, 1.0)"
    "\n        grads = optimizer.get_unscaled_gradients(grads)"
)
MP201_MESSAGE = (
    "custom training loop under mixed_float16 set at {path}:3: it applies gradients with an optimizer that "
    "is not a LossScaleOptimizer, so small float16 gradients underflow to zero"
)
MP202_K3 = (
    "the optimizer is a LossScaleOptimizer, which divides the gradients by the loss scale, but the tape "
    "differentiates the unscaled loss: updates are 32768x too small and training silently stalls; differentiate "
    "optimizer.scale_loss(loss)"
)
MP202_K2 = (
    "the optimizer is a LossScaleOptimizer; the tape differentiates the scaled loss but get_unscaled_gradients "
    "is never called: updates 32768x too large"
)
MP203_K3 = "apply_gradients already divides the gradients by the loss scale: this second unscale makes updates 32768x too small"
MP203_K2 = "the gradients were already unscaled: this second unscale makes updates 32768x too small"
MP204_K3 = (
    "gradients are clipped while still multiplied by the loss scale (apply_gradients unscales them only "
    "afterwards): the threshold is 32768x too tight"
)
MP204_K2 = (
    "gradients are clipped while still multiplied by the loss scale (get_unscaled_gradients comes later): the "
    "threshold is 32768x too tight"
)


@pytest.mark.parametrize(
    "rule, arms, found, fixed",
    [
        # Keras 3's arm scales with scale_loss only; Keras 2's gets get_scaled_loss and get_unscaled_gradients
        (
            "MP201",
            dict(k3_opt=ADAM, k2_opt=ADAM, k3_body=UNSCALED, k2_body=UNSCALED),
            [(12, MP201_MESSAGE), (20, MP201_MESSAGE)],
            [(f"    optimizer = {ADAM}\n", f"    optimizer = {K2_LSO}\n")] * 2
            + [(UNSCALED, K3_SCALED), (UNSCALED, K2_UNSCALED)],
        ),
        (
            "MP202",
            dict(k3_body=UNSCALED, k2_body=K2_SCALED),
            [(11, MP202_K3), (21, MP202_K2)],
            [(UNSCALED, K3_SCALED), (K2_SCALED, K2_UNSCALED)],
        ),
        (
            "MP203",
            dict(k3_body=K3_DIVIDED, k2_body=K2_DIVIDED),
            [(13, MP203_K3), (24, MP203_K2)],
            [(K3_DIVIDED, K3_SCALED), (K2_DIVIDED, K2_UNSCALED)],
        ),
        # Keras 3 clips through the inner optimizer; Keras 2 moves the clip after its unscale
        (
            "MP204",
            dict(k3_body=K3_CLIPPED, k2_body=K2_CLIPPED),
            [(13, MP204_K3), (23, MP204_K2)],
            [
                (K3_LSO, K3_LSO.replace("Adam()", "Adam(global_clipnorm=1.0)")),
                (K3_CLIPPED, K3_SCALED),
                (K2_CLIPPED, K2_UNSCALED + "\n        grads, _ = tf.clip_by_global_norm(grads, 1.0)"),
            ],
        ),
    ],
)
def test_each_arm_gets_its_generations_finding_and_a_fix_safe_on_it(tmp_path, capsys, rule, arms, found, fixed):
    """The program admits Keras 2 and Keras 3 (TF >= 2.6): unguarded, these fixes would hold on part of it only. Each
    arm runs on one generation, so each fix is safe there."""
    source = _source(**arms)
    messages = [(rule, line, message.format(path=tmp_path / "train.py"), "safe") for line, message in found]
    assert _check(tmp_path, capsys, rule, source) == (1, messages)
    expected = source
    for old, new in fixed:
        expected = expected.replace(old, new, 1)
    assert _fixed(tmp_path, rule) == expected


MP206_MESSAGES = [
    (
        6,
        "LossScaleOptimizer under mixed_bfloat16: bfloat16 has float32's exponent range, so loss scaling only costs time",
    ),
    (11, "scale_loss() under mixed_bfloat16: bfloat16 has float32's exponent range, so loss scaling only costs time"),
    (
        15,
        "LossScaleOptimizer under mixed_bfloat16: bfloat16 has float32's exponent range, so loss scaling only costs time",
    ),
    (
        20,
        "get_scaled_loss() under mixed_bfloat16: bfloat16 has float32's exponent range, so loss scaling only costs time",
    ),
    (
        22,
        "get_unscaled_gradients() under mixed_bfloat16: bfloat16 has float32's exponent range, so loss scaling only "
        "costs time",
    ),
]


@pytest.mark.parametrize("pin, lines", [("tensorflow>=2.6\n", [6, 11, 15, 20, 22]), ("tensorflow>=2.16\n", [6, 11])])
def test_mp206_only_in_arms_that_run_on_the_target(tmp_path, capsys, pin, lines):
    """Unwrapping is right on every generation; an arm that never runs on the target (Keras 2's, where TensorFlow
    >= 2.16 is pinned) is left alone."""
    source = _source(policy="mixed_bfloat16")
    expected = [("MP206", line, message, "safe") for line, message in MP206_MESSAGES if line in lines]
    assert _check(tmp_path, capsys, "MP206", source, pin) == (1, expected)
    fixed = source.replace(K3_LSO, ADAM).replace("optimizer.scale_loss(loss)", "loss")
    if 15 in lines:
        fixed = (
            fixed.replace(K2_LSO, ADAM)
            .replace("optimizer.get_scaled_loss(loss)", "loss")
            .replace("        grads = optimizer.get_unscaled_gradients(grads)\n", "")
        )
    assert _fixed(tmp_path, "MP206") == fixed


def test_an_arm_that_never_runs_on_the_target_draws_nothing(tmp_path, capsys):
    """With TensorFlow >= 2.16 pinned, Keras 2's arm never runs: its missing unscale is no finding."""
    source = _source(k3_body=UNSCALED, k2_body=K2_SCALED)
    assert _check(tmp_path, capsys, "MP202", source, "tensorflow>=2.16\n") == (1, [("MP202", 11, MP202_K3, "safe")])


FEATURE_TESTS_IN_THE_LOOP = """\
import tensorflow as tf

tf.keras.mixed_precision.set_global_policy("mixed_float16")
optimizer = tf.keras.mixed_precision.LossScaleOptimizer(tf.keras.optimizers.Adam())


def step(model, x, y):
    with tf.GradientTape() as tape:
        loss = tf.reduce_mean(tf.square(model(x) - y))
        if hasattr(optimizer, "get_scaled_loss"):
            loss = optimizer.get_scaled_loss(loss)
    grads = tape.gradient(loss, model.trainable_variables)
    if hasattr(optimizer, "get_unscaled_gradients"):
        grads = optimizer.get_unscaled_gradients(grads)
    optimizer.apply_gradients(zip(grads, model.trainable_variables))
"""


@pytest.mark.parametrize(
    "pin, found",
    [
        # Keras 3 runs neither arm: nothing scales, and its LossScaleOptimizer divides the gradients anyway
        ("tensorflow>=2.16\n", [("MP202", 12, MP202_K3, None)]),
        ("tensorflow>=2.6\n", [("MP202", 12, MP202_K3, None)]),
        # Keras 2 alone: the LossScaleOptimizer has both methods, both arms run
        ("tensorflow<2.16\n", []),
    ],
)
def test_feature_tests_inside_the_loop_are_read_as_the_generation_runs_them(tmp_path, capsys, pin, found):
    """``hasattr(optimizer, "get_scaled_loss")`` is a version test as MP502 reads it (true on Keras 2's
    LossScaleOptimizer only), not a test of the optimizer's type alone; no fix: the loss is assigned in an arm."""
    assert _check(tmp_path, capsys, "MP202", FEATURE_TESTS_IN_THE_LOOP, pin) == (1 if found else 0, found)


ARM_ON_BOTH = """\
import tensorflow as tf

tf.keras.mixed_precision.set_global_policy("mixed_float16")

if hasattr(tf.keras.mixed_precision, "LossScaleOptimizer"):
    optimizer = tf.keras.mixed_precision.LossScaleOptimizer(tf.keras.optimizers.Adam())

    def step(model, x, y):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.square(model(x) - y))
        grads = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(grads, model.trainable_variables))
"""


def test_an_arm_on_both_generations_names_itself_and_its_fix_stays_unsafe(tmp_path, capsys):
    """``mixed_precision.LossScaleOptimizer`` exists on Keras 2 and Keras 3: the arm spans both, and the message
    names the arm, its guard and the program's range, as MP502's does."""
    assert _check(tmp_path, capsys, "MP202", ARM_ON_BOTH) == (
        1,
        [
            (
                "MP202",
                11,
                (
                    f"{MP202_K3} (target Keras 2 or Keras 3: {K3_ARM.replace('optimizers', 'mixed_precision')}, {PIN}; the fix "
                    "holds on Keras 3 only)"
                ),
                "unsafe",
            )
        ],
    )
    assert _fixed(tmp_path, "MP202") == ARM_ON_BOTH


def test_a_maybe_wrapped_optimizer_on_keras_2_is_not_told_of_keras_3():
    files = {"requirements.txt": "tensorflow==2.5.0\n"}  # performance comes from an installed library
    code = (
        "import tensorflow as tf\nimport performance\n\n"
        'tf.keras.mixed_precision.set_global_policy("mixed_float16")\n'
        "opt = performance.configure_optimizer(tf.keras.optimizers.Adam(1e-3), use_float16=True)\n\n\n"
        "def train(model, dataset):\n    for x, y in dataset:\n        with tf.GradientTape() as tape:\n"
        "            loss = tf.reduce_mean(model(x) - y)\n"
        "        grads = tape.gradient(loss, model.trainable_variables)\n"
        "        opt.apply_gradients(zip(grads, model.trainable_variables))\n"
    )
    found = lint_code(code, path="train.py", files=files, select=["MP202"]).diagnostics
    assert [(d.line, d.column) for d in found] == [(12, 17)]
    assert found[0].message == (
        "the optimizer comes from `performance.configure_optimizer(...)`, which is handed float16 options and may "
        "wrap it in a LossScaleOptimizer, but the loss is never scaled (scale_loss/get_scaled_loss): without scaling "
        "small float16 gradients underflow"
    )
