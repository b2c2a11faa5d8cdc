"""The base class of the rules on a custom loop's gradient sites (MP201-MP203)."""

from __future__ import annotations

from mplint.analysis.optimizer_flow import has_gradient_sites
from mplint.engine.rule import Rule


class GradientSiteRule(Rule):
    """What the rules on a custom loop's gradient sites under mixed_float16 (MP201-MP203) share: where
    they can fire (a file that takes a ``GradientTape``'s gradient) and when (under float16 policies)."""

    triggers = (b"GradientTape",)

    @classmethod
    def candidate(cls, code) -> bool:
        return has_gradient_sites(code)

    @classmethod
    def active_for(cls, facts) -> bool:
        return facts.float16
