"""The math a hand-written loss does that overflows in float16, shared by MP103 (libcst) and the project
summaries of loss functions (CPython's tree): by path after the namespace (``tf.``, ``keras.``)."""

from __future__ import annotations

REDUCTIONS = frozenset({"reduce_mean", "reduce_sum", "math.reduce_mean", "math.reduce_sum", "ops.mean", "ops.sum"})
SUMS = frozenset({"reduce_sum", "math.reduce_sum", "ops.sum"})
GROWING = frozenset(
    {"square", "math.square", "exp", "math.exp", "pow", "math.pow", "ops.square", "ops.exp", "ops.power"}
)
REDUCTION_NAMES = frozenset(path.rsplit(".", 1)[-1] for path in REDUCTIONS)
GROWING_NAMES = frozenset(path.rsplit(".", 1)[-1] for path in GROWING)
