"""The flags Ruff users type, with Ruff's meaning: each with its exact output and exit code."""

from __future__ import annotations

import json
import os
import queue
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from mplint.catalog import load_catalog
from mplint.cli import main
from mplint.engine.registry import select
from mplint.output.text import use_colour

pytestmark = pytest.mark.quick  # the one-minute subset: python3 -m pytest -m quick

REPO = Path(__file__).resolve().parent.parent
POLICY = 'import keras\nfrom keras import layers\n\nkeras.mixed_precision.set_global_policy("mixed_float16")\n'
MODEL = 'model = keras.Sequential([layers.Dense(64), layers.Dense(10, activation="softmax")])\n'
FIXED = 'model = keras.Sequential([layers.Dense(64), layers.Dense(10, activation="softmax", dtype="float32")])\n'
MESSAGE = (
    "MP101 [*] softmax output layer computes in reduced precision (mixed_float16 set at {path}:4): float16 "
    'probabilities round to 0 or 1, and the loss saturates or becomes inf/NaN; give this layer dtype="float32"'
)
HELP = (
    '  = help: Add `dtype="float32"` to the softmax output layer, or cast the logits of a softmax call to float32. '
    "(safe fix)"
)


def finding(path: str) -> list[str]:
    return [
        f"{path}:5:45: " + MESSAGE.format(path=path),
        "  |",
        "5 | " + MODEL.rstrip("\n"),
        "  | " + " " * 44 + "^" * 38,
        HELP,
        "",
    ]


@pytest.fixture
def project(tmp_path, monkeypatch):
    (tmp_path / ".mplint.yaml").write_text("select: [MP101]\n")
    for name in ("train.py", "tests/test_model.py", "vendor/lib.py"):
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(POLICY + MODEL)
    monkeypatch.chdir(tmp_path)
    for name in ("FORCE_COLOR", "NO_COLOR", "CLICOLOR_FORCE", "CLICOLOR"):
        monkeypatch.delenv(name, raising=False)
    return tmp_path


def lines(capsys) -> tuple[list[str], str]:
    captured = capsys.readouterr()
    return captured.out.splitlines(), captured.err


# -- --quiet / --silent --------------------------------------------------------


def test_quiet_prints_the_findings_and_nothing_else(project, capsys):
    assert main(["-q", "train.py"]) == 1
    assert lines(capsys) == (finding("train.py"), "")
    assert main(["--quiet", "train.py", "--fix"]) == 0
    assert lines(capsys) == ([], "")  # neither "Fixed 1 error." nor "All checks passed!"


def test_silent_prints_nothing_and_keeps_the_exit_code(project, capsys):
    assert main(["-s", "train.py"]) == 1
    assert lines(capsys) == ([], "")
    assert main(["--silent", "--format", "json", "train.py", "missing.py"]) == 2
    assert lines(capsys) == ([], "")
    assert main(["--silent", "--exit-zero", "train.py"]) == 0


# -- --fix-only / --show-fixes -------------------------------------------------


def test_fix_only_fixes_and_reports_no_remaining_finding(project, capsys):
    (project / "broken.py").write_text("def f(:\n")
    assert main(["--fix-only", "train.py", "broken.py"]) == 0
    assert lines(capsys) == (["Fixed 1 error."], "")
    assert (project / "train.py").read_text() == POLICY + FIXED
    assert main(["--fix-only", "train.py", "broken.py"]) == 0  # MP000 remains: still 0, nothing printed
    assert lines(capsys) == ([], "")
    assert main(["-q", "train.py", "broken.py"]) == 1  # it does remain
    assert lines(capsys)[0][0] == "broken.py:1:7: MP000 syntax error: invalid syntax"
    assert main(["--fix-only", "--format", "json", "tests/test_model.py"]) == 0  # Ruff prints no JSON here
    assert lines(capsys)[0] == []
    assert (project / "tests/test_model.py").read_text() == POLICY + FIXED


