"""No rule matches an API by the last segment of what is written: every API match goes through the resolved name
(``names.matches``/``kname``/``torch_api``), so ``train(None, loss_scale_factor=2.0)`` is no Keras optimizer and
``from ... import LossScaleOptimizer as Wrap`` still is one."""

from __future__ import annotations

import ast
from pathlib import Path

from mplint.testing import lint_code

CHECKS = Path(__file__).resolve().parent.parent / "mplint" / "checks"

# Comparisons still to move onto resolved names: each mixes API names with the project's own function names
# (builders, converters, loss helpers), which only a summary of the project can tell apart.
KNOWN = {
    ("mp103_loss_in_float16.py", "_unbounded"),
    ("mp401_float16_preprocessing.py", "_passed_dtype"),
    ("mp701_policy_after_model_build.py", "describe"),
}


def short_name_comparisons(source: str) -> list[tuple[str, int]]:
    """(function, line) of each comparison of ``last_name(...)`` (directly or through a variable it was assigned
    to) with ``==``, ``!=``, ``in`` or ``not in``."""
    found = []
    for function in (n for n in ast.walk(ast.parse(source)) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))):
        short = set()
        for node in ast.walk(function):
            if isinstance(node, (ast.Assign, ast.NamedExpr)) and _is_last_name(node.value):
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                short |= {t.id for t in targets if isinstance(t, ast.Name)}
        for node in ast.walk(function):
            if isinstance(node, ast.Compare) and all(isinstance(op, (ast.Eq, ast.NotEq, ast.In, ast.NotIn)) for op in node.ops):
                sides = [node.left, *node.comparators]
                if any(_is_last_name(s) or isinstance(s, ast.Name) and s.id in short for s in sides):
                    found.append((function.name, node.lineno))
    return found


def _is_last_name(node: ast.AST) -> bool:
    if isinstance(node, ast.BoolOp):  # ``last_name(f) or ""``
        return any(_is_last_name(v) for v in node.values)
    return isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "last_name"


def test_the_inspection_sees_a_short_name_comparison():
    source = "def visit(node):\n    name = last_name(node.func) or ''\n    if name == 'LossScaleOptimizer':\n        pass\n" \
             "    if last_name(node.func) in API:\n        pass\n"
    assert short_name_comparisons(source) == [("visit", 3), ("visit", 5)]


def test_no_check_compares_a_written_short_name_with_an_api_name():
    found = {(path.name, function) for path in sorted(CHECKS.glob("*.py"))
             for function, _ in short_name_comparisons(path.read_text())}
    assert found - KNOWN == set()
    assert KNOWN - found == set(), "a known case was fixed: take it off KNOWN"


_POLICY = 'import keras\nkeras.mixed_precision.set_global_policy("mixed_float16")\n\n'


def test_mp205_loss_scale_factor_only_on_a_keras_optimizer():
    code = _POLICY + "def train(model, loss_scale_factor=1.0):\n    pass\n\ntrain(None, loss_scale_factor=2.0)\n" \
                     "opt = keras.optimizers.Adam(loss_scale_factor=128.0)\n"
    found = lint_code(code, select=["MP205"]).diagnostics
    assert [(d.rule_id, d.line, d.column, d.message) for d in found] == [
        ("MP205", 8, 29, "loss_scale_factor= multiplies the loss by a constant: a fixed loss scale overflows to inf or "
                         "lets gradients underflow as their range drifts; use dynamic loss scaling")]


def test_mp205_finds_an_aliased_loss_scale_optimizer():
    code = ("import tensorflow as tf\nfrom tensorflow.keras.mixed_precision import LossScaleOptimizer as Wrap\n\n"
            'tf.keras.mixed_precision.set_global_policy("mixed_float16")\nopt = Wrap(tf.keras.optimizers.Adam(), dynamic=False)\n')
    found = lint_code(code, select=["MP205"]).diagnostics
    assert [(d.rule_id, d.line, d.column, d.message.split(":")[0]) for d in found] == [
        ("MP205", 5, 40, "LossScaleOptimizer(dynamic=False)")]
