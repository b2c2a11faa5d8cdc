"""MP203: gradients divided by the loss scale twice."""

from __future__ import annotations

import libcst as cst

from mplint.analysis.optimizer_flow import GradientSiteRule, OptimizerFlow
from mplint.diagnostics import Fix, FixSafety


class DoubleUnscale(GradientSiteRule):
    id = "MP203"
    def visit_Module(self, node: cst.Module) -> None:
        flow = self.context.analysis(OptimizerFlow)
        for site in flow.sites:
            if site.origin is None or site.origin.wrap not in ("explicit", "auto"):
                continue
            if self.context.generation == 3:
                # apply_gradients/apply already divide by the scale; get_unscaled_gradients is MP502's.
                extra = [op for op in site.ops if op.kind == "manual_unscale"]
                why = "apply_gradients already divides the gradients by the loss scale"
            else:
                unscales = [op for op in site.ops if op.kind in ("unscale", "manual_unscale")]
                extra = unscales[1:] if len(unscales) > 1 else []
                why = "the gradients were already unscaled"
            for op in extra:
                self.report(op.node, f"{why}: this second unscale makes updates 32768x too small", self._fix(op))

    def _fix(self, op) -> Fix | None:
        # Only a reassignment of the same name can go without renaming its uses.
        if op.stmt is None or len(op.targets) != 1 or op.inputs != frozenset(op.targets):
            return None
        return Fix({op.stmt: cst.RemovalSentinel.REMOVE}, FixSafety.SAFE)
