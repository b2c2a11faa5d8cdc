"""``mplint verify`` of Keras 3 scripts on the JAX and torch backends (CPU), TensorFlow hidden as on a machine without
it: the backend the script or KERAS_BACKEND picks, step caps of fit() and of custom loops (a ``jax.jit`` step, an
eager torch step), NaN/Inf, the loss scale, gradient underflow against the float32 reference, ``--fix`` and
``--benchmark``, with the verdicts the same scripts get on TensorFlow; and the install hint where the backend is
missing."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import REPO
from keras_backends import backend_env, backend_params, missing

from mplint.verify.cli import detect_backend, missing_runtime

FIXTURES = REPO / "fixtures" / "verify"
# A custom loop per backend that never scales a tiny loss, as fixtures/verify/underflow_loop.py does on TensorFlow.
UNSCALED_LOOPS = {
    "tensorflow": ("underflow_loop.py", 33),
    "jax": ("keras_jax_loop.py", 51),
    "torch": ("keras_torch_loop.py", 25),
}


def verify(backend: str, folder: Path, *argv) -> tuple[int, dict]:
    """``mplint verify ARGV --format json`` in a process on ``backend``."""
    done = subprocess.run(
        [sys.executable, "-m", "mplint", "verify", *map(str, argv), "--format", "json"],
        capture_output=True,
        text=True,
        cwd=REPO,
        env=backend_env(backend, folder),
        timeout=900,
    )
    assert done.stdout, done.stderr[-3000:]
    return done.returncode, json.loads(done.stdout)


def metrics(doc: dict, run: str) -> dict:
    return doc["runs"][run]["metrics"]


def rules(doc: dict, run: str) -> list[str]:
    return sorted({f["rule"] for f in metrics(doc, run)["findings"]})


@pytest.mark.parametrize("backend", backend_params())
def test_a_loop_that_never_scales_underflows_on_every_backend(backend, tmp_path):
    script, line = UNSCALED_LOOPS[backend]
    code, doc = verify(backend, tmp_path, FIXTURES / script, "--steps", "4")
    assert (code, doc["verdict"], doc["backend"]) == (1, "problems: MP804", backend)
    run, reference = metrics(doc, "run"), metrics(doc, "float32 reference")
    assert [u["loop"] for u in run["units"]] == [f"loop at {script}:{line}"]
    assert (run["steps"], reference["steps"]) == (4, 4)  # the loop ended at its cap, in the jitted step too
    assert run["underflow"] > 0.5
    assert (rules(doc, "run"), rules(doc, "float32 reference")) == (["MP804"], [])
    assert (run["policy"], reference["policy"]) == ("mixed_float16", "float32")


@pytest.mark.parametrize("backend", backend_params("torch"))
def test_fix_of_a_loop_that_never_scales_is_verified_as_on_tensorflow(backend, tmp_path):
    """MP201's fix of the torch loop (a LossScaleOptimizer, the scaled loss's backward()); tests/test_verify.py fixes
    underflow_loop.py on TensorFlow, with the same measurements. On JAX MP201 writes no fix (rules/MP201.yaml)."""
    script, line = UNSCALED_LOOPS[backend]
    code, doc = verify(backend, tmp_path, FIXTURES / script, "--fix", "--steps", "5")
    assert (code, doc["backend"], doc["fixed_rules"]) == (0, backend, ["MP201"])
    assert doc["verdict"] == "verified: the fixed script is no worse and shows no MP802/MP803/MP804"
    before, after = metrics(doc, "before"), metrics(doc, "after")
    assert before["underflow"] > 0.5 and after["underflow"] < 0.01
    assert [u["loop"] for u in before["units"]] == [u["loop"] for u in after["units"]] == [f"loop at {script}:{line}"]
    assert (rules(doc, "before"), rules(doc, "after")) == (["MP804"], [])
    assert (before["scale_first"], after["scale_first"]) == (None, 32768.0)


@pytest.mark.parametrize("backend", backend_params("jax", "torch"))
def test_fix_of_a_float16_softmax_output_is_verified_as_on_tensorflow(backend, tmp_path):
    """tests/test_verify.py runs the same on TensorFlow, with the same verdict."""
    code, doc = verify(backend, tmp_path, FIXTURES / "fit_softmax.py", "--fix", "--steps", "4")
    assert (code, doc["backend"]) == (0, backend)
    assert doc["verdict"] == "verified: the fixed script is no worse and shows no MP802/MP803/MP804"
    assert doc["fixed_rules"] == ["MP101"]
    assert [metrics(doc, run)["output_dtype"] for run in ("before", "after", "float32 reference")] == [
        "float16",
        "float32",
        "float32",
    ]
    assert (rules(doc, "before"), rules(doc, "after")) == (["MP101", "MP806"], [])
    assert [metrics(doc, run)["steps"] for run in doc["runs"]] == [4, 4, 4]  # fit(): one capped epoch
    assert doc["events"]["datasets_replaced"] == ["mnist"]


@pytest.mark.parametrize("backend", backend_params("jax"))
def test_fix_removes_nan_from_an_additive_mask_on_jax(backend, tmp_path):
    code, doc = verify(backend, tmp_path, FIXTURES / "mask_nan.py", "--fix", "--steps", "4")
    assert (code, doc["fixed_rules"]) == (0, ["MP601"])
    before, after = metrics(doc, "before"), metrics(doc, "after")
    assert (before["non_finite_steps"], after["non_finite_steps"]) == (4, 0)
    assert "MP802" in rules(doc, "before") and rules(doc, "after") == []


SCALED_LOOPS = {
    "jax": """\
