"""MPT204: gradients clipped while still multiplied by the GradScaler's scale."""

from __future__ import annotations

import libcst as cst

from mplint.checks._torch_rule import TorchRule
from mplint.checks.torch_amp.torch_loop import CLIP_BEFORE_UNSCALE, STEP_BYPASSED, TrainingLoopFlow
from mplint.diagnostics import Fix, FixSafety
from mplint.engine.names import dotted


class TorchClipBeforeUnscale(TorchRule):
    id = "MPT204"
    triggers = (b"clip_grad",)

    @classmethod
    def candidate(cls, code) -> bool:
        return (
            code.imports_torch
            and code.calls_any("clip_grad_norm_", "clip_grad_value_", "clip_grad_norm", "clip_grads_with_norm_")
            and "scale" in code.calls
        )

    def visit_Module(self, node: cst.Module) -> None:
        flow = self.context.analysis(TrainingLoopFlow)
        for clip in flow.findings(CLIP_BEFORE_UNSCALE):
            scalers = sorted(flow.pending_scalers.get(id(clip), ()))
            scaler = scalers[0] if len(scalers) == 1 else "scaler"
            self.report(
                clip,
                f"gradients are clipped while still multiplied by the loss scale (no `{scaler}.unscale_(optimizer)` "
                f"since `{scaler}.scale(loss).backward()`): the threshold is in effect 65536x too tight",
                self._fix(flow, clip, scalers),
                related=self.related(flow.related(clip), _scaled),
            )

    def _fix(self, flow: TrainingLoopFlow, clip: cst.Call, scalers: list[str]) -> Fix | None:
        """``scaler.unscale_(optimizer)`` on the line before the clip, when every path to the clip has a scaled
        backward pending, one optimizer is stepped through that scaler in the function, and none is unscaled later."""
        line = self.whole_line_of(clip)
        if line is None or len(scalers) != 1 or not flow.on_every_path(clip):
            return None
        scope = self.context.enclosing(clip, cst.FunctionDef) or self.context.module
        steps, other_unscales = set(), False
        for call in self.context.nodes_within(scope, cst.Call):
            func = call.func
            if isinstance(func, cst.Attribute) and dotted(func.value) == scalers[0] and call.args:
                if func.attr.value == "step":
                    steps.add(self.code(call.args[0].value))
                elif func.attr.value == "unscale_":
                    other_unscales = True
        if not steps and "MPT202" in self.context.active_rules:
            # MPT202's fix routes a bypassed ``optimizer.step()`` through this scaler in the same --fix
            steps = {
                self.code(step.func.value)
                for step in flow.findings(STEP_BYPASSED)
                if self.context.contains(scope, step)
                and flow.pending_scalers.get(id(step)) == {scalers[0]}
                and flow.on_every_path(step)
                and not step.args
            }
        if len(steps) != 1 or other_unscales:
            return None
        unscale = cst.parse_statement(f"{scalers[0]}.unscale_({steps.pop()})\n")
        unscale = unscale.with_changes(leading_lines=line.leading_lines)
        return Fix({line: cst.FlattenSentinel([unscale, line.with_changes(leading_lines=())])}, FixSafety.SAFE)


def _scaled(kind: str, role: str) -> str | None:
    return "scales the loss whose gradients are clipped" if kind == "scaled-backward" else None
