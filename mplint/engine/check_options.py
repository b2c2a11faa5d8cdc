"""What a check of one file is asked to do; free of libcst, so warm (cached) runs never import it."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from mplint.diagnostics import FixSafety

if TYPE_CHECKING:
    from mplint.engine.facts import Facts
    from mplint.engine.rule import Rule

# The engine's own diagnostics (see rules/MP000.yaml ... MP003.yaml).
PARSE_ERROR = "MP000"
FIX_REVERTED = "MP001"
RULE_CRASHED = "MP002"
OVER_BUDGET = "MP003"


@dataclass(frozen=True)
class CheckOptions:
    rules: tuple[type[Rule], ...]
    facts: Facts  # the module's project facts (``mplint.project.facts.ProjectFacts``)
    fix: bool = False
    unsafe_fixes: bool = False
    #: the rules' ``candidate`` tests (off only to prove in tests that they hide no finding)
    prefilter: bool = True
    #: CPython parsed these very bytes for the project facts: with no rule admitted, no parse is needed here
    parses: bool = False

    def may_apply(self, safety: FixSafety) -> bool:
        return self.fix and (safety is FixSafety.SAFE or (safety is FixSafety.UNSAFE and self.unsafe_fixes))
