"""Recognising loss-scaling API calls across Keras generations.

Shared by the API-migration rules (MP5xx) and the loss-scaling rules (MP2xx):
which calls construct a ``LossScaleOptimizer`` (G1 experimental, Keras 2 or
Keras 3 spellings), which argument carries a G1 ``loss_scale``, what that
argument means (dynamic, fixed, or a ``DynamicLossScale`` with settings), and
which names in a file hold a ``LossScaleOptimizer``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import libcst as cst

from mplint.analysis.call_args import keyword
from mplint.engine import matchers as m
from mplint.engine.context import FileContext
from mplint.engine.names import KName, dotted
from mplint.knowledge.loss_scale_names import LSO_PATHS

LOSS_SCALE_OPTIMIZER = LSO_PATHS
POLICY = ("mixed_precision.Policy", "mixed_precision.experimental.Policy")
# G1 loss-scale objects: tf.mixed_precision.experimental.* (alias tf.train.experimental.*).
_LOSS_SCALE_CLASSES = {
    f"{module}.{cls}"
    for module in ("mixed_precision.experimental", "train.experimental")
    for cls in ("DynamicLossScale", "FixedLossScale")
}
_DYNAMIC_STRINGS = {"dynamic", "auto"}


def positional(call: cst.Call, index: int) -> cst.Arg | None:
    args = [a for a in call.args if a.keyword is None and not a.star]
    return args[index] if index < len(args) else None


def loss_scale_optimizer_call(context: FileContext, node: cst.CSTNode) -> KName | None:
    """The KName of the ``LossScaleOptimizer`` that ``node`` constructs, if it is such a call."""
    return context.names.callee(node, LOSS_SCALE_OPTIMIZER) if isinstance(node, cst.Call) else None


def loss_scale_class(context: FileContext, node: cst.CSTNode) -> str | None:
    """ "DynamicLossScale" or "FixedLossScale" when ``node`` constructs one (any namespace)."""
    if not isinstance(node, cst.Call):
        return None
    found = context.names.matches(node.func, _LOSS_SCALE_CLASSES, namespaces=("tf", "keras", "tf.keras", "tf_keras"))
    return found.last if found else None


def is_number(node: cst.BaseExpression) -> bool:
    """A numeric constant expression: ``128``, ``2.0``, ``2 ** 15``, ``2 * 1024``."""
    if isinstance(node, (cst.Integer, cst.Float)):
        return True
    if isinstance(node, cst.BinaryOperation) and isinstance(node.operator, (cst.Power, cst.Multiply)):
        return is_number(node.left) and is_number(node.right)
    return False


@dataclass
class LossScaleValue:
    """What a G1 ``loss_scale`` value means.

    kind: "dynamic" (the default dynamic scaling), "fixed" (``value`` is the scale),
    "custom" (dynamic with settings, in ``settings`` as Keras 2/3 keyword names) or
    "unknown" (a variable or anything the linter cannot read).
    """

    kind: str
    value: cst.BaseExpression | None = None
    settings: list[tuple[str, cst.BaseExpression]] = field(default_factory=list)


def read_loss_scale(context: FileContext, node: cst.BaseExpression) -> LossScaleValue:
    if isinstance(node, cst.SimpleString) and node.evaluated_value in _DYNAMIC_STRINGS:
        return LossScaleValue("dynamic")
    if m.matches(node, m.Name("None")):
        return LossScaleValue("dynamic")
    if is_number(node):
        return LossScaleValue("fixed", node)
    cls = loss_scale_class(context, node)
    if cls == "FixedLossScale":
        arg = positional(node, 0) or keyword(node, "loss_scale_value")
        return LossScaleValue("fixed", arg.value) if arg is not None else LossScaleValue("unknown")
    if cls == "DynamicLossScale":
        return _dynamic_settings(node)
    return LossScaleValue("unknown")


def _dynamic_settings(call: cst.Call) -> LossScaleValue:
    """``DynamicLossScale(initial_loss_scale, increment_period, multiplier)`` in Keras 2/3 words."""
    renames = (("initial_loss_scale", "initial_scale"), ("increment_period", "dynamic_growth_steps"))
    settings = []
    for index, (old, new) in enumerate(renames):
        arg = keyword(call, old) or positional(call, index)
        if arg is not None:
            settings.append((new, arg.value))
    multiplier = keyword(call, "multiplier") or positional(call, 2)
    if multiplier is not None and not m.matches(multiplier.value, m.Integer("2") | m.Float("2.0") | m.Float("2.")):
        return LossScaleValue("unknown")  # Keras 2 and 3 always double and halve
    if any(a.star for a in call.args):
        return LossScaleValue("unknown")
    return LossScaleValue("custom" if settings else "dynamic", settings=settings)


def without_arg(call: cst.Call, drop: cst.Arg, extra: list[cst.Arg] = ()) -> cst.Call:
    """``call`` with ``drop`` removed and ``extra`` keyword arguments appended; a trailing comma stays."""
    trailing = call.args[-1].comma if call.args else cst.MaybeSentinel.DEFAULT
    args = [a for a in call.args if a is not drop] + list(extra)
    tidy = [_with_comma(a) for a in args[:-1]] + [args[-1].with_changes(comma=trailing)] if args else []
    return call.with_changes(args=tidy)


def _with_comma(arg: cst.Arg) -> cst.Arg:
    if isinstance(arg.comma, cst.Comma):
        return arg
    return arg.with_changes(comma=cst.Comma(whitespace_after=cst.SimpleWhitespace(" ")))


class LossScaleOptimizerNames:
    """Dotted targets (``opt``, ``self.optimizer``) assigned a ``LossScaleOptimizer`` in a file.

    Matched by text across the file, not per scope: an optimizer stored on
    ``self`` in ``__init__`` is used in other methods.
    """

    def __init__(self, context: FileContext):
        self.bound: dict[str, KName] = {}
        for assign in context.nodes(cst.Assign, cst.AnnAssign):
            if assign.value is None:
                continue
            kname = loss_scale_optimizer_call(context, assign.value)
            if kname is None:
                continue
            targets = [t.target for t in assign.targets] if isinstance(assign, cst.Assign) else [assign.target]
            for target in targets:
                name = dotted(target)
                if name:
                    self.bound[name] = kname
