"""Functions that map an activation's name to a Keras layer (``get_activation("softmax")``), read on CPython's tree
so that a model output built through one in another module is seen for what it is: a softmax output layer (MP101),
and a layer that keeps its input's shape, so that the layer before it is an output layer too (model_outputs).

The forms read: ``return layers.Activation(name)``, ``return {"softmax": layers.Softmax(), ...}[name]`` (also a
module dict of such layers or of their classes, called: ``_ACTIVATIONS[name]()``), and ``if name == "softmax":
return layers.Softmax()``. The summary's ``default`` is the name that gives the softmax layer.
"""

from __future__ import annotations

import ast
import re

import libcst as cst

from mplint.analysis.call_args import argument
from mplint.analysis.constants import evaluate
from mplint.engine.context import FileContext
from mplint.engine.imports import callee_name
from mplint.engine.summaries import FunctionSummary, Summary, SummaryKind, declare, parameters, summary_at
from mplint.engine.summaries import walk as walk_python

SOFTMAX = "softmax"


def _activation_layer_functions(statements: list[ast.stmt], source: bytes = b"") -> dict[str, Summary]:
    """Module functions whose result is a layer chosen by an activation-name parameter, where some name gives a
    softmax layer that no ``dtype=`` argument of the function makes float32."""
    dicts = {
        target.id: stmt.value
        for stmt in statements
        if isinstance(stmt, ast.Assign) and isinstance(stmt.value, ast.Dict)
        for target in stmt.targets
        if isinstance(target, ast.Name)
    }
    found: dict[str, Summary] = {}
    for function in statements:
        if not isinstance(function, ast.FunctionDef):
            continue
        positional, params, own, rebound = parameters(function)
        for node in own:
            if not isinstance(node, ast.Return) or node.value is None:
                continue
            chosen = _chosen_softmax(node, node.value, params - rebound, dicts, function)
            if chosen is not None:
                param, key = chosen
                index = positional.index(param) if param in positional else -1
                found[function.name] = summary_at(node.value, param, index, key)
                break
    return found


def _chosen_softmax(
    ret: ast.Return, value: ast.expr, params: set[str], dicts: dict[str, ast.Dict], function: ast.FunctionDef
) -> tuple[str, str] | None:
    """(parameter, the name of it that gives a softmax layer) for the returned ``value``, else None."""
    if isinstance(value, ast.Call) and callee_name(value) == "Activation" and not _has_dtype(value):
        spelled = (
            value.args[0] if value.args else next((k.value for k in value.keywords if k.arg == "activation"), None)
        )
        if isinstance(spelled, ast.Name) and spelled.id in params:
            return spelled.id, SOFTMAX  # Activation("softmax") is a softmax layer
    called = isinstance(value, ast.Call) and not value.args and not value.keywords
    table = value.func if isinstance(value, ast.Call) and called else value
    if isinstance(table, ast.Subscript) and isinstance(table.slice, ast.Name) and table.slice.id in params:
        mapping: ast.expr | None = table.value
        if isinstance(mapping, ast.Name):
            mapping = dicts.get(mapping.id)
        if isinstance(mapping, ast.Dict):
            for key, layer in zip(mapping.keys, mapping.values):
                if isinstance(key, ast.Constant) and isinstance(key.value, str) and _softmax_layer(layer, called):
                    return table.slice.id, key.value
        return None
    if _softmax_layer(value, False):
        test = _guarding_test(ret, function)
        if (
            isinstance(test, ast.Compare)
            and isinstance(test.left, ast.Name)
            and test.left.id in params
            and len(test.ops) == 1
            and isinstance(test.ops[0], ast.Eq)
            and isinstance(test.comparators[0], ast.Constant)
            and isinstance(test.comparators[0].value, str)
        ):
            return test.left.id, test.comparators[0].value
    return None


def _softmax_layer(node: ast.expr, a_class: bool) -> bool:
    """``layers.Softmax()``, ``Activation("softmax")`` (or, where ``a_class``, ``layers.Softmax`` that the caller
    calls), without a dtype."""
    if a_class:
        name = node.attr if isinstance(node, ast.Attribute) else node.id if isinstance(node, ast.Name) else None
        return name == "Softmax"
    if not isinstance(node, ast.Call) or _has_dtype(node):
        return False
    last = callee_name(node)
    if last == "Softmax":
        return True
    return (
        last == "Activation"
        and bool(node.args)
        and isinstance(node.args[0], ast.Constant)
        and node.args[0].value == SOFTMAX
    )


def _has_dtype(call: ast.Call) -> bool:
    """An explicit ``dtype=`` (``**kwargs`` passes on the caller's: ``softmax_by_name`` looks at the call)."""
    return any(k.arg == "dtype" for k in call.keywords)


def _guarding_test(ret: ast.Return, function: ast.FunctionDef) -> ast.expr | None:
    """The test of the ``if`` whose body holds ``ret`` directly (``if name == "softmax": return ...``)."""
    for node in walk_python(function):
        if isinstance(node, ast.If) and ret in node.body:
            return node.test
    return None


# the whole file: a module dict of layers may hold the softmax that a function only indexes
ACTIVATION_LAYER = declare(
    SummaryKind("activation_layer", (re.compile(rb"Activation|oftmax"),), False, _activation_layer_functions)
)


def activation_by_name(context: FileContext, call: cst.CSTNode | None) -> bool:
    """``call`` calls a project function that maps an activation's name to a layer (whatever name it passes): a
    layer that keeps its input's shape."""
    return (
        isinstance(call, cst.Call)
        and isinstance(call.func, (cst.Name, cst.Attribute))
        and context.summary(call.func, ACTIVATION_LAYER) is not None
    )


def softmax_by_name(context: FileContext, call: cst.CSTNode | None) -> FunctionSummary | None:
    """The project's activation-name function ``call`` calls (``get_activation("softmax")``) and its summary, when
    the call asks it for its softmax layer (a name the file binds once to that string counts) and passes no
    ``dtype`` or ``**kwargs``; else None."""
    if not isinstance(call, cst.Call) or not isinstance(call.func, (cst.Name, cst.Attribute)):
        return None
    found = context.summary(call.func, ACTIVATION_LAYER)
    if found is None or any(
        a.star == "**" or (a.keyword is not None and a.keyword.value == "dtype") for a in call.args
    ):
        return None
    passed = argument(call, found.position if found.position >= 0 else None, found.value)
    value = evaluate(context, passed) if passed is not None else None
    if value is None or value.from_default or value.value != found.default:
        return None
    return found
