"""MP201 and MP202 on Keras 3's custom loops on the torch and JAX backends, executed on the CPU, each run in a process
of its own on its backend (TensorFlow hidden): the loop as written, after mplint's own fix (torch), and with the
policy switched to float32 as the reference. Updates are read off the first hidden layer, which computes in float16.

torch: the fixes are proven, before and after. JAX: mplint writes no fix, and the runs show why: the findings hold
(a plain optimizer's float16 gradients underflow; a LossScaleOptimizer's updates are 32768x too small), the scaling
the message spells out (``scale_loss`` under ``keras.StatelessScope`` with the carried optimizer variables) trains as
float32 does, and a plain ``optimizer.scale_loss(loss)`` does only until the loss scale the loop carries changes."""

from __future__ import annotations

import json

import pytest
from conftest import REPO
from keras_backends import backend_env, backend_params, warm_module

from mplint.diagnostics import FixSafety
from mplint.testing import lint_code
from mplint.verify.warm import run_python

LOSS_SCALE = 2.0**15


def _fixed(code: str, rule: str, where: tuple[int, int], message: str) -> str:
    """The code after mplint's safe fix, having found ``rule`` at ``where`` with ``message``."""
    found = lint_code(code, select=[rule]).diagnostics
    assert [(d.rule_id, d.line, d.column, d.message, d.fix_safety) for d in found] == [
        (rule, *where, message, FixSafety.SAFE)
    ]
    result = lint_code(code, select=[rule], fix=True)
    assert result.diagnostics == [] and result.written
    return result.fixed_code


def _updates(backend: str, code: str, folder) -> list[float]:
    """The script's ``UPDATES [...]`` line: the mean absolute update of the first hidden layer, step by step."""
    folder.mkdir(parents=True, exist_ok=True)
    done = run_python(["-c", code], module=warm_module(backend), cwd=REPO, env=backend_env(backend, folder))
    assert done.returncode == 0, done.stderr[-3000:]
    line = next(line for line in done.stdout.splitlines() if line.startswith("UPDATES "))
    return json.loads(line[len("UPDATES ") :])


def _float32(code: str) -> str:
    return code.replace('"mixed_float16"', '"float32"')


# --- torch ------------------------------------------------------------------------------------------

# The keras.io torch loop; {optimizer} is the optimizer's construction, {factor} the loss's (1e-7: so small that its
# gradients in the float16 layer underflow). The first layer's bias starts at zero, so its update is read exactly.
TORCH_LOOP = """\
import keras
import numpy as np
import torch

keras.mixed_precision.set_global_policy("mixed_float16")
keras.utils.set_random_seed(0)
x = np.random.RandomState(0).normal(size=(64, 16)).astype("float32")
y = keras.ops.convert_to_tensor((x[:, :1] * 2.0).astype("float32"))
model = keras.Sequential(
    [keras.Input((16,)), keras.layers.Dense(32, activation="relu"), keras.layers.Dense(1, dtype="float32")]
)
optimizer = {optimizer}
bias = model.layers[0].bias
updates = []

for step in range(2):
    start = keras.ops.convert_to_numpy(bias).astype("float64")
    predictions = model(x, training=True)
    loss = {factor} * keras.ops.mean(keras.ops.square(predictions - y))
    model.zero_grad()
    loss.backward()
    trainable_weights = [v for v in model.trainable_weights]
    gradients = [v.value.grad for v in trainable_weights]
    with torch.no_grad():
        optimizer.apply(gradients, trainable_weights)
    updates.append(float(np.mean(np.abs(keras.ops.convert_to_numpy(bias).astype("float64") - start))))
print("UPDATES", updates)
"""

