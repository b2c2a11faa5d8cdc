"""A fix written into library code holds for every policy the library's users may set (MP202, MP206).

A published Keras 2 package's model class overrides ``train_step`` and never scales the loss: every user who
compiles it under mixed_float16 gets compile()'s LossScaleOptimizer and float16 gradients that underflow. The fix
scales and unscales, but a float32 user's optimizer has no ``get_scaled_loss``: each inserted call runs under a test
of the optimizer. An optimizer the library wraps itself is a LossScaleOptimizer for every user and needs no test.
The executed proof under both policies is tests/test_loss_scaling_executed.py.
"""

from __future__ import annotations

from mplint.testing import lint_code

# Two tapes, two apply_gradients: an extrapolation step, then the update from the extrapolated point.
EXTRAGRADIENT = """\
import tf_keras as keras
import tensorflow as tf


class ExtragradientModel(keras.Model):
    def train_step(self, data):
        x, y = data
        with tf.GradientTape() as tape:
            loss = self.compiled_loss(y, self(x, training=True))
        grads = tape.gradient(loss, self.trainable_variables)
        self.optimizer.apply_gradients(zip(grads, self.trainable_variables))
        with tf.GradientTape() as tape:
            loss = self.compiled_loss(y, self(x, training=True))
        grads = tape.gradient(loss, self.trainable_variables)
        self.optimizer.apply_gradients(zip(grads, self.trainable_variables))
        return {"loss": loss}


def fit_with_scaling(model, dataset):
    optimizer = keras.mixed_precision.LossScaleOptimizer(keras.optimizers.SGD(0.1))
    for x, y in dataset:
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.square(y - model(x)))
        grads = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(grads, model.trainable_variables))
"""
GUARDED_STEP = """\
        with tf.GradientTape() as tape:
            loss = self.compiled_loss(y, self(x, training=True))
            if hasattr(self.optimizer, "get_scaled_loss"):
                scaled_loss = self.optimizer.get_scaled_loss(loss)
            else:
                scaled_loss = loss
        grads = tape.gradient(scaled_loss, self.trainable_variables)
        if hasattr(self.optimizer, "get_scaled_loss"):
            grads = self.optimizer.get_unscaled_gradients(grads)
        self.optimizer.apply_gradients(zip(grads, self.trainable_variables))
"""
STEP = """\
        with tf.GradientTape() as tape:
            loss = self.compiled_loss(y, self(x, training=True))
        grads = tape.gradient(loss, self.trainable_variables)
        self.optimizer.apply_gradients(zip(grads, self.trainable_variables))
"""
OWN_WRAPPER = """\
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.square(y - model(x)))
        grads = tape.gradient(loss, model.trainable_variables)
"""
OWN_WRAPPER_FIXED = """\
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.square(y - model(x)))
            scaled_loss = optimizer.get_scaled_loss(loss)
        grads = tape.gradient(scaled_loss, model.trainable_variables)
        grads = optimizer.get_unscaled_gradients(grads)
"""
PACKAGE = {"extrag/__init__.py": ""}
USERS_WRAP = (
    "in library code, compile() wraps the optimizer in a LossScaleOptimizer for any user under mixed_float16, but "
    "the loss is never scaled (get_scaled_loss) so small float16 gradients underflow"
)
OWN = "the optimizer is a LossScaleOptimizer, but the loss is never scaled (get_scaled_loss) so small float16 gradients underflow"


def _pyproject(dependency: str) -> dict[str, str]:
    return {"pyproject.toml": f'[project]\nname = "extrag"\nversion = "0.1"\ndependencies = ["{dependency}"]\n'}


def test_each_tape_of_a_keras2_library_train_step_gets_a_fix_guarded_on_the_optimizer():
    files = {**PACKAGE, **_pyproject("tf-keras>=2.15")}
    found = lint_code(EXTRAGRADIENT, path="extrag/models.py", files=files, select=["MP202"]).diagnostics
    assert [(d.rule_id, d.line, d.column, d.message, d.fix_safety.value) for d in found] == [
        ("MP202", 10, 17, USERS_WRAP, "safe"),
        ("MP202", 14, 17, USERS_WRAP, "safe"),
        ("MP202", 24, 17, OWN, "safe"),  # the library wraps this one itself: every user's is a LossScaleOptimizer
    ]
    out = lint_code(EXTRAGRADIENT, path="extrag/models.py", files=files, select=["MP202"], fix=True)
    assert out.diagnostics == []
    assert out.fixed_code == EXTRAGRADIENT.replace(STEP, GUARDED_STEP).replace(OWN_WRAPPER, OWN_WRAPPER_FIXED)


def test_the_guarded_fix_is_unsafe_where_the_range_admits_tf_2_1_to_2_3():
    """The inserted methods are Keras 2's in the API table: a range from TF 2.1 makes the fix unsafe, and says so."""
    code = EXTRAGRADIENT.replace("import tf_keras as keras\n", "from tensorflow import keras\n")
    files = {**PACKAGE, **_pyproject("tensorflow>=2.1,<2.16")}
    found = lint_code(code, path="extrag/models.py", files=files, select=["MP202"]).diagnostics
    note = (
        " (target G1 (TF 2.1-2.3) or Keras 2 (TF 2.1-2.15), from pyproject.toml pins tensorflow<2.16,>=2.1; the fix "
        "holds on Keras 2 only: set the target or pin TensorFlow to make it safe)"
    )
    assert [(d.line, d.message, d.fix_safety.value) for d in found] == [
        (10, USERS_WRAP + note, "unsafe"),
        (14, USERS_WRAP + note, "unsafe"),
        (24, OWN + note, "unsafe"),
    ]


def test_a_library_without_pins_is_not_guessed_keras_2():
    """Without evidence of its generation a library may run on Keras 2 or 3, whose fixes differ: no finding."""
    code = EXTRAGRADIENT.replace("import tf_keras as keras\n", "from tensorflow import keras\n")
    assert lint_code(code, path="extrag/models.py", files=PACKAGE, select=["MP202"]).diagnostics == []


def test_no_fix_where_the_range_is_tf_2_1_to_2_3_alone():
    """The inserted methods are written and proven for Keras 2 and 3: on TF 2.2 alone the finding has no fix."""
    code = EXTRAGRADIENT.replace("import tf_keras as keras\n", "from tensorflow import keras\n")
    files = {**PACKAGE, **_pyproject("tensorflow==2.2.2")}
    found = lint_code(code, path="extrag/models.py", files=files, select=["MP202"]).diagnostics
    note = (
        " (target G1 (TF 2.1-2.3) (TF 2.2), from pyproject.toml pins tensorflow==2.2.2; no fix: its names are written "
        "and proven for Keras 2 and Keras 3 only)"
    )
    assert [(d.line, d.message, d.fix_safety.value) for d in found] == [
        (10, USERS_WRAP + note, "none"),
        (14, USERS_WRAP + note, "none"),
        (24, OWN + note, "none"),
    ]
