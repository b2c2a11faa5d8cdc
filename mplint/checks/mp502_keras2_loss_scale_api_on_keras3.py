"""MP502: Keras 2 LossScaleOptimizer methods and attributes used with Keras 3.

Which receivers count: ``get_scaled_loss``/``get_unscaled_gradients`` are
distinctive enough to flag on any receiver (unless the file defines a method of
that name itself). The common words ``loss_scale``/``dynamic_counter`` are
flagged only on a receiver that plausibly is a LossScaleOptimizer: a dotted
name the file assigns a ``LossScaleOptimizer(...)`` to, or ``<x>.optimizer``
(``self.optimizer`` in ``train_step``, ``model.optimizer``). Receivers bound
to a ``tf_keras`` LossScaleOptimizer keep the Keras 2 API and are skipped.
"""

from __future__ import annotations

import libcst as cst

from mplint.analysis.call_args import keyword
from mplint.analysis.keras_guards import NO_FIX, guarded_target
from mplint.analysis.loss_scale_api import (
    LossScaleOptimizerNames,
    loss_scale_optimizer_call,
)
from mplint.diagnostics import Fix, FixSafety
from mplint.engine import matchers as m
from mplint.engine.check import in_compatibility_branch
from mplint.engine.names import canonical, dotted
from mplint.engine.rule import Rule
from mplint.knowledge.api_versions import K3
from mplint.knowledge.loss_scale_names import KERAS2_METHODS as _METHODS
from mplint.knowledge.loss_scale_names import KERAS3_RENAMES as _ATTRIBUTES

_EXPERIMENTAL = "mixed_precision.experimental"


