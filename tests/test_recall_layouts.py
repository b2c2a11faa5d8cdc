"""Recall of the headline rules where the code reaches the defect through another function, a name or a class:
small projects of the layouts real repositories use, with exact findings, messages, related locations and fixes.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from mplint.testing import lint_code
from mplint.verify.warm import run_python

_HARM = "float16 arithmetic is slow on CPUs, where input pipelines run, and rounds integers above 2048"


def _found(outcome) -> list[tuple]:
    return [
        (d.rule_id, d.line, d.column, d.message, tuple((Path(r.path).name, r.line, r.message) for r in d.related))
        for d in outcome.diagnostics
    ]


# --- MP401: a float16 conversion in a tf.data map function ---------------------------------------------------

TRAIN = """\
import tensorflow as tf

from data import make_dataset

tf.keras.mixed_precision.set_global_policy("mixed_float16")
model = tf.keras.Sequential([tf.keras.Input((8,)), tf.keras.layers.Dense(16), tf.keras.layers.Dense(1, dtype="float32")])
model.compile("adam", "mse")
model.fit(make_dataset(True))
"""

LOADER = """\
import tensorflow as tf


def _parse(x, use_fp16):
    dtype = tf.float16 if use_fp16 else tf.float32
    x = tf.cast(x, dtype)
    return (x - 127.5) / 64.0


def _parse_inline(x, use_fp16):
    x = tf.cast(x, tf.float16 if use_fp16 else tf.float32)
    return x / 255.0


def _unpacked(x, y):
    x, y = tf.cast(x, tf.float16), tf.cast(y, tf.float32)
    return x * 2.0, y


def _final(x, use_fp16):
    x = (tf.cast(x, tf.float32) - 127.5) / 64.0
    dtype = tf.float16 if use_fp16 else tf.float32
    return tf.cast(x, dtype)


def make_dataset(use_fp16):
    ds = tf.data.Dataset.from_tensor_slices(tf.zeros((64, 8), tf.uint8))
    ds = ds.map(lambda x: _parse(x, use_fp16)).map(lambda x: _parse_inline(x, use_fp16))
    ds = ds.map(lambda x: (x, x)).map(_unpacked).map(lambda x, y: _final(x, use_fp16))
    return ds.batch(32)
"""


def test_mp401_follows_the_dtype_and_the_unpacked_name_in_dataset_map_functions():
    outcome = lint_code(LOADER, path="data.py", files={"train.py": TRAIN}, select=["MP401"])
    conditional = "`tf.float16 if use_fp16 else tf.float32`"
    assert _found(outcome) == [
        (
            "MP401",
            6,
            9,
            f"data converted to `dtype` here ({conditional}, set at line 5) is then processed in a dataset map "
            f"function (`(x - 127.5)`): in the mixed-precision runs that is float16, and {_HARM}; convert to float32 "
            "(Keras casts model inputs to the compute dtype)",
            (("data.py", 5, "`dtype` is float16 here"),),
        ),
        (
            "MP401",
            11,
            9,
            f"data converted to {conditional} here is then processed in a dataset map function (`x / 255.0`): in the "
            f"mixed-precision runs that is float16, and {_HARM}; convert to float32 (Keras casts model inputs to the "
            "compute dtype)",
            (),
        ),
        (
            "MP401",
            16,
            12,
            f"data converted to float16 here is then processed (`x * 2.0`): {_HARM}; do the math in float32 (Keras "
            "casts model inputs to the compute dtype)",
            (),
        ),
    ]
    fixed = lint_code(LOADER, path="data.py", files={"train.py": TRAIN}, select=["MP401"], fix=True).fixed_code
    assert fixed == LOADER.replace(
        "tf.cast(x, tf.float16 if use_fp16 else tf.float32)", "tf.cast(x, tf.float32)"
    ).replace("x, y = tf.cast(x, tf.float16)", "x, y = tf.cast(x, tf.float32)")


def test_mp401_conditional_dtype_fix_keeps_float32_runs_and_makes_mixed_runs_float32(tmp_path):
    """Executed: the loader before and after mplint's fix, with use_fp16 off (float32 runs: identical values and
    dtype) and on (float16 before, float32 after)."""
    pytest.importorskip("tensorflow")
    fixed = lint_code(LOADER, path="data.py", files={"train.py": TRAIN}, select=["MP401"], fix=True).fixed_code
    probe = (
        "import sys\nimport numpy as np\nimport tensorflow as tf\nimport data\n"
        "x = tf.constant(np.arange(8, dtype=np.uint8) * 31)\n"
        "for fp16 in (False, True):\n"
        "    out = data._parse_inline(x, fp16)\n"
        "    print(out.dtype.name, ' '.join(repr(float(v)) for v in out.numpy()))\n"
    )
    outputs = []
    for name, text in (("original", LOADER), ("fixed", fixed)):
        folder = tmp_path / name
        folder.mkdir()
        (folder / "data.py").write_text(text, encoding="utf-8")
        env = {**os.environ, "CUDA_VISIBLE_DEVICES": "", "TF_CPP_MIN_LOG_LEVEL": "3"}
        done = run_python(["-c", probe], module="tensorflow", cwd=folder, env=env)
        assert done.returncode == 0, done.stderr[-3000:]
        outputs.append(done.stdout.splitlines())
    (original_f32, original_f16), (fixed_f32, fixed_f16) = outputs
    assert original_f32 == fixed_f32 and original_f32.startswith("float32 0.0 0.12156862765550613 ")
    assert original_f16.startswith("float16 ") and fixed_f16 == fixed_f32


# --- MP101: a softmax head through an activation-name function, or a builder's default ------------------------

ACTIVATIONS = """\
from keras import layers

