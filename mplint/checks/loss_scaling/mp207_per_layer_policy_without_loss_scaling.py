"""MP207: layers set to mixed_float16 one by one while compile() sees a float32 model and adds no loss scaling."""

from __future__ import annotations

import libcst as cst

from mplint.analysis.keras_guards import note_safety
from mplint.checks.loss_scaling.fixes import lso_spelling, range_note, wrap_construction, written_names
from mplint.checks.loss_scaling.optimizer_flow import OptimizerFlow, compile_optimizer
from mplint.checks.loss_scaling.sites import method_name
from mplint.diagnostics import Fix
from mplint.engine.rule import Rule
from mplint.knowledge.policies import FLOAT16_POLICIES, UNKNOWN_POLICY


class PerLayerPolicyWithoutLossScaling(Rule):
    id = "MP207"
    triggers = (b"compile",)

    @classmethod
    def candidate(cls, code) -> bool:
        return "compile" in code.calls

    @classmethod
    def active_for(cls, facts):
        layer_only = "mixed_float16" in facts.layer_policy_names
        return layer_only and not facts.global_policy_names & (FLOAT16_POLICIES | {UNKNOWN_POLICY})

    def visit_Call(self, node: cst.Call) -> None:
        if method_name(node) != "compile" or not any(
            a.keyword and a.keyword.value in ("loss", "optimizer") for a in node.args
        ):
            return
        arg = compile_optimizer(node)
        if arg is None:
            return
        flow = self.context.analysis(OptimizerFlow)
        if flow.defines_train_step():  # a custom train_step is MP201's: wrapping alone would break it
            return
        origin = flow.origin(arg.value, node)
        if origin.wrap != "none":
            return
        message = (
            'layers use dtype="mixed_float16" but the global policy is float32, so compile() adds no '
            "LossScaleOptimizer: small float16 gradients underflow to zero"
        )
        fix = None
        if origin.construction is not None:
            wrapped = wrap_construction(self.context, origin.construction)
            if wrapped is not None:
                note = range_note(self.context, written_names(lso_spelling(self.context)[0]))
                fix = Fix({origin.construction: wrapped[0]}, note_safety(note), imports=wrapped[1])
                message += f" ({note})" if note else ""
        self.report(arg.value, message, fix)
