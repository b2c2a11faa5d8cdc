"""The command line: exit codes, discovery, bad input, and files left untouched."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from mplint.cli import main

pytestmark = pytest.mark.quick  # the one-minute subset: python3 -m pytest -m quick

GOOD = "import math\nx = math.pi\n"


def make(tmp_path, files: dict[str, bytes | str]):
    (tmp_path / ".mplint.yaml").write_text("{}\n")
    for name, data in files.items():
        path = tmp_path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data if isinstance(data, bytes) else data.encode())
    return tmp_path


def run_json(args, capsys):
    code = main([*args, "--format", "json"])
    return code, json.loads(capsys.readouterr().out)


def test_clean_project_exits_0(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(make(tmp_path, {"a.py": GOOD}))
    assert main(["."]) == 0
    assert "All checks passed!" in capsys.readouterr().out


def test_syntax_error_among_good_files_is_reported_and_others_checked(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(make(tmp_path, {"a.py": GOOD, "b.py": "def f(:\n", "c.py": GOOD}))
    code, doc = run_json(["."], capsys)
    assert code == 1
    assert [(d["path"], d["rule"], d["start"]) for d in doc["diagnostics"]] == [
        ("b.py", "MP000", {"line": 1, "column": 7})
    ]
    assert doc["summary"]["files"] == 3


def test_missing_path_is_an_error_but_other_paths_are_checked(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(make(tmp_path, {"a.py": "def f(:\n"}))
    code, doc = run_json(["a.py", "nope.py"], capsys)
    assert code == 2
    assert doc["errors"] == ["nope.py: no such file or directory"]
    assert [d["rule"] for d in doc["diagnostics"]] == ["MP000"]


def test_exit_zero(tmp_path, monkeypatch):
    monkeypatch.chdir(make(tmp_path, {"b.py": "def f(:\n"}))
    assert main([".", "--exit-zero"]) == 0


NO_FILES = "mplint: warning: No Python files or notebooks found under the given path(s)\n"
NOT_PYTHON = "not a Python file (.py), notebook (.ipynb) or script with a python shebang; skipped"


def test_paths_that_hold_nothing_to_check_say_so_and_what_was_skipped(tmp_path, monkeypatch, capsys):
    """As Ruff warns, on standard error, and exits 0: nothing was checked, so "All checks passed!" is not said.
    A file named on the command line is checked when it is Python: .py, a notebook, or a script with a python
    shebang (what pre-commit's types: [python] passes); any other is skipped with a warning."""
    monkeypatch.chdir(
        make(
            tmp_path,
            {
                "notes.txt": "hi\n",
                "train.py": GOOD,
                "docs/README.md": "# docs\n",
                "docs/build/gen.py": GOOD,
                "bin/train": "#!/usr/bin/env python3\ndef f(:\n",
                "bin/setup.sh": "#!/bin/sh\n",
            },
        )
    )
    (tmp_path / "empty_folder").mkdir()
    assert main(["empty_folder/"]) == 0
    assert capsys.readouterr() == (
        "",
        "mplint: warning: empty_folder: holds no Python file (.py) or notebook (.ipynb)\n" + NO_FILES,
    )
    assert main(["notes.txt"]) == 0
    assert capsys.readouterr() == ("", f"mplint: warning: notes.txt: {NOT_PYTHON}\n" + NO_FILES)
    assert main(["docs", "bin/setup.sh"]) == 0
    assert capsys.readouterr() == (
        "",
        "mplint: warning: docs: holds no Python file (.py) or notebook (.ipynb) (1 other file, 1 excluded or "
        f"git-ignored)\nmplint: warning: bin/setup.sh: {NOT_PYTHON}\n" + NO_FILES,
    )
    assert main(["train.py", "notes.txt"]) == 0
    assert capsys.readouterr() == ("All checks passed!\n", f"mplint: warning: notes.txt: {NOT_PYTHON}\n")
    code, doc = run_json(["bin/train", "bin/setup.sh"], capsys)  # the script with a shebang is checked
    assert (code, [(d["path"], d["rule"]) for d in doc["diagnostics"]]) == (1, [("bin/train", "MP000")])
    assert main(["-q", "notes.txt"]) == 0
    assert capsys.readouterr() == ("", "")
    code, doc = run_json(["empty_folder"], capsys)
    assert (code, doc["summary"]["files"], doc["diagnostics"]) == (0, 0, [])


def test_gitignore_and_excludes_are_respected(tmp_path, monkeypatch, capsys):
    make(
        tmp_path,
        {
            ".gitignore": "generated/\n*_pb2.py\n",
            "generated/x.py": "def f(:\n",
            "model_pb2.py": "def f(:\n",
            "sub/.gitignore": "local.py\n",
            "sub/local.py": "def f(:\n",
            "sub/kept.py": "def f(:\n",
            ".venv/lib.py": "def f(:\n",
            "build/out.py": "def f(:\n",
            "vendor/v.py": "def f(:\n",
        },
    )
    (tmp_path / ".mplint.yaml").write_text("extend-exclude: [vendor]\n")
    monkeypatch.chdir(tmp_path)
    _, doc = run_json(["."], capsys)
    assert [d["path"] for d in doc["diagnostics"]] == ["sub/kept.py"]
    _, doc = run_json(["vendor/v.py"], capsys)  # a file named explicitly is always checked
    assert [d["path"] for d in doc["diagnostics"]] == ["vendor/v.py"]


def test_unreadable_file_is_mp000_and_others_are_checked(tmp_path, monkeypatch, capsys):
    make(tmp_path, {"a.py": GOOD, "c.py": "def f(:\n"})
    os.symlink(tmp_path / "gone.py", tmp_path / "b.py")  # dangling: listed, but cannot be read
    monkeypatch.chdir(tmp_path)
    code, doc = run_json(["."], capsys)
    assert code == 1
    assert [(d["path"], d["rule"], d["message"]) for d in doc["diagnostics"]] == [
        ("b.py", "MP000", "cannot read file: No such file or directory"),
        ("c.py", "MP000", "syntax error: invalid syntax"),
    ]


def test_files_without_findings_are_never_rewritten(tmp_path, monkeypatch):
    files = {
        "crlf.py": b"x = 1\r\ny = 2\r\n",
        "bom.py": b"\xef\xbb\xbfx = 1\n",
        "latin.py": b"# -*- coding: latin-1 -*-\n# caf\xe9\nx = 1\n",
        "mixed.py": b"x = 1\r\ny = 2\nz = 3\r\n",
    }
    make(tmp_path, files)
    stamps = {n: (tmp_path / n).stat().st_mtime_ns for n in files}
    monkeypatch.chdir(tmp_path)
    assert main([".", "--fix", "--unsafe-fixes"]) == 0
    for name, data in files.items():
        assert (tmp_path / name).read_bytes() == data
        assert (tmp_path / name).stat().st_mtime_ns == stamps[name]


def test_python_dash_m_and_version():
    out = subprocess.run([sys.executable, "-m", "mplint", "--version"], capture_output=True, text=True)
    assert out.returncode == 0 and out.stdout.startswith("mplint ")


def test_rules_and_explain(capsys):
    assert main(["rules"]) == 0
    assert "MP000" in capsys.readouterr().out
    assert main(["explain", "parse-error"]) == 0
    out = capsys.readouterr().out
    assert "MP000 parse-error" in out and "Why is this bad?" in out and "Fix safety" in out
    assert main(["explain", "MP00"]) == 2
    assert "unknown rule 'MP00'" in capsys.readouterr().out


def test_an_unmarked_tree_is_one_project_and_policies_follow_imports(tmp_path, monkeypatch, capsys):
    """Without markers the tree is one project: a program in one folder governs the modules it imports
    from another, and no module it does not reach."""
    tree = tmp_path / "tree"
    (tree / "a").mkdir(parents=True)
    (tree / "b").mkdir()
    (tree / "a" / "train.py").write_text(
        "import keras\nkeras.mixed_precision.set_global_policy('mixed_float16')\nfrom b.model import model\nmodel.fit()\n"
    )
    softmax = "import keras\nmodel = keras.Sequential([keras.layers.Dense(10, activation='softmax')])\n"
    (tree / "b" / "model.py").write_text(softmax)
    (tree / "b" / "other.py").write_text(softmax)
    monkeypatch.chdir(tree)
    code, doc = run_json(["--select", "MP101", "--no-cache", "."], capsys)
    assert code == 1
    assert [(d["path"], d["rule"], d["start"]["line"]) for d in doc["diagnostics"]] == [("b/model.py", "MP101", 2)]
    assert doc["diagnostics"][0]["context"]["program"] == "a/train.py"


def test_a_run_that_changes_nothing_writes_no_cache(tmp_path, monkeypatch, capsys):
    softmax = (
        "import keras\nkeras.mixed_precision.set_global_policy('mixed_float16')\n"
        "m = keras.Sequential([keras.layers.Dense(10, activation='softmax')])\n"
    )
    monkeypatch.chdir(make(tmp_path, {"a.py": softmax, "b.py": GOOD}))
    first = run_json(["."], capsys)
    stamps = {p: p.stat().st_mtime_ns for p in (tmp_path / ".mplint_cache").rglob("*.json")}
    assert stamps and run_json(["."], capsys) == first
    assert {p: p.stat().st_mtime_ns for p in (tmp_path / ".mplint_cache").rglob("*.json")} == stamps
    (tmp_path / "b.py").write_text(softmax)
    code, doc = run_json(["."], capsys)
    assert [(d["path"], d["rule"]) for d in doc["diagnostics"]] == [("a.py", "MP101"), ("b.py", "MP101")]


def test_stdin_reads_the_cache_and_never_writes_it(tmp_path, monkeypatch, capsys):
    import io

    softmax = (
        "import keras\nkeras.mixed_precision.set_global_policy('mixed_float16')\n"
        "m = keras.Sequential([keras.layers.Dense(10, activation='softmax')])\n"
    )
    monkeypatch.chdir(make(tmp_path, {"a.py": softmax, "b.py": GOOD}))
    run_json(["."], capsys)
    stamps = {p: p.stat().st_mtime_ns for p in (tmp_path / ".mplint_cache").rglob("*.json")}
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(softmax.encode())))
    code, doc = run_json(["--stdin-filename", "b.py", "."], capsys)
    assert (code, [(d["path"], d["rule"]) for d in doc["diagnostics"]]) == (1, [("b.py", "MP101")])
    assert {p: p.stat().st_mtime_ns for p in (tmp_path / ".mplint_cache").rglob("*.json")} == stamps


