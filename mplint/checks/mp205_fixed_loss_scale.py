"""MP205: a fixed loss scale under mixed_float16."""

from __future__ import annotations

import libcst as cst

from mplint.engine.rule import Rule
from mplint.knowledge.loss_scale_names import LSO

_WHY = "a fixed loss scale overflows to inf or lets gradients underflow as their range drifts; use dynamic loss scaling"


def _number(node: cst.BaseExpression) -> bool:
    if isinstance(node, cst.UnaryOperation):
        node = node.expression
    if isinstance(node, cst.BinaryOperation):
        return _number(node.left) and _number(node.right)
    return isinstance(node, (cst.Integer, cst.Float))


class FixedLossScale(Rule):
    id = "MP205"
    triggers = (b"LossScale", b"loss_scale")

    @classmethod
    def candidate(cls, code) -> bool:
        policy_scale = code.calls_any("Policy", "DTypePolicy") and "loss_scale" in code.keywords
        return policy_scale or code.calls_any("FixedLossScale", LSO) or "loss_scale_factor" in code.keywords

    @classmethod
    def active_for(cls, facts):
        return facts.float16

    def visit_Call(self, node: cst.Call) -> None:
        api = self.context.names.kname(node.func)  # the resolved API: `Wrap` of `import LossScaleOptimizer as Wrap`
        if api is None:
            return  # `train(None, loss_scale_factor=2.0)` is no Keras API
        problems = _problems(node, api)
        if problems and api.last == LSO and self._chosen_over_dynamic(node):
            return
        for where, message in problems:
            self.report(where, f"{message}: {_WHY}")

    def _chosen_over_dynamic(self, call: cst.Call) -> bool:
        """``if loss_scale == "dynamic": LSO(opt) else: LSO(opt, dynamic=False, initial_scale=loss_scale)``: the
        code scales dynamically unless its caller asks for a fixed scale; that choice is the caller's to make."""
        child: cst.CSTNode = call
        for ancestor in self.context.ancestors(call):
            if isinstance(ancestor, (cst.FunctionDef, cst.ClassDef, cst.Lambda)):
                return False
            if isinstance(ancestor, (cst.If, cst.IfExp)) and child in (ancestor.body, ancestor.orelse):
                other = ancestor.orelse if child is ancestor.body else ancestor.body
                if other is not None and any(self._dynamic(c) for c in self.context.nodes_within(other, cst.Call)):
                    return True
            child = ancestor
        return False

    def _dynamic(self, call: cst.Call) -> bool:
        api = self.context.names.kname(call.func)
        return api is not None and api.last == LSO and not _problems(call, api)


def _problems(node: cst.Call, api) -> list[tuple[cst.CSTNode, str]]:
    """Where the call fixes the loss scale, and how the message names it."""
    name = api.last
    if name == "FixedLossScale":
        return [(node, "FixedLossScale")]
    found = []
    for i, arg in enumerate(node.args):
        key = arg.keyword.value if arg.keyword else None
        if (
            key == "loss_scale_factor"
            and api.path.startswith("optimizers.")
            and not (isinstance(arg.value, cst.Name) and arg.value.value == "None")
        ):
            found.append((arg, "loss_scale_factor= multiplies the loss by a constant"))
        elif name == LSO and key == "dynamic" and isinstance(arg.value, cst.Name) and arg.value.value == "False":
            found.append((arg, "LossScaleOptimizer(dynamic=False)"))
        elif name == LSO and (key == "loss_scale" or (key is None and i == 1)) and _number(arg.value):
            found.append((arg, "LossScaleOptimizer with a numeric loss scale"))
        elif name in ("Policy", "DTypePolicy") and key == "loss_scale" and _number(arg.value):
            found.append((arg, "Policy(loss_scale=<number>)"))
    return found
