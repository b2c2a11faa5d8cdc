"""What functions of another file do to optimizers and losses, for the training loops that call them (CPython's
tree): the factories that build an optimizer (and whether they wrap it for loss scaling) and the helpers that scale
a loss or unscale gradients. ``optimizer_flow`` reads them where a loop calls such a function.
"""

from __future__ import annotations

import ast

from mplint.engine.imports import callee_name
from mplint.engine.summaries import Summary, SummaryKind, declare, own_nodes, summary_at
from mplint.engine.summaries import walk as walk_python
from mplint.knowledge.loss_scale_names import LSO, SCALE_ATTRS, SCALE_METHODS, UNSCALE_METHOD

_OPTIMIZER_CLASSES = frozenset(
    {
        "Adam",
        "AdamW",
        "SGD",
        "RMSprop",
        "Adagrad",
        "Adadelta",
        "Adamax",
        "Nadam",
        "Ftrl",
        "Lion",
        "Lamb",
        "LAMB",
        "Adafactor",
    }
)


def _optimizer_factories(statements: list[ast.stmt], source: bytes = b"") -> dict[str, Summary]:
    """Module functions that return an optimizer, and how it is wrapped, for loops in other modules
    (``optimizer = build_optimizer(params)``): "explicit" when every return is a LossScaleOptimizer, "maybe"
    when some are (``if use_float16: optimizer = LossScaleOptimizer(optimizer)``, the parameter returned as
    it came otherwise), "none" when every return is a plain optimizer's constructor, "unknown" for other
    functions named like optimizer factories."""
    found: dict[str, Summary] = {}
    for function in statements:
        if not isinstance(function, ast.FunctionDef):
            continue
        own = list(own_nodes(function))
        params = {a.arg for a in (*function.args.args, *function.args.kwonlyargs)}
        assigned: dict[str, list[ast.expr]] = {}
        for node in own:
            if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
                assigned.setdefault(node.targets[0].id, []).append(node.value)
        returns = [n.value for n in own if isinstance(n, ast.Return) and n.value is not None]
        kinds = set().union(*(_optimizer_kinds(value, assigned, params, 0) for value in returns)) if returns else set()
        if kinds == {"explicit"}:
            wrap = "explicit"
        elif "explicit" in kinds:
            wrap = "maybe"
        elif kinds == {"none"}:
            wrap = "none"
        elif "optim" in function.name.lower() and returns:
            wrap = "unknown"
        else:
            continue
        found[function.name] = summary_at(function, wrap, -1, None)
    return found


def _optimizer_kinds(value: ast.expr, assigned: dict[str, list[ast.expr]], params: set[str], depth: int) -> set[str]:
    """What a returned value may be: "explicit" (a LossScaleOptimizer), "none" (a plain optimizer's
    constructor), "unknown"; a name, every value bound to it (a parameter also as it was passed)."""
    if isinstance(value, ast.Call):
        last = callee_name(value)
        if last == LSO:
            return {"explicit"}
        return {"none"} if last in _OPTIMIZER_CLASSES else {"unknown"}
    if isinstance(value, ast.Name) and depth < 3 and value.id in assigned:
        found = {"unknown"} if value.id in params else set()
        return found.union(*(_optimizer_kinds(v, assigned, params, depth + 1) for v in assigned[value.id]))
    return {"unknown"}


def _loss_scaling_helpers(statements: list[ast.stmt], source: bytes = b"") -> dict[str, Summary]:
    """Module functions that scale a loss or unscale gradients (``def scale(opt, loss): return
    opt.get_scaled_loss(loss)``), so that a loop of another module calling them is read as the same
    module's helpers are: "scale", "unscale" (``get_unscaled_gradients``), "manual_unscale" (divides
    by ``loss_scale``/``dynamic_scale``)."""
    found: dict[str, Summary] = {}
    for function in statements:
        if not isinstance(function, ast.FunctionDef):
            continue
        steps = set()
        for node in own_nodes(function):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
                if node.func.attr in SCALE_METHODS:
                    steps.add("scale")
                elif node.func.attr == UNSCALE_METHOD:
                    steps.add("unscale")
            elif (
                isinstance(node, ast.BinOp)
                and isinstance(node.op, ast.Div)
                and any(isinstance(a, ast.Attribute) and a.attr in SCALE_ATTRS for a in walk_python(node.right))
            ):
                steps.add("manual_unscale")
        if steps:
            found[function.name] = summary_at(function, "+".join(sorted(steps)), -1, None)
    return found


# `SGD(lr)` may say "optimizer" only in its import
OPTIMIZER = declare(SummaryKind("optimizer", (b"ptimizer",), False, _optimizer_factories))
LOSS_SCALING = declare(SummaryKind("loss_scaling", (b"scale",), True, _loss_scaling_helpers))