import os

os.environ["KERAS_BACKEND"] = "jax"

import jax
import keras
import numpy as np

keras.mixed_precision.set_global_policy("mixed_float16")
x = np.random.normal(size=(512, 32)).astype("float32")
y = (x[:, :1] * 2.0).astype("float32")
model = keras.Sequential([keras.Input(shape=(32,)), keras.layers.Dense(64, activation="relu"),
                          keras.layers.Dense(1, dtype="float32")])
optimizer = keras.optimizers.LossScaleOptimizer(keras.optimizers.SGD(learning_rate=1e5))
optimizer.build(model.trainable_variables)


def compute_loss(trainable, non_trainable, optimizer_variables, features, targets):
    predictions, non_trainable = model.stateless_call(trainable, non_trainable, features, training=True)
    loss = 1e-7 * keras.ops.mean(keras.ops.square(predictions - targets))
    with keras.StatelessScope(state_mapping=list(zip(optimizer.variables, optimizer_variables))):
        scaled = optimizer.scale_loss(loss)
    return scaled, (loss, non_trainable)


grad_fn = jax.value_and_grad(compute_loss, has_aux=True)


@jax.jit
def train_step(state, features, targets):
    trainable, non_trainable, optimizer_variables = state
    (_, (loss, non_trainable)), grads = grad_fn(trainable, non_trainable, optimizer_variables, features, targets)
    trainable, optimizer_variables = optimizer.stateless_apply(optimizer_variables, grads, trainable)
    return loss, (trainable, non_trainable, optimizer_variables)


state = [[v.value for v in group] for group in (model.trainable_variables, model.non_trainable_variables,
                                                 optimizer.variables)]
for step in range(100):  # a warm-up loop
    loss, state = train_step(state, x[:64], y[:64])
for epoch in range(3):
    for start in range(0, len(x), 64):
        loss, state = train_step(state, x[start:start + 64], y[start:start + 64])
print("done", float(loss))
""",
    "torch": """\
import os

os.environ["KERAS_BACKEND"] = "torch"

import keras
import numpy as np
import torch

keras.mixed_precision.set_global_policy("mixed_float16")
x = np.random.normal(size=(512, 32)).astype("float32")
y = (x[:, :1] * 2.0).astype("float32")
model = keras.Sequential([keras.Input(shape=(32,)), keras.layers.Dense(64, activation="relu"),
                          keras.layers.Dense(1, dtype="float32")])
optimizer = keras.optimizers.LossScaleOptimizer(keras.optimizers.SGD(learning_rate=1e5))


