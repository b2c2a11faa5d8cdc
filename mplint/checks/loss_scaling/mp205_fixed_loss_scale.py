"""MP205: a fixed loss scale under mixed_float16."""

from __future__ import annotations

import ast
import re

import libcst as cst

from mplint.analysis.call_args import argument
from mplint.analysis.constants import reaching_assignment
from mplint.diagnostics import Related
from mplint.engine.rule import Rule
from mplint.engine.summaries import Summary, SummaryKind, declare, parameter_defaults, parameters, summary_at
from mplint.knowledge.loss_scale_names import LSO

_WHY = "a fixed loss scale overflows to inf or lets gradients underflow as their range drifts; use dynamic loss scaling"


def _number(node: cst.BaseExpression) -> bool:
    if isinstance(node, cst.UnaryOperation):
        node = node.expression
    if isinstance(node, cst.BinaryOperation):
        return _number(node.left) and _number(node.right)
    return isinstance(node, (cst.Integer, cst.Float))


def _returned_parameters(statements: list[ast.stmt], source: bytes) -> dict[str, Summary]:
    """Loss-scale helpers that can return one of their parameters as it came (mlcommons' ``get_loss_scale(flags_obj,
    default_for_fp16)`` returns ``default_for_fp16`` when no ``--loss_scale`` is given): a caller that passes a
    number there gets a fixed loss scale. The default is kept where it is a number."""
    found: dict[str, Summary] = {}
    for function in statements:
        if not isinstance(function, ast.FunctionDef):
            continue
        positional, params, own, rebound = parameters(function)
        for node in own:
            if isinstance(node, ast.Return) and isinstance(node.value, ast.Name):
                name = node.value.id
                if name in params - rebound:
                    found[function.name] = summary_at(
                        node, name, positional.index(name) if name in positional else -1, _default(function, name)
                    )
                    break
    return found


def _default(function: ast.FunctionDef, name: str) -> str | None:
    value = parameter_defaults(function).get(name)
    if isinstance(value, ast.Constant) and type(value.value) in (int, float):
        return repr(value.value)
    return None


RETURNED_SCALE = declare(
    SummaryKind("returned_loss_scale", (re.compile(rb"(?i)loss_?scale"),), True, _returned_parameters)
)


class FixedLossScale(Rule):
    id = "MP205"
    triggers = (b"LossScale", b"loss_scale")
    summary_triggers = (RETURNED_SCALE,)  # `LossScaleOptimizer(opt, get_loss_scale(flags, default_for_fp16=128))`

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
        if api.last == LSO and not problems:
            self._returned_number(node)

    def _returned_number(self, call: cst.Call) -> None:
        """``LossScaleOptimizer(opt, loss_scale)`` where ``loss_scale`` comes from a project helper that can return
        the number its caller passes (or its default): a fixed loss scale on that path."""
        arg = next(
            (a for i, a in enumerate(call.args) if (a.keyword.value if a.keyword else i) in (1, "loss_scale")), None
        )
        if arg is None:
            return
        value = arg.value
        if isinstance(value, cst.Name):
            reaching = reaching_assignment(self.context, value.value, call)
            value = reaching.value if reaching is not None else None
        if not isinstance(value, cst.Call):
            return
        summary = self.context.summary(value.func, RETURNED_SCALE)
        if summary is None:
            return
        passed = argument(value, summary.position if summary.position >= 0 else None, summary.value)
        if passed is not None and _number(passed):
            number = self.context.module.code_for_node(passed)
        elif passed is None and summary.default is not None:
            number = summary.default
        else:
            return
        helper = self.context.module.code_for_node(value.func)
        self.report(
            arg,
            f"LossScaleOptimizer with a numeric loss scale: `{helper}` can return its `{summary.value}`, "
            f"{number} here, and the scale then stays {number}: {_WHY}",
            related=(Related(summary.path, summary.line, f"`{helper}` returns `{summary.value}` here"),),
        )

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
