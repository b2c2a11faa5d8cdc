"""MP301-MP304, MP504, MP701 on whole fixture projects, through the real command line.

Each fixture folder is copied out of the repository (whose own config excludes fixtures/) and checked as the
project it is: its requirements.txt pins Keras 3 and its own code sets the policy.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from mplint.analysis.constants import evaluate
from mplint.testing import copy_tree, lint_code

REPO = Path(__file__).resolve().parent.parent
FIXTURES = REPO / "fixtures"
OUR_RULES = "MP301,MP302,MP303,MP304,MP504,MP701"


def mplint(project: Path, *args: str) -> tuple[int, list[tuple[str, str, int, int, str | None]]]:
    env = {**os.environ, "PYTHONPATH": str(REPO), "NO_COLOR": "1"}
    done = subprocess.run(
        [sys.executable, "-m", "mplint", ".", "--format", "json", *args],
        cwd=project,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    report = json.loads(done.stdout)
    found = [
        (d["path"], d["rule"], d["start"]["line"], d["start"]["column"], d["fix"] and d["fix"]["safety"])
        for d in report["diagnostics"]
    ]
    return done.returncode, sorted(found)


@pytest.fixture
def project(tmp_path):
    def copy(name: str) -> Path:
        return copy_tree(FIXTURES / name, tmp_path / name)

    return copy


def test_lstm_tagger_reports_misaligned_hidden_and_batch_sizes(project):
    code, found = mplint(project("lstm_tagger"), "--select", OUR_RULES)
    assert code == 1
    assert found == [
        ("train.py", "MP301", 30, 38, "unsafe"),  # EMBED_DIM = 100, used only as a hidden size
        ("train.py", "MP301", 31, 42, None),  # HIDDEN = 50 also feeds HIDDEN * 3: no edit of the constant
        ("train.py", "MP301", 33, 42, None),
        ("train.py", "MP301", 34, 22, None),  # HIDDEN * 3 = 150, computed
        ("train.py", "MP302", 43, 40, "unsafe"),  # BATCH_SIZE = 50
    ]  # never the Dense(NUM_TAGS) output layer


def test_lstm_tagger_unsafe_fix_rounds_the_constants(project):
    folder = project("lstm_tagger")
    code, _ = mplint(folder, "--select", "MP301,MP302", "--fix", "--unsafe-fixes")
    assert code == 1  # the LSTM sizes stay reported: HIDDEN is not only a hidden size
    text = (folder / "train.py").read_text()
    assert "EMBED_DIM = 104\n" in text and "BATCH_SIZE = 56\n" in text and "HIDDEN = 50\n" in text
    code, found = mplint(folder, "--select", "MP301,MP302")
    assert code == 1
    assert [(rule, line) for _, rule, line, _, _ in found] == [("MP301", 31), ("MP301", 33), ("MP301", 34)]


def test_lstm_tagger_safe_fix_alone_changes_nothing(project):
    folder = project("lstm_tagger")
    before = (folder / "train.py").read_bytes()
    code, _ = mplint(folder, "--select", "MP301,MP302", "--fix")
    assert code == 1
    assert (folder / "train.py").read_bytes() == before


def test_tpu_gpu_switch_float16_on_the_tpu_path(project):
    folder = project("tpu_gpu_switch")
    assert mplint(folder, "--select", OUR_RULES) == (1, [("train.py", "MP303", 17, 1, "safe")])
    code, found = mplint(folder, "--fix")
    assert (code, found) == (0, [])
    fixed = (folder / "train.py").read_text()
    assert (
        'tf.keras.mixed_precision.set_global_policy("mixed_bfloat16" if isinstance(strategy, '
        'tf.distribute.TPUStrategy) else "mixed_float16")\n'
    ) in fixed


def test_tpu_gpu_switch_with_bfloat16_branch_is_clean(project):
    assert mplint(project("tpu_gpu_switch_bfloat16"), "--select", OUR_RULES) == (0, [])


def test_mp304_is_off_by_default_and_extend_select_enables_it(project):
    folder = project("tpu_gpu_switch")
    code, found = mplint(folder)
    assert code == 1 and all(rule != "MP304" for _, rule, *_ in found)
    code, found = mplint(folder, "--extend-select", "MP304")
    assert code == 1
    assert [(rule, line, column) for _, rule, line, column, _ in found] == [
        ("MP303", 17, 1)
    ]  # all sizes are 128-aligned
    tagger = project("lstm_tagger")
    (tagger / "tpu.py").write_text(  # a second program: trains the tagger on a TPU
        "import tensorflow as tf\nimport train\n"
        "strategy = tf.distribute.TPUStrategy(tf.distribute.cluster_resolver.TPUClusterResolver())\n"
        "with strategy.scope():\n    train.main()\n"
    )
    code, found = mplint(tagger)
    assert code == 1 and all(rule != "MP304" for _, rule, *_ in found)
    expected = [  # the vocabulary (VOCAB_SIZE = 2000, not 128-aligned) is a gather, not a matmul: not reported
        ("MP304", 30, 38),
        ("MP304", 31, 42),
        ("MP304", 33, 42),
        ("MP304", 34, 22),
        ("MP304", 43, 40),
    ]
    code, found = mplint(tagger, "--extend-select", "tpu-dimension-alignment")
    assert code == 1
    assert [(rule, line, column) for _, rule, line, column, _ in found if rule == "MP304"] == expected
    assert mplint(tagger, "--select", "MP304") == (1, [("train.py", *where, None) for where in expected])


def test_constants_evaluate_module_constants_arithmetic_and_defaults():
    import libcst as cst
    from libcst.metadata import MetadataWrapper

    from mplint.engine.context import FileContext
    from mplint.project.facts import ProjectFacts

    source = (
        "A = 10\nB = A * 3 + 2\nC = 1\nC = 2\ndef f(width=A // 4, other=x):\n    return B, width, C, other, 2 ** 100\n"
    )
    wrapper = MetadataWrapper(cst.parse_module(source))
    context = FileContext("m.py", wrapper, ProjectFacts(), "m", False)
    ret = wrapper.module.body[4].body.body[0].body[0].value
    values = [evaluate(context, e.value) for e in ret.elements]
    assert values[0].value == 32 and values[0].literal is None  # computed: nothing single to edit
    assert values[1].value == 2 and values[1].literal is None  # a default: callers may pass anything
    assert values[2] is None and values[3] is None and values[4] is None  # bound twice, unknown, too large


def test_constants_evaluate_int_round_max_min_of_known_float_arithmetic():
    import libcst as cst
    from libcst.metadata import MetadataWrapper

    from mplint.engine.context import FileContext
    from mplint.project.facts import ProjectFacts

    source = (
        "C = 40\nR = 0.25\n"
        "def f(channels=40, ratio=0.25):\n"
        "    return (int(C * R), round(C * 0.375), round(2.5), max(1, int(C * R)), min(C, 3 * 8), int(C / 3),\n"
        "            int(channels * R), round(C * ratio), round(C * R, 1), int(float('inf')), max([C, 8]))\n"
        "def g(int=round):\n"
        "    return int(C * R)\n"
    )
    wrapper = MetadataWrapper(cst.parse_module(source))
    context = FileContext("m.py", wrapper, ProjectFacts(), "m", False)
    ret = wrapper.module.body[2].body.body[0].body[0].value
    values = [evaluate(context, e.value) for e in ret.elements]
    # Python's own results: int truncates, round rounds half to even
    assert [v.value for v in values[:6]] == [10, 15, 2, 10, 24, 13]
    assert all(type(v.value) is int and v.literal is None for v in values[:6])  # computed: nothing single to edit
    # a ratio of a parameter's default (callers pass their own channels), round to digits (a float), int(inf),
    # an iterable
    assert values[6:] == [None] * 5
    shadowed = wrapper.module.body[3].body.body[0].body[0].value
    assert evaluate(context, shadowed) is None  # `int` is a parameter here, not the builtin


def test_mp701_fix_keeps_the_late_import_order():
    code = (
        "import keras\n"
        "model = keras.Sequential([keras.layers.Dense(8)])\n"
        "policy = 'mixed_float16'\n"
        "keras.mixed_precision.set_global_policy(policy)\n"
        "model.fit(x, y)\n"
    )
    found = lint_code(code, select=["MP701"], fix=True, unsafe_fixes=True)
    assert [(d.rule_id, d.line, d.column) for d in found.diagnostics] == [("MP701", 4, 1)]
    assert found.fixed_code == code  # moving it would read `policy` before its assignment
