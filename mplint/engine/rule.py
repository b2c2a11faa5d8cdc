"""The base class of every rule.

A rule is not a libcst visitor: the engine runs all active rules in one traversal of
the file and calls their ``visit_<Node>(node)`` and ``leave_<Node>(node)`` methods (node
class names as in libcst; return values are ignored, every rule sees every node).
libcst's attribute visitors (``visit_Call_func``) and ``get_metadata`` do not exist here:
the registry rejects such methods, and metadata comes from the ``FileContext``
(``context.position(node)``, ``context.names``, ``context.parent(node)``). Rules learn
about the file and the project only through their context and report ``Finding``s; they
know nothing of the CLI, configs or output formats.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, ClassVar

import libcst as cst

from mplint.diagnostics import Finding, Fix, FixSafety, Related, Severity

if TYPE_CHECKING:
    from mplint.catalog import RuleKey, RuleMeta
    from mplint.engine.code_summary import CodeSummary
    from mplint.engine.context import FileContext
    from mplint.engine.facts import Facts
    from mplint.engine.summaries import SummaryKind


class _CatalogEntry:
    """A rule's whole catalog entry (prose, examples), read from its YAML the first time it is asked for."""

    def __get__(self, rule: Rule | None, owner: type[Rule]) -> RuleMeta:
        from mplint.catalog import rule_meta

        return rule_meta(owner.id)


class Rule:
    #: Catalog ID, e.g. "MP101"; the rule's YAML in rules/ carries the rest.
    id: ClassVar[str]
    #: Byte strings or compiled byte regexes of which a file must contain at least one for
    #: the rule to run on it (the engine never parses a file no active rule admits).
    #: Empty means every file. The second pre-filter is ``candidate``, on what the file's code mentions.
    triggers: ClassVar[tuple[bytes | re.Pattern[bytes], ...]] = ()
    #: Names of which a file must hold at least one as well, in its text or as its top-level package (a relative
    #: import inside package ``apex`` names apex): what every candidate of the rule imports. Empty: no such name.
    requires: ClassVar[tuple[bytes, ...]] = ()
    #: Kinds of project function summaries (``mplint.engine.summaries``) the rule reads at call sites: the
    #: names of the project's functions of these kinds are triggers too (a call is all such a file may show).
    summary_triggers: ClassVar[tuple[SummaryKind, ...]] = ()
    #: What a check needs of the catalog (name, severity, generations, the fix's title), filled when the rule is
    #: registered; ``meta`` is the whole entry.
    key: ClassVar[RuleKey]
    meta = _CatalogEntry()
    #: API-generation rules: silent in the arms of a version gate (a compatibility shim), except for findings the
    #: rule marks ``guards_read`` after judging the arm's own range itself.
    silent_in_compatibility_branches: ClassVar[bool] = False
    #: Version rules: silent in functions nothing in the project calls (``Facts.uncalled``): dead code breaks on no
    #: version.
    silent_in_uncalled_code: ClassVar[bool] = False
    #: Rules about a program's own choices (layer and batch sizes, where and which policy is set, a loop's missing
    #: LossScaleOptimizer): silent in a published package's modules, whose users make those choices, whatever
    #: policy the repository's own scripts run them under.
    program_choice: ClassVar[bool] = False
    #: Findings about code the policy governs (layers, outputs, losses on them): dropped where the code runs before
    #: the setter of its script or notebook, which the policy then does not govern (``FileContext.facts_at``).
    governed_by_policy: ClassVar[bool] = False

    def __init__(self, context: FileContext) -> None:
        self.context = context
        self.findings: list[Finding] = []

    def __init_subclass__(cls, **kwargs) -> None:
        super().__init_subclass__(**kwargs)
        wrong = [
            name
            for name in vars(cls)
            if name.startswith(("visit_", "leave_"))
            and name.count("_") > 1
            or name in ("get_metadata", "on_visit", "on_leave", "visit_batched")
        ]
        if wrong:
            raise TypeError(
                f"{cls.__name__}.{wrong[0]}: rules get visit_<Node>/leave_<Node> calls only (see mplint.engine.rule)"
            )

    @classmethod
    def active_for(cls, facts: Facts) -> bool:
        """Whether the rule can fire at all in this project (inactive rules cost nothing)."""
        return True

    @classmethod
    def applies_to(cls, facts: Facts) -> bool:
        """Whether the rule runs on a module with these facts: ``active_for``, and a program-choice rule never in
        a published package's module."""
        return not (cls.program_choice and facts.distribution) and cls.active_for(facts)

    @classmethod
    def candidate(cls, code: CodeSummary) -> bool:
        """Whether a file whose code mentions ``code`` can hold a finding of this rule.

        Checked on files the triggers admit, before libcst parses them. It must be a necessary
        condition of every finding: False may never hide one (tests/test_prefilter.py checks
        the rule examples, fixtures and a library corpus with and without it).
        """
        return True

    def report(
        self,
        node: cst.CSTNode,
        message: str,
        fix: Fix | None = None,
        severity: Severity | None = None,
        related: tuple[Related, ...] = (),
    ) -> None:
        """``related``: the other end of a finding that crosses a boundary (path "" for this file)."""
        if self.governed_by_policy and not self.active_for(self.context.facts_at(node)):
            return
        if fix is not None:
            ceiling = self.key.fix_safety  # the catalog's: a rule's code may only lower it, site by site
            if ceiling is FixSafety.NONE or fix.safety is FixSafety.NONE:
                fix = None
            elif ceiling is FixSafety.UNSAFE and fix.safety is FixSafety.SAFE:
                fix.safety = FixSafety.UNSAFE
        if fix is not None and not fix.description:
            fix.description = self.key.fix_title
        self.findings.append(Finding(self.id, node, message, fix, severity, related))
