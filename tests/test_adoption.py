"""Adopting mplint in a big codebase: --add-noqa, --changed-since, --stdin-filename, the progress bar."""

from __future__ import annotations

import io
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from mplint.cli import main, show_progress

DATA = Path(__file__).parent / "data" / "notebooks"
POLICY = 'import keras\nfrom keras import layers\n\nkeras.mixed_precision.set_global_policy("mixed_float16")\n'
BAD_MODEL = 'model = keras.Sequential([layers.Dense(64), layers.Dense(10, activation="softmax")])'


@pytest.fixture
def project(tmp_path, monkeypatch):
    (tmp_path / ".mplint.yaml").write_text("{}\n")
    monkeypatch.chdir(tmp_path)
    return tmp_path


def _json(capsys) -> dict:
    return json.loads(capsys.readouterr().out)


# -- --add-noqa ---------------------------------------------------------------


def test_add_noqa_suppresses_every_finding_and_merges_codes(project, capsys):
    (project / "a.py").write_text(POLICY + BAD_MODEL + "\n")
    (project / "b.py").write_text(POLICY + BAD_MODEL + "  # noqa: E501\n")
    (project / "c.py").write_text(POLICY + "x = (1,\n     2)  # noqa: E501\n")
    c_mtime = (project / "c.py").stat().st_mtime_ns
    assert main(["--select", "MP101", "--add-noqa", "."]) == 0
    assert (project / "a.py").read_text() == POLICY + BAD_MODEL + "  # noqa: MP101\n"
    assert (project / "b.py").read_text() == POLICY + BAD_MODEL + "  # noqa: E501, MP101\n"
    assert (project / "c.py").stat().st_mtime_ns == c_mtime  # no findings: never touched
    assert "Added 2 noqa comments." in capsys.readouterr().err
    assert main(["--select", "MP101", "."]) == 0
    before = (project / "a.py").read_bytes()
    assert main(["--select", "MP101", "--add-noqa", "."]) == 0  # idempotent
    assert (project / "a.py").read_bytes() == before


def test_add_noqa_on_multiline_finding_uses_its_first_line(project):
    code = (
        POLICY
        + 'model = keras.Sequential([\n    layers.Dense(\n        10,\n        activation="softmax",\n    ),\n])\n'
    )
    (project / "m.py").write_text(code)
    assert main(["--select", "MP101", "--add-noqa", "m.py"]) == 0
    assert (project / "m.py").read_text() == code.replace("    layers.Dense(\n", "    layers.Dense(  # noqa: MP101\n")


def test_add_noqa_writes_into_the_notebook_cell(project):
    path = Path(shutil.copy(DATA / "train.ipynb", project / "train.ipynb"))
    before = path.read_bytes()
    assert main(["--select", "MP101", "--add-noqa", "train.ipynb"]) == 0
    old = b'    layers.Dense(10, activation=\\"softmax\\"),\\n'
    assert path.read_bytes() == before.replace(
        old, b'    layers.Dense(10, activation=\\"softmax\\"),  # noqa: MP101\\n'
    )
    assert main(["--select", "MP101", "train.ipynb"]) == 0


def test_add_noqa_refuses_fix(project, capsys):
    assert main(["--select", "MP101", "--add-noqa", "--fix", "."]) == 2
    assert "--add-noqa cannot be combined" in capsys.readouterr().err


# -- --changed-since ----------------------------------------------------------


def _git(repo: Path, *args: str) -> None:
    subprocess.run(
        ["git", "-c", "user.name=t", "-c", "user.email=t@t", *args], cwd=repo, check=True, capture_output=True
    )


@pytest.fixture
def repo(project):
    _git(project, "init", "-q")
    (project / "policy.py").write_text(POLICY)
    (project / "old.py").write_text(POLICY + BAD_MODEL + "\n")
    (project / "edited.py").write_text("from policy import *\n")
    _git(project, "add", ".")
    _git(project, "commit", "-q", "-m", "base")
    return project


