"""Layer sizes and batch sizes of a file, for the dimension-alignment rules (MP301, MP302, MP304).

Collects the matmul/conv dimensions a file's layers set (``hidden_sizes``) and
the training batch sizes it sets (``batch_sizes``), each as a ``SizeArg`` with
the constant a fix would edit, plus the index of every call of the file
(``calls``) and the helpers that suggest or apply rounding to a multiple.
"""

from __future__ import annotations

import ast
import dataclasses
import re
from collections.abc import Callable
from dataclasses import dataclass

import libcst as cst

from mplint.analysis.call_args import argument, keyword_value
from mplint.analysis.constants import Constant, evaluate_int, may_be_unaligned, only_used_where
from mplint.analysis.discarded_results import discarded
from mplint.analysis.model_outputs import is_output_layer
from mplint.analysis.reshapes import split_by_a_reshape
from mplint.diagnostics import Fix, FixSafety
from mplint.engine.code_summary import CodeSummary
from mplint.engine.context import FileContext
from mplint.knowledge.dtypes import WIDE_DTYPES
from mplint.knowledge.policies import BFLOAT16_POLICIES, FLOAT16_POLICIES

# Layer -> the arguments that become matmul/conv dimensions: (position, keyword).
_UNITS = ((0, "units"),)
_FILTERS = ((0, "filters"),)
SIZED_LAYERS: dict[str, tuple[tuple[int, str], ...]] = {
    "layers.Dense": _UNITS,
    "layers.LSTM": _UNITS,
    "layers.GRU": _UNITS,
    # An embedding's vocabulary (input_dim) is a gather, not a matmul dimension, and often a pretrained one.
    "layers.Embedding": ((1, "output_dim"),),
    **{
        f"layers.{conv}": _FILTERS
        for conv in (
            "Conv1D",
            "Conv2D",
            "Conv3D",
            "Convolution1D",
            "Convolution2D",
            "Convolution3D",
            "Conv1DTranspose",
            "Conv2DTranspose",
            "Conv3DTranspose",
            "SeparableConv1D",
            "SeparableConv2D",
        )
    },
}
ATTENTION = "layers.MultiHeadAttention"
_SIZED_LAYER_NAMES = frozenset(path.rsplit(".", 1)[-1] for path in [*SIZED_LAYERS, ATTENTION])
# Last name -> (positions, keywords) of its dimension arguments, for the pre-filter.
_SIZE_ARGUMENTS = {
    **{path.rsplit(".", 1)[-1]: ({p for p, _ in sizes}, {k for _, k in sizes}) for path, sizes in SIZED_LAYERS.items()},
    ATTENTION.rsplit(".", 1)[-1]: ({0, 1, 2}, {"num_heads", "key_dim", "value_dim"}),
}
# Wrappers whose result is the wrapped layer's output (an output check must look through them).
_WRAPPERS = ("layers.Bidirectional", "layers.TimeDistributed")
# Words that name a class count rather than a hidden size: `Dense(num_classes)`, `Conv2D(n_labels, 1)`.
_CLASS_WORDS = frozenset(
    "class classes cls label labels tag tags category categories target targets action actions outputs".split()
)
_PROBABILITIES = frozenset({"softmax", "sigmoid", "log_softmax"})
MIN_SIZE = 8  # below this a size is semantic (scores, coordinates, channels) and too small to matter


@dataclass(frozen=True)
class SizeArg:
    """One dimension argument of a call, with its value and the constant a fix would edit."""

    expr: cst.BaseExpression  # the argument as written (where the finding points)
    value: int  # the dimension the hardware sees
    what: str  # e.g. "units of Dense"
    edit: Constant  # the constant behind it (for MultiHeadAttention: key_dim)


def names_class_count(expr: cst.BaseExpression) -> bool:
    for node in _identifiers(expr):
        words = re.split(r"_|(?<=[a-z])(?=[A-Z])", node)
        if any(w.lower() in _CLASS_WORDS or (w[:1].lower() == "n" and w[1:].lower() in _CLASS_WORDS) for w in words):
            return True
    return False


def _identifiers(expr: cst.CSTNode):
    if isinstance(expr, cst.Name):
        yield expr.value
    elif isinstance(expr, cst.Attribute):
        yield expr.attr.value
    for child in expr.children:
        yield from _identifiers(child)


def _computes_in_float32(context: FileContext, call: cst.Call) -> bool:
    dtype = next((a.value for a in call.args if a.keyword is not None and a.keyword.value == "dtype"), None)
    if dtype is None:
        return False
    if isinstance(dtype, cst.SimpleString):
        return dtype.evaluated_value in WIDE_DTYPES
    found = context.names.kname(dtype)
    return found is not None and found.last in WIDE_DTYPES