def test_show_fixes_lists_the_fixes_per_file_and_rule(project, capsys):
    assert main(["--fix", "--show-fixes", "--no-cache", "train.py", "tests/test_model.py"]) == 0
    assert lines(capsys) == (
        [
            "Fixed 2 errors:",
            "- tests/test_model.py:",
            "    1 \u00d7 MP101 (float16-softmax-output)",
            "- train.py:",
            "    1 \u00d7 MP101 (float16-softmax-output)",
        ],
        "",
    )
    (project / "train.py").write_text(POLICY + MODEL)
    assert main(["--fix", "--no-show-fixes", "train.py"]) == 0
    assert lines(capsys) == (["Fixed 1 error."], "")


# -- --color / --no-color and the environment ----------------------------------


def test_color_flags_win_over_the_environment(project, capsys, monkeypatch):
    assert main(["--color", "train.py"]) == 1
    assert lines(capsys)[0][0].startswith("\x1b[1mtrain.py:5:45\x1b[0m: \x1b[31;1mMP101\x1b[0m \x1b[36m[*]\x1b[0m ")
    monkeypatch.setenv("FORCE_COLOR", "1")
    assert main(["--no-color", "train.py"]) == 1
    out, _ = lines(capsys)
    assert out == finding("train.py") + ["Found 1 error (1 fixable with `--fix`)."]


class _Terminal:
    def isatty(self) -> bool:
        return True


@pytest.mark.parametrize(
    "environ, terminal, expected",
    [
        ({}, True, True),
        ({}, False, False),
        ({"NO_COLOR": "1"}, True, False),
        ({"NO_COLOR": ""}, True, False),  # set at all: off, as Ruff's colour crate reads it
        ({"FORCE_COLOR": "1"}, False, True),
        ({"FORCE_COLOR": ""}, False, False),  # empty: not set
        ({"FORCE_COLOR": "1", "NO_COLOR": "1"}, False, True),  # Ruff applies FORCE_COLOR over everything
        ({"CLICOLOR_FORCE": "1", "NO_COLOR": "1"}, False, True),
        ({"CLICOLOR_FORCE": "0"}, False, False),
        ({"CLICOLOR": "0"}, True, False),
        ({"TERM": "dumb"}, True, False),
    ],
)
def test_colour_follows_the_environment_as_ruff_reads_it(environ, terminal, expected):
    assert use_colour(_Terminal() if terminal else object(), environ) is expected
    assert use_colour(object(), environ, choice=True) is True
    assert use_colour(_Terminal(), environ, choice=False) is False


# -- --exclude / --extend-exclude / --force-exclude ----------------------------


def test_exclude_and_extend_exclude_take_gitignore_patterns(project, capsys):
    assert main(["-q", "--exclude", "tests/,vendor/**/*.py", "."]) == 1
    assert lines(capsys) == (finding("train.py"), "")
    assert main(["-q", "--extend-exclude", "test_*.py", "--extend-exclude", "lib.py", "."]) == 1
    assert lines(capsys) == (finding("train.py"), "")
    (project / "build").mkdir()
    (project / "build" / "gen.py").write_text(POLICY + MODEL)
    assert main(["-q", "--exclude", "vendor,tests", "."]) == 1  # replaces the defaults: build/ is checked
    assert lines(capsys) == (finding("build/gen.py") + finding("train.py"), "")


