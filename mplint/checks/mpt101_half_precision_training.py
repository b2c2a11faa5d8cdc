"""MPT101: a model made pure float16 and then trained with an optimizer."""

from __future__ import annotations

import libcst as cst

from mplint.analysis.torch_amp import TorchAmp, is_half_cast
from mplint.checks._torch_rule import TorchRule
from mplint.diagnostics import Fix, FixSafety
from mplint.engine.names import dotted


class HalfPrecisionTraining(TorchRule):
    id = "MPT101"
    triggers = (b"half", b"float16", b"set_default_dtype")

    @classmethod
    def active_for(cls, facts) -> bool:
        return not facts.test_module  # a test makes a model float16 on purpose, to exercise it (as MP602)

    @classmethod
    def candidate(cls, code) -> bool:
        return (
            code.imports_torch
            and "parameters" in code.calls
            and ("half" in code.calls or "float16" in code.argument_words or "set_default_dtype" in code.calls)
        )

    def visit_Module(self, node: cst.Module) -> None:
        amp = self.context.analysis(TorchAmp.of)
        trained = self._trained_models(amp)
        if not trained:
            return
        for call in self.context.nodes(cst.Call):
            if (
                self.context.names.torch_api(call.func, {"set_default_dtype"}) is not None
                and call.args
                and amp.dtype_of(call.args[0].value) == "float16"
            ):
                self.report(
                    call,
                    "the default dtype is float16, so the model's weights and their updates are float16 and small "
                    "updates vanish: keep float32 weights and train under `torch.autocast` with a GradScaler",
                )
                continue
            model = self._made_half(amp, call)
            if model is not None and model in trained:
                self.report(
                    call,
                    f"`{model}` is made pure float16 and then trained: its weights and their updates are float16, "
                    "so updates smaller than 1/2048 of a weight vanish; keep the model float32 and train under "
                    "`torch.autocast` with a GradScaler",
                    self._fix(amp, call),
                )

    def _trained_models(self, amp: TorchAmp) -> set[str]:
        """Texts ``m`` of ``m.parameters()`` passed to a torch optimizer's construction."""
        found = set()
        for call in self.context.nodes(cst.Call):
            if amp.is_optimizer_construction(call) and call.args:
                for inner in self.context.nodes_within(call.args[0].value, cst.Call):
                    if isinstance(inner.func, cst.Attribute) and inner.func.attr.value in (
                        "parameters",
                        "named_parameters",
                    ):
                        text = dotted(inner.func.value)
                        if text:
                            found.add(text)
        return found

    def _made_half(self, amp: TorchAmp, call: cst.Call) -> str | None:
        """The model text ``call`` casts to float16: ``model.half()`` or ``model = Net().half()``."""
        if not is_half_cast(self.context, amp, call):
            return None
        parent = self.context.parent(call)
        if isinstance(parent, cst.Assign) and len(parent.targets) == 1:
            return dotted(parent.targets[0].target)
        if isinstance(parent, cst.Expr):
            return dotted(call.func.value)
        return None

    def _fix(self, amp: TorchAmp, call: cst.Call) -> Fix | None:
        """Drop the cast, when no other float16 cast in the file would feed float16 inputs to the float32 model."""
        if sum(is_half_cast(self.context, amp, c) for c in self.context.nodes(cst.Call)) != 1:
            return None
        parent = self.context.parent(call)
        if isinstance(parent, cst.Assign):
            return Fix({call: call.func.value}, FixSafety.UNSAFE)
        line = self.whole_line_of(call)
        if line is None or len(self.context.parent(line).body) < 2:
            return None
        return Fix({line: cst.RemovalSentinel.REMOVE}, FixSafety.UNSAFE)
