"""No fix deletes the call that keeps training correct.

Over every fix the project shows (the rules' flagged examples with their ``fixed`` text, and ``--fix
--unsafe-fixes`` over a copy of fixtures/): a function that called ``scaler.update()``, ``scaler.unscale_``,
``get_unscaled_gradients`` or built a ``LossScaleOptimizer`` before the fix still does after it, unless the fix
removed that loss scaling as a whole (MPT206/MP206 under bfloat16: no ``scaler.scale`` / ``LossScaleOptimizer`` left).
Keras 3's ``optimizer.scale_loss`` counts as the unscale: its ``apply_gradients`` unscales the gradients.
"""

from __future__ import annotations

import ast
import os
import shutil
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from mplint.catalog import load_catalog

REPO = Path(__file__).resolve().parent.parent

_TF_GUARDS = {"get_unscaled_gradients", "LossScaleOptimizer"}


def guards(source: str) -> Counter:
    """(function, guard) -> count: ``("train", "scaler.update")``, ``("train", "scaler.unscale_")``,
    ``("<module>", "LossScaleOptimizer")``. Receivers are the source text of what is called."""
    found: Counter = Counter()

    def walk(node: ast.AST, scope: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                walk(child, f"{scope}.{child.name}" if scope != "<module>" else child.name)
                continue
            if isinstance(child, ast.Call):
                func = child.func
                name = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""
                if isinstance(func, ast.Attribute) and (
                    name == "unscale_" or name == "update" and not child.args and not child.keywords
                ):
                    found[(scope, f"{ast.unparse(func.value)}.{name}")] += 1
                elif name in _TF_GUARDS:
                    found[(scope, name)] += 1
                elif name == "scale_loss":  # Keras 3's LossScaleOptimizer unscales in apply_gradients what
                    found[(scope, "get_unscaled_gradients")] += 1  # scale_loss scaled (apex: on leaving the block)
            walk(child, scope)

    walk(ast.parse(source), "<module>")
    return found


def scaling_removed(after: str, guard: str) -> bool:
    """The fix took the loss scaling away as a whole (a GradScaler or LossScaleOptimizer under bfloat16)."""
    if guard in _TF_GUARDS:
        return "LossScaleOptimizer" not in after and "get_scaled_loss" not in after and "scale_loss" not in after
    receiver = guard.rsplit(".", 1)[0]
    return f"{receiver}.scale(" not in after and f"{receiver}.step(" not in after


def lost_guards(before: str, after: str) -> list[tuple[str, str]]:
    """The (function, guard) pairs present before and gone after, the whole scaling not removed."""
    kept = guards(after)
    return [key for key in guards(before) if not kept[key] and not scaling_removed(after, key[1])]


def _example_fixes():
    for meta in load_catalog().values():
        for i, example in enumerate(getattr(meta, "flagged", ())):
            if example.fixed is not None and not example.settings.get("path", "").endswith(".ipynb"):
                yield pytest.param(example.code, example.fixed, id=f"{meta.id}-{i}-{example.title or 'example'}"[:80])


def test_the_check_sees_a_deleted_update_and_a_deleted_unscale():
    before = (
        "def step(scaler, opt, loss):\n    scaler.scale(loss).backward()\n    scaler.unscale_(opt)\n"
        "    scaler.step(opt)\n    scaler.update()\n"
    )
    assert lost_guards(before, before.replace("    scaler.update()\n", "")) == [("step", "scaler.update")]
    assert lost_guards(before, before.replace("    scaler.unscale_(opt)\n", "")) == [("step", "scaler.unscale_")]
    moved = before.replace("    scaler.update()\n", "") + "    scaler.update()\n"
    assert lost_guards(before, moved) == []
    assert lost_guards("opt = LossScaleOptimizer(opt)\n", "opt = opt\n") == []  # no scaling left: MP206's case
    assert lost_guards(
        "opt = LossScaleOptimizer(opt)\nloss = opt.get_scaled_loss(l)\n", "opt = opt\nloss = opt.get_scaled_loss(l)\n"
    ) == [("<module>", "LossScaleOptimizer")]


@pytest.mark.parametrize("before, after", list(_example_fixes()))
def test_no_rule_example_fix_deletes_an_update_an_unscale_or_a_loss_scale_optimizer(before, after):
    assert lost_guards(before, after) == []


def test_no_fix_over_the_fixtures_deletes_an_update_an_unscale_or_a_loss_scale_optimizer(tmp_path):
    shutil.copytree(
        REPO / "fixtures", tmp_path / "fixtures", ignore=shutil.ignore_patterns(".mplint_cache", "__pycache__")
    )
    originals = {p: p.read_text() for p in (tmp_path / "fixtures").rglob("*.py")}
    env = {**os.environ, "NO_COLOR": "1", "PYTHONPATH": str(REPO)}
    done = subprocess.run(
        [sys.executable, "-m", "mplint", "--no-cache", "--fix", "--unsafe-fixes", "fixtures"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode in (0, 1), done.stderr
    assert "did not settle" not in done.stdout
    changed = {p: p.read_text() for p in originals if p.read_text() != originals[p]}
    assert changed, "no fixture was fixed: the check would prove nothing"
    lost = {str(p.relative_to(tmp_path)): lost_guards(originals[p], text) for p, text in changed.items()}
    assert {path: keys for path, keys in lost.items() if keys} == {}


def _training_loops():
    from test_training_loop_paths import _HEAD, FIXED, SILENT

    yield from (pytest.param(code, id=name) for name, code in SILENT.items())
    yield from (pytest.param(_HEAD + tail, id=name) for name, (tail, _, _) in FIXED.items())


@pytest.mark.parametrize("code", list(_training_loops()))
def test_no_fix_of_a_training_loop_deletes_an_update_or_an_unscale(code):
    from mplint.testing import lint_code

    result = lint_code(code, fix=True, unsafe_fixes=True)
    assert [d.rule_id for d in result.diagnostics if d.rule_id == "MP001"] == []
    assert lost_guards(code, result.fixed_code) == []
