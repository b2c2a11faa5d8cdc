"""MP302: batch sizes that are not multiples of 8 under a mixed policy."""

from __future__ import annotations

import re

import libcst as cst

from mplint.analysis.constants import evaluate_int
from mplint.checks.mp301_tensor_core_alignment import (
    MIN_SIZE,
    SizeArg,
    argument,
    calls,
    reduced_precision_on_gpu,
    rounding_fix,
    rounding_hint,
)
from mplint.context import FileContext
from mplint.rule import Rule

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
            return _keyword(call, "batch_size"), f"batch_size of {func.value}"
        return None, ""
    method = func.attr.value
    if method == "fit":
        return _keyword(call, "batch_size"), "batch_size of fit()"
    if method.endswith(_DATASET_FACTORIES):
        return _keyword(call, "batch_size"), f"batch_size of {method}"
    if method in _BATCH_METHODS and not _is_sequence_window(context, call):
        return argument(call, 0, "batch_size"), f"{method}() size"
    return None, ""


def _keyword(call: cst.Call, name: str) -> cst.BaseExpression | None:
    return next((a.value for a in call.args if a.keyword is not None and a.keyword.value == name), None)


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


class BatchSizeAlignment(Rule):
    id = "MP302"
    triggers = (re.compile(rb"batch_size\s*=|\.(?:padded_)?batch\s*\("),)

    @classmethod
    def active_for(cls, facts) -> bool:
        return reduced_precision_on_gpu(facts)

    def visit_Module(self, node: cst.Module) -> None:
        for size in batch_sizes(self.context):
            if size.value % 8 == 0:
                continue
            self.report(
                size.expr,
                f"{size.what} is {size.value}, not a multiple of 8: under {self.context.facts.describe_policy()} "
                f"the batch dimension of every float16/bfloat16 matmul is misaligned for tensor cores; "
                f"{rounding_hint(size, 8)}",
                rounding_fix(self.context, size, 8, batch_sizes),
            )
