"""MPT206: a GradScaler in a file whose every autocast region is bfloat16."""

from __future__ import annotations

import libcst as cst

from mplint.analysis.torch_amp import BFLOAT16, TorchAmp
from mplint.checks._torch_rule import TorchRule
from mplint.diagnostics import Fix, FixSafety
from mplint.engine.names import dotted


class GradScalerWithBfloat16(TorchRule):
    id = "MPT206"
    triggers = (b"GradScaler",)

    @classmethod
    def candidate(cls, code) -> bool:
        return code.imports_torch and "autocast" in code.calls and code.calls_any("GradScaler", "ShardedGradScaler")

    def visit_Module(self, node: cst.Module) -> None:
        amp = self.context.analysis(TorchAmp.of)
        regions = [r for r in amp.regions if r.enabled is not False]
        if not regions or any(r.dtype != BFLOAT16 for r in regions):
            return
        for binding in amp.scalers:
            if binding.enabled is not None and not (
                isinstance(binding.enabled, cst.Name) and binding.enabled.value == "True"
            ):
                continue  # GradScaler(enabled=dtype == torch.float16) is what the docs recommend
            self.report(
                binding.call,
                "GradScaler with bfloat16 autocast: bfloat16 has float32's exponent range, so loss scaling "
                "only costs time (every autocast region of this file is bfloat16); remove the scaler",
                self._remove(binding),
            )

    def _remove(self, binding) -> Fix | None:
        """Unwrap every use of the scaler: ``scaler.scale(x)`` -> ``x``, ``scaler.step(opt)`` -> ``opt.step()``,
        ``scaler.update()``/``scaler.unscale_(opt)`` and the construction deleted. Offered when those are its only uses."""
        line = binding.stmt
        if not isinstance(line, cst.SimpleStatementLine) or len(line.body) != 1:
            return None
        replacements: dict = {line: cst.RemovalSentinel.REMOVE}
        removed_from: dict[int, int] = {id(self.context.parent(line)): 1}
        for name in self.context.nodes(cst.Name, cst.Attribute):
            if dotted(name) != binding.target or self.context.contains(line, name):
                continue
            parent = self.context.parent(name)
            call = self.context.parent(parent) if isinstance(parent, cst.Attribute) and parent.value is name else None
            if not isinstance(call, cst.Call) or call.func is not parent:
                return None
            method = parent.attr.value
            if method == "scale" and len(call.args) == 1:
                replacements[call] = call.args[0].value
            elif method == "step" and len(call.args) == 1:
                replacements[call] = cst.Call(cst.Attribute(call.args[0].value, cst.Name("step")))
            elif method in ("update", "unscale_") and self.whole_line_of(call) is not None:
                statement = self.whole_line_of(call)
                replacements[statement] = cst.RemovalSentinel.REMOVE
                block = id(self.context.parent(statement))
                removed_from[block] = removed_from.get(block, 0) + 1
            else:
                return None
        blocks = {id(b): b for b in self.context.nodes(cst.IndentedBlock)} | {
            id(self.context.module): self.context.module
        }
        if any(len(blocks[b].body) <= count for b, count in removed_from.items()):
            return None
        return Fix(replacements, FixSafety.SAFE)
