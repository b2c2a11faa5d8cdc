"""Loss scaling that is right on both Keras generations.

Keras 2: ``get_scaled_loss`` before the gradient, ``get_unscaled_gradients`` after it.
Keras 3: ``scale_loss`` before the gradient; ``apply_gradients`` unscales by itself, so unscaling
here would divide twice (MP203).
"""

from __future__ import annotations

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


def scale_loss(opt, loss):
    """The loss to differentiate: scaled when ``opt`` scales, else ``loss`` itself.

    Every Keras 3 optimizer scales: a LossScaleOptimizer by its dynamic scale, any other by its
    ``loss_scale_factor`` (``apply_gradients`` divides by it, so an unscaled loss would make the
    updates that many times too small)."""
    if is_keras2_loss_scale_optimizer(opt):
        return opt.get_scaled_loss(loss)
    if generation_of(opt) == 3 and callable(getattr(opt, "scale_loss", None)):
        return opt.scale_loss(loss)
    return loss


def apply_gradients(opt, grads_and_vars):
    """Apply gradients of the loss returned by :func:`scale_loss`, unscaling exactly once."""
    pairs = list(grads_and_vars)
    if is_keras2_loss_scale_optimizer(opt):
        grads = opt.get_unscaled_gradients([g for g, _ in pairs])
        pairs = list(zip(grads, (v for _, v in pairs)))
    return opt.apply_gradients(pairs)
