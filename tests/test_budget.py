"""A file over the per-file budget (syntax nodes, time) is MP003 "not fully checked", and the run goes on."""

from __future__ import annotations

import ast
import functools
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from fuzz_strategies import Program, options_for

from mplint.cli import main
from mplint.engine import budget
from mplint.engine.check import check_source

REPO = Path(__file__).resolve().parent.parent
SOFTMAX = 'm = tf.keras.Sequential([tf.keras.layers.Dense(3, activation="softmax")])\n'
NODES_MESSAGE = (
    "not fully checked: more than 50,000 syntax nodes (the per-file budget, about 300 MB); its imports "
    "and policies still count for the project, its own findings are not looked for"
)


def data_module(elements: int) -> str:
    """A module that imports TensorFlow and holds generated data, with one finding libcst would have to reach."""
    return (
        "import tensorflow as tf\nDATA = ["
        + ", ".join(str(i) for i in range(elements))
        + "]\n"
        + SOFTMAX
        + "x = tf.constant(DATA)\n"
    )


@functools.cache
def options(fix: bool = False):
    return options_for(
        Program("budget", "import tensorflow as tf\n", policy="mixed_float16"), "import tensorflow as tf\n", fix=fix
    )


@pytest.fixture
def project(tmp_path, monkeypatch):
    (tmp_path / ".mplint.yaml").write_text("policy: mixed_float16\n")
    (tmp_path / "data.py").write_text(data_module(100_000))
    (tmp_path / "good.py").write_text("import tensorflow as tf\n" + SOFTMAX)
    monkeypatch.chdir(tmp_path)
    return tmp_path


def test_100k_element_list_is_mp003_and_the_run_goes_on(project):
    """Before the budget this file took 506 MB and 85 s (750 MB, 208 s on the machine of the report)."""
    env = {**os.environ, "PYTHONPATH": str(REPO), "MPLINT_NO_PROGRESS": "1"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "mplint", ".", "--fix", "--format", "json", "--no-cache", "--jobs", "1"],
        cwd=project,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    out, err = proc.communicate(timeout=300)
    assert proc.returncode == 1, err.decode()[-2000:]
    doc = json.loads(out)
    assert [(d["path"], d["rule"], d["message"], d["start"]["line"]) for d in doc["diagnostics"]] == [
        ("data.py", "MP003", NODES_MESSAGE, 1)
    ]
    assert [(d["path"], d["rule"]) for d in doc["fixed"]] == [("good.py", "MP101")]
    assert (project / "data.py").read_text() == data_module(100_000)


def test_100k_element_list_peak_memory_is_under_300_mb(project):
    (project / "good.py").unlink()
    env = {**os.environ, "PYTHONPATH": str(REPO), "MPLINT_NO_PROGRESS": "1"}
    # measured by a small parent: a child forked from this (large) test process would report its size too
    measure = (
        "import resource, subprocess, sys\n"
        "code = subprocess.run([sys.executable, '-m', 'mplint', '.', '--no-cache', '--jobs', '1'],\n"
        "                      stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL).returncode\n"
        "print(code, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)\n"
    )
    done = subprocess.run([sys.executable, "-c", measure], cwd=project, env=env, capture_output=True, text=True)
    code, peak_kb = map(int, done.stdout.split())
    assert code == 1
    assert peak_kb < 300 * 1024, f"peak RSS {peak_kb / 1024:.0f} MB"


def test_node_budget_boundary(monkeypatch):
    small = data_module(20).encode()
    monkeypatch.setattr(budget, "MAX_SYNTAX_NODES", budget.syntax_nodes(ast.parse(small), 10**6))
    assert [d.rule_id for d in check_source("data.py", small, options()).diagnostics] == ["MP101"]
    bigger = data_module(21).encode()
    result = check_source("data.py", bigger, options())
    [d] = result.diagnostics
    assert (d.rule_id, d.line, d.column) == ("MP003", 1, 1)
    assert result.repeatable  # the node count follows from the text: the next run may answer from its cache


def test_a_file_over_the_node_budget_is_answered_from_the_cache_on_the_next_run(project, monkeypatch):
    from mplint import runner

    first = runner.run(runner.RunOptions([project], jobs=1))
    assert [(Path(d.path).name, d.rule_id, d.message) for d in first.diagnostics] == [
        ("data.py", "MP003", NODES_MESSAGE),
        ("good.py", "MP101", first.diagnostics[1].message),
    ]

    def checked(source, data, check):
        raise AssertionError(f"{source.display} was checked again")

    monkeypatch.setattr(runner, "_check_file", checked)
    again = runner.run(runner.RunOptions([project], jobs=1))
    assert again.diagnostics == first.diagnostics


def test_time_budget_stops_a_slow_check_and_restores_the_timer(monkeypatch):
    monkeypatch.setattr(budget, "MAX_SECONDS", 0.05)
    before = signal.getsignal(signal.SIGALRM)
    result = check_source("data.py", data_module(20_000).encode(), options(fix=True))  # about a second of libcst
    assert [(d.rule_id, d.message) for d in result.diagnostics] == [
        (
            "MP003",
            (
                "not fully checked: checking took longer than 0.05 s (the per-file budget); "
                "no finding or fix of this file is reported"
            ),
        )
    ]
    assert result.fixed_source is None
    assert not result.repeatable  # how long a check takes is not a fact of the file: checked again next time
    assert signal.getsignal(signal.SIGALRM) is before and signal.getitimer(signal.ITIMER_REAL) == (0.0, 0.0)


def test_within_budget_a_check_is_unchanged_and_leaves_no_timer():
    result = check_source("data.py", data_module(50).encode(), options(fix=True))
    assert [(d.rule_id, d.fixed) for d in result.diagnostics] == [("MP101", True)]
    assert signal.getitimer(signal.ITIMER_REAL) == (0.0, 0.0)


def test_add_noqa_never_suppresses_mp003(project, capsys):
    (project / "good.py").unlink()
    assert main([".", "--add-noqa", "--format", "json"]) == 1
    assert (project / "data.py").read_text() == data_module(100_000)