def test_changed_since_checks_changed_and_untracked_files_only(repo, capsys):
    (repo / "edited.py").write_text("import policy\nfrom keras import layers\nimport keras\n" + BAD_MODEL + "\n")
    (repo / "new.py").write_text("import policy\nimport keras\nfrom keras import layers\n" + BAD_MODEL + "\n")
    assert main(["--select", "MP101", "--format", "json", "--changed-since", "HEAD", "."]) == 1
    doc = _json(capsys)
    # old.py has a finding but did not change; the policy set in unchanged policy.py still counts
    assert [(d["path"], d["rule"], d["start"]["line"]) for d in doc["diagnostics"]] == [
        ("edited.py", "MP101", 4),
        ("new.py", "MP101", 4),
    ]
    assert doc["summary"]["files"] == 2


def test_changed_since_with_nothing_changed_is_clean(repo, capsys):
    assert main(["--select", "MP101", "--changed-since", "HEAD", "."]) == 0
    assert main(["--select", "MP101", "."]) == 1  # old.py still has its finding


def test_changed_since_staged_changes_count(repo, capsys):
    (repo / "edited.py").write_text("import policy\nimport keras\nfrom keras import layers\n" + BAD_MODEL + "\n")
    _git(repo, "add", "edited.py")
    assert main(["--select", "MP101", "--format", "json", "--changed-since", "HEAD", "."]) == 1
    assert [d["path"] for d in _json(capsys)["diagnostics"]] == ["edited.py"]


def test_changed_since_unknown_revision_is_a_usage_error(repo, capsys):
    assert main(["--select", "MP101", "--changed-since", "no-such-branch", "."]) == 2
    assert "unknown git revision 'no-such-branch'" in capsys.readouterr().err


def test_changed_since_outside_git_is_a_usage_error(project, capsys):
    assert main(["--select", "MP101", "--changed-since", "HEAD", "."]) == 2
    assert "--changed-since needs a git repository" in capsys.readouterr().err


# -- --stdin-filename ---------------------------------------------------------


def _stdin(monkeypatch, text: str) -> None:
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(text.encode())))


def test_stdin_fix_prints_fixed_source_and_reports_on_stderr(project, monkeypatch, capfdbinary):
    (project / "src").mkdir()
    _stdin(monkeypatch, POLICY + BAD_MODEL + "\n")
    assert main(["--select", "MP101", "--fix", "--stdin-filename", "src/train.py"]) == 0
    out, err = capfdbinary.readouterr()
    assert out == (POLICY + BAD_MODEL.replace('"softmax")', '"softmax", dtype="float32")') + "\n").encode()
    assert b"Fixed 1 error." in err
    assert not (project / "src" / "train.py").exists()  # nothing written


def test_stdin_without_fixes_echoes_the_source(project, monkeypatch, capfdbinary):
    _stdin(monkeypatch, "x = 1\r\n")
    assert main(["--select", "MP101", "--fix", "--stdin-filename", "clean.py"]) == 0
    assert capfdbinary.readouterr().out == b"x = 1\r\n"


def test_stdin_check_reports_on_stdout_with_the_given_name(project, monkeypatch, capsys):
    (project / "train.py").write_text("x = 1\n")  # the on-disk copy is replaced by stdin
    _stdin(monkeypatch, POLICY + BAD_MODEL + "\n")
    assert main(["--select", "MP101", "--format", "json", "--stdin-filename", "train.py"]) == 1
    [d] = _json(capsys)["diagnostics"]
    assert (d["path"], d["rule"], d["start"]["line"], d["start"]["column"]) == ("train.py", "MP101", 5, 45)
    assert (project / "train.py").read_text() == "x = 1\n"


def test_stdin_facts_come_from_the_whole_project_not_the_given_paths(project, monkeypatch, capsys):
    """An editor sends one buffer: the policy its program sets in an unsent module still counts."""
    (project / "policy.py").write_text(POLICY)
    _stdin(monkeypatch, "import policy\nimport keras\nfrom keras import layers\n" + BAD_MODEL + "\n")
    assert main(["--select", "MP101", "--format", "json", "--stdin-filename", "model.py"]) == 1
    [d] = _json(capsys)["diagnostics"]
    assert (d["path"], d["context"]["set_at"]) == ("model.py", {"path": "policy.py", "line": 4})
    _stdin(monkeypatch, "import keras\nfrom keras import layers\n" + BAD_MODEL + "\n")  # not reached by policy.py
    assert main(["--select", "MP101", "--format", "json", "--stdin-filename", "model.py", "policy.py"]) == 0