def train_step(features, targets):
    loss = 1e-7 * keras.ops.mean(keras.ops.square(model(features, training=True) - keras.ops.convert_to_tensor(targets)))
    model.zero_grad()
    optimizer.scale_loss(loss).backward()
    with torch.no_grad():
        optimizer.apply([v.value.grad for v in model.trainable_weights], model.trainable_weights)
    return loss


for step in range(100):  # a warm-up loop
    loss = train_step(x[:64], y[:64])
for epoch in range(3):
    for start in range(0, len(x), 64):
        loss = train_step(x[start:start + 64], y[start:start + 64])
print("done", float(loss))
""",
}


@pytest.mark.parametrize("backend", backend_params("jax", "torch"))
def test_a_scaled_loop_records_its_scale_and_the_unscaled_loss_and_each_loop_is_capped(backend, tmp_path):
    script = tmp_path / "project" / "train.py"
    script.parent.mkdir()
    script.write_text(SCALED_LOOPS[backend], encoding="utf-8")
    code, doc = verify(backend, tmp_path, script, "--steps", "3")
    assert (code, doc["verdict"]) == (0, "no MP802/MP803/MP804 in the capped run")
    run, reference = metrics(doc, "run"), metrics(doc, "float32 reference")
    lines = (39, 41) if backend == "jax" else (26, 28)
    assert [(u["loop"], u["optimizer"], u["steps"]) for u in run["units"]] == [
        (f"loop at train.py:{line}", "LossScaleOptimizer(SGD)", 3) for line in lines
    ]  # the warm-up loop ended at its cap, and the script went on to its next loop
    assert [u["scale_first"] for u in run["units"]] == [32768.0, 32768.0]
    assert run["underflow"] < 0.01  # the scale keeps the gradients that float32 has
    # the loss reported is the one the script wrote, not the one scaled by 32768 that was differentiated
    first, first_reference = run["units"][0]["final_loss"], reference["units"][0]["final_loss"]
    assert 0.5 < first / first_reference < 2


PADDED_POOLING_FIT = """\
import os

os.environ["KERAS_BACKEND"] = "torch"

import keras
import numpy as np
from keras import layers, ops

keras.mixed_precision.set_global_policy("mixed_float16")


class MeanPooling(layers.Layer):
    def call(self, inputs, padding_mask):
        mask = ops.cast(ops.expand_dims(padding_mask, -1), inputs.dtype)
        return ops.sum(inputs * mask, axis=1) / ops.maximum(ops.sum(mask, axis=1), 1e-9)


tokens, padding = keras.Input(shape=(8, 4)), keras.Input(shape=(8,))
model = keras.Model([tokens, padding], layers.Dense(1, dtype="float32")(MeanPooling()(layers.Dense(8)(tokens), padding)))
model.compile(optimizer="adam", loss="mse")
x = np.random.normal(size=(256, 8, 4)).astype("float32")
m = (np.random.uniform(size=(256, 8)) > 0.3).astype("float32")
m[::16] = 0.0  # a sequence of each batch is all padding: 0/0 in float16, where 1e-9 is 0
y = np.random.normal(size=(256, 1)).astype("float32")
model.fit([x, m], y, batch_size=16, epochs=2, shuffle=False)
"""


@pytest.mark.parametrize("backend", backend_params("torch"))
def test_nan_in_every_step_on_torch(backend, tmp_path):
    script = tmp_path / "project" / "train.py"
    script.parent.mkdir()
    script.write_text(PADDED_POOLING_FIT, encoding="utf-8")
    code, doc = verify(backend, tmp_path, script, "--steps", "3")
    assert (code, doc["verdict"]) == (1, "problems: MP802, MP803")
    run = metrics(doc, "run")
    # compile() wrapped Adam in a LossScaleOptimizer, which skips each step and halves its scale
    assert (run["steps"], run["non_finite_steps"], run["skipped_steps"]) == (3, 3, 3)
    assert [u["scale_history"] for u in run["units"]] == [[16384.0, 8192.0, 4096.0]]
    assert run["final_loss"] != run["final_loss"]  # NaN
    assert metrics(doc, "float32 reference")["non_finite_steps"] == 0


# A custom loop per backend, its loss scaled as it should be, training a classifier whose softmax output is left in
# float16 under mixed_float16.
SOFTMAX_MODEL = """\
import os