class Keras2LossScaleApiOnKeras3(Rule):
    id = "MP502"
    silent_in_uncalled_code = True
    silent_in_compatibility_branches = True
    triggers = (b"get_scaled_loss", b"get_unscaled_gradients", b"loss_scale", b"dynamic")

    @classmethod
    def candidate(cls, code) -> bool:
        return code.mentions(*_METHODS, *_ATTRIBUTES) or (
            "dynamic" in code.words and "LossScaleOptimizer" in code.calls
        )

    @classmethod
    def active_for(cls, facts) -> bool:
        return facts.generation.admits(3)  # the range includes Keras 3

    def __init__(self, context):
        super().__init__(context)
        self.gen = gen = context.facts.generation
        self.target = f"target {gen.label}, from {gen.source}"
        # Where the range admits Keras 2 too, the Keras 2 API is right there: the Keras 3 rewrite holds on part of it,
        # a guess where nothing says which part runs.
        self.safety = FixSafety.SAFE
        if gen.low < 3 and not gen.evidenced:
            self.safety = FixSafety.NONE
            self.target += f"; {NO_FIX}"
        elif gen.low < 3:
            self.safety = FixSafety.UNSAFE
            self.target += "; the fix holds on Keras 3 only: set the target or pin TensorFlow >= 2.16 to make it safe"
        self._own_methods: set[str] | None = None
        self.experimental = False  # the module uses the TF 2.1-2.3 experimental API (``_experimental_api``)
        self._bound: dict | None = None

    def report(self, node, message, fix=None, severity=None, related=()) -> None:
        """Inside a version guard the arm's own range decides: silent where it never runs on Keras 3 (or the guard
        is unknown), and the fix is safe only where the arm runs on Keras 3 alone."""
        guard = guarded_target(self.context, node, self.gen, frozenset({K3}))
        if guard is False:
            return
        if guard is not None:
            target = guard.label
            if fix is not None:
                fix.safety = FixSafety.SAFE if guard.eras == {K3} else FixSafety.UNSAFE
                if guard.eras != {K3}:
                    target += "; the fix holds on Keras 3 only"
            message = message.replace(f"({self.target})", f"({target})")
        super().report(node, message, fix, severity, related)
        self.findings[-1].guards_read = guard is not None

    def visit_Attribute(self, node: cst.Attribute) -> None:
        name = node.attr.value
        if name == "experimental" and self._experimental_api(node):
            return
        if name in _METHODS:
            if name not in self.own_methods and not self._legacy_receiver(node.value):
                self._method(node, name)
        elif name in _ATTRIBUTES and self._plausible_receiver(node.value):
            self._attribute(node, name)

    def visit_ImportFrom(self, node: cst.ImportFrom) -> None:
        module = dotted(node.module) if node.module is not None and not node.relative else None
        k = canonical(module or "")
        named = [] if isinstance(node.names, cst.ImportStar) else [dotted(a.name) for a in node.names]
        if (
            k is not None
            and k.is_keras
            and (k.path == _EXPERIMENTAL or k.path == "mixed_precision" and "experimental" in named)
        ):
            self._experimental_api(node)

    def _experimental_api(self, node: cst.CSTNode) -> bool:
        """The module uses TF 2.1-2.3's ``mixed_precision.experimental`` (outside a compatibility shim): where the
        target also admits older Keras, that is the code's own evidence that it runs there, not on Keras 3 (it could
        not get past the experimental names); its Keras 2 names are MP501's migration's business."""
        if isinstance(node, cst.Attribute) and not self.context.names.matches(node, [_EXPERIMENTAL]):
            return False
        if not in_compatibility_branch(self.context, node):
            self.experimental = True
        return True

    def leave_Module(self, original_node: cst.Module) -> None:
        if self.experimental and self.gen.low < 3:  # where the target is Keras 3 alone, both names break there
            self.findings.clear()

    def visit_Call(self, node: cst.Call) -> None:
        arg = keyword(node, "dynamic")
        if arg is None or not m.matches(arg.value, m.Name("False")):
            return
        kname = loss_scale_optimizer_call(self.context, node)
        if kname is None or kname.ns == "tf_keras":
            return
        self.report(
            arg,
            "Keras 3's LossScaleOptimizer raises ValueError on `dynamic=False`: for a fixed loss scale drop the "
            "wrapper, pass `loss_scale_factor=<scale>` to the inner optimizer (and `auto_scale_loss=False` to "
            f"compile()); or keep dynamic scaling and remove `dynamic=False` ({self.target})",
        )

    # --- methods ---------------------------------------------------------------------------

    def _method(self, node: cst.Attribute, name: str) -> None:
        call = self.context.parent(node)
        if not (isinstance(call, cst.Call) and call.func is node):
            self.report(
                node.attr, f"`{name}` does not exist on Keras 3's LossScaleOptimizer (AttributeError) ({self.target})"
            )
            return
        if name == "get_scaled_loss":
            self.report(
                node.attr,
                f"`get_scaled_loss` does not exist on Keras 3's LossScaleOptimizer (AttributeError): use "
                f"`scale_loss` ({self.target})",
                Fix({node: node.with_changes(attr=cst.Name("scale_loss"))}, self.safety),
            )
            return
        message = (
            f"`get_unscaled_gradients` does not exist on Keras 3's LossScaleOptimizer (AttributeError): its "
            f"`apply_gradients` unscales the gradients itself, so pass them on unchanged ({self.target})"
        )
        if len(call.args) != 1 or call.args[0].keyword is not None or call.args[0].star:
            self.report(node.attr, message)
            return
        self.report(node.attr, message, Fix(self._drop_unscale(call), self.safety))

    def _drop_unscale(self, call: cst.Call) -> dict:
        """``grads = opt.get_unscaled_gradients(grads)`` goes; elsewhere the call becomes its argument."""
        argument = call.args[0].value
        assign = self.context.parent(call)
        line = self.context.parent(assign) if isinstance(assign, cst.Assign) else None
        if (
            isinstance(line, cst.SimpleStatementLine)
            and len(line.body) == 1
            and len(assign.targets) == 1
            and dotted(assign.targets[0].target) is not None
            and dotted(assign.targets[0].target) == dotted(argument)
            and len(getattr(self.context.parent(line), "body", ())) > 1
        ):
            return {line: cst.RemovalSentinel.REMOVE}
        return {call: argument.with_changes(lpar=call.lpar, rpar=call.rpar) if call.lpar else argument}

    @property
    def own_methods(self) -> set[str]:
        if self._own_methods is None:
            self._own_methods = {f.name.value for f in self.context.nodes(cst.FunctionDef)}
        return self._own_methods

    # --- attributes ------------------------------------------------------------------------

    def _attribute(self, node: cst.Attribute, name: str) -> None:
        new = _ATTRIBUTES[name]
        message = f"`.{name}` does not exist on Keras 3's LossScaleOptimizer (AttributeError): use `.{new}`"
        if name == "dynamic_counter":
            message += " (the steps since the last scale change)"
        target = self._is_target(node)
        if target:
            message += "; no automatic fix: it is the target of an assignment or del"
        renamed = node.with_changes(attr=cst.Name(new))
        call = self.context.parent(node)
        if name == "loss_scale" and isinstance(call, cst.Call) and call.func is node and not call.args:
            # G1's `opt.loss_scale()` called the LossScale object for its value; `dynamic_scale` is that value.
            fix = Fix({call: renamed.with_changes(lpar=call.lpar, rpar=call.rpar)}, self.safety)
        else:
            fix = None if target else Fix({node: renamed}, self.safety)
        self.report(node.attr, f"{message} ({self.target})", fix)

    def _is_target(self, node: cst.CSTNode) -> bool:
        parent = self.context.parent(node)
        if isinstance(parent, cst.AssignTarget):
            return True
        return isinstance(parent, (cst.AugAssign, cst.AnnAssign, cst.Del)) and parent.target is node

    @property
    def bound(self) -> dict:
        if self._bound is None:
            self._bound = self.context.analysis(LossScaleOptimizerNames).bound
        return self._bound

    def _plausible_receiver(self, receiver: cst.BaseExpression) -> bool:
        name = dotted(receiver)
        if name is None:
            return False
        if name in self.bound:
            return self.bound[name].ns != "tf_keras"
        return isinstance(receiver, cst.Attribute) and receiver.attr.value == "optimizer"

    def _legacy_receiver(self, receiver: cst.BaseExpression) -> bool:
        name = dotted(receiver)
        return name in self.bound and self.bound[name].ns == "tf_keras"