_LAYERS = {"relu": layers.ReLU, "softmax": layers.Softmax}


def get_activation(name):
    return _LAYERS[name]()


def activation_layer(name, **kwargs):
    return layers.Activation(name, **kwargs)
"""

CLASSIFIER = """\
import keras
from keras import layers

from nets.activations import activation_layer, get_activation

keras.mixed_precision.set_global_policy("mixed_float16")
HEAD = "softmax"


class Classifier(keras.Model):
    def __init__(self, classes):
        super().__init__()
        self.hidden = layers.Dense(64, activation="relu")
        self.logits = layers.Dense(classes)
        self.probabilities = get_activation(HEAD)

    def call(self, x):
        return self.probabilities(self.logits(self.hidden(x)))


inputs = keras.Input((32,))
x = layers.Dense(10)(inputs)
safe = keras.Model(inputs, activation_layer("softmax", dtype="float32")(x))
safe.compile(optimizer="adam", loss="sparse_categorical_crossentropy")
unsafe = keras.Model(inputs, activation_layer("softmax")(x))
unsafe.compile(optimizer="adam", loss="sparse_categorical_crossentropy")
model = Classifier(10)
model.compile(optimizer="adam", loss="sparse_categorical_crossentropy")
"""


def test_mp101_softmax_output_layer_built_by_an_activation_name_function_in_another_module():
    files = {"nets/__init__.py": "", "nets/activations.py": ACTIVATIONS}
    outcome = lint_code(CLASSIFIER, path="train.py", files=files, select=["MP101", "MP102", "MP301"])
    tail = (
        "without a dtype: it computes in reduced precision (mixed_float16 set at train.py:6): float16 probabilities "
        'round to 0 or 1, and the loss saturates or becomes inf/NaN; end the model with a softmax layer given dtype="float32" '
        "instead"
    )
    assert _found(outcome) == [
        (
            "MP101",
            15,
            30,
            f"`get_activation(HEAD)` is this model's softmax output layer, built by `get_activation` at "
            f"nets/activations.py:7 {tail}",
            (("activations.py", 7, "`get_activation` returns the softmax layer here"),),
        ),
        (
            "MP101",
            25,
            30,
            f'`activation_layer("softmax")` is this model\'s softmax output layer, built by `activation_layer` at '
            f"nets/activations.py:11 {tail}",
            (("activations.py", 11, "`activation_layer` returns the softmax layer here"),),
        ),
    ]  # Dense(10) and the class count before the softmax: no MP301; the softmax outputs: no MP102


RESNET = """\
import keras
from keras import layers


def ResNet(input_shape, include_top=True, classes=1000, classifier_activation="softmax"):
    inputs = keras.Input(input_shape)
    x = layers.Conv2D(64, 3, activation="relu")(inputs)
    x = layers.GlobalAveragePooling2D()(x)
    if include_top:
        with keras.name_scope("head"):
            x = layers.Dense(classes, activation=classifier_activation, name="predictions")(x)
    return keras.Model(inputs, x)