def test_stdin_notebook_fix_prints_the_notebook(project, monkeypatch, capfdbinary):
    raw = (DATA / "colab.ipynb").read_text(encoding="utf-8")
    _stdin(monkeypatch, raw)
    assert main(["--select", "MP101", "--fix", "--stdin-filename", "colab.ipynb"]) == 0
    fixed = raw.replace("activation='softmax'),", "activation='softmax', dtype='float32'),")
    assert capfdbinary.readouterr().out == fixed.encode()


# -- progress bar -------------------------------------------------------------


class _Stream:
    def __init__(self, tty: bool):
        self.tty = tty

    def isatty(self) -> bool:
        return self.tty


@pytest.mark.parametrize(
    "tty,env,shown",
    [
        (True, {}, True),
        (True, {"CI": "true"}, False),
        (True, {"TERM": "dumb"}, False),
        (False, {}, False),
    ],
)
def test_progress_only_for_a_terminal_outside_ci(tty, env, shown):
    assert show_progress(_Stream(tty), env) is shown


def test_long_run_in_a_pipe_prints_no_progress(project, capsys):
    for i in range(120):
        (project / f"m{i}.py").write_text("x = 1\n")
    assert main(["--select", "MP101", "."]) == 0
    assert capsys.readouterr().err == ""


def _long_project(project, files: int = 110) -> None:
    (project / "a.py").write_text(POLICY + BAD_MODEL + "\n")
    for i in range(files):
        (project / f"m{i}.py").write_text("x = 1\n")


def test_progress_on_a_terminal_shows_every_phase(project):
    from rich.console import Console

    from mplint.cli import _ProgressBar
    from mplint.runner import PHASES, RunOptions, run

    _long_project(project)
    screen = io.StringIO()
    seen = []
    bar = _ProgressBar(Console(file=screen, force_terminal=True, width=120))

    def record(phase, done, total):
        seen.append((phase, done, total))
        bar(phase, done, total)

    report = run(RunOptions(paths=[project], fix=True, select=["MP101"], cache=False, jobs=1, on_progress=record))
    bar.close()
    assert report.fixed_count == 1
    shown = screen.getvalue()
    for label in ("Finding files", "Reading project facts", "Walking programs", "Checking files", "Writing fixes"):
        assert label in shown
    assert [p for p in PHASES if any(s[0] == p for s in seen)] == list(PHASES)
    assert seen[0] == ("discovery", 0, None) and seen[1] == ("discovery", 111, 111)
    finals = {phase: (done, total) for phase, done, total in seen}
    # facts twice: after the fix the fixed files' facts are read again, to see whether they settled (they did:
    # one round of checks)
    # the program model after each reading of the facts: one program (a.py, the only entry point) each time,
    # counted up from none
    assert [s for s in seen if s[0] == "programs"] == [
        ("programs", 0, 1),
        ("programs", 1, 1),
        ("programs", 1, 2),
        ("programs", 2, 2),
    ]
    assert finals == {
        "discovery": (111, 111),
        "facts": (222, 222),
        "programs": (2, 2),
        "checks": (111, 111),
        "fixes": (1, 1),
    }


def test_progress_never_reaches_piped_output(project, capsys, monkeypatch):
    _long_project(project)
    assert main(["--select", "MP101", "--no-cache", "--diff", "."]) == 1
    piped = capsys.readouterr()
    assert piped.err == ""
    from rich.console import Console

    import mplint.cli

    terminal = io.StringIO()
    monkeypatch.setattr(mplint.cli, "show_progress", lambda stream, environ: True)
    monkeypatch.setattr(
        mplint.cli, "_ProgressBar", lambda: _ProgressBar(Console(file=terminal, force_terminal=True, width=120))
    )
    assert main(["--select", "MP101", "--no-cache", "--diff", "."]) == 1
    shown = capsys.readouterr()
    assert "Checking files" in terminal.getvalue()
    assert shown.out == piped.out and shown.err == ""


_ProgressBar = __import__("mplint.cli", fromlist=["_ProgressBar"])._ProgressBar