# The keras.io torch train_step override, compiled under mixed_float16 (compile() wraps the optimizer) and fitted for
# two steps. The first layer's bias starts at zero, so its update is read exactly however small.
TORCH_TRAIN_STEP = """\
import keras
import numpy as np
import torch

keras.mixed_precision.set_global_policy("mixed_float16")
keras.utils.set_random_seed(0)


class Regressor(keras.Model):
    def train_step(self, data):
        x, y = data
        self.zero_grad()
        y_pred = self(x, training=True)
        loss = self.compute_loss(y=y, y_pred=y_pred)
        loss.backward()
        trainable_weights = [v for v in self.trainable_weights]
        gradients = [v.value.grad for v in trainable_weights]
        with torch.no_grad():
            self.optimizer.apply(gradients, trainable_weights)
        return {"loss": loss}


x = np.random.RandomState(0).normal(size=(128, 16)).astype("float32")
y = (x[:, :1] * 2.0).astype("float32")
inputs = keras.Input((16,))
model = Regressor(inputs, keras.layers.Dense(1, dtype="float32")(keras.layers.Dense(32, activation="relu")(inputs)))
model.compile(optimizer=keras.optimizers.SGD(learning_rate=0.1), loss="mse")
updates, previous = [], np.zeros(32)
for batch in range(2):
    model.fit(x[batch * 64 : batch * 64 + 64], y[batch * 64 : batch * 64 + 64], batch_size=64, epochs=1, verbose=0)
    bias = keras.ops.convert_to_numpy(model.layers[1].bias).astype("float64")
    updates.append(float(np.mean(np.abs(bias - previous))))
    previous = bias
print("UPDATES", updates)
"""

MP201_TORCH = (
    "custom training loop on the torch backend under mixed_float16 set at example.py:5: it applies gradients with "
    "an optimizer that is not a LossScaleOptimizer, so small float16 gradients underflow to zero"
)
MP202_TORCH_LOOP = (
    "the optimizer is a LossScaleOptimizer, which divides the gradients by the loss scale, but in this custom "
    "training loop on the torch backend `backward()` differentiates the unscaled loss: updates are 32768x too small "
    "and training silently stalls; differentiate optimizer.scale_loss(loss)"
)
MP202_TORCH_OVERRIDE = (
    "compile() wraps the optimizer in a LossScaleOptimizer, which divides the gradients by the loss scale, but in "
    "this train_step override for the torch backend `backward()` differentiates the unscaled loss: updates are "
    "32768x too small and training silently stalls; differentiate optimizer.scale_loss(loss)"
)


@pytest.mark.parametrize("backend", backend_params("torch"))
def test_mp201_torch_loop_fix_recovers_the_updates_float16_flushed_to_zero(backend, tmp_path):
    code = TORCH_LOOP.format(optimizer="keras.optimizers.SGD(learning_rate=1e5)", factor="1e-7")
    fixed = _fixed(code, "MP201", (25, 9), MP201_TORCH)
    assert fixed == code.replace(
        "optimizer = keras.optimizers.SGD(learning_rate=1e5)",
        "optimizer = keras.optimizers.LossScaleOptimizer(keras.optimizers.SGD(learning_rate=1e5))",
    ).replace(
        "    loss = 1e-7 * keras.ops.mean(keras.ops.square(predictions - y))\n",
        "    loss = 1e-7 * keras.ops.mean(keras.ops.square(predictions - y))\n"
        "    scaled_loss = optimizer.scale_loss(loss)\n",
    ).replace("    loss.backward()", "    scaled_loss.backward()")
    before = _updates(backend, code, tmp_path / "before")
    after = _updates(backend, fixed, tmp_path / "after")
    float32 = _updates(backend, _float32(code), tmp_path / "float32")
    assert before == [0.0, 0.0] and min(float32) > 1e-4  # the float16 layer's gradients flushed to zero: no learning
    assert all(0.9 < a / f < 1.1 for a, f in zip(after, float32)), (after, float32)
    # float32 trains exactly as before: the wrapper scales and unscales by powers of two
    assert _updates(backend, _float32(fixed), tmp_path / "fixed-float32") == float32