def _produces_output(context: FileContext, call: cst.Call) -> bool:
    """The layer or a wrapper around it (Bidirectional, TimeDistributed) produces a model output."""
    node: cst.CSTNode | None = call
    while isinstance(node, cst.Call):
        if is_output_layer(context, node):
            return True
        arg = context.parent(node)
        wrapper = context.parent(arg) if isinstance(arg, cst.Arg) else None
        node = wrapper if isinstance(wrapper, cst.Call) and context.names.callee(wrapper, _WRAPPERS) else None
    return False


def _probability_head(context: FileContext, call: cst.Call) -> bool:
    """``Dense(10, activation="softmax")``: a layer that outputs probabilities has a class count for its size."""
    activation = argument(call, 1, "activation")
    if isinstance(activation, cst.SimpleString):
        return activation.evaluated_value in _PROBABILITIES
    found = context.names.kname(activation) if activation is not None else None
    return found is not None and found.last in _PROBABILITIES


def _layer_sizes(context: FileContext, call: cst.Call) -> list[SizeArg]:
    names = context.names
    layer = names.callee(call, [*SIZED_LAYERS, ATTENTION])
    if layer is None or _computes_in_float32(context, call) or _produces_output(context, call):
        return []
    if layer.path == "layers.Dense" and _probability_head(context, call) or discarded(context, call):
        return []  # a class count, or a layer whose result reaches nothing (a demo a later cell replaces)
    out = []
    if layer.path == ATTENTION:
        heads, key_dim = argument(call, 0, "num_heads"), argument(call, 1, "key_dim")
        n = evaluate_int(context, heads) if heads is not None else None
        k = evaluate_int(context, key_dim) if key_dim is not None else None
        if n is not None and k is not None:
            out.append(SizeArg(key_dim, n.value * k.value, "num_heads * key_dim of MultiHeadAttention", k))
        value_dim = argument(call, 2, "value_dim")
        v = evaluate_int(context, value_dim) if value_dim is not None else None
        if v is not None:
            out.append(SizeArg(value_dim, v.value, "value_dim of MultiHeadAttention", v))
        return out
    for position, keyword in SIZED_LAYERS[layer.path]:
        expr = argument(call, position, keyword)
        found = evaluate_int(context, expr) if expr is not None else None
        if found is not None:
            out.append(SizeArg(expr, found.value, f"{keyword} of {layer.last}", found))
    return out


def calls(context: FileContext) -> list[cst.Call]:
    """Every call of the file in source order (memoised)."""
    return context.analysis(_all_calls)


def _all_calls(context: FileContext) -> list[cst.Call]:
    return context.nodes(cst.Call)


def hidden_sizes(context: FileContext) -> list[SizeArg]:
    """Hidden-size arguments of the file's layers, never of an output layer or a class count (memoised)."""
    return context.analysis(_hidden_sizes)


def _hidden_sizes(context: FileContext) -> list[SizeArg]:
    return [
        size
        for call in calls(context)
        for size in _layer_sizes(context, call)
        if size.value >= MIN_SIZE and not names_class_count(size.expr) and not split_by_a_reshape(context, size.expr)
    ]


def sizes_layers(code: CodeSummary, multiple: int) -> bool:
    """Pre-filter: a call of a sized layer with a dimension argument that may be a constant int not
    a multiple of ``multiple`` (see ``may_be_unaligned``)."""
    if not code.calls_any(*_SIZED_LAYER_NAMES):
        return False
    names: dict = {}  # what a name can be, shared by every size argument of the file
    for call in code.called:
        for target in code.names_of(call) & _SIZED_LAYER_NAMES:
            positions, keywords = _SIZE_ARGUMENTS[target]
            sizes = [arg for i, arg in enumerate(call.args) if i in positions]
            sizes.extend(k.value for k in call.keywords if k.arg in keywords)
            if any(may_be_unaligned(code, size, multiple, names) for size in sizes):
                return True
    return False


def sets_batch_size(code: CodeSummary, multiple: int) -> bool:
    """Pre-filter: ``.batch(n)``/``.padded_batch(n)`` or a ``batch_size=`` argument whose value may
    be a constant int not a multiple of ``multiple``."""
    if not (code.calls_any(*_BATCH_METHODS) or "batch_size" in code.keywords):
        return False
    for call in code.called:
        func = call.func
        sizes = [k.value for k in call.keywords if k.arg == "batch_size"]
        if type(func) is ast.Attribute and func.attr in _BATCH_METHODS:
            sizes.extend(call.args[:1])
        if any(may_be_unaligned(code, size, multiple) for size in sizes):
            return True
    return False