def test_diff_ends_with_ruffs_summary_and_git_applies_it(tmp_path, monkeypatch, capsys):
    """As Ruff: the diff, then "Would fix N errors." on standard output (git apply reads past it); nothing on
    standard error; -q leaves the summary out; a run with nothing to fix prints nothing."""
    code = 'import tensorflow as tf\ntf.keras.mixed_precision.set_global_policy("float16")\n'
    monkeypatch.chdir(make(tmp_path, {"train.py": code, "clean.py": GOOD}))
    assert main(["--diff", "--select", "MP602", "train.py"]) == 1
    shown = capsys.readouterr()
    assert (shown.out, shown.err) == (
        "--- a/train.py\n"
        "+++ b/train.py\n"
        "@@ -1,2 +1,2 @@\n"
        " import tensorflow as tf\n"
        '-tf.keras.mixed_precision.set_global_policy("float16")\n'
        '+tf.keras.mixed_precision.set_global_policy("mixed_float16")\n'
        "\n"
        "Would fix 1 error.\n",
        "",
    )
    subprocess.run(["git", "init", "-q"], check=True)
    (tmp_path / "fixes.patch").write_text(shown.out)
    subprocess.run(["git", "apply", "fixes.patch"], check=True)
    assert (tmp_path / "train.py").read_text() == code.replace('"float16"', '"mixed_float16"')
    (tmp_path / "train.py").write_text(code)
    assert main(["--diff", "-q", "--select", "MP602", "train.py"]) == 1
    assert capsys.readouterr().out.splitlines()[-1] == '+tf.keras.mixed_precision.set_global_policy("mixed_float16")'
    assert main(["--diff", "--select", "MP602", "clean.py"]) == 0
    assert capsys.readouterr() == ("", "")


def test_diff_labels_relative_paths_like_git_and_absolute_paths_as_given(tmp_path, monkeypatch, capsys):
    code = 'import tensorflow as tf\ntf.keras.mixed_precision.set_global_policy("float16")\n'
    (tmp_path / "p").mkdir()
    (tmp_path / "elsewhere").mkdir()
    monkeypatch.chdir(make(tmp_path / "p", {"train.py": code}))
    assert main(["--diff", "--select", "MP602", "train.py"]) == 1
    relative = capsys.readouterr().out.splitlines()[:2]
    monkeypatch.chdir(make(tmp_path / "elsewhere", {}))
    assert main(["--diff", "--select", "MP602", str(tmp_path / "p" / "train.py")]) == 1
    absolute = capsys.readouterr().out.splitlines()[:2]
    assert (relative, absolute) == (
        ["--- a/train.py", "+++ b/train.py"],
        [f"--- {tmp_path}/p/train.py", f"+++ {tmp_path}/p/train.py"],
    )