@pytest.mark.parametrize("backend", backend_params("torch"))
def test_mp202_torch_loop_fix_scales_the_loss_the_wrapper_unscales(backend, tmp_path):
    code = TORCH_LOOP.format(
        optimizer="keras.optimizers.LossScaleOptimizer(keras.optimizers.SGD(learning_rate=0.1))", factor="1.0"
    )
    fixed = _fixed(code, "MP202", (21, 5), MP202_TORCH_LOOP)
    assert fixed == code.replace(
        "    loss = 1.0 * keras.ops.mean(keras.ops.square(predictions - y))\n",
        "    loss = 1.0 * keras.ops.mean(keras.ops.square(predictions - y))\n"
        "    scaled_loss = optimizer.scale_loss(loss)\n",
    ).replace("    loss.backward()", "    scaled_loss.backward()")
    before = _updates(backend, code, tmp_path / "before")
    after = _updates(backend, fixed, tmp_path / "after")
    float32 = _updates(backend, _float32(fixed), tmp_path / "float32")
    # 32768x too small: the first step's update, and the weights barely move after it (no second step to compare)
    assert 0.5 < before[0] * LOSS_SCALE / float32[0] < 2 and max(before) < min(float32) / 1000, (before, float32)
    assert all(0.9 < a / f < 1.1 for a, f in zip(after, float32)), (after, float32)


@pytest.mark.parametrize("backend", backend_params("torch"))
def test_mp202_torch_train_step_override_fix_trains_at_full_speed(backend, tmp_path):
    fixed = _fixed(TORCH_TRAIN_STEP, "MP202", (15, 9), MP202_TORCH_OVERRIDE)
    assert fixed == TORCH_TRAIN_STEP.replace(
        "        loss.backward()",
        "        scaled_loss = self.optimizer.scale_loss(loss)\n        scaled_loss.backward()",
    )
    before = _updates(backend, TORCH_TRAIN_STEP, tmp_path / "before")
    after = _updates(backend, fixed, tmp_path / "after")
    float32 = _updates(backend, _float32(TORCH_TRAIN_STEP), tmp_path / "float32")
    # 32768x too small: the first step's update, and the weights barely move after it (no second step to compare)
    assert 0.5 < before[0] * LOSS_SCALE / float32[0] < 2 and max(before) < min(float32) / 1000, (before, float32)
    assert all(0.9 < a / f < 1.1 for a, f in zip(after, float32)), (after, float32)
    assert _updates(backend, _float32(fixed), tmp_path / "fixed-float32") == float32


# --- JAX ---------------------------------------------------------------------------------------------

# The keras.io JAX loop; {optimizer} is the optimizer's construction, {loss_fn} the loss function (its parameters and
# its return), {scaling} how it scales and {call} the arguments grad_fn is called with. The first layer's bias
# starts at zero; each step's update of it is read off the state the loop carries.
JAX_LOOP = """\
import jax
import keras
import numpy as np

keras.mixed_precision.set_global_policy("mixed_float16")
keras.utils.set_random_seed(0)
x = np.random.RandomState(0).normal(size=(64, 16)).astype("float32")
y = (x[:, :1] * 2.0).astype("float32")
model = keras.Sequential(
    [keras.Input((16,)), keras.layers.Dense(32, activation="relu"), keras.layers.Dense(1, dtype="float32")]
)
optimizer = {optimizer}
optimizer.build(model.trainable_variables)


def compute_loss_and_updates({parameters}):
    y_pred, non_trainable_variables = model.stateless_call(trainable_variables, non_trainable_variables, x)
    loss = {factor} * keras.ops.mean(keras.ops.square(y_pred - y))
{scaling}

grad_fn = jax.value_and_grad(compute_loss_and_updates, has_aux=True)


@jax.jit
def train_step(state, x, y):
    trainable_variables, non_trainable_variables, optimizer_variables = state
    {bound} = grad_fn({arguments})
    trainable_variables, optimizer_variables = optimizer.stateless_apply(
        optimizer_variables, grads, trainable_variables
    )
    return loss, (trainable_variables, non_trainable_variables, optimizer_variables)


state = (
    [v.value for v in model.trainable_variables],
    [v.value for v in model.non_trainable_variables],
    [v.value for v in optimizer.variables],
)
updates = []
for step in range(3):
    start = np.asarray(state[0][1], "float64")
    loss, state = train_step(state, x, y)
    updates.append(float(np.mean(np.abs(np.asarray(state[0][1], "float64") - start))))
print("UPDATES", updates)
"""
_AS_WRITTEN = {
    "parameters": "trainable_variables, non_trainable_variables, x, y",
    "scaling": "    return loss, non_trainable_variables\n",
    "bound": "(loss, non_trainable_variables), grads",
    "arguments": "trainable_variables, non_trainable_variables, x, y",
}
# what the MP201 and MP202 messages say to write
_STATELESS_SCOPE = {
    "parameters": "trainable_variables, non_trainable_variables, optimizer_variables, x, y",
    "scaling": "    with keras.StatelessScope(state_mapping=list(zip(optimizer.variables, optimizer_variables))):\n"
    "        scaled_loss = optimizer.scale_loss(loss)\n"
    "    return scaled_loss, (loss, non_trainable_variables)\n",
    "bound": "(_, (loss, non_trainable_variables)), grads",
    "arguments": "trainable_variables, non_trainable_variables, optimizer_variables, x, y",
}
# the plain call a fix would write: it reads the optimizer's own loss-scale variable, never the carried one
_PLAIN_SCALE_LOSS = {
    **_AS_WRITTEN,
    "scaling": "    scaled_loss = optimizer.scale_loss(loss)\n    return scaled_loss, (loss, non_trainable_variables)\n",
    "bound": "(_, (loss, non_trainable_variables)), grads",
}
PLAIN = "keras.optimizers.SGD(learning_rate={lr})"
# the loss scale doubles after every finite step: what 2000 steps do to the default wrapper
WRAPPED = "keras.optimizers.LossScaleOptimizer(keras.optimizers.SGD(learning_rate={lr}), dynamic_growth_steps=1)"


