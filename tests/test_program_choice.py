"""Rules about a program's own choices are silent in a published package's modules (MP201, MP301, MP302, MP303,
MP304, MP701, MPT301).

Layer and batch sizes, where and which policy is set, a custom loop's optimizer: a published package's users make
those choices, so its modules are never asked to change them, even where an example script of the repository runs
them under mixed_float16. The same modules in a repository that publishes nothing are that script's own code.
"""

from __future__ import annotations

import json

import pytest
from conftest import write_files

from mplint.cli import main

PROGRAM_CHOICE = "MP201,MP301,MP302,MP303,MP304,MP701,MPT301"

PACKAGE = {
    "tfkit/__init__.py": "",
    "tfkit/models.py": """\
import tensorflow as tf


def build_classifier(num_classes=10):
    model = tf.keras.Sequential([
        tf.keras.layers.Dense(100, activation="relu"),
        tf.keras.layers.Dense(num_classes, activation="softmax", dtype="float32"),
    ])
    tf.keras.mixed_precision.set_global_policy("mixed_float16")
    return model


def distribute(use_tpu):
    if use_tpu:
        resolver = tf.distribute.cluster_resolver.TPUClusterResolver()
        tf.keras.mixed_precision.set_global_policy("mixed_float16")
        return tf.distribute.TPUStrategy(resolver)
    return tf.distribute.MirroredStrategy()


def train(model, dataset, x, y):
    optimizer = tf.keras.optimizers.Adam()
    for features, targets in dataset:
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.square(targets - model(features)))
        grads = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(grads, model.trainable_variables))
    model.fit(x, y, batch_size=100)
""",
    "tfkit/torch_models.py": """\
import torch
from torch import nn

model = nn.Sequential(nn.Linear(784, 100), nn.ReLU(), nn.Linear(100, 10))


def step(x):
    with torch.autocast("cuda"):
        return model(x)
""",
    "examples/train.py": """\
import tensorflow as tf

from tfkit.models import build_classifier, train
from tfkit.torch_models import step

tf.keras.mixed_precision.set_global_policy("mixed_float16")
model = build_classifier()
train(model, [], None, None)
model.fit(None, None, batch_size=100)
""",
}
PYPROJECT = '[project]\nname = "tfkit"\nversion = "1.0"\ndependencies = ["tensorflow>=2.9,<2.16", "torch>=2.4"]\n'
REQUIREMENTS = "tensorflow>=2.9,<2.16\ntorch>=2.4\n"

PROGRAM = "in the program of examples/train.py, which imports this module"
TPU_PADS = "this project runs on TPUs, whose matrix units pad every dimension to 128; round it up to 128"
TPU = (
    "TPUs compute in bfloat16, and float16 there is slow or unsupported and needs needless loss scaling; use "
    "mixed_bfloat16 on TPUs"
)
EXAMPLE = [
    (
        "examples/train.py",
        "MP302",
        9,
        34,
        "batch_size of fit() is 100, not a multiple of 8: under mixed_float16 set at examples/train.py:6 the batch "
        "dimension of every float16 matmul is misaligned for tensor cores; round it up to 104",
    ),
    ("examples/train.py", "MP304", 9, 34, f"batch_size of fit() is 100, not a multiple of 128: {TPU_PADS}"),
]
OWN_CODE = [
    *EXAMPLE,
    (
        "tfkit/models.py",
        "MP301",
        6,
        31,
        f"units of Dense is 100, not a multiple of 8: under mixed_float16 set at tfkit/models.py:9 {PROGRAM} its "
        "float16 matmuls cannot use tensor cores fully; round it up to 104",
    ),
    ("tfkit/models.py", "MP304", 6, 31, f"units of Dense is 100, not a multiple of 128: {TPU_PADS}"),
    (
        "tfkit/models.py",
        "MP303",
        9,
        5,
        "mixed_float16 reaches code that runs under a TPU strategy (this policy also applies on the TPU path and is "
        f"not switched to mixed_bfloat16 there): {TPU}",
    ),
    (
        "tfkit/models.py",
        "MP701",
        9,
        5,
        "the policy is set after `Sequential(...)` at line 5 created layers: layers that already exist keep their "
        "float32 policy, so that model silently trains without mixed precision; set the policy before building or "
        "loading any model",
    ),
    (
        "tfkit/models.py",
        "MP303",
        16,
        9,
        f"mixed_float16 reaches code that runs under a TPU strategy (this branch runs on TPUs): {TPU}",
    ),
    (
        "tfkit/models.py",
        "MP201",
        27,
        9,
        f"custom training loop under mixed_float16 set at tfkit/models.py:9 {PROGRAM}: it applies gradients with an "
        "optimizer that is not a LossScaleOptimizer, so small float16 gradients underflow to zero",
    ),
    (
        "tfkit/models.py",
        "MP302",
        28,
        32,
        f"batch_size of fit() is 100, not a multiple of 8: under mixed_float16 set at tfkit/models.py:9 {PROGRAM} "
        "the batch dimension of every float16 matmul is misaligned for tensor cores; round it up to 104",
    ),
    ("tfkit/models.py", "MP304", 28, 32, f"batch_size of fit() is 100, not a multiple of 128: {TPU_PADS}"),
    (
        "tfkit/torch_models.py",
        "MPT301",
        4,
        38,
        "`out_features=100` of `nn.Linear` is not a multiple of 8: under float16 autocast its matmuls cannot use "
        "tensor cores fully (use 104)",
    ),
]


def _lint(capsys, *args: str) -> list[tuple]:
    code = main(["--format", "json", "--no-cache", *args])
    doc = json.loads(capsys.readouterr().out)
    found = [(d["path"], d["rule"], d["start"]["line"], d["start"]["column"], d["message"]) for d in doc["diagnostics"]]
    assert code == (1 if found else 0)
    return found


@pytest.mark.parametrize(
    ("metadata", "expected"),
    [
        ({"pyproject.toml": PYPROJECT}, EXAMPLE),  # tfkit is published: its users choose
        ({"requirements.txt": REQUIREMENTS}, OWN_CODE),  # nothing is published: the example's own code
    ],
    ids=["published", "unpublished"],
)
def test_program_choice_rules_are_silent_in_a_published_package(tmp_path, monkeypatch, capsys, metadata, expected):
    write_files(tmp_path, {**PACKAGE, **metadata})
    monkeypatch.chdir(tmp_path)
    assert _lint(capsys, "--select", PROGRAM_CHOICE, ".") == expected
