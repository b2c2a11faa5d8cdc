"""The pre-filter on/off property over the real-world corpus of ``bench/realworld.py``.

The corpus lives in a download cache (``$MPLINT_REALWORLD_CACHE``, default ``~/.cache/mplint-realworld``) that
``python bench/realworld.py`` fills once; without it these tests are skipped (CI has no network). Two checks:
- every TensorFlow/Keras tree as a whole project (its own policies, pins and function summaries), every rule
  selected, with the pre-filter (byte triggers and candidates) on and off: the same diagnostics;
- one file in five of every tree, PyTorch packages included, checked alone in a project where every rule is
  active (an unevaluable float16 policy, TPUs, Keras 3), on and off: the same diagnostics.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest
from test_prefilter import _every_rule_active, _keys

from mplint.catalog import load_catalog
from mplint.engine.check import check_source
from mplint.engine.check_options import CheckOptions
from mplint.runner import RunOptions, run

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "bench"))
from realworld import FRAMEWORKS, KERAS_SRC, TENSORFLOW, default_cache  # noqa: E402

TREES = default_cache() / "trees"


def _trees(framework: str | None = None) -> list[Path]:
    if not TREES.is_dir():
        return []
    found = []
    for tree in sorted(p for p in TREES.iterdir() if p.is_dir()):
        name = KERAS_SRC if tree.name.startswith(KERAS_SRC) else tree.name.rsplit("-", 1)[0]
        if name in FRAMEWORKS and (framework is None or FRAMEWORKS[name] == framework):
            found.append(tree)
    return found


pytestmark = pytest.mark.skipif(not _trees(), reason="real-world corpus not downloaded (python bench/realworld.py)")


@pytest.mark.parametrize("tree", _trees(TENSORFLOW), ids=lambda p: p.name)
def test_a_real_project_finds_the_same_with_and_without_the_prefilter(tree, monkeypatch):
    monkeypatch.chdir(tree)
    every_rule = sorted(load_catalog())
    on = run(RunOptions([Path(".")], cache=False, jobs=os.cpu_count() or 1, select=every_rule))
    off = run(RunOptions([Path(".")], cache=False, jobs=os.cpu_count() or 1, select=every_rule, prefilter=False))
    assert _keys(on.diagnostics) == _keys(off.diagnostics)


@pytest.mark.parametrize("tree", _trees(), ids=lambda p: p.name)
def test_real_files_find_the_same_with_and_without_the_prefilter_when_every_rule_is_active(tree):
    options = _every_rule_active()
    off_options = CheckOptions(options.rules, options.facts, prefilter=False)
    differ = []
    for path in sorted(tree.rglob("*.py"))[::5]:
        source = path.read_bytes()
        on = check_source(str(path), source, options)
        off = check_source(str(path), source, off_options)
        if _keys(on.diagnostics) != _keys(off.diagnostics):
            differ.append(str(path.relative_to(tree)))
    assert differ == []
