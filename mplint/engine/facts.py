"""What the engine needs of the facts a project hands to each module (``mplint.project.facts.ProjectFacts``).

The engine reads the project's re-exports and function summaries for its pre-filters and the context's
``summary``, the Keras generation for ``FileContext.generation`` and the module's context record for reports;
rules see the whole of the project's facts through ``FileContext.facts``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from mplint.engine.summaries import FunctionSummary, SummaryKind


class Generation(Protocol):
    value: int  # the newest Keras generation the module targets (0: TF1, 1, 2 or 3)


class StackRange(Protocol):
    """The releases of one trainer stack a module may run with (``mplint.project.trainer_target.StackTarget``)."""

    pinned: bool

    @property
    def label(self) -> str: ...

    @property
    def described(self) -> str: ...

    def at_least(self, version: str) -> bool: ...

    def admits_from(self, version: str) -> bool: ...

    def admits_before(self, version: str) -> bool: ...


class Facts(Protocol):
    #: The project's re-exports of Keras names: alias path -> the Keras path it stands for.
    reexports: dict
    generation: Generation
    #: The module's functions and methods nothing in the project names (``f``, ``Class.method``).
    uncalled: frozenset[str]
    #: No code of the module runs: no program reaches it and nothing could import it.
    never_runs: bool
    distribution: str  # the distribution that publishes the module ("" where the project publishes none of it)

    @property
    def reexported_names(self) -> dict[str, frozenset[str]]:
        """Last name of each re-export -> the parts of the Keras path it stands for."""

    @property
    def summarized_names(self) -> dict[str, frozenset[str]]:
        """Summary kind -> last names of the project's functions with that summary."""

    def summaries_of(self, kind: SummaryKind) -> dict[str, FunctionSummary]:
        """Qualified function name -> its summary of ``kind``."""

    @property
    def orders_policies(self) -> bool:
        """A policy set by this module's own top-level code runs at a known statement (see ``at``)."""

    def at(self, function: str, line: int | None) -> Facts:
        """The facts in force for code that runs in ``function`` (a top-level function of the module), or at top
        level (``function`` "") in the statement starting on ``line``: a setter that runs after it drops out."""

    def context_record(self) -> dict:
        """The module's mixed-precision context and target, for JSON and SARIF."""

    def trainer_target(self, stack: str) -> StackRange:
        """The releases of a trainer stack (``knowledge.trainer_versions.STACKS``) the module may run with."""


# The project's tables (re-exports, function summaries) are each one dict shared by every module's facts: what is
# derived from one is computed once per table (the table is kept alive with its result, so its id is never reused).
_PER_TABLE: dict[int, tuple[dict, dict]] = {}


def per_project_table(table: dict, key, compute):
    """``compute()`` once per (project table, key)."""
    entry = _PER_TABLE.get(id(table))
    if entry is None or entry[0] is not table:
        if len(_PER_TABLE) > 64:
            _PER_TABLE.clear()
        entry = _PER_TABLE[id(table)] = (table, {})
    results = entry[1]
    if key not in results:
        results[key] = compute()
    return results[key]
