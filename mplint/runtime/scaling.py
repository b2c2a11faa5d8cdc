"""Loss scaling that is right on both Keras generations and on every Keras 3 backend.

Keras 2: ``get_scaled_loss`` before the gradient, ``get_unscaled_gradients`` after it.
Keras 3 (TensorFlow, JAX, torch): ``scale_loss`` before the gradient; ``apply_gradients``, ``apply`` and
``stateless_apply`` unscale by themselves, so unscaling here would divide twice (MP203). On JAX, where Keras's
LossScaleOptimizer has no eager ``apply``, the eager step goes through ``stateless_apply``. In a JAX stateless loop
the scale is one of the optimizer variables the loop carries: pass them, and the loss is scaled by that value,
not by the one the optimizer held when the step was traced.
"""

from __future__ import annotations

import contextlib

from mplint.runtime.keras_generation import generation_of, keras_module


def is_keras2_loss_scale_optimizer(opt) -> bool:
    return hasattr(opt, "get_scaled_loss") and hasattr(opt, "get_unscaled_gradients")


def is_keras3_loss_scale_optimizer(opt) -> bool:
    return hasattr(opt, "inner_optimizer") and hasattr(opt, "scale_loss") and not is_keras2_loss_scale_optimizer(opt)


def is_loss_scale_optimizer(opt) -> bool:
    return is_keras2_loss_scale_optimizer(opt) or is_keras3_loss_scale_optimizer(opt)


def wrap_optimizer(opt):
    """``opt`` wrapped in the generation's LossScaleOptimizer when the global policy is mixed_float16.

    Returned unchanged under float32 and bfloat16 policies (nothing to scale) and when it is
    already a LossScaleOptimizer.
    """
    if is_loss_scale_optimizer(opt):
        return opt
    keras = keras_module(generation_of(opt))
    if keras.mixed_precision.global_policy().name != "mixed_float16":
        return opt
    return keras.mixed_precision.LossScaleOptimizer(opt)


def scale_loss(opt, loss, optimizer_variables=None):
    """The loss to differentiate: scaled when ``opt`` scales, else ``loss`` itself.

    Every Keras 3 optimizer scales: a LossScaleOptimizer by its dynamic scale, any other by its
    ``loss_scale_factor`` (``apply_gradients`` divides by it, so an unscaled loss would make the
    updates that many times too small). ``optimizer_variables``: in a stateless loop (JAX), the values of
    ``opt.variables`` the step carries, whose dynamic scale is the one to use."""
    if is_keras2_loss_scale_optimizer(opt):
        return opt.get_scaled_loss(loss)
    if generation_of(opt) != 3 or not callable(getattr(opt, "scale_loss", None)):
        return loss
    if optimizer_variables is None:
        return opt.scale_loss(loss)
    keras = keras_module(3)
    with keras.StatelessScope(state_mapping=list(zip(opt.variables, optimizer_variables))):
        return opt.scale_loss(loss)


def apply_gradients(opt, grads_and_vars):
    """Apply gradients of the loss returned by :func:`scale_loss`, unscaling exactly once."""
    pairs = list(grads_and_vars)
    if is_keras2_loss_scale_optimizer(opt):
        grads = opt.get_unscaled_gradients([g for g, _ in pairs])
        pairs = list(zip(grads, (v for _, v in pairs)))
    if _needs_stateless_step(opt):
        return _stateless_step(opt, [g for g, _ in pairs], [v for _, v in pairs])
    with _no_grad(opt):
        return opt.apply_gradients(pairs)


def apply(opt, grads, trainable_variables=None):
    """``opt.apply(grads, trainable_variables)`` (Keras 3's loop on torch and JAX) for gradients of the loss
    :func:`scale_loss` returned, unscaling exactly once (Keras 2 has only ``apply_gradients``)."""
    if generation_of(opt) == 2:
        return apply_gradients(opt, zip(grads, trainable_variables))
    if _needs_stateless_step(opt):
        return _stateless_step(opt, list(grads), trainable_variables)
    with _no_grad(opt):
        return opt.apply(grads, trainable_variables)


def _needs_stateless_step(opt) -> bool:
    """Keras 3's LossScaleOptimizer cannot ``apply`` eagerly on JAX (its ``ops.cond`` traces the variable updates,
    which escape the trace): its step is made stateless there."""
    return is_keras3_loss_scale_optimizer(opt) and keras_module(3).backend.backend() == "jax"


def _stateless_step(opt, grads, trainable_variables=None) -> None:
    """``opt.apply(grads, trainable_variables)`` through ``stateless_apply``, the new values assigned back."""
    variables = list(trainable_variables if trainable_variables is not None else opt._trainable_variables)
    if not opt.built:
        opt.build(variables)
    new_variables, new_optimizer_variables = opt.stateless_apply(
        [v.value for v in opt.variables], grads, [v.value for v in variables]
    )
    for variable, value in zip([*variables, *opt.variables], [*new_variables, *new_optimizer_variables]):
        variable.assign(value)


def _no_grad(opt):
    """On the torch backend, the update is no part of the graph autograd records (as in Keras's own trainer)."""
    if generation_of(opt) == 3 and keras_module(3).backend.backend() == "torch":
        import torch

        return torch.no_grad()
    return contextlib.nullcontext()


def stateless_apply(opt, optimizer_variables, grads, trainable_variables):
    """``opt.stateless_apply(...)`` (a JAX loop) for gradients of the loss :func:`scale_loss` returned with the same
    ``optimizer_variables``: a LossScaleOptimizer unscales them once, skips the step on inf/NaN and updates its
    scale. Returns ``(trainable_variables, optimizer_variables)``. Keras 3 only."""
    if generation_of(opt) == 2:
        raise TypeError("stateless_apply is Keras 3's: a Keras 2 optimizer has only apply_gradients")
    return opt.stateless_apply(optimizer_variables, grads, trainable_variables)
