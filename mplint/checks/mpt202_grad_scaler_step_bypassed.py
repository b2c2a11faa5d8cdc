"""MPT202: a GradScaler whose step is bypassed, whose scale never updates, or updates between two steps."""

from __future__ import annotations

import libcst as cst

from mplint.analysis.torch_amp import TorchAmp, TorchRule
from mplint.analysis.torch_loop import STEP_BYPASSED, UPDATE_BETWEEN_STEPS, TrainingLoopFlow
from mplint.diagnostics import Fix, FixSafety
from mplint.engine.names import dotted


class GradScalerStepBypassed(TorchRule):
    id = "MPT202"
    triggers = (b".step(",)

    @classmethod
    def candidate(cls, code) -> bool:
        return code.imports_torch and "step" in code.calls and ("scale" in code.calls or "update" in code.calls)

    def visit_Module(self, node: cst.Module) -> None:
        flow = self.context.analysis(TrainingLoopFlow)
        amp = self.context.analysis(TorchAmp.of)
        for step in flow.findings(STEP_BYPASSED):
            scalers = sorted(flow.pending_scalers.get(id(step), ()))
            scaler = scalers[0] if len(scalers) == 1 else "scaler"
            optimizer = self.code(step.func.value)
            self.report(step, f"`{optimizer}.step()` after `{scaler}.scale(loss).backward()` applies gradients still multiplied by "
                              f"the loss scale and never skips a step with inf/NaN gradients: call `{scaler}.step({optimizer})`",
                        self._route_through_scaler(flow, step, scalers))
        for update in flow.findings(UPDATE_BETWEEN_STEPS):
            self.report(update, f"`{self.code(update)}` runs between two optimizer steps of one backward: the next step unscales "
                                "with a scale its gradients were not made with; call `update()` once, after every optimizer stepped",
                        self._remove(update))
        self._missing_updates(amp)

    def _route_through_scaler(self, flow, step: cst.Call, scalers: list[str]) -> Fix | None:
        """``optimizer.step()`` -> ``scaler.step(optimizer)`` (plus ``scaler.update()`` when the function has none)."""
        line = self.statement_of(step)
        if line is None or len(scalers) != 1 or not flow.on_every_path(step) or step.args:
            return None
        scaler, optimizer = scalers[0], self.code(step.func.value)
        new = cst.parse_statement(f"{scaler}.step({optimizer})\n").with_changes(leading_lines=line.leading_lines)
        if self._updates(step, scaler):
            return Fix({line: new.with_changes(trailing_whitespace=line.trailing_whitespace)}, FixSafety.SAFE)
        update = cst.parse_statement(f"{scaler}.update()\n").with_changes(trailing_whitespace=line.trailing_whitespace)
        return Fix({line: cst.FlattenSentinel([new, update])}, FixSafety.SAFE)

    def _updates(self, node: cst.CSTNode, scaler: str) -> bool:
        scope = self.context.enclosing(node, cst.FunctionDef) or self.context.module
        return any(isinstance(c.func, cst.Attribute) and c.func.attr.value == "update" and dotted(c.func.value) == scaler
                   for c in self.context.nodes_within(scope, cst.Call))

    def _remove(self, update: cst.Call) -> Fix | None:
        line = self.statement_of(update)
        if line is None or len(self.context.parent(line).body) < 2:
            return None
        return Fix({line: cst.RemovalSentinel.REMOVE}, FixSafety.SAFE)

    def _missing_updates(self, amp: TorchAmp) -> None:
        """A scaler stepped in this file but never updated anywhere in it: the scale stays at its first value."""
        updated = {dotted(c.func.value) for c in amp.scaler_calls("update") if not c.args}
        constructed = amp.scaler_targets
        for step in amp.scaler_calls("step"):
            scaler = dotted(step.func.value)
            if scaler in updated or scaler not in constructed or not step.args:
                continue
            line = self.statement_of(step)
            fix = None
            if line is not None:
                update = cst.parse_statement(f"{scaler}.update()\n").with_changes(trailing_whitespace=line.trailing_whitespace)
                fix = Fix({line: cst.FlattenSentinel([line.with_changes(trailing_whitespace=cst.TrailingWhitespace()), update])},
                          FixSafety.SAFE)
            self.report(step, f"`{scaler}` is stepped but `{scaler}.update()` is never called: the next step raises "
                              "RuntimeError (step() has already been called since the last update()) and the scale never adapts", fix)
