"""MPT203: gradients unscaled twice between two GradScaler updates."""

from __future__ import annotations

import libcst as cst

from mplint.checks._torch_rule import TorchRule
from mplint.checks.torch_amp.torch_loop import MANUAL_UNSCALE, UNSCALE_TWICE, TrainingLoopFlow
from mplint.diagnostics import Fix, FixSafety


class UnscaleTwice(TorchRule):
    id = "MPT203"
    triggers = (b"unscale_", b"get_scale")

    @classmethod
    def candidate(cls, code) -> bool:
        return code.imports_torch and code.calls_any("unscale_", "get_scale")

    def visit_Module(self, node: cst.Module) -> None:
        flow = self.context.analysis(TrainingLoopFlow)
        for call in flow.findings(UNSCALE_TWICE):
            fix = self._remove(call) if flow.on_every_path(call) else None
            self.report(
                call,
                f"`{self.code(call)}` unscales gradients already unscaled (or stepped) since the last `update()`: "
                "PyTorch raises RuntimeError (unscale_() has already been called on this optimizer)",
                fix,
                related=self.related(flow.related(call), _first),
            )
        for manual in flow.findings(MANUAL_UNSCALE):
            self.report(
                manual,
                "gradients are divided by the loss scale by hand and then `scaler.step` unscales them again: "
                "updates 65536x too small; drop the division (call `scaler.unscale_(optimizer)` if they "
                "must be unscaled before the step)",
                self._remove(manual),
                related=self.related(flow.related(manual), _again),
            )

    def _remove(self, node: cst.CSTNode) -> Fix | None:
        """Delete the statement; a ``for p in ...:`` loop that only held it goes with it."""
        line = self.context.enclosing(node, cst.SimpleStatementLine)
        if line is None or len(line.body) != 1 or not isinstance(line.body[0], (cst.Expr, cst.AugAssign)):
            return None
        block = self.context.parent(line)
        if len(block.body) > 1:
            return Fix({line: cst.RemovalSentinel.REMOVE}, FixSafety.SAFE)
        loop = self.context.parent(block)
        if isinstance(loop, cst.For) and loop.orelse is None and len(self.context.parent(loop).body) > 1:
            return Fix({loop: cst.RemovalSentinel.REMOVE}, FixSafety.SAFE)
        return None


def _first(kind: str, role: str) -> str | None:
    return {"unscale": "unscales them first", "scaler-step": "steps (and unscales) them first"}.get(kind)


def _again(kind: str, role: str) -> str | None:
    return "unscales them again" if kind == "scaler-step" else None
