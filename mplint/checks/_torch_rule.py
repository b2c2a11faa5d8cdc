"""The base class of the PyTorch rules (MPTnnn)."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import ClassVar

import libcst as cst

from mplint.diagnostics import Related
from mplint.engine.rule import Rule


class TorchRule(Rule):
    """What the MPT rules share: they read only files that import PyTorch (or apex), whose mixed-precision
    context is the file's own code, so they are active in every project."""

    triggers: ClassVar[tuple[bytes | re.Pattern[bytes], ...]] = (b"torch",)  # the base's type: rules name their own
    requires = (b"torch", b"apex")  # ``candidate``: no finding in a file that imports neither

    @classmethod
    def candidate(cls, code) -> bool:
        return code.imports_torch

    def whole_line_of(self, node: cst.CSTNode) -> cst.SimpleStatementLine | None:
        """The line ``node`` is the whole of (``x.step()``, ``y = x.step()``), else None."""
        line = self.context.enclosing(node, cst.SimpleStatementLine)
        if line is None or len(line.body) != 1:
            return None
        small = line.body[0]
        whole = small.value if isinstance(small, (cst.Expr, cst.Assign)) else None
        return line if whole is node else None

    def code(self, node: cst.CSTNode) -> str:
        return self.context.module.code_for_node(node)

    def related(
        self, events: list[tuple[str, str, cst.CSTNode]], describe: Callable[[str, str], str | None]
    ) -> tuple[Related, ...]:
        """The other ends of a training-loop finding (``TrainingLoopFlow.related``): each event's code and what
        ``describe(kind, role)`` says it does there (None leaves it out)."""
        found = []
        for kind, role, node in events:
            what = describe(kind, role)
            if what is not None:
                found.append(Related("", self.context.position(node).start.line, f"`{self.code(node)}` {what}"))
        return tuple(found)