def head_if_asked(input_shape, classifier_activation="softmax"):
    inputs = keras.Input(input_shape)
    x = layers.Flatten()(inputs)
    if classifier_activation is not None:
        x = layers.Dense(10, activation=classifier_activation)(x)
    return keras.Model(inputs, x)


def head_then_more(input_shape, activation="softmax"):
    inputs = keras.Input(input_shape)
    x = layers.Dense(10, activation=activation)(layers.Flatten()(inputs))
    x = layers.Dense(1)(x)
    return keras.Model(inputs, x)


def sequential_head(classes=10, activation="softmax"):
    return keras.Sequential([keras.Input((8,)), layers.Dense(64), layers.Dense(classes, activation=activation)])
"""

PROGRAM = """\
import keras
from models import ResNet, head_if_asked, head_then_more, sequential_head

keras.mixed_precision.set_global_policy("mixed_float16")
a = ResNet((32, 32, 3), True, 10)
a.compile(optimizer="adam", loss="sparse_categorical_crossentropy")
b = ResNet((32, 32, 3), False)
c = head_if_asked((8,))
d = head_then_more((8,))
e = sequential_head()
e.fit(x=None, y=None)
"""


def test_mp101_builder_default_softmax_head_where_the_call_keeps_it():
    outcome = lint_code(PROGRAM, path="train.py", files={"models.py": RESNET}, select=["MP101"])
    tail = (
        "is a softmax that computes in reduced precision (mixed_float16 set at train.py:4): float16 probabilities "
        "round to 0 or 1, and the loss saturates or becomes inf/NaN"
    )
    assert _found(outcome) == [
        (
            "MP101",
            5,
            5,
            f'`ResNet` leaves `classifier_activation` at its default "softmax", so the output layer it builds at '
            f"models.py:11 {tail}; pass classifier_activation=None and apply the softmax in float32 after it "
            '(`Activation("softmax", dtype="float32")`), or give that layer dtype="float32"',
            (("models.py", 11, "`ResNet` gives its output layer `activation=classifier_activation` here"),),
        ),
        (
            "MP101",
            10,
            5,
            f'`sequential_head` leaves `activation` at its default "softmax", so the output layer it builds at '
            f"models.py:31 {tail}; pass activation=None and apply the softmax in float32 after it "
            '(`Activation("softmax", dtype="float32")`), or give that layer dtype="float32"',
            (("models.py", 31, "`sequential_head` gives its output layer `activation=activation` here"),),
        ),
    ]  # b: no head (include_top passed positionally); c: a head under another condition; d: not the output


# --- MP601/MPT601: masks and epsilons in a published package's layers ------------------------------------------

PACKAGE_LAYERS = """\
import keras
import tensorflow as tf
from keras import ops


class AttentionPooling(tf.keras.layers.Layer):
    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.score = tf.keras.layers.Dense(1)

    def call(self, keys, key_masks):
        outputs = tf.transpose(self.score(keys), (0, 2, 1))
        paddings = tf.ones_like(outputs) * (-2 ** 32 + 1)
        return tf.matmul(tf.nn.softmax(tf.where(key_masks, outputs, paddings)), keys)


class MaskedScores(keras.layers.Layer):
    def call(self, scores, mask):
        return ops.softmax(ops.where(mask, scores, ops.cast(tf.float32.min, scores.dtype)))


class Entropy(keras.layers.Layer):
    def call(self, logits):
        p = ops.sigmoid(logits)
        return -ops.log(ops.add(p, 1e-8)) - ops.log(ops.add(1.0 - ops.cast(p, "float32"), 1e-8))
"""

EXPORT_TOOL = """\
import keras

from recsys.layers import AttentionPooling