os.environ["KERAS_BACKEND"] = "{backend}"

import keras
import numpy as np
from keras import layers

keras.mixed_precision.set_global_policy("mixed_float16")

model = keras.Sequential([
    keras.Input(shape=(32,)),
    layers.Dense(64, activation="relu"),
    layers.Dense(10, activation="softmax"),
])
optimizer = keras.optimizers.LossScaleOptimizer(keras.optimizers.Adam())
loss_fn = keras.losses.SparseCategoricalCrossentropy()
x = np.random.normal(size=(256, 32)).astype("float32")
y = np.random.randint(0, 10, size=(256,))
"""
SOFTMAX_LOOPS = {
    "tensorflow": """\
import tensorflow as tf


@tf.function
def train_step(features, labels):
    with tf.GradientTape() as tape:
        loss = loss_fn(labels, model(features, training=True))
        scaled = optimizer.scale_loss(loss)
    optimizer.apply(tape.gradient(scaled, model.trainable_variables), model.trainable_variables)


for epoch in range(5):
    for start in range(0, len(x), 32):
        train_step(x[start:start + 32], y[start:start + 32])
""",
    "jax": """\
import jax


def compute_loss(trainable, non_trainable, optimizer_variables, features, labels):
    predictions, non_trainable = model.stateless_call(trainable, non_trainable, features, training=True)
    loss = loss_fn(labels, predictions)
    with keras.StatelessScope(state_mapping=list(zip(optimizer.variables, optimizer_variables))):
        return optimizer.scale_loss(loss), non_trainable


grad_fn = jax.value_and_grad(compute_loss, has_aux=True)


@jax.jit
def train_step(state, features, labels):
    trainable, non_trainable, optimizer_variables = state
    (_, non_trainable), grads = grad_fn(trainable, non_trainable, optimizer_variables, features, labels)
    trainable, optimizer_variables = optimizer.stateless_apply(optimizer_variables, grads, trainable)
    return trainable, non_trainable, optimizer_variables


optimizer.build(model.trainable_variables)
state = [[v.value for v in group] for group in (model.trainable_variables, model.non_trainable_variables,
                                                 optimizer.variables)]
for epoch in range(5):
    for start in range(0, len(x), 32):
        state = train_step(state, x[start:start + 32], y[start:start + 32])
""",
    "torch": """\
import torch

for epoch in range(5):
    for start in range(0, len(x), 32):
        loss = loss_fn(y[start:start + 32], model(x[start:start + 32], training=True))
        model.zero_grad()
        optimizer.scale_loss(loss).backward()
        with torch.no_grad():
            optimizer.apply([v.value.grad for v in model.trainable_weights], model.trainable_weights)
