"""MPT202: a GradScaler whose step is bypassed, whose scale never updates, or updates between two steps."""

from __future__ import annotations

import libcst as cst

from mplint.analysis.torch_amp import TorchAmp
from mplint.checks._torch_rule import TorchRule
from mplint.checks.torch_amp.torch_loop import STEP_BYPASSED, UPDATE_BETWEEN_STEPS, TrainingLoopFlow
from mplint.diagnostics import Fix, FixSafety
from mplint.engine.names import dotted

_EXITS = (cst.Return, cst.Raise, cst.Break, cst.Continue)


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
            self.report(
                step,
                f"`{optimizer}.step()` after `{scaler}.scale(loss).backward()` applies gradients still multiplied by "
                f"the loss scale and never skips a step with inf/NaN gradients: call `{scaler}.step({optimizer})`",
                self._route_through_scaler(flow, amp, step, scalers),
                related=self.related(flow.related(step), _bypassed),
            )
        for update in flow.findings(UPDATE_BETWEEN_STEPS):
            self.report(
                update,
                f"`{self.code(update)}` runs between two optimizer steps of one backward: the next step unscales "
                "with a scale its gradients were not made with; call `update()` once, after every optimizer stepped",
                self._remove_or_move(update),
                related=self.related(flow.related(update), _around_update),
            )
        self._missing_updates(amp)

    # --- fixes ------------------------------------------------------------------------------------

    def _route_through_scaler(self, flow, amp: TorchAmp, step: cst.Call, scalers: list[str]) -> Fix | None:
        """``optimizer.step()`` -> ``scaler.step(optimizer)``, plus one ``scaler.update()`` after every step of
        that scaler in the function when the function has none."""
        line = self.whole_line_of(step)
        if line is None or len(scalers) != 1 or not flow.on_every_path(step) or step.args:
            return None
        scaler, optimizer = scalers[0], self.code(step.func.value)
        new = cst.parse_statement(f"{scaler}.step({optimizer})\n").with_changes(
            leading_lines=line.leading_lines, trailing_whitespace=line.trailing_whitespace
        )
        if self._updates(step, scaler):
            return Fix({line: new}, FixSafety.SAFE)
        steps = [
            step,
            *(s for s in flow.findings(STEP_BYPASSED) if s is not step and self._same_function(s, step)),
            *(s for s in amp.scaler_calls("step") if dotted(s.func.value) == scaler and self._same_function(s, step)),
        ]
        site = self._after_steps(steps)
        if site is None:
            return None
        return self._insert_update(site, scaler, {line: new})

    def _remove_or_move(self, update: cst.Call) -> Fix | None:
        """Drop the ``update()`` when a later one of the same scaler follows it in the same block on every path;
        move it after a ``for opt in optimizers:`` loop whose body steps each optimizer. Otherwise no fix: the
        only ``update()`` of a path is never deleted."""
        line = self.whole_line_of(update)
        block = self.context.parent(line) if line is not None else None
        if block is None:
            return None
        scaler = dotted(update.func.value)
        following = list(block.body)[list(block.body).index(line) + 1 :]
        for statement in following:
            if self._is_update_line(statement, scaler):
                return Fix({line: cst.RemovalSentinel.REMOVE}, FixSafety.SAFE)
            if any(self.context.nodes_within(statement, *_EXITS)):
                break
        loop = self.context.parent(block)
        if (
            isinstance(loop, cst.For)
            and loop.orelse is None
            and not following
            and len(block.body) > 1
            and self._steps_loop_target(loop, scaler)
        ):
            body = [s for s in block.body if s is not line]
            moved = line.with_changes(leading_lines=())
            return Fix(
                {loop: cst.FlattenSentinel([loop.with_changes(body=block.with_changes(body=body)), moved])},
                FixSafety.SAFE,
            )
        return None

    def _missing_updates(self, amp: TorchAmp) -> None:
        """A scaler of this file stepped but never updated (nor handed to other code that may update it)."""
        updated = {dotted(c.func.value) for c in amp.scaler_calls("update") if not c.args}
        constructed = amp.scaler_targets
        groups: dict[tuple[str, int], list[cst.Call]] = {}
        for step in amp.scaler_calls("step"):
            scaler = dotted(step.func.value)
            if scaler in updated or scaler not in constructed or not step.args or self._escapes(scaler):
                continue
            scope = self.context.enclosing(step, cst.FunctionDef) or self.context.module
            groups.setdefault((scaler, id(scope)), []).append(step)
        for (scaler, _), steps in groups.items():
            site = self._after_steps(steps)
            fix = self._insert_update(site, scaler, {}) if site is not None else None
            for step in steps:
                self.report(
                    step,
                    f"`{scaler}` is stepped but `{scaler}.update()` is never called: the next step raises "
                    "RuntimeError (step() has already been called since the last update()) and the scale never adapts",
                    fix if step is steps[-1] else None,
                )

    # --- where the one update() goes ------------------------------------------------------------

    def _after_steps(self, steps: list[cst.Call]) -> cst.BaseStatement | None:
        """The statement after which one ``update()`` follows every step in ``steps`` (one function): the innermost
        statement holding them all (the ``if`` whose branches each step), lifted out of ``for opt in optimizers:``."""
        chains = [self._statements(s) for s in steps]
        if any(not c for c in chains):
            return None
        depth = 0
        while all(len(c) > depth and c[depth] is chains[0][depth] for c in chains):
            depth += 1
        if depth == len(chains[0]) and all(len(c) == depth for c in chains):
            site = chains[0][-1]  # every step is on one line
        else:
            heads = {id(c[depth]): c[depth] for c in chains if len(c) > depth}
            blocks = {id(self.context.parent(h)) for h in heads.values()}
            if len(blocks) == 1 and all(len(c) > depth for c in chains):
                site = max(heads.values(), key=self.context.source_order)
            elif depth > 0:
                site = chains[0][depth - 1]
            else:
                return None
        optimizers = {(dotted(s.args[0].value) if s.args else dotted(s.func.value)) or "" for s in steps}
        roots = {name.split(".")[0] for name in optimizers}
        for ancestor in self.context.ancestors(site):
            if isinstance(ancestor, cst.FunctionDef):
                break
            if (
                isinstance(ancestor, cst.For)
                and {n.value for n in self.context.nodes_within(ancestor.target, cst.Name)} & roots
            ):
                site = ancestor
        return site

    def _statements(self, node: cst.CSTNode) -> list[cst.BaseStatement]:
        """The statements holding ``node`` inside its function, outermost first (an ``elif`` belongs to its ``if``)."""
        chain = []
        for ancestor in self.context.ancestors(node):
            if isinstance(ancestor, (cst.FunctionDef, cst.ClassDef)):
                break
            if isinstance(ancestor, (cst.SimpleStatementLine, cst.BaseCompoundStatement)) and not isinstance(
                self.context.parent(ancestor), cst.If
            ):
                chain.append(ancestor)
        return chain[::-1]

    def _insert_update(self, site: cst.BaseStatement, scaler: str, replaced: dict) -> Fix:
        """``scaler.update()`` after ``site``, with ``replaced`` (``site`` itself or a line inside it) rewritten."""
        new_site = next((new for old, new in replaced.items() if old is site), None)
        if new_site is None:
            new_site = site
            for old, new in replaced.items():
                new_site = new_site.deep_replace(old, new)
        update = cst.parse_statement(f"{scaler}.update()\n")
        if isinstance(new_site, cst.SimpleStatementLine):  # a trailing comment stays at the end of the pair
            update = update.with_changes(trailing_whitespace=new_site.trailing_whitespace)
            new_site = new_site.with_changes(trailing_whitespace=cst.TrailingWhitespace())
        return Fix({site: cst.FlattenSentinel([new_site, update])}, FixSafety.SAFE)

    def _updates(self, node: cst.CSTNode, scaler: str) -> bool:
        scope = self.context.enclosing(node, cst.FunctionDef) or self.context.module
        return any(
            isinstance(c.func, cst.Attribute) and c.func.attr.value == "update" and dotted(c.func.value) == scaler
            for c in self.context.nodes_within(scope, cst.Call)
        )

    def _same_function(self, a: cst.CSTNode, b: cst.CSTNode) -> bool:
        return self.context.enclosing(a, cst.FunctionDef) is self.context.enclosing(b, cst.FunctionDef)

    def _is_update_line(self, statement: cst.CSTNode, scaler: str | None) -> bool:
        if not isinstance(statement, cst.SimpleStatementLine) or len(statement.body) != 1:
            return False
        small = statement.body[0]
        call = small.value if isinstance(small, cst.Expr) else None
        return (
            isinstance(call, cst.Call)
            and not call.args
            and isinstance(call.func, cst.Attribute)
            and call.func.attr.value == "update"
            and dotted(call.func.value) == scaler
        )

    def _steps_loop_target(self, loop: cst.For, scaler: str | None) -> bool:
        """``for opt in optimizers: scaler.step(opt)``: the loop visits several optimizers of one backward."""
        names = {n.value for n in self.context.nodes_within(loop.target, cst.Name)}
        for call in self.context.nodes_within(loop.body, cst.Call):
            func = call.func
            if (
                isinstance(func, cst.Attribute)
                and func.attr.value == "step"
                and dotted(func.value) == scaler
                and call.args
                and (dotted(call.args[0].value) or "").split(".")[0] in names
            ):
                return True
        return False

    def _escapes(self, scaler: str) -> bool:
        """The scaler is handed to other code (``finish_step(scaler)``), which may update it."""
        for name in self.context.nodes(cst.Arg):
            if dotted(name.value) == scaler:
                return True
        return False


def _bypassed(kind: str, role: str) -> str | None:
    return "scales the loss whose gradients the step applies" if kind == "scaled-backward" else None


def _around_update(kind: str, role: str) -> str | None:
    if role == "before":
        return "steps before the update"
    if role == "before and after":
        return "steps one optimizer before the update and the next after it"
    return "steps after it, on gradients of the same backward" if role == "after" else None
