"""The base class of the rules on a custom loop's gradient sites (MP201-MP204)."""

from __future__ import annotations

from collections.abc import Iterator

from mplint.checks.loss_scaling.backend_loops import BackendLoops, has_backend_loops
from mplint.checks.loss_scaling.optimizer_flow import OptimizerFlow
from mplint.checks.loss_scaling.sites import GradientSite, has_gradient_sites
from mplint.engine.rule import Rule


class GradientSiteRule(Rule):
    """What the rules on a custom loop's gradient sites under mixed_float16 (MP201-MP204) share: where
    they can fire (a file that takes a ``GradientTape``'s gradient) and when (under float16 policies)."""

    triggers = (b"GradientTape",)
    governed_by_policy = True
    # Also Keras 3's loops on the JAX and torch backends (``backend_loops``); their triggers are the rule's to add.
    backend_loops = False

    @classmethod
    def candidate(cls, code) -> bool:
        return has_gradient_sites(code) or cls.backend_loops and has_backend_loops(code)

    @classmethod
    def active_for(cls, facts) -> bool:
        return facts.float16

    def running_sites(self) -> Iterator[tuple[GradientSite, bool]]:
        """The file's gradient sites whose arm runs on the target (a version-guarded arm that never does has no
        Keras range), each with whether its own range reaches Keras 3 (its guards narrow the program's)."""
        sites = list(self.context.analysis(OptimizerFlow).sites)
        if self.backend_loops:
            sites.extend(self.context.analysis(BackendLoops).sites)
        for site in sites:
            if site.keras is not None:
                yield site, site.keras.newest == 3
