"""MPT205: ``backward()`` called inside an autocast region."""

from __future__ import annotations

import libcst as cst

from mplint.analysis.torch_amp import TorchAmp
from mplint.checks._torch_rule import TorchRule
from mplint.diagnostics import Fix, FixSafety


class BackwardInsideAutocast(TorchRule):
    id = "MPT205"
    triggers = (b"autocast",)

    @classmethod
    def candidate(cls, code) -> bool:
        return code.imports_torch and "backward" in code.calls and "autocast" in code.calls

    def visit_Module(self, node: cst.Module) -> None:
        amp = self.context.analysis(TorchAmp.of)
        for region in amp.regions:
            if region.enabled is False:
                continue
            for call in self.context.nodes_within(region.node.body, cst.Call):
                func = call.func
                if not (isinstance(func, cst.Attribute) and func.attr.value == "backward"):
                    continue
                if self.context.enclosing(
                    call, (cst.FunctionDef, cst.Lambda, cst.ClassDef)
                ) is not self.context.enclosing(region.node, (cst.FunctionDef, cst.Lambda, cst.ClassDef)):
                    continue  # defined in the region, run elsewhere
                self.report(
                    call,
                    "`backward()` runs inside the autocast region: PyTorch documents backward under autocast as "
                    "unsupported (backward ops already run in the dtype autocast chose for the forward); "
                    "call it after the `with` block",
                    self._move_out(region, call),
                )

    def _move_out(self, region, call: cst.Call) -> Fix | None:
        """Move the backward statement and everything after it in the block out of the ``with``."""
        with_node = region.node
        line = self.whole_line_of(call)
        body = with_node.body
        if (
            line is None
            or not isinstance(body, cst.IndentedBlock)
            or line not in body.body
            or len(with_node.items) != 1
        ):
            return None
        at = body.body.index(line)
        if at == 0:
            return None
        kept, moved = body.body[:at], body.body[at:]
        return Fix(
            {with_node: cst.FlattenSentinel([with_node.with_changes(body=body.with_changes(body=kept)), *moved])},
            FixSafety.SAFE,
        )