def test_force_exclude_skips_excluded_paths_given_explicitly(project, capsys):
    (project / ".mplint.yaml").write_text("select: [MP101]\nextend-exclude: [vendor, 'test_*.py']\n")
    assert main(["-q", "vendor/lib.py", "tests/test_model.py"]) == 1  # named: checked (Ruff's default)
    assert lines(capsys) == (finding("tests/test_model.py") + finding("vendor/lib.py"), "")
    assert main(["--force-exclude", "vendor/lib.py", "tests/test_model.py"]) == 0  # what pre-commit passes
    assert lines(capsys) == (
        [],  # nothing was checked: no "All checks passed!"
        "mplint: warning: vendor/lib.py: excluded (--force-exclude)\n"
        "mplint: warning: tests/test_model.py: excluded (--force-exclude)\n"
        "mplint: warning: No Python files or notebooks found under the given path(s)\n",
    )
    assert main(["-q", "--force-exclude", "vendor/lib.py", "train.py"]) == 1
    assert lines(capsys) == (finding("train.py"), "")
    assert main(["--force-exclude", "vendor/lib.py", "train.py"]) == 1
    assert lines(capsys)[1] == ""  # an excluded path beside checked ones is skipped silently, as pre-commit needs
    (project / ".mplint.yaml").write_text("select: [MP101]\nextend-exclude: [vendor]\nforce-exclude: true\n")
    assert main(["vendor/lib.py"]) == 0
    assert main(["--no-force-exclude", "-q", "vendor/lib.py"]) == 1


def test_force_exclude_applies_to_stdin_filename(project, capsys, monkeypatch):
    import io

    source = (POLICY + MODEL).encode()
    monkeypatch.setattr(sys, "stdin", type("S", (), {"buffer": io.BytesIO(source)})())
    assert main(["--force-exclude", "--extend-exclude", "vendor", "--fix", "--stdin-filename", "vendor/lib.py"]) == 0
    assert capsys.readouterr() == (source.decode(), "All checks passed!\n")  # given back as it came, unchecked


# -- --per-file-ignores ----------------------------------------------------------


def test_per_file_ignores_take_ruffs_glob_colon_rule_pairs(project, capsys):
    (project / ".mplint.yaml").write_text("select: [MP101]\nper-file-ignores: {'vendor/*': [MP101]}\n")
    assert main(["-q", "--per-file-ignores", "tests/*:MP101,train.py:float16-softmax-output", "."]) == 1
    assert lines(capsys) == (finding("vendor/lib.py"), "")  # the flag replaces the config's table
    assert main(["-q", "--extend-per-file-ignores", "tests/*:MP1", "."]) == 1
    assert lines(capsys) == (finding("train.py"), "")  # added to the config's table
    assert main(["--per-file-ignores", "tests/*", "."]) == 2
    assert lines(capsys) == ([], "mplint: error: --per-file-ignores takes GLOB:RULE pairs, got 'tests/*'\n")
    assert main(["--per-file-ignores", "tests/*:MP999", "."]) == 2
    assert lines(capsys) == ([], "mplint: error: unknown rule selector 'MP999' (see 'mplint rules')\n")


# -- --add-noqa --------------------------------------------------------------------


def test_add_noqa_prints_only_the_count(project, capsys):
    (project / "b.py").write_text(POLICY + MODEL + MODEL.replace("model", "other"))
    assert main(["--add-noqa", "train.py", "b.py"]) == 0
    assert capsys.readouterr() == ("", "Added 3 noqa comments.\n")
    assert main(["--add-noqa", "-q", "vendor"]) == 0
    assert capsys.readouterr() == ("", "")
    assert main(["train.py"]) == 0


# -- --output-format -----------------------------------------------------------


def test_output_format_is_format(project, capsys):
    """Ruff's ``--output-format`` is mplint's ``--format``: the same report, the same exit code."""
    assert main(["--output-format", "json", "train.py"]) == 1
    spelled_ruffs_way = capsys.readouterr()
    assert main(["--format", "json", "train.py"]) == 1
    assert capsys.readouterr() == spelled_ruffs_way
    assert [d["rule"] for d in json.loads(spelled_ruffs_way.out)["diagnostics"]] == ["MP101"]
    assert main(["--output-format", "junit", "train.py"]) == 2


# -- mplint rule -------------------------------------------------------------------


def test_rule_is_explain(capsys):
    assert main(["explain", "MP101"]) == 0
    page = capsys.readouterr().out
    assert main(["rule", "MP101"]) == 0
    assert capsys.readouterr().out == page
    assert page.splitlines()[1].strip("│ ") == "MP101 float16-softmax-output"
    assert main(["rule", "MP9999"]) == 2
    assert main(["rule", "--all"]) == 0
    everything = capsys.readouterr().out
    assert page in everything and everything.count("What it does") == len(load_catalog())
    assert main(["rule"]) == 2
    assert "give one rule, or --all" in capsys.readouterr().err


