"""MP202: a LossScaleOptimizer is in play but the tape differentiates the unscaled loss (or G2 never unscales)."""

from __future__ import annotations

import libcst as cst

from mplint.analysis.optimizer_flow import GradientSiteRule, OptimizerFlow, scaling_insertion
from mplint.diagnostics import Fix, FixSafety


class UnscaledLossGradient(GradientSiteRule):
    id = "MP202"
    def visit_Module(self, node: cst.Module) -> None:
        flow = self.context.analysis(OptimizerFlow)
        for site in flow.sites:
            if site.origin is None or site.origin.wrap not in ("explicit", "auto"):
                continue
            how = "compile() wraps the optimizer in a LossScaleOptimizer" if site.origin.wrap == "auto" else "the optimizer is a LossScaleOptimizer"
            if self.context.generation == 3:
                self._keras3(site, how)
            else:
                self._keras2(site, how)

    def _keras3(self, site, how: str) -> None:
        if site.scaled_by is not None:
            return
        message = (
            f"{how}, which divides the gradients by the loss scale, but the tape differentiates the unscaled "
            "loss: updates are 32768x too small and training silently stalls; differentiate optimizer.scale_loss(loss)"
        )
        self.report(site.call, message, self._fix(site, scale=True, unscale=False))

    def _keras2(self, site, how: str) -> None:
        manual = any(op.kind == "manual_unscale" for op in site.ops)
        if site.scaled_by is None:
            if site.unscaled or manual:
                message = f"{how}; the gradients are unscaled but the tape differentiates the unscaled loss: updates 32768x too small"
            else:
                message = f"{how}, but the loss is never scaled (get_scaled_loss) so small float16 gradients underflow"
            self.report(site.call, message, self._fix(site, scale=True, unscale=not (site.unscaled or manual)))
        elif not site.unscaled and not manual:
            message = f"{how}; the tape differentiates the scaled loss but get_unscaled_gradients is never called: updates 32768x too large"
            self.report(site.apply_call, message, self._fix(site, scale=False, unscale=True))

    def _fix(self, site, scale: bool, unscale: bool) -> Fix | None:
        insertion = scaling_insertion(self.context, site, scale, unscale)
        return Fix(insertion, FixSafety.SAFE) if insertion else None