def round_up(value: int, multiple: int) -> int:
    return -(-value // multiple) * multiple


def rounding_fix(
    context: FileContext, size: SizeArg, multiple: int, uses: Callable[[FileContext], list[SizeArg]]
) -> Fix | None:
    """Round the literal behind ``size`` up, when that literal feeds only positions of this kind."""
    edit = size.edit
    if edit.literal is None or type(edit.value) is not int or edit.value <= 0:
        return None
    if edit.binding is not None:
        positions = {id(s.expr) for s in uses(context)}
        if not only_used_where(context, edit.binding, lambda name: id(name) in positions):
            return None
    new = edit.literal.with_changes(value=str(round_up(edit.value, multiple)))
    return Fix({edit.literal: new}, safety=FixSafety.UNSAFE)


def rounding_hint(size: SizeArg, multiple: int) -> str:
    if size.edit.value != size.value:  # MultiHeadAttention: the product is checked, key_dim is edited
        heads, key_dim = size.value // size.edit.value, round_up(size.edit.value, 8)
        while heads * key_dim % multiple:
            key_dim += 8
        return f"round key_dim up to {key_dim}"
    return f"round it up to {round_up(size.value, multiple)}"


def reduced_precision_on_gpu(facts) -> bool:
    """A float16/bfloat16 policy, unless the project is a bfloat16 TPU project (MP304 covers TPUs)."""
    return facts.reduced_precision and not (facts.uses_tpu and facts.bfloat16_only)


def policy_on_gpu(facts) -> tuple[str, str]:
    """The policy in force on GPUs, as messages cite it, and the dtype its matmuls compute in: a float16 policy
    before a bfloat16 one (a program that sets mixed_bfloat16 for TPUs and mixed_float16 otherwise runs float16 on
    GPUs), else the facts' own description."""
    for policies, dtype in ((FLOAT16_POLICIES, "float16"), (BFLOAT16_POLICIES, "bfloat16")):
        chosen = [i for i, site in enumerate(facts.policies) if site.policy in policies]
        if chosen:
            links = tuple(facts.links[i] for i in chosen) if facts.links else ()
            narrowed = dataclasses.replace(facts, policies=tuple(facts.policies[i] for i in chosen), links=links)
            return narrowed.describe_policy(), dtype
    return facts.describe_policy(), "float16/bfloat16"


_BATCH_METHODS = ("batch", "padded_batch")
_DATASET_FACTORIES = ("_dataset_from_directory", "_dataset_from_array")


def batch_sizes(context: FileContext) -> list[SizeArg]:
    """Training batch sizes the file sets with evaluable values (memoised)."""
    return context.analysis(_batch_sizes)


def _batch_sizes(context: FileContext) -> list[SizeArg]:
    out = []
    for call in calls(context):
        expr, what = _batch_argument(context, call)
        found = evaluate_int(context, expr) if expr is not None else None
        if found is not None and found.value >= MIN_SIZE:
            out.append(SizeArg(expr, found.value, what, found))
    return out


def _batch_argument(context: FileContext, call: cst.Call) -> tuple[cst.BaseExpression | None, str]:
    func = call.func
    if not isinstance(func, cst.Attribute):
        if isinstance(func, cst.Name) and func.value.endswith(_DATASET_FACTORIES):
            return keyword_value(call, "batch_size"), f"batch_size of {func.value}"
        return None, ""
    method = func.attr.value
    if method == "fit":
        return keyword_value(call, "batch_size"), "batch_size of fit()"
    if method.endswith(_DATASET_FACTORIES):
        return keyword_value(call, "batch_size"), f"batch_size of {method}"
    if method in _BATCH_METHODS and not _is_sequence_window(context, call):
        return argument(call, 0, "batch_size"), f"{method}() size"
    return None, ""


def _is_sequence_window(context: FileContext, call: cst.Call) -> bool:
    """``window.batch(n)`` in a flat_map turns a window into a sequence of length n, not a batch.

    Also ``tf.train.batch(tensors, n)`` (TF1), whose first argument is not a size.
    """
    receiver = call.func.value
    if isinstance(receiver, (cst.Name, cst.Attribute)) and any(
        k.ns == "tf" and k.last == "train" for k in context.names.knames(receiver)
    ):
        return True
    node = receiver
    while isinstance(node, cst.Call) and isinstance(node.func, cst.Attribute):
        if node.func.attr.value == "window":
            return True
        node = node.func.value
    for ancestor in context.ancestors(call):
        if isinstance(ancestor, cst.Lambda):
            return True
        if isinstance(ancestor, cst.FunctionDef) and "window" in ancestor.name.value.lower():
            return True
    return False
