"""MP201 and MP202 on Keras 3's custom loops on the JAX and torch backends, in the shapes the YAML examples do not
cover: the other JAX gradient transforms and their bindings, and where the rules stay silent (no Keras optimizer, no
float16 policy, a range without Keras 3, a ``backward()`` that is not a loss's)."""

from __future__ import annotations

import pytest

from mplint.diagnostics import FixSafety
from mplint.testing import check_code

JAX_HEAD = """import jax
import keras

keras.mixed_precision.set_global_policy("{policy}")
model = keras.Sequential([keras.layers.Dense(64), keras.layers.Dense(1, dtype="float32")])
optimizer = keras.optimizers.Adam(1e-3)


def loss_fn(trainable_variables, non_trainable_variables, x, y):
    y_pred, non_trainable_variables = model.stateless_call(trainable_variables, non_trainable_variables, x)
    loss = keras.ops.mean(keras.ops.square(y_pred - y))
    return {returned}


"""
MP201_JAX = (
    "custom training loop on the JAX backend under mixed_float16 set at example.py:4: it applies gradients with an "
    "optimizer that is not a LossScaleOptimizer, so small float16 gradients underflow to zero (no fix on JAX: wrap "
    "the optimizer in a LossScaleOptimizer and differentiate optimizer.scale_loss(loss) computed under "
    "keras.StatelessScope(state_mapping=list(zip(optimizer.variables, optimizer_variables))), with the optimizer "
    "variables the loop carries)"
)


def _found(code: str, rule: str = "MP201", **kwargs) -> list[tuple]:
    return [
        (d.rule_id, d.line, d.column, d.message, d.fix_safety)
        for d in check_code(code, select=[rule], **kwargs).diagnostics
    ]


@pytest.mark.parametrize(
    "returned, step",
    [
        (
            "loss",
            "grad_fn = jax.grad(loss_fn)\n"
            "grads = grad_fn(state[0], state[1], x, y)\n"
            "new_state = optimizer.stateless_apply(state[2], grads, state[0])\n",
        ),
        (
            "loss, non_trainable_variables",
            "grads, non_trainable_variables = jax.grad(loss_fn, has_aux=True)(state[0], state[1], x, y)\n"
            "new_state = optimizer.stateless_apply(state[2], grads, state[0])\n",
        ),
        (
            "loss, non_trainable_variables",
            "(loss, aux), grads = jax.value_and_grad(loss_fn, has_aux=True)(state[0], state[1], x, y)\n"
            "clipped = [g * 0.5 for g in grads]\n"
            "new_state = optimizer.stateless_apply(state[2], grads=clipped, trainable_variables=state[0])\n",
        ),
    ],
    ids=["grad-bound-to-a-name", "grad-with-aux-called-directly", "value-and-grad-through-a-renaming"],
)
def test_each_jax_gradient_transform_and_binding_is_a_loop(returned, step):
    code = JAX_HEAD.format(policy="mixed_float16", returned=returned) + step
    line = len(JAX_HEAD.format(policy="x", returned="x").splitlines()) + len(step.splitlines())
    assert _found(code) == [("MP201", line, 13, MP201_JAX, FixSafety.NONE)]


def test_a_jax_loss_function_of_another_module_is_not_guessed():
    """What an imported function returns is unknown here (Keras's own ``compute_loss_and_updates`` scales): no loop."""
    code = JAX_HEAD.format(policy="mixed_float16", returned="loss").replace(
        "import keras\n", "import keras\nfrom losses import compute_loss_and_updates\n"
    ) + (
        "grads = jax.grad(compute_loss_and_updates)(state[0], state[1], x, y)\n"
        "new_state = optimizer.stateless_apply(state[2], grads, state[0])\n"
    )
    assert _found(code) == []


TORCH = """import keras
import torch

keras.mixed_precision.set_global_policy("{policy}")
model = keras.Sequential([keras.layers.Dense(64), keras.layers.Dense(1, dtype="float32")])
optimizer = {optimizer}

for x, y in batches:
    loss = keras.ops.mean(keras.ops.square(model(x) - y))
    model.zero_grad()
    {backward}
    weights = model.trainable_weights
    with torch.no_grad():
        optimizer.apply([w.value.grad for w in weights], weights)
"""
TORCH_MESSAGE = (
    "custom training loop on the torch backend under mixed_float16 set at example.py:4: it applies gradients with "
    "an optimizer that is not a LossScaleOptimizer, so small float16 gradients underflow to zero"
)


