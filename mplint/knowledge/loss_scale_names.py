"""The names of the loss-scaling API, shared by the loop analysis and the rules (libcst), the project summaries
(CPython's tree) and the version table of ``api_versions``."""

from __future__ import annotations

LSO = "LossScaleOptimizer"
# Where the class lives after the Keras namespace: Keras 2/3's (``mixed_precision.LossScaleOptimizer`` folds into
# it) and TF 2.1-2.8's experimental one.
LSO_PATHS = ("optimizers.LossScaleOptimizer", "mixed_precision.experimental.LossScaleOptimizer")
SCALE_METHOD = {2: "get_scaled_loss", 3: "scale_loss"}  # by Keras generation (TF 2.1-2.3 spell it as Keras 2)
SCALE_METHODS = frozenset(SCALE_METHOD.values())
UNSCALE_METHOD = "get_unscaled_gradients"
SCALE_ATTRS = frozenset({"dynamic_scale", "loss_scale"})  # dividing by one of these unscales by hand
# Keras 2 members that Keras 3 dropped (the methods: its apply_gradients unscales) or renamed (the attributes).
KERAS2_METHODS = frozenset({SCALE_METHOD[2], UNSCALE_METHOD})
KERAS3_RENAMES = {"loss_scale": "dynamic_scale", "dynamic_counter": "step_counter"}
# The members of either generation's LossScaleOptimizer that the rules read or write.
LSO_MEMBERS = KERAS2_METHODS | {SCALE_METHOD[3]} | KERAS3_RENAMES.keys() | set(KERAS3_RENAMES.values())
# Attributes only a LossScaleOptimizer has (Keras 2 and 3): `hasattr(opt, ...)` tests for one.
LSO_ATTRS = frozenset(
    {
        "get_scaled_loss",
        "get_unscaled_gradients",
        "loss_scale",
        "dynamic_scale",
        "dynamic_counter",
        "initial_scale",
        "inner_optimizer",
        "dynamic_growth_steps",
    }
)


def scale_method(generation: int) -> str:
    """The method that scales a loss on Keras ``generation``: ``scale_loss`` on 3, ``get_scaled_loss`` before."""
    return SCALE_METHOD[3] if generation == 3 else SCALE_METHOD[2]
