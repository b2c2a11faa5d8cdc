"""The first-sight packets (bench/first_sight.py): each file's fixes shown as the unified diff of the whole fixed
file against the original, as ``mplint --fix --unsafe-fixes --diff`` writes it."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
TRAIN = """import torch
from torch.cuda.amp import GradScaler, autocast

scaler = GradScaler()


def step(model, x):
    with autocast():
        return model(x).sum()
"""
TRAIN_DIFF = """--- a/train.py
+++ b/train.py
@@ -1,9 +1,8 @@
 import torch
-from torch.cuda.amp import GradScaler, autocast
 
-scaler = GradScaler()
+scaler = torch.amp.GradScaler("cuda")
 
 
 def step(model, x):
-    with autocast():
+    with torch.autocast("cuda"):
         return model(x).sum()"""


@pytest.fixture(scope="module")
def first_sight():
    spec = importlib.util.spec_from_file_location("first_sight", REPO / "bench" / "first_sight.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["first_sight"] = module
    spec.loader.exec_module(module)
    yield module
    del sys.modules["first_sight"]


def test_the_packet_shows_each_files_fixes_as_the_diff_of_the_whole_fixed_file(first_sight, tmp_path):
    (tmp_path / "requirements.txt").write_text("torch>=2.4\n")
    (tmp_path / "train.py").write_text(TRAIN)
    (tmp_path / "other.py").write_text('print("nothing to fix")\n')
    diff = first_sight.fixed_diff(tmp_path)
    assert first_sight.diffs_by_file(diff) == {"train.py": TRAIN_DIFF}
    assert (tmp_path / "train.py").read_text() == TRAIN  # --diff writes nothing
    fixes = first_sight.repos.applied_fixes("o/n", tmp_path, REPO)
    repo = first_sight.repos.Repository("o/n", "c" * 40, "first sight")
    assert first_sight.packet(repo, tmp_path, [], fixes, diff) == "\n".join(
        [
            f"# o/n @ {'c' * 40}",
            "",
            "0 findings, 2 fixes.",
            "",
            "## train.py",
            "",
            "- X1: MPT502 fix (safe, applied) train.py:4",
            "- X2: MPT502 fix (safe, applied) train.py:8",
            "",
            "```diff",
            TRAIN_DIFF,
            "```",
            "",
        ]
    )


def test_a_notebooks_cells_are_one_files_diff_and_the_summary_is_left_out(first_sight):
    diff = (
        "--- a/nb.ipynb:cell 1\n+++ b/nb.ipynb:cell 1\n@@ -1 +1 @@\n-a\n+b\n"
        "--- a/nb.ipynb:cell 3\n+++ b/nb.ipynb:cell 3\n@@ -1 +1 @@\n-c\n+d\n"
        "--- a/x.py\n+++ b/x.py\n@@ -1,2 +1,2 @@\n \n-e\n+f\n\nWould fix 3 errors.\n"
    )
    assert first_sight.diffs_by_file(diff) == {
        "nb.ipynb": "--- a/nb.ipynb:cell 1\n+++ b/nb.ipynb:cell 1\n@@ -1 +1 @@\n-a\n+b\n"
        "--- a/nb.ipynb:cell 3\n+++ b/nb.ipynb:cell 3\n@@ -1 +1 @@\n-c\n+d",
        "x.py": "--- a/x.py\n+++ b/x.py\n@@ -1,2 +1,2 @@\n \n-e\n+f",
    }
