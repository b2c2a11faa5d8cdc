"""MP102 on Keras 3: a loss compile wraps converts the predictions to float32; other uses of them do not."""

from __future__ import annotations

from mplint.testing import check_code

MODEL = """\
import keras
import tensorflow as tf

keras.config.set_dtype_policy("mixed_float16")
inputs = keras.Input(shape=(8,))
outputs = keras.layers.Dense(1)(keras.layers.Dense(64)(inputs))
model = keras.Model(inputs, outputs)
"""
MESSAGE = (
    "model output from layer Dense is not float32 (mixed_float16 set at example.py:4): losses and metrics then run "
    'in float16/bfloat16 and may overflow or lose precision; make the output dtype="float32"'
)


def _found(code: str, keras: int) -> list[tuple]:
    outcome = check_code(code, keras=keras, select=["MP102"])
    return [(d.rule_id, d.line, d.column, d.message) for d in outcome.diagnostics]


def test_keras3_compiled_keras_loss_is_silent():
    assert _found(MODEL + 'model.compile(optimizer="adam", loss="mse")\nmodel.fit(x, y)\n', keras=3) == []


def test_keras2_in_range_is_reported():
    assert _found(MODEL + 'model.compile(optimizer="adam", loss="mse")\n', keras=2) == [("MP102", 6, 11, MESSAGE)]


def test_keras3_metric_on_the_raw_predictions_is_reported():
    code = MODEL + 'model.compile(optimizer="adam", loss="mse", metrics=["mae"])\n'
    assert _found(code, keras=3) == [("MP102", 6, 11, MESSAGE)]


def test_keras3_custom_loss_function_is_reported():
    code = MODEL + 'model.compile(optimizer="adam", loss=my_loss)\n'
    assert _found(code, keras=3) == [("MP102", 6, 11, MESSAGE)]


def test_keras3_custom_loop_is_reported():
    code = (
        MODEL
        + 'model.compile(optimizer="adam", loss="mse")\n'
        + "with tf.GradientTape() as tape:\n    loss = tf.reduce_mean(tf.square(model(x) - y))\n"
    )
    assert _found(code, keras=3) == [("MP102", 6, 11, MESSAGE)]
