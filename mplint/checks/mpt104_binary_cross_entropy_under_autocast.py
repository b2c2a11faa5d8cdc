"""MPT104: ``binary_cross_entropy``/``BCELoss`` called in an autocast region that runs on CUDA, where it raises."""

from __future__ import annotations

import libcst as cst

from mplint.analysis.bindings import binding_nodes
from mplint.analysis.torch_amp import AutocastRegion, BoundNames, TorchAmp
from mplint.checks._torch_rule import TorchRule
from mplint.diagnostics import Fix, FixSafety
from mplint.engine.names import dotted

_SCOPES = (cst.FunctionDef, cst.Lambda, cst.ClassDef)
_SIGMOIDS = frozenset({"sigmoid", "nn.functional.sigmoid", "special.expit"})
_LOGITS_NAMES = ("logits", "bce_logits")  # the name a fix binds the logits to, the first the scope does not use


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
        fix = None
        logits = self._sigmoid_input(call) if spelled == "function" else None
        if logits is not None:
            fix = self._with_logits(call, logits)
        elif spelled == "function" and not caller:
            fix = self._with_bound_logits(call, region)
        if logits is not None or fix is not None:
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
            fix,
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
        first = self._first_argument(call)
        return self._logits_of(first) if isinstance(first, cst.Call) else None

    @staticmethod
    def _first_argument(call: cst.Call) -> cst.BaseExpression | None:
        first = call.args[0] if call.args and call.args[0].keyword is None and not call.args[0].star else None
        return first.value if first is not None else None

    def _logits_of(self, value: cst.Call) -> cst.BaseExpression | None:
        """``z`` of a sigmoid call ``torch.sigmoid(z)``/``z.sigmoid()``, else None."""
        func = value.func
        if self._torch(func, _SIGMOIDS):
            return value.args[0].value if len(value.args) == 1 and value.args[0].keyword is None else None
        if isinstance(func, cst.Attribute) and func.attr.value == "sigmoid" and not value.args:
            return func.value  # z.sigmoid()
        return None

    def _torch(self, node: cst.CSTNode, paths: set[str] | frozenset[str]) -> bool:
        found = self.context.names.torch_api(node, paths)
        return found is not None and found.ns == "torch"

    def _with_bound_logits(self, call: cst.Call, region: AutocastRegion) -> Fix | None:
        """``p = torch.sigmoid(z)`` on an earlier line of the loss's region, ``p`` bound nowhere else in the scope,
        then ``F.binary_cross_entropy(p, y)``: ``z`` bound to a name of its own (``logits = z``, then ``p =
        torch.sigmoid(logits)``, which the rest of the code may still read) and given to the logits form. ``z``
        itself where it is a name not bound again between the two lines."""
        probabilities = self._first_argument(call)
        found = self._assignment(probabilities) if isinstance(probabilities, cst.Name) else None
        if found is None:
            return None
        line, assign, sigmoid = found
        logits = self._logits_of(sigmoid)
        order = self.context.source_order
        if (
            logits is None
            or order(line) > order(call)
            or not any(ancestor is region.node for ancestor in self.context.ancestors(line))
        ):
            return None
        if isinstance(logits, cst.Name) and self._unchanged_between(logits, line, call):
            return self._with_logits(call, logits)
        name = self._free_name(call)
        if name is None:
            return None
        if isinstance(sigmoid.func, cst.Attribute) and not sigmoid.args:  # z.sigmoid()
            rebound = sigmoid.with_changes(func=sigmoid.func.with_changes(value=cst.Name(name)))
        else:
            rebound = sigmoid.with_changes(args=(sigmoid.args[0].with_changes(value=cst.Name(name)),))
        bind = cst.SimpleStatementLine(
            body=(cst.Assign(targets=(cst.AssignTarget(cst.Name(name)),), value=logits),),
            leading_lines=line.leading_lines,
        )
        then = line.with_changes(leading_lines=(), body=(assign.with_changes(value=rebound),))
        loss = self._with_logits(call, cst.Name(name))
        assert loss is not None
        return Fix({line: cst.FlattenSentinel((bind, then)), **loss.replacements}, FixSafety.UNSAFE)

    def _assignment(self, name: cst.Name) -> tuple[cst.SimpleStatementLine, cst.Assign, cst.Call] | None:
        """The one statement binding ``name`` where it is read, when it is ``name = <call>`` alone on its line."""
        bound = binding_nodes(self.context, name)
        if not bound or len(bound) != 1:
            return None
        target = self.context.parent(bound[0])
        assign = self.context.parent(target) if isinstance(target, cst.AssignTarget) else None
        if not isinstance(assign, cst.Assign) or len(assign.targets) != 1 or not isinstance(assign.value, cst.Call):
            return None
        line = self.context.parent(assign)
        if not isinstance(line, cst.SimpleStatementLine) or len(line.body) != 1:
            return None
        return line, assign, assign.value

    def _unchanged_between(self, name: cst.Name, first: cst.CSTNode, last: cst.CSTNode) -> bool:
        """No binding of ``name`` lies between ``first`` and ``last`` in the source."""
        bound = binding_nodes(self.context, name)
        order = self.context.source_order
        return bound is not None and not any(order(first) < order(node) < order(last) for node in bound)

    def _free_name(self, call: cst.Call) -> str | None:
        """A name for the logits that the scope of ``call`` does not use."""
        scope = self.context.enclosing(call, _SCOPES) or self.context.module
        used = {name.value for name in self.context.nodes_within(scope, cst.Name)}
        return next((name for name in _LOGITS_NAMES if name not in used), None)

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
