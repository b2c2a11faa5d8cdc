"""MP205: a fixed loss scale under mixed_float16."""

from __future__ import annotations

import libcst as cst

from mplint.knowledge.loss_scale_names import LSO
from mplint.engine.rule import Rule

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
        name = api.last
        if name == "FixedLossScale":
            self.report(node, f"FixedLossScale: {_WHY}")
            return
        for i, arg in enumerate(node.args):
            key = arg.keyword.value if arg.keyword else None
            if key == "loss_scale_factor" and api.path.startswith("optimizers.") \
                    and not (isinstance(arg.value, cst.Name) and arg.value.value == "None"):
                self.report(arg, f"loss_scale_factor= multiplies the loss by a constant: {_WHY}")
            elif name == LSO and key == "dynamic" and isinstance(arg.value, cst.Name) and arg.value.value == "False":
                self.report(arg, f"LossScaleOptimizer(dynamic=False): {_WHY}")
            elif name == LSO and (key == "loss_scale" or (key is None and i == 1)) and _number(arg.value):
                self.report(arg, f"LossScaleOptimizer with a numeric loss scale: {_WHY}")
            elif name in ("Policy", "DTypePolicy") and key == "loss_scale" and _number(arg.value):
                self.report(arg, f"Policy(loss_scale=<number>): {_WHY}")
