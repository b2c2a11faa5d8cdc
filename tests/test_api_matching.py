"""No rule matches an API by the last segment of what is written: every API match goes through the resolved name
(``names.matches``/``kname``/``torch_api``), so ``train(None, loss_scale_factor=2.0)`` is no Keras optimizer and
``from ... import LossScaleOptimizer as Wrap`` still is one."""

from __future__ import annotations

import ast
from pathlib import Path

from mplint.testing import lint_code

CHECKS = Path(__file__).resolve().parent.parent / "mplint" / "checks"


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
            if isinstance(node, ast.Compare) and all(
                isinstance(op, (ast.Eq, ast.NotEq, ast.In, ast.NotIn)) for op in node.ops
            ):
                sides = [node.left, *node.comparators]
                if any(_is_last_name(s) or isinstance(s, ast.Name) and s.id in short for s in sides):
                    found.append((function.name, node.lineno))
    return found


def _is_last_name(node: ast.AST) -> bool:
    if isinstance(node, ast.BoolOp):  # ``last_name(f) or ""``
        return any(_is_last_name(v) for v in node.values)
    return isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "last_name"


def test_the_inspection_sees_a_short_name_comparison():
    source = (
        "def visit(node):\n    name = last_name(node.func) or ''\n    if name == 'LossScaleOptimizer':\n        pass\n"
        "    if last_name(node.func) in API:\n        pass\n"
    )
    assert short_name_comparisons(source) == [("visit", 3), ("visit", 5)]


def test_no_check_compares_a_written_short_name_with_an_api_name():
    found = [
        (path.name, function, line)
        for path in sorted(CHECKS.glob("*.py"))
        for function, line in short_name_comparisons(path.read_text())
    ]
    assert found == []


_POLICY = 'import keras\nkeras.mixed_precision.set_global_policy("mixed_float16")\n\n'


def test_mp205_loss_scale_factor_only_on_a_keras_optimizer():
    code = (
        _POLICY + "def train(model, loss_scale_factor=1.0):\n    pass\n\ntrain(None, loss_scale_factor=2.0)\n"
        "opt = keras.optimizers.Adam(loss_scale_factor=128.0)\n"
    )
    found = lint_code(code, select=["MP205"]).diagnostics
    assert [(d.rule_id, d.line, d.column, d.message) for d in found] == [
        (
            "MP205",
            8,
            29,
            "loss_scale_factor= multiplies the loss by a constant: a fixed loss scale overflows to inf or "
            "lets gradients underflow as their range drifts; use dynamic loss scaling",
        )
    ]


def test_mp205_finds_an_aliased_loss_scale_optimizer():
    code = (
        "import tensorflow as tf\nfrom tensorflow.keras.mixed_precision import LossScaleOptimizer as Wrap\n\n"
        'tf.keras.mixed_precision.set_global_policy("mixed_float16")\nopt = Wrap(tf.keras.optimizers.Adam(), dynamic=False)\n'
    )
    found = lint_code(code, select=["MP205"]).diagnostics
    assert [(d.rule_id, d.line, d.column, d.message.split(":")[0]) for d in found] == [
        ("MP205", 5, 40, "LossScaleOptimizer(dynamic=False)")
    ]


def test_mp103_knows_an_aliased_log_softmax_by_its_resolved_name():
    code = (
        "import tensorflow as tf\nfrom tensorflow.nn import log_softmax as normalize\n\n\ndef token_loss(logits):\n"
        "    log_probs = normalize(tf.cast(logits, tf.float16))\n    loss = tf.reduce_sum(log_probs)\n    return loss\n"
    )
    found = lint_code(code, select=["MP103"], policy="mixed_float16").diagnostics
    assert [(d.rule_id, d.line, d.column) for d in found] == [("MP103", 7, 12)]
    assert found[0].message.startswith("this loss squares, exponentiates or sums the compute-dtype `log_probs`")
    fixed = lint_code(code, select=["MP103"], policy="mixed_float16", fix=True).fixed_code
    assert fixed == code.replace("tf.reduce_sum(log_probs)", "tf.reduce_sum(tf.cast(log_probs, tf.float32))")


def test_mp401_finds_a_converting_function_imported_under_another_name():
    prep = (
        "import tensorflow as tf\n\n\ndef normalize_image(image, dtype=tf.float32):\n"
        "    image = tf.image.convert_image_dtype(image, dtype)\n    return (image - 0.5) / 0.25\n"
    )
    code = (
        "import tensorflow as tf\nfrom prep import normalize_image as norm\n\n\ndef parse(image, label):\n"
        "    return norm(image, dtype=tf.float16), label\n"
    )
    found = lint_code(code, select=["MP401"], policy="mixed_float16", files={"prep.py": prep}).diagnostics
    assert [(d.rule_id, d.line, d.column) for d in found] == [("MP401", 6, 30)]
    assert found[0].message.startswith(
        "`normalize_image` converts its data to this dtype at prep.py:5 and then computes"
    )
    fixed = lint_code(code, select=["MP401"], policy="mixed_float16", files={"prep.py": prep}, fix=True).fixed_code
    assert fixed == code.replace("dtype=tf.float16", "dtype=tf.float32")


def test_mp701_knows_load_model_by_its_resolved_name_not_a_local_function_so_named():
    aliased = (
        'import keras\nfrom keras.models import load_model as restore\n\nbase = restore("base.keras")\n'
        'keras.mixed_precision.set_global_policy("mixed_float16")\nbase.fit(x, y)\n'
    )
    found = lint_code(aliased, select=["MP701"]).diagnostics
    assert [(d.rule_id, d.line, d.column) for d in found] == [("MP701", 5, 1)]
    assert found[0].message.startswith("the policy is set after `load_model(...)` at line 4 created layers")
    local = (
        "import json\nimport keras\n\n\ndef load_model(path):\n    with open(path) as f:\n        return json.load(f)\n\n\n"
        'settings = load_model("settings.json")\nkeras.mixed_precision.set_global_policy("mixed_float16")\n'
        "configure(settings)\n"
    )
    assert lint_code(local, select=["MP701"]).diagnostics == []