SHARED_NAMES = {
    "clip-before-unscale": ["MP204", "MPT204"],
    "tensor-core-alignment": ["MP301", "MPT301"],
    "float16-overflow-constant": ["MP601", "MPT601"],
}


def test_the_shared_names_are_those_of_the_catalog():
    ids_by_name: dict[str, list[str]] = {}
    for meta in load_catalog().values():
        ids_by_name.setdefault(meta.name, []).append(meta.id)
    assert {name: ids for name, ids in ids_by_name.items() if len(ids) > 1} == SHARED_NAMES


@pytest.mark.parametrize("name", sorted(SHARED_NAMES))
def test_explain_of_a_shared_name_shows_every_rule_it_names_as_select_does(capsys, name):
    ids = SHARED_NAMES[name]
    assert sorted(select([name])) == ids  # what --select takes for the name
    assert main(["explain", name]) == 0
    out = capsys.readouterr().out
    pages = []
    for rule_id in ids:
        assert main(["explain", rule_id]) == 0
        pages.append(capsys.readouterr().out)
    assert out == f"{name} names 2 rules: {ids[0]} and {ids[1]}.\n" + "".join(pages)
    assert [line.strip("│ ") for line in out.splitlines() if line.startswith("│ MP")] == [f"{i} {name}" for i in ids]


# -- --watch -----------------------------------------------------------------------


def _reader(stream) -> queue.Queue:
    """Lines of ``stream`` as they come, read on a thread so that every wait has a bound."""
    lines: queue.Queue = queue.Queue()
    threading.Thread(target=lambda: [lines.put(line) for line in stream], daemon=True).start()
    return lines


def test_watch_checks_again_after_a_file_changes(project):
    env = {**os.environ, "PYTHONPATH": str(REPO), "NO_COLOR": "1", "MPLINT_WATCH_POLL": "0.2"}
    (project / "vendor" / "lib.py").unlink()
    (project / "tests" / "test_model.py").unlink()
    process = subprocess.Popen(
        [sys.executable, "-m", "mplint", "--watch", "-q", "."],
        cwd=project,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        out = _reader(process.stdout)
        first = [out.get(timeout=60) for _ in range(7)]
        assert first == ["Starting linter in watch mode...\n", *(line + "\n" for line in finding("train.py"))]
        time.sleep(0.3)
        (project / "train.py").write_text(POLICY + "\n" + MODEL)  # the finding moves to line 6
        second = [out.get(timeout=30) for _ in range(3)]
        assert second[0] == "File change detected...\n"
        assert second[1] == "train.py:6:45: " + MESSAGE.format(path="train.py") + "\n"
        process.send_signal(signal.SIGINT)
        assert process.wait(timeout=30) == 130
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()


def test_watch_checks_again_a_file_saved_while_the_first_check_runs(project):
    """An edit saved during a check (the check is slow, the editor quick) is checked once that check ends."""
    import io
    from types import SimpleNamespace

    from mplint.watch import watch

    checks = []

    def check() -> int:
        checks.append(len(checks))
        if len(checks) == 1:
            time.sleep(0.01)
            (project / "train.py").write_text(POLICY + "\n" + MODEL)  # saved while the first check runs
        return 1

    options = SimpleNamespace(paths=[Path(".")], config_path=None)
    out = io.StringIO()
    assert watch(check, options, out, polls=2) == 1
    assert checks == [0, 1]
    assert out.getvalue() == "Starting linter in watch mode...\nFile change detected...\n"


def test_watch_refuses_what_it_cannot_repeat(project, capsys):
    assert main(["--watch", "--add-noqa", "."]) == 2
    assert capsys.readouterr().err == (
        "mplint: error: --watch cannot be combined with --stdin-filename, --add-noqa or --show-facts\n"
    )
