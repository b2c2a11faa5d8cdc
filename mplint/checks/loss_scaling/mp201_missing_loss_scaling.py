"""MP201: a custom loop under mixed_float16 whose optimizer has no LossScaleOptimizer."""

from __future__ import annotations

import libcst as cst

from mplint.analysis.keras_guards import code_range, note_safety
from mplint.checks.loss_scaling._gradient_site_rule import GradientSiteRule
from mplint.checks.loss_scaling.backend_loops import JAX_SCALED_LOSS, TRIGGERS, describe_loop
from mplint.checks.loss_scaling.fixes import (
    lso_spelling,
    range_note,
    scaling_insertion,
    wrap_construction,
    written_names,
)
from mplint.checks.loss_scaling.sites import describe_when
from mplint.diagnostics import Fix, FixSafety
from mplint.knowledge.loss_scale_names import UNSCALE_METHOD, scale_method


class MissingLossScaling(GradientSiteRule):
    id = "MP201"
    program_choice = True
    triggers = (*GradientSiteRule.triggers, *TRIGGERS)
    backend_loops = True

    def visit_Module(self, node: cst.Module) -> None:
        for site, g3 in self.running_sites():
            live = [p for p in site.paths if not p.float32]
            hits = [p for p in live if p.origin is not None and p.origin.wrap == "none" and (p.scaled_by is None or g3)]
            if not hits:
                continue
            when = describe_when(site.paths, hits)
            message = (
                f"{describe_loop(site)} under {self.context.facts.describe_policy()}: {when}it applies gradients with "
                "an optimizer that is not a LossScaleOptimizer, so small float16 gradients underflow to zero"
            )
            if hits[0].origin.made_by:
                message += f" ({hits[0].origin.made_by} returns a plain optimizer)"
            dead = [test for test, value in hits[0].tests.items() if not value]
            if dead:
                message += f" (the `{dead[0]}` branch never runs: this optimizer is never wrapped)"
            fix = None if site.conditional or site.backend == "jax" else self._fix(site, site.origin, g3)
            if fix is not None and fix.safety is not FixSafety.SAFE:
                message += f" ({self._note})"
            if site.backend == "jax":
                message += (
                    f" (no fix on JAX: wrap the optimizer in a LossScaleOptimizer and differentiate {JAX_SCALED_LOSS})"
                )
            self.report(site.apply_call, message, fix, related=hits[0].origin.related)

    def _fix(self, site, origin, g3: bool) -> Fix | None:
        """The wrapper in the spelling the whole range of its construction has, and the scaling calls of the newest
        generation of the site's range: safe where every version of each range has every name written there."""
        if origin is None or origin.construction is None:
            return None
        made_on = code_range(self.context, origin.construction) or site.keras  # the wrapper runs where it is built
        wrapped = wrap_construction(self.context, origin.construction, made_on)
        if wrapped is None:
            return None
        scale, unscale = site.scaled_by is None, not g3 and not site.unscaled
        insertion = scaling_insertion(self.context, site, scale=scale, unscale=unscale)
        if insertion is None:
            return None
        names = ({scale_method(3 if g3 else 2)} if scale else set()) | ({UNSCALE_METHOD} if unscale else set())
        self._note = range_note(self.context, names, site.keras) or range_note(
            self.context, written_names(lso_spelling(self.context, made_on)[0]), made_on
        )
        new, imports = wrapped
        return Fix({origin.construction: new, **insertion}, note_safety(self._note), imports=imports)
