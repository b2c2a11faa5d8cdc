"""What a check produces: findings from rules, diagnostics for users."""

from __future__ import annotations

import enum
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Union

if TYPE_CHECKING:  # libcst stays out of runs that only read the cache
    import libcst as cst


class FixSafety(str, enum.Enum):
    SAFE = "safe"
    UNSAFE = "unsafe"
    NONE = "none"


class Severity(str, enum.Enum):
    ERROR = "error"
    WARNING = "warning"
    INFO = "info"


Replacement = Union["cst.CSTNode", "cst.RemovalSentinel", "cst.FlattenSentinel"]


@dataclass(frozen=True)
class ImportSpec:
    """An import a fix needs: ``import module`` or ``from module import obj [as asname]``."""

    module: str
    obj: str | None = None
    asname: str | None = None


@dataclass
class Fix:
    """A rewrite of nodes of the parsed module, applied by the engine.

    ``replacements`` maps original nodes (by identity) to their replacement.
    All replaced nodes of one fix are applied together or not at all.
    """

    replacements: Mapping[cst.CSTNode, Replacement]
    safety: FixSafety = FixSafety.SAFE
    description: str = ""
    imports: Sequence[ImportSpec] = ()


@dataclass(frozen=True)
class Related:
    """The other end of a finding that crosses a function or module boundary: where a builder puts the
    layer, a factory wraps the optimizer, a constant is written (path as displayed, 1-based line)."""

    path: str
    line: int
    message: str
    cell: int | None = None  # in a notebook: the cell, ``line`` being a line of that cell

    def where(self) -> str:
        return f"{self.path}:cell {self.cell}:{self.line}" if self.cell is not None else f"{self.path}:{self.line}"


@dataclass
class Finding:
    """What a rule reports: a node, a message and maybe a fix."""

    rule_id: str
    node: cst.CSTNode
    message: str
    fix: Fix | None = None
    severity: Severity | None = None  # None: the catalog's; a rule lowers it where the target makes it so
    related: tuple[Related, ...] = ()  # "" as path: the finding's own file
    guards_read: bool = False  # the rule judged the version guards around it itself (no blanket silence there)


@dataclass(frozen=True)
class Edit:
    """Replace [start, end) (1-based lines and columns) with ``text``."""

    line: int
    column: int
    end_line: int
    end_column: int
    text: str


@dataclass(frozen=True)
class Diagnostic:
    """A finding placed in a file. Positions are 1-based; ``end_column`` is exclusive."""

    path: str
    rule_id: str
    name: str
    message: str
    line: int
    column: int
    end_line: int
    end_column: int
    severity: Severity = Severity.ERROR
    fix_safety: FixSafety = FixSafety.NONE
    fix_description: str = ""
    fixed: bool = False
    cell: int | None = None  # notebook cell (1-based) when the file is a notebook
    edits: tuple[Edit, ...] = ()  # the fix as text replacements (imports it adds not included)
    context: dict | None = None  # the MP context and target the finding was judged under (JSON-ready)
    related: tuple[Related, ...] = ()  # the other ends of a finding across functions or modules
    imports: tuple[ImportSpec, ...] = ()  # the imports its fix adds (where: as applying the fix decides)

    @property
    def fixable(self) -> bool:
        return self.fix_safety is not FixSafety.NONE and not self.fixed

    def to_dict(self) -> dict:
        return {
            "path": self.path,
            "cell": self.cell,
            "rule": self.rule_id,
            "name": self.name,
            "message": self.message,
            "severity": self.severity.value,
            "start": {"line": self.line, "column": self.column},
            "end": {"line": self.end_line, "column": self.end_column},
            "context": self.context,
            "related": [{"path": r.path, "cell": r.cell, "line": r.line, "message": r.message} for r in self.related],
            "fix": None
            if self.fix_safety is FixSafety.NONE
            else {
                "safety": self.fix_safety.value,
                "description": self.fix_description,
                "applied": self.fixed,
                "edits": [
                    {
                        "start": {"line": e.line, "column": e.column},
                        "end": {"line": e.end_line, "column": e.end_column},
                        "text": e.text,
                    }
                    for e in self.edits
                ],
            },
        }


@dataclass
class FileResult:
    """Everything the engine learned about one file."""

    path: str
    diagnostics: list[Diagnostic] = field(default_factory=list)
    fixed_source: bytes | None = None  # new content when fixes were applied
    original_source: bytes | None = None
    fixes_applied: int = 0
    # False where the result depends on more than the file's text and facts (a rule crashed, a fix was reverted, the
    # time budget ran out): a run checks such a file again instead of answering from the cache.
    repeatable: bool = True
