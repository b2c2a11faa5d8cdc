"""MP206: loss scaling under mixed_bfloat16, whose exponent range is float32's."""

from __future__ import annotations

import libcst as cst

from mplint.analysis.keras_guards import code_range
from mplint.checks.loss_scaling.fixes import simple_line_of
from mplint.checks.loss_scaling.sites import is_lso_call, lso_inner, method_name
from mplint.diagnostics import Fix, FixSafety
from mplint.engine.rule import Rule
from mplint.knowledge.loss_scale_names import LSO, SCALE_METHODS, UNSCALE_METHOD

_WHY = "bfloat16 has float32's exponent range, so loss scaling only costs time"


class LossScalingWithBfloat16(Rule):
    id = "MP206"
    triggers = (b"LossScaleOptimizer", b"scale")

    @classmethod
    def candidate(cls, code) -> bool:
        return code.calls_any(LSO, UNSCALE_METHOD, *SCALE_METHODS)

    @classmethod
    def active_for(cls, facts):
        # Library code keeps its loss scaling: its users may pick mixed_float16, which needs it, whatever policy
        # the repository's own programs run it under.
        return facts.bfloat16_only and not facts.library_context

    def report(self, node, message, fix=None, severity=None, related=()) -> None:
        if code_range(self.context, node) is not None:  # else a guarded arm that never runs on the target
            super().report(node, message, fix, severity, related)  # unwrapping is right on every generation

    def visit_Call(self, node: cst.Call) -> None:
        if is_lso_call(node):
            inner = lso_inner(node)
            self.report(node, f"LossScaleOptimizer under mixed_bfloat16: {_WHY}", self._unwrap(node, inner))
        elif method_name(node) in SCALE_METHODS | {UNSCALE_METHOD} and len(node.args) == 1 and not node.args[0].keyword:
            self.report(
                node, f"{method_name(node)}() under mixed_bfloat16: {_WHY}", self._unwrap(node, node.args[0].value)
            )

    def _unwrap(self, call: cst.Call, inner: cst.BaseExpression | None) -> Fix | None:
        """The call becomes its argument; ``x = f(x)`` goes away entirely."""
        if inner is None:
            return None
        stmt = simple_line_of(self.context, call)
        if stmt is not None and len(stmt.body) == 1 and isinstance(stmt.body[0], cst.Assign):
            assign = stmt.body[0]
            if assign.value is call and len(assign.targets) == 1 and inner.deep_equals(assign.targets[0].target):
                return Fix({stmt: cst.RemovalSentinel.REMOVE}, FixSafety.SAFE)
        return Fix({call: inner}, FixSafety.SAFE)
