"""The names of the loss-scaling API, shared by the loop analysis (libcst) and the project summaries (CPython's tree)."""

from __future__ import annotations

LSO = "LossScaleOptimizer"
SCALE_METHODS = frozenset({"scale_loss", "get_scaled_loss"})
UNSCALE_METHOD = "get_unscaled_gradients"
SCALE_ATTRS = frozenset({"dynamic_scale", "loss_scale"})  # dividing by one of these unscales by hand