def test_torch_loop_with_a_keras_optimizer_is_found_and_fixed():
    code = TORCH.format(policy="mixed_float16", optimizer="keras.optimizers.SGD(0.1)", backward="loss.backward()")
    assert _found(code) == [("MP201", 14, 9, TORCH_MESSAGE, FixSafety.SAFE)]
    fixed = check_code(code, select=["MP201"], fix=True)
    assert fixed.diagnostics == []
    assert fixed.fixed_code == code.replace(
        "optimizer = keras.optimizers.SGD(0.1)",
        "optimizer = keras.optimizers.LossScaleOptimizer(keras.optimizers.SGD(0.1))",
    ).replace(
        "    model.zero_grad()\n    loss.backward()",
        "    scaled_loss = optimizer.scale_loss(loss)\n    model.zero_grad()\n    scaled_loss.backward()",
    )


def test_torch_loop_whose_loss_is_bound_in_another_block_gets_no_fix():
    code = TORCH.format(
        policy="mixed_float16", optimizer="keras.optimizers.SGD(0.1)", backward="loss.backward()"
    ).replace("    loss = keras", "    if True:\n        loss = keras")
    assert _found(code) == [("MP201", 15, 9, TORCH_MESSAGE, FixSafety.NONE)]


@pytest.mark.parametrize(
    "policy, optimizer, backward",
    [
        ("mixed_bfloat16", "keras.optimizers.SGD(0.1)", "loss.backward()"),
        ("float32", "keras.optimizers.SGD(0.1)", "loss.backward()"),
        ("mixed_float16", "torch.optim.SGD(params, lr=0.1)", "loss.backward()"),
        ("mixed_float16", "make_optimizer()", "loss.backward()"),
        ("mixed_float16", "keras.optimizers.SGD(0.1)", "loss.backward(torch.ones_like(loss))"),
    ],
    ids=["bfloat16", "float32", "torch-optimizer", "optimizer-of-unknown-kind", "backward-of-a-non-scalar"],
)
def test_torch_backend_loop_is_silent_without_clear_evidence(policy, optimizer, backward):
    code = TORCH.format(policy=policy, optimizer=optimizer, backward=backward)
    assert _found(code) == [] and _found(code, "MP202") == []


def test_a_target_without_keras_3_has_no_backend_loops():
    """Keras 2 (the config says so) has neither ``stateless_apply`` nor a torch backend: the code is not such a loop."""
    code = TORCH.format(policy="mixed_float16", optimizer="keras.optimizers.SGD(0.1)", backward="loss.backward()")
    assert _found(code, keras=2) == []


def test_torch_loop_scaled_with_a_plain_optimizer_is_still_missing_the_wrapper():
    """Keras 3's ``scale_loss`` on a plain optimizer returns the loss as it is: nothing scales."""
    code = TORCH.format(
        policy="mixed_float16",
        optimizer="keras.optimizers.SGD(0.1)",
        backward="optimizer.scale_loss(loss).backward()",
    )
    assert [f[:3] for f in _found(code)] == [("MP201", 14, 9)]
    assert _found(code, "MP202") == []


KERAS_OWN_JAX_TRAINER = """import jax
import keras

keras.mixed_precision.set_global_policy("mixed_float16")


class Trainer(keras.Model):
    def compute_loss_and_updates(self, trainable_variables, non_trainable_variables, optimizer_variables, x, y,
                                 training=False):
        y_pred, non_trainable_variables = self.stateless_call(trainable_variables, non_trainable_variables, x)
        loss = self.compute_loss(x, y, y_pred)
        unscaled_loss = loss
        if training and self.optimizer is not None:
            mapping = list(zip(self.optimizer.variables, optimizer_variables))
            with keras.StatelessScope(state_mapping=mapping):
                loss = self.optimizer.scale_loss(loss)
        return loss, (unscaled_loss, non_trainable_variables)

    def train_step(self, state, data):
        trainable_variables, non_trainable_variables, optimizer_variables = state
        x, y = data
        grad_fn = jax.value_and_grad(self.compute_loss_and_updates, has_aux=True)
        (loss, aux), grads = grad_fn(
            trainable_variables, non_trainable_variables, optimizer_variables, x, y, training={training}
        )
        trainable_variables, optimizer_variables = self.optimizer.stateless_apply(
            optimizer_variables, grads, trainable_variables
        )
        return {{"loss": aux[0]}}, (trainable_variables, aux[1], optimizer_variables)


model = Trainer(keras.Input((4,)), keras.layers.Dense(1, dtype="float32")(keras.Input((4,))))
model.compile(optimizer="adam", loss="mse")
"""


def test_scaling_under_a_test_of_the_loss_function_s_own_arguments_is_the_call_s_to_decide():
    """Keras's own JAX trainer scales under ``if training and self.optimizer is not None:``, ``training`` being an
    argument of the loss function: its paths are the call's, not the program's flags, and are not judged."""
    assert _found(KERAS_OWN_JAX_TRAINER.format(training="True"), "MP202") == []