def _jax(optimizer: str, lr: str, factor: str, variant: dict) -> str:
    return JAX_LOOP.format(optimizer=optimizer.format(lr=lr), factor=factor, **variant)


@pytest.mark.parametrize("backend", backend_params("jax"))
def test_jax_loop_with_a_plain_optimizer_flushes_float16_gradients_to_zero(backend, tmp_path):
    code = _jax(PLAIN, "1e5", "1e-7", _AS_WRITTEN)
    assert [(d.rule_id, d.line, d.column, d.fix_safety) for d in lint_code(code, select=["MP2"]).diagnostics] == [
        ("MP201", 29, 48, FixSafety.NONE)
    ]
    before = _updates(backend, code, tmp_path / "before")
    float32 = _updates(backend, _float32(code), tmp_path / "float32")
    assert before == [0.0, 0.0, 0.0] and min(float32) > 1e-4
    scaled = _updates(backend, _jax(WRAPPED, "1e5", "1e-7", _STATELESS_SCOPE), tmp_path / "scaled")
    assert all(0.9 < s / f < 1.1 for s, f in zip(scaled, float32)), (scaled, float32)


@pytest.mark.parametrize("backend", backend_params("jax"))
def test_jax_loop_with_a_wrapper_needs_the_carried_scale_not_a_plain_scale_loss(backend, tmp_path):
    code = _jax(WRAPPED, "1.0", "1e-3", _AS_WRITTEN)
    assert [(d.rule_id, d.line, d.column, d.fix_safety) for d in lint_code(code, select=["MP2"]).diagnostics] == [
        ("MP202", 28, 46, FixSafety.NONE)
    ]
    before = _updates(backend, code, tmp_path / "before")
    float32 = _updates(backend, _float32(_jax(PLAIN, "1.0", "1e-3", _AS_WRITTEN)), tmp_path / "float32")
    # the wrapper divides gradients of the unscaled loss by the scale it carries: 32768, then 65536, then 131072
    assert all(0.5 < b * LOSS_SCALE * 2**i / f < 2 for i, (b, f) in enumerate(zip(before, float32))), (before, float32)
    scoped = _updates(backend, _jax(WRAPPED, "1.0", "1e-3", _STATELESS_SCOPE), tmp_path / "scoped")
    assert all(0.9 < s / f < 1.1 for s, f in zip(scoped, float32)), (scoped, float32)
    # a plain scale_loss keeps scaling by 32768 while the carried scale doubles: right once, then half, a quarter
    plain = _updates(backend, _jax(WRAPPED, "1.0", "1e-3", _PLAIN_SCALE_LOSS), tmp_path / "plain")
    assert all(0.9 < p * 2**i / f < 1.1 for i, (p, f) in enumerate(zip(plain, float32))), (plain, float32)
    assert lint_code(_jax(WRAPPED, "1.0", "1e-3", _STATELESS_SCOPE), select=["MP2"]).diagnostics == []