""",
}


@pytest.mark.parametrize("backend", backend_params())
def test_fix_of_a_custom_loop_is_verified_with_the_same_verdict_on_every_backend(backend, tmp_path):
    script = tmp_path / "project" / "train.py"
    script.parent.mkdir()
    script.write_text(SOFTMAX_MODEL.format(backend=backend) + "\n" + SOFTMAX_LOOPS[backend], encoding="utf-8")
    code, doc = verify(backend, tmp_path, script, "--fix", "--steps", "3")
    assert (code, doc["fixed_rules"], doc["backend"]) == (0, ["MP101"], backend)
    assert doc["verdict"] == "verified: the fixed script is no worse and shows no MP802/MP803/MP804"
    assert [metrics(doc, run)["output_dtype"] for run in ("before", "after", "float32 reference")] == [
        "float16",
        "float32",
        "float32",
    ]
    assert (rules(doc, "before"), rules(doc, "after")) == (["MP101", "MP806"], [])
    before, after = metrics(doc, "before"), metrics(doc, "after")
    assert [u["loop"] for u in before["units"]] == [u["loop"] for u in after["units"]]  # one loop, named alike
    assert (before["steps"], after["steps"], after["scale_first"], after["skipped_steps"]) == (3, 3, 32768.0, 0)


@pytest.mark.parametrize("backend", backend_params("jax"))
def test_benchmark_times_the_mixed_policy_against_float32(backend, tmp_path):
    code, doc = verify(backend, tmp_path, FIXTURES / "keras_jax_loop.py", "--benchmark", "--steps", "6")
    assert (code, doc["backend"], doc["benchmark"]["policy"]) == (0, "jax", "mixed_float16")
    mixed, float32 = doc["benchmark"]["mixed_ms_per_step"], doc["benchmark"]["float32_ms_per_step"]
    assert mixed > 0 and float32 > 0
    speedup = float32 / mixed
    assert doc["verdict"] == (
        f"mixed_float16 is {speedup:.2f}x faster than float32 here"
        if speedup > 1
        else f"MP805 mixed_float16 is not faster than float32 here ({mixed:.2f} vs {float32:.2f} ms/step)"
    )


def test_the_backend_is_the_scripts_then_the_environments_then_keras_json(tmp_path):
    script = tmp_path / "train.py"
    home = tmp_path / "home"
    script.write_text('import os\nos.environ["KERAS_BACKEND"] = "torch"\nimport keras\n', encoding="utf-8")
    assert detect_backend(script, {"KERAS_BACKEND": "jax"}) == ("torch", "set by the script")
    script.write_text('import os\nos.environ.setdefault("KERAS_BACKEND", "torch")\nimport keras\n', encoding="utf-8")
    assert detect_backend(script, {"KERAS_BACKEND": "jax"}) == ("jax", "KERAS_BACKEND=jax")
    assert detect_backend(script, {"HOME": str(home)}) == ("torch", "set by the script")
    script.write_text("import keras\n", encoding="utf-8")
    assert detect_backend(script, {"HOME": str(home)}) == ("tensorflow", "Keras's default")
    (home / ".keras").mkdir(parents=True)
    (home / ".keras" / "keras.json").write_text('{"backend": "jax", "floatx": "float32"}', encoding="utf-8")
    assert detect_backend(script, {"HOME": str(home)}) == ("jax", str(home / ".keras" / "keras.json"))
    assert detect_backend(script, {"HOME": str(home), "KERAS_HOME": str(tmp_path)}) == ("tensorflow", "Keras's default")


def test_an_unknown_backend_is_named():
    assert missing_runtime(3, "keras", ("mlx", "KERAS_BACKEND=mlx")) == (
        "Keras 3 has no backend 'mlx' (KERAS_BACKEND=mlx): choose one of tensorflow, jax, torch"
    )


HIDE_AND_VERIFY = "import sys\n{hide}\nfrom mplint.cli import main\nsys.exit(main(['verify', {script!r}]))"


@pytest.mark.parametrize(
    ("hidden", "script", "named"),
    [
        (
            ("jax",),
            "keras_jax_loop.py",
            "Keras 3 on the jax backend (set by the script), and jax is not installed in this environment: install it: "
            'python3 -m pip install "jax[cpu]" ("jax[cuda12]" in place of "jax[cpu]" for NVIDIA GPUs)',
        ),
        (
            ("keras", "torch"),
            "keras_torch_loop.py",
            "Keras 3 on the torch backend (set by the script), and keras, torch are not installed in this environment: "
            "install them: python3 -m pip install keras torch (a CPU-only torch: python3 -m pip install torch "
            "--index-url https://download.pytorch.org/whl/cpu)",
        ),
    ],
    ids=["jax", "keras-and-torch"],
)
def test_verify_without_the_backend_says_what_to_install(hidden, script, named):
    if "keras" not in hidden and missing("keras"):
        pytest.skip("keras is not installed")
    hide = "\n".join(f"sys.modules[{name!r}] = None" for name in hidden)
    done = subprocess.run(
        [sys.executable, "-c", HIDE_AND_VERIFY.format(hide=hide, script=str(FIXTURES / script))],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=120,
    )
    assert (done.returncode, done.stdout, done.stderr) == (
        2,
        "",
        f"mplint verify: error: mplint verify runs the script with {named}\n",
    )
