"""MPT104: ``binary_cross_entropy``/``BCELoss`` called in an autocast region that runs on CUDA, where it raises."""

from __future__ import annotations

import libcst as cst

from mplint.analysis.torch_amp import AutocastRegion, BoundNames, TorchAmp
from mplint.checks._torch_rule import TorchRule
from mplint.diagnostics import Fix, FixSafety
from mplint.engine.names import dotted

_SCOPES = (cst.FunctionDef, cst.Lambda, cst.ClassDef)
_SIGMOIDS = frozenset({"sigmoid", "nn.functional.sigmoid", "special.expit"})


class BinaryCrossEntropyUnderAutocast(TorchRule):
    id = "MPT104"
    triggers = (b"binary_cross_entropy", b"BCELoss")

    @classmethod
    def candidate(cls, code) -> bool:
        return code.imports_torch and "autocast" in code.calls and code.mentions("binary_cross_entropy", "BCELoss")

    def visit_Module(self, node: cst.Module) -> None:
        amp = self.context.analysis(TorchAmp.of)
        if not amp.regions:
            return
        criteria = BoundNames(self.context, {"nn.BCELoss"})
        helpers = self._helpers()
        reported: set[cst.Call] = set()
        for call in self.context.nodes(cst.Call):
            spelled = self._bce_call(call, criteria)
            region = self._region(amp, call) if spelled is not None else None
            if spelled is not None and region is not None:
                self._report(call, spelled, region, "")
                reported.add(call)
            helper = helpers.get(dotted(call.func) or "") if spelled is None else None
            region = self._region(amp, call) if helper is not None else None
            if helper is None or region is None:
                continue
            line = self.context.position(call).start.line
            for inner in self.context.nodes_within(helper.body, cst.Call):
                inner_spelled = self._bce_call(inner, criteria)
                if inner_spelled is None or inner in reported or self.context.enclosing(inner, _SCOPES) is not helper:
                    continue
                if any(self.context.enclosing(r.node, _SCOPES) is helper for r in amp.enclosing_regions(inner)):
                    continue  # the helper's own region decides (above)
                self._report(
                    inner, inner_spelled, region, f" (through `{helper.name.value}`, called there on line {line})"
                )
                reported.add(inner)

    def _report(self, call: cst.Call, spelled: str, region: AutocastRegion, caller: str) -> None:
        where = "a CUDA autocast region" if region.device == "cuda" else "an autocast region that can run on CUDA"
        if region.enabled is None:
            where += " (when it is enabled)"
        logits = self._sigmoid_input(call)
        if spelled == "function" and logits is not None:
            advice = "pass the logits to `binary_cross_entropy_with_logits` instead of their sigmoid"
        else:
            advice = (
                "give the logits to `binary_cross_entropy_with_logits` (`BCEWithLogitsLoss`) instead of probabilities"
            )
        self.report(
            call,
            f"`{self.code(call.func)}` runs in {where}{caller} and raises RuntimeError "
            "whatever its inputs' dtype: PyTorch bans binary cross-entropy under CUDA autocast (its backward can "
            f"make gradients float16 cannot hold); {advice}",
            self._with_logits(call, logits) if spelled == "function" else None,
        )

    def _helpers(self) -> dict[str, cst.FunctionDef]:
        """The module's functions defined once at its top level, by name: a region's call of one is followed."""
        defined: dict[str, list[cst.FunctionDef]] = {}
        for statement in self.context.module.body:
            if isinstance(statement, cst.FunctionDef):
                defined.setdefault(statement.name.value, []).append(statement)
        return {name: found[0] for name, found in defined.items() if len(found) == 1}

    def _bce_call(self, call: cst.Call, criteria: BoundNames) -> str | None:
        """``function`` for ``F.binary_cross_entropy(...)``, ``module`` for a ``BCELoss`` called, else None."""
        if self._torch(call.func, {"nn.functional.binary_cross_entropy"}):
            return "function"
        func = call.func
        if isinstance(func, cst.Call) and self._torch(func.func, {"nn.BCELoss"}):
            return "module"  # nn.BCELoss()(p, y)
        return "module" if criteria.binds(func) else None

    def _region(self, amp: TorchAmp, call: cst.Call) -> AutocastRegion | None:
        """The innermost autocast region around ``call`` in its own function, if it can run on CUDA enabled."""
        scope = self.context.enclosing(call, _SCOPES)
        regions = [r for r in amp.enclosing_regions(call) if self.context.enclosing(r.node, _SCOPES) is scope]
        if not regions:
            return None
        innermost = regions[-1]
        if innermost.enabled is False or innermost.device not in ("cuda", None):
            return None  # autocast off there, or CPU autocast, which runs it in float32
        return innermost

    def _sigmoid_input(self, call: cst.Call) -> cst.BaseExpression | None:
        """The logits when the loss's input is ``torch.sigmoid(z)``/``z.sigmoid()``: ``z``."""
        first = call.args[0] if call.args and call.args[0].keyword is None and not call.args[0].star else None
        value = first.value if first is not None else None
        if not isinstance(value, cst.Call):
            return None
        func = value.func
        if self._torch(func, _SIGMOIDS):
            return value.args[0].value if len(value.args) == 1 and value.args[0].keyword is None else None
        if isinstance(func, cst.Attribute) and func.attr.value == "sigmoid" and not value.args:
            return func.value  # z.sigmoid()
        return None

    def _torch(self, node: cst.CSTNode, paths: set[str] | frozenset[str]) -> bool:
        found = self.context.names.torch_api(node, paths)
        return found is not None and found.ns == "torch"

    def _with_logits(self, call: cst.Call, logits: cst.BaseExpression | None) -> Fix | None:
        """``F.binary_cross_entropy(torch.sigmoid(z), y, ...)`` -> ``F.binary_cross_entropy_with_logits(z, y, ...)``:
        the same arguments in the same order (with_logits adds ``pos_weight`` after them)."""
        func = call.func
        if logits is None or not isinstance(func, cst.Attribute):
            return None  # a bare imported name would need a new import
        first = call.args[0].with_changes(value=logits)
        new = call.with_changes(
            func=func.with_changes(attr=cst.Name("binary_cross_entropy_with_logits")),
            args=(first, *call.args[1:]),
        )
        return Fix({call: new}, FixSafety.UNSAFE)
