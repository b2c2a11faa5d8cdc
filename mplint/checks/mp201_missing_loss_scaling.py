"""MP201: a custom loop under mixed_float16 whose optimizer has no LossScaleOptimizer."""

from __future__ import annotations

import libcst as cst

from mplint.analysis.optimizer_flow import (
    GradientSiteRule,
    OptimizerFlow,
    scaling_insertion,
    wrap_construction,
)
from mplint.diagnostics import Fix, FixSafety


class MissingLossScaling(GradientSiteRule):
    id = "MP201"
    def visit_Module(self, node: cst.Module) -> None:
        flow = self.context.analysis(OptimizerFlow)
        g3 = self.context.generation == 3
        for site in flow.sites:
            origin = site.origin
            if origin is None or origin.wrap != "none" or (site.scaled_by is not None and not g3):
                continue
            message = (
                f"custom training loop under {self.context.facts.describe_policy()} applies gradients with an "
                "optimizer that is not a LossScaleOptimizer: small float16 gradients underflow to zero"
            )
            self.report(site.apply_call, message, self._fix(site, origin, g3))

    def _fix(self, site, origin, g3: bool) -> Fix | None:
        if origin.construction is None:
            return None
        wrapped = wrap_construction(self.context, origin.construction)
        if wrapped is None:
            return None
        insertion = scaling_insertion(self.context, site, scale=site.scaled_by is None, unscale=not g3 and not site.unscaled)
        if insertion is None:
            return None
        new, imports = wrapped
        return Fix({origin.construction: new, **insertion}, FixSafety.SAFE, imports=imports)