keras.mixed_precision.set_global_policy("float32")
AttentionPooling()
"""


def test_mp601_masks_and_epsilons_in_a_published_package_whose_tool_script_sets_float32():
    files = {
        "pyproject.toml": '[project]\nname = "recsys"\nversion = "1.0"\ndependencies = ["tensorflow>=2.16"]\n',
        "recsys/__init__.py": "",
        "tools/export.py": EXPORT_TOOL,
    }
    outcome = lint_code(PACKAGE_LAYERS, path="recsys/layers.py", files=files, select=["MP601"])
    library = (
        "library code of recsys (users pick the policy); tools/export.py sets float32 but is a tool script of this "
        "repository"
    )
    assert _found(outcome) == [
        (
            "MP601",
            13,
            45,
            "`(-2 ** 32 + 1)` is outside float16's range (largest finite value 65504): combined with the compute-dtype "
            "tensor `tf.ones_like(outputs)` it becomes -inf under a float16 policy, and a padding of -inf is no "
            f"finite minimum: a softmax over a fully padded row, or the difference of two paddings, is NaN; {library}",
            (),
        ),
        (
            "MP601",
            19,
            61,
            "`tf.float32.min` is outside float16's range (largest finite value 65504): given to "
            "`ops.cast(tf.float32.min, scores.dtype)`, which makes it a tensor of the compute dtype, it becomes -inf "
            f"under a float16 policy, and the result is infinite; {library}",
            (),
        ),
        (
            "MP601",
            25,
            36,
            "`1e-8` flushes to 0 in float16 (smallest subnormal 6e-8): combined with the compute-dtype tensor `p` "
            "under a float16 policy the epsilon vanishes and a log or division by it gives inf or NaN; "
            f"{library}",
            (),
        ),
    ]  # the second epsilon meets a float32 value
    fixed = lint_code(PACKAGE_LAYERS, path="recsys/layers.py", files=files, select=["MP601"], fix=True)
    assert fixed.fixed_code == (
        PACKAGE_LAYERS.replace(
            "(-2 ** 32 + 1)",
            '(-3e4 if keras.backend.standardize_dtype(outputs.dtype) == "float16" else (-2 ** 32 + 1))',
        )
        .replace(
            "ops.cast(tf.float32.min, scores.dtype)",
            'ops.cast((-3e4 if keras.backend.standardize_dtype(scores.dtype) == "float16" else tf.float32.min), '
            "scores.dtype)",
        )
        .replace(
            "ops.add(p, 1e-8)",
            'ops.add(p, (6.104e-05 if keras.backend.standardize_dtype(p.dtype) == "float16" else 1e-8))',
        )
    )


CLASSIFIER_CLASS = """\
import keras
from keras import layers


class Classifier(keras.Model):
    def __init__(self, classes=1000, activation="softmax"):
        super().__init__()
        self.hidden = layers.Dense(64, activation="relu")
        self.head = layers.Dense(classes, activation=activation)

    def call(self, x):
        return self.head(self.hidden(x))


class GuardedClassifier(keras.Model):
    def __init__(self, classes=1000, activation="softmax", include_top=True):
        super().__init__()
        self.hidden = layers.Dense(64, activation="relu")
        if include_top:
            self.head = layers.Dense(classes, activation=activation)

    def call(self, x):
        return self.head(self.hidden(x))
"""


def test_mp101_model_class_whose_head_activation_defaults_to_softmax():
    program = (
        "import keras\nfrom classifier import Classifier, GuardedClassifier\n\n"
        'keras.mixed_precision.set_global_policy("mixed_float16")\n'
        "model = Classifier(10)\n"
        'model.compile(optimizer="adam", loss="sparse_categorical_crossentropy")\n'
        "logits = Classifier(10, None)\n"
        "guarded = GuardedClassifier(10)\n"
    )
    outcome = lint_code(program, path="train.py", files={"classifier.py": CLASSIFIER_CLASS}, select=["MP101"])
    assert _found(outcome) == [
        (
            "MP101",
            5,
            9,
            '`Classifier` leaves `activation` at its default "softmax", so the output layer it builds at '
            "classifier.py:9 is a softmax that computes in reduced precision (mixed_float16 set at train.py:4): "
            "float16 probabilities round to 0 or 1, and the loss saturates or becomes inf/NaN; pass activation=None and apply the "
            'softmax in float32 after it (`Activation("softmax", dtype="float32")`), or give that layer '
            'dtype="float32"',
            (("classifier.py", 9, "`Classifier` gives its output layer `activation=activation` here"),),
        )
    ]  # `Classifier(10, None)` passes logits; GuardedClassifier's head exists only under a condition
