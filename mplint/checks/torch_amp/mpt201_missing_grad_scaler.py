"""MPT201: a float16 autocast loss trained without a GradScaler."""

from __future__ import annotations

import libcst as cst
from libcst.metadata import ClassScope, GlobalScope

from mplint.analysis.bindings import scope_referents
from mplint.analysis.torch_amp import FLOAT16, TorchAmp
from mplint.checks._torch_rule import TorchRule
from mplint.checks.torch_amp.torch_loop import MISSING_SCALER, TrainingLoopFlow
from mplint.diagnostics import Fix, FixSafety, ImportSpec, Related
from mplint.engine.names import dotted


class MissingGradScaler(TorchRule):
    id = "MPT201"
    triggers = (b"autocast",)

    @classmethod
    def candidate(cls, code) -> bool:
        return code.imports_torch and "autocast" in code.calls and "backward" in code.calls and "step" in code.calls

    def visit_Module(self, node: cst.Module) -> None:
        flow = self.context.analysis(TrainingLoopFlow)
        regions = [r for r in self.context.analysis(TorchAmp.of).regions if r.enabled is not False]
        computed = sorted({r.may_be_float16 for r in regions if r.may_be_float16})
        certain = any(r.dtype == FLOAT16 for r in regions)
        for backward in flow.findings(MISSING_SCALER):
            steps = sorted(flow.unscaled_steps.get(id(backward), {}).values(), key=self.context.source_order)
            if certain:
                self.report(
                    backward,
                    "the loss comes from a float16 autocast region but `backward()` and the optimizer "
                    "step run without a GradScaler: small gradients underflow to zero in float16; scale "
                    f"the loss with {self._advice()}",
                    self._fix(backward, steps),
                    related=self._steps(steps),
                )
            else:  # the dtype is chosen at run time (bfloat16 where the GPU has it, else float16): no one fix
                self.report(
                    backward,
                    f"the loss comes from an autocast region whose dtype `{computed[0]}` is chosen at "
                    "run time and can be float16, but `backward()` and the optimizer step run without a "
                    "GradScaler: where it is float16 (GPUs without bfloat16) small gradients underflow "
                    f"to zero; scale the loss with {self._enabled_where_float16(computed[0])}; no "
                    "automatic fix",
                    related=self._steps(steps),
                )

    def _steps(self, steps: list[cst.Call]) -> tuple[Related, ...]:
        return self.related([("optimizer-step", "", s) for s in steps], lambda kind, role: "steps without a scaler")

    def _devices(self) -> set[str]:
        return {r.device for r in self.context.analysis(TorchAmp.of).regions if r.dtype == FLOAT16 and r.device}

    def _spelling(self, device: str) -> str | None:
        """The GradScaler every torch of the target range has: ``torch.amp.GradScaler(device)`` from 2.3, before it
        ``torch.cuda.amp.GradScaler()`` (CUDA only)."""
        if self.context.facts.torch_target.at_least("2.3"):
            return f'torch.amp.GradScaler("{device}")'
        return "torch.cuda.amp.GradScaler()" if device == "cuda" else None

    def _enabled_where_float16(self, dtype: str) -> str:
        """A GradScaler on only where the computed dtype is float16: ``torch.cuda.amp.GradScaler(enabled=ptdtype ==
        torch.float16)``."""
        devices = {r.device for r in self.context.analysis(TorchAmp.of).regions if r.may_be_float16 and r.device}
        spelling = self._spelling(devices.pop() if len(devices) == 1 else "cuda")
        if spelling is None:
            return f"a GradScaler enabled where `{dtype}` is float16"
        enabled = f"enabled={dtype} == torch.float16"
        return f"`{spelling[:-1]}{', ' if not spelling.endswith('()') else ''}{enabled})`"

    def _advice(self) -> str:
        devices = self._devices()
        spelling = self._spelling(devices.pop() if len(devices) == 1 else "cuda") if len(devices) <= 1 else None
        if spelling is not None:
            return f"`{spelling}`"
        return f"a GradScaler (`torch.amp.GradScaler(device)` from torch 2.3; target {self.context.facts.torch_target.described})"

    def _fix(self, backward: cst.Call, steps: list[cst.Call]) -> Fix | None:
        """``scaler = GradScaler(device)`` after the optimizer's construction (or, where the steps cannot see that
        one, after the one assignment of the optimizer they read), ``scaler.scale(loss).backward()``,
        ``scaler.step(opt)`` + ``scaler.update()``: when the loss is a name, every step a statement of its own,
        one optimizer, ``scaler`` a free name, and the assignment one that has run, in a scope the backward and the
        steps see, wherever they run."""
        amp = self.context.analysis(TorchAmp.of)
        if (
            "scaler" in self.context.text
            or not isinstance(backward.func, cst.Attribute)
            or not isinstance(backward.func.value, cst.Name)
            or self.whole_line_of(backward) is None
        ):
            return None
        step_lines = [self.whole_line_of(step) for step in steps]
        optimizers = {dotted(step.func.value) for step in steps}
        if not steps or None in step_lines or len(optimizers) != 1:
            return None
        optimizer = optimizers.pop()
        construction = self._anchor(amp, optimizer, [backward, *steps])
        devices = self._devices()
        if construction is None or len(devices) > 1:
            return None
        scaler = self._spelling(devices.pop() if devices else "cuda")
        if scaler is None:
            return None
        replacements = {
            construction: cst.FlattenSentinel([construction, cst.parse_statement(f"scaler = {scaler}\n")]),
            backward.func: backward.func.with_changes(
                value=cst.parse_expression(f"scaler.scale({backward.func.value.value})")
            ),
        }
        for line in step_lines:
            replacements[line] = cst.FlattenSentinel(
                [
                    cst.parse_statement(f"scaler.step({optimizer})\n").with_changes(leading_lines=line.leading_lines),
                    cst.parse_statement("scaler.update()\n").with_changes(trailing_whitespace=line.trailing_whitespace),
                ]
            )
        return Fix(replacements, FixSafety.SAFE, imports=[ImportSpec("torch")])

    def _anchor(self, amp: TorchAmp, optimizer: str, uses: list[cst.Call]) -> cst.SimpleStatementLine | None:
        """The statement after which ``scaler = ...`` is seen by every use: the optimizer's construction, else the
        one assignment of the name the steps read (``model, optimizer = prepare(...)`` in the function whose
        nested step function trains)."""
        construction = self._construction(amp, optimizer)
        if construction is not None and self._seen_by(construction, uses):
            return construction
        bound: dict[int, cst.CSTNode] = {}
        for step in uses[1:]:
            name = step.func.value if isinstance(step.func, cst.Attribute) else None
            found = scope_referents(self.context, name) if isinstance(name, cst.Name) else None
            if not found or None in found:
                return None
            bound.update((id(n), n) for n in found)
        if len(bound) != 1:
            return None
        line = self._assignment_line(next(iter(bound.values())))
        return line if line is not None and self._seen_by(line, uses) else None

    def _assignment_line(self, target: cst.CSTNode) -> cst.SimpleStatementLine | None:
        """The line ``target`` is a target of a plain assignment on (``model, optimizer = ...``)."""
        for ancestor in self.context.ancestors(target):
            if isinstance(ancestor, cst.Assign):
                line = self.context.parent(ancestor)
                return line if isinstance(line, cst.SimpleStatementLine) and len(line.body) == 1 else None
            if not isinstance(ancestor, (cst.Tuple, cst.List, cst.Element, cst.StarredElement, cst.AssignTarget)):
                return None
        return None

    def _seen_by(self, line: cst.SimpleStatementLine, uses: list[cst.Call]) -> bool:
        """Whether ``scaler`` assigned right after ``line`` has been assigned wherever each use runs: the line's
        block holds every use (not one arm of an ``if`` the uses are outside of), and by libcst's scopes the
        line's scope is the use's own or one a function sees (an enclosing function, the module; no class body)."""
        block = self.context.parent(line)
        scopes = self.context.names.scopes
        scope = scopes.get(line)
        for use in uses:
            if block not in self.context.ancestors(use):
                return False
            if scope is None or scope not in _visible_scopes(scopes.get(use)):
                return False
        return True

    def _construction(self, amp: TorchAmp, optimizer: str) -> cst.SimpleStatementLine | None:
        found = [
            self.whole_line_of(call)
            for call in self.context.nodes(cst.Call)
            if amp.is_optimizer_construction(call)
            and isinstance(self.context.parent(call), cst.Assign)
            and [dotted(t.target) for t in self.context.parent(call).targets] == [optimizer]
        ]
        return found[0] if len(found) == 1 else None


def _visible_scopes(scope) -> list:
    """The scopes whose names code in ``scope`` reads: its own, then the enclosing functions' and the module's
    (Python skips class bodies)."""
    found = [scope] if scope is not None else []
    while scope is not None and not isinstance(scope, GlobalScope):
        scope = scope.parent
        if not isinstance(scope, ClassScope):
            found.append(scope)
    return found
