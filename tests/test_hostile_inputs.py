"""Hostile and broken inputs: each gets a clear message, and the other files are still checked (and fixed).

Every project here sets ``policy: mixed_float16`` and holds ``good.py`` with one
fixable MP101 finding: "the others still processed" means good.py is reported,
and under --fix rewritten. Tests run as root in CI, so unreadable inputs are
made with tricks that hold for root too: dangling symlinks, symlink loops,
FIFOs, folders where a file is expected, files deleted mid-run.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

import mplint.runner
from mplint.checks import all_rules
from mplint.cli import main
from mplint.engine.check import MAX_SOURCE_BYTES, CheckOptions, check_source
from mplint.project.config import ConfigError, load_config
from mplint.project.facts import ProjectFacts

GOOD = 'import keras\nm = keras.Sequential([keras.layers.Dense(3, activation="softmax")])\n'
# a line every rule pre-filter of MP101 admits: files no active rule could match are not even parsed
SOFTMAX = b"import keras  # softmax output\n"
GOOD_FIXED = GOOD.replace('"softmax")', '"softmax", dtype="float32")')


@pytest.fixture
def project(tmp_path, monkeypatch):
    (tmp_path / ".mplint.yaml").write_text("policy: mixed_float16\n")
    (tmp_path / "good.py").write_text(GOOD)
    monkeypatch.chdir(tmp_path)
    return tmp_path


def run_json(capsys, *args):
    """(exit code, the JSON report, its errors as one text)."""
    code = main([*args, "--format", "json"])
    doc = json.loads(capsys.readouterr().out)
    return code, doc, "\n".join(doc["errors"])


def by_path(doc) -> dict[str, list[tuple[str, str]]]:
    out: dict[str, list[tuple[str, str]]] = {}
    for d in doc["diagnostics"]:
        out.setdefault(d["path"], []).append((d["rule"], d["message"]))
    return out


def sources_and_leftovers(project: Path) -> list[str]:
    """The folder's entries, less mplint's own cache folder."""
    return sorted(p.name for p in project.iterdir() if p.name != ".mplint_cache")


def assert_good_checked(doc):
    assert [rule for rule, _ in by_path(doc)["good.py"]] == ["MP101"]


# -- broken sources: MP000 with a clear message ---------------------------------------


def start_of(doc, path: str) -> list[tuple[int, int]]:
    return [(d["start"]["line"], d["start"]["column"]) for d in doc["diagnostics"] if d["path"] == path]


@pytest.mark.parametrize(
    "name,data,message,start",
    [
        ("syntax.py", SOFTMAX + b"def f(:\n", "syntax error: invalid syntax", (2, 7)),
        ("nulls.py", SOFTMAX + b"x = 1\x00\n", "file contains null bytes; not a Python source file", (1, 1)),
        (
            "undecodable.py",
            SOFTMAX + b"x = '\xff\xfe'\n",
            "cannot decode file as utf-8: invalid start byte (byte 0xff)",
            (2, 6),
        ),
        (
            "cookie.py",
            b"# -*- coding: klingon -*-\n" + SOFTMAX,
            "cannot decode file: unknown encoding: klingon",
            (1, 1),
        ),
        (
            "cookie_lies.py",
            b"# -*- coding: ascii -*-\n" + SOFTMAX + b"x = 'caf\xc3\xa9'\n",
            "cannot decode file as ascii: ordinal not in range(128) (byte 0xc3)",
            (3, 9),
        ),
    ],
)
def test_broken_source_is_mp000_and_the_others_are_checked(project, capsys, name, data, message, start):
    (project / name).write_bytes(data)
    code, doc, _ = run_json(capsys, ".", "--fix")
    assert code == 1
    assert by_path(doc)[name] == [("MP000", message)]
    assert start_of(doc, name) == [start]
    assert (project / name).read_bytes() == data
    assert (project / "good.py").read_text() == GOOD_FIXED


@pytest.mark.parametrize(
    "name,data,message,start",
    [
        ("syntax.py", b"def f(:\n", "syntax error: invalid syntax", (1, 7)),
        ("nulls.py", b"x = 1\x00\n", "file contains null bytes; not a Python source file", (1, 1)),
        (
            "undecodable.py",
            b"x = 1\ny = 2\nz = '\xff\xfe'\n",
            "cannot decode file as utf-8: invalid start byte (byte 0xff)",
            (3, 6),
        ),
    ],
)
def test_broken_source_without_any_trigger_is_mp000(project, capsys, name, data, message, start):
    # No rule's trigger is in it: only a file the project facts parsed skips the check's own parse.
    (project / name).write_bytes(data)
    code, doc, _ = run_json(capsys, ".", "--no-cache")
    assert code == 1
    assert by_path(doc)[name] == [("MP000", message)]
    assert start_of(doc, name) == [start]


def test_an_undecodable_byte_is_reported_at_its_line_and_column(project, capsys, monkeypatch):
    """Line breaks of every kind (CRLF, CR) count, and the column counts characters: two 2-byte characters
    before the bad byte are two columns."""
    monkeypatch.setenv("NO_COLOR", "1")
    (project / "bad.py").write_bytes(b"import keras\r\nx = 1\ry = '\xc3\xa9\xc3\xa9' + '\xff'\n")
    assert main(["--no-cache", "bad.py"]) == 1
    assert capsys.readouterr().out.splitlines() == [
        "bad.py:3:13: MP000 cannot decode file as utf-8: invalid start byte (byte 0xff)",
        "  |",
        "3 | y = '\u00e9\u00e9' + '\ufffd'",
        "  |             ^",
        "",
        "Found 1 error.",
    ]


def test_deep_nesting_is_mp000_not_a_crash(project, capsys):
    deep = "import keras  # softmax\nx = " + "(" * 5000 + "1" + ")" * 5000 + "\n"
    (project / "deep.py").write_text(deep)
    deep_calls = "import keras  # softmax\nx = " + "f(" * 3000 + "1" + ")" * 3000 + "\n"
    (project / "deep_calls.py").write_text(deep_calls)
    code, doc, errors = run_json(capsys, ".")
    assert (code, errors) == (1, "")
    found = by_path(doc)
    for name in ("deep.py", "deep_calls.py"):
        [(rule, message)] = found[name]
        assert rule == "MP000" and ("nested too deeply" in message or "too many nested parentheses" in message), message
    assert_good_checked(doc)


def test_deep_nesting_in_the_engine_alone_is_mp000():
    source = (
        "import keras\n" + "if x:\n" + "".join(" " * i + "if x:\n" for i in range(1, 120)) + " " * 120 + "pass\n"
    ).encode()
    rules = tuple(all_rules().values())
    result = check_source("deep.py", source, CheckOptions(rules, ProjectFacts()))
    assert [d.rule_id for d in result.diagnostics] == ["MP000"], [d.message for d in result.diagnostics]


def test_huge_file_is_skipped_quickly_with_a_clear_message(project, capsys):
    line = b"x = [1, 2, 3]  # generated data for a softmax\n"
    (project / "huge.py").write_bytes(line * (50_000_000 // len(line)))
    start = time.monotonic()
    code, doc, errors = run_json(capsys, ".")
    assert time.monotonic() - start < 30
    assert (code, errors) == (1, "")
    assert by_path(doc)["huge.py"] == [("MP000", "file too large to check (47.7 MiB, limit 10 MiB); skipped")]
    assert_good_checked(doc)


def test_file_just_under_the_size_limit_is_still_checked(project, capsys):
    body = b"import keras\n" + b"#" * (MAX_SOURCE_BYTES - 200) + b"\n"
    (project / "big.py").write_bytes(body)
    code, doc, errors = run_json(capsys, ".")
    assert (code, errors) == (1, "")
    assert "big.py" not in by_path(doc)
    assert_good_checked(doc)


def test_huge_file_mentioning_keras_is_bounded_in_time(project):
    line = b"x = [1, 2, 3]  # generated keras data, set_global_policy\n"
    (project / "huge.py").write_bytes(line * (25_000_000 // len(line)))
    try:  # a hang guard, not a speed target: the run takes about 1.5 s of CPU (bench/ measures speed)
        done = subprocess.run(
            [sys.executable, "-m", "mplint", "--format", "json", "."], cwd=project, capture_output=True, timeout=30
        )
    except subprocess.TimeoutExpired:
        pytest.fail("mplint spent more than 30 s on a file it skips as too large")
    assert (done.returncode, done.stderr) == (1, b""), done.stderr.decode(errors="replace")
    doc = json.loads(done.stdout)
    assert doc["errors"] == []
    assert by_path(doc)["huge.py"] == [("MP000", "file too large to check (23.8 MiB, limit 10 MiB); skipped")]
    assert_good_checked(doc)  # the run went on past the huge file


# -- files that cannot be read ------------------------------------------------------------


def test_symlink_loops_and_dangling_links_are_mp000(project, capsys):
    os.symlink("loop_b.py", project / "loop_a.py")
    os.symlink("loop_a.py", project / "loop_b.py")
    os.symlink("missing.py", project / "dangling.py")
    os.symlink(".", project / "self")  # a folder loop: never followed
    code, doc, _ = run_json(capsys, ".")
    assert code == 1
    found = by_path(doc)
    assert found["loop_a.py"] == [("MP000", "cannot read file: Too many levels of symbolic links")]
    assert found["loop_b.py"] == [("MP000", "cannot read file: Too many levels of symbolic links")]
    assert found["dangling.py"] == [("MP000", "cannot read file: No such file or directory")]
    assert not any(p.startswith("self/") for p in found)
    assert_good_checked(doc)


def test_fifo_is_skipped_with_an_error_instead_of_blocking(project, capsys):
    os.mkfifo(project / "pipe.py")
    code, doc, err = run_json(capsys, ".", "--fix")
    assert code == 2
    assert "pipe.py: not a regular file (a FIFO, socket or device); skipped" in err
    assert (project / "good.py").read_text() == GOOD_FIXED


def test_fifo_named_on_the_command_line_is_an_error(project, capsys):
    os.mkfifo(project / "pipe.py")
    code, doc, err = run_json(capsys, "pipe.py", "good.py")
    assert code == 2 and "pipe.py: not a regular file or directory" in err
    assert_good_checked(doc)


def test_folder_where_a_file_is_expected(project, capsys):
    (project / "pkg.py").mkdir()
    (project / "pkg.py" / "inner.py").write_text("def f(:\n  softmax\n")
    (project / "nb.ipynb").mkdir()
    code, doc, _ = run_json(capsys, ".")
    assert code == 1
    found = by_path(doc)
    assert [rule for rule, _ in found["pkg.py/inner.py"]] == ["MP000"]
    assert "nb.ipynb" not in found
    assert_good_checked(doc)


def test_file_deleted_after_discovery_is_mp000(project, capsys, monkeypatch):
    (project / "gone.py").write_text(GOOD)
    discover = mplint.runner.discover

    def discover_then_delete(*args, **kwargs):
        found = discover(*args, **kwargs)
        (project / "gone.py").unlink()
        return found

    monkeypatch.setattr(mplint.runner, "discover", discover_then_delete)
    code, doc, _ = run_json(capsys, ".", "--fix")
    assert code == 1
    assert by_path(doc)["gone.py"] == [("MP000", "cannot read file: No such file or directory")]
    assert (project / "good.py").read_text() == GOOD_FIXED


def test_file_deleted_before_its_fix_is_written_is_not_recreated(project, capsys, monkeypatch):
    (project / "gone.py").write_text(GOOD)
    check_file = mplint.runner._check_file

    def check_then_delete(source, data, check):
        result = check_file(source, data, check)
        if source.path.name == "gone.py":
            source.path.unlink(missing_ok=True)
        return result

    monkeypatch.setattr(mplint.runner, "_check_file", check_then_delete)
    code, _, err = run_json(capsys, ".", "--fix")
    assert code == 2
    assert "gone.py: cannot write fixes: No such file or directory" in err
    assert not (project / "gone.py").exists()
    assert sources_and_leftovers(project) == [".mplint.yaml", "good.py"]  # no temporary left
    assert (project / "good.py").read_text() == GOOD_FIXED


def test_read_only_file_under_fix_is_an_error_and_untouched(project, capsys):
    (project / "locked.py").write_text(GOOD)
    (project / "locked.py").chmod(0o444)
    stamp = (project / "locked.py").stat().st_mtime_ns
    code, doc, err = run_json(capsys, ".", "--fix")
    assert code == 2
    assert "locked.py: cannot write fixes: file is read-only" in err
    assert (project / "locked.py").read_text() == GOOD
    assert (project / "locked.py").stat().st_mtime_ns == stamp
    assert [rule for rule, _ in by_path(doc)["locked.py"]] == ["MP101"]  # reported as still there
    assert (project / "good.py").read_text() == GOOD_FIXED
    assert sources_and_leftovers(project) == [".mplint.yaml", "good.py", "locked.py"]


# -- notebooks ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "content,message",
    [
        (b'{"cells": [', "notebook is not valid JSON: Expecting value"),
        (b"\xff\xfe{}", "notebook is not valid UTF-8"),
        (b'{"nbformat": 4, "metadata": {}}', "notebook has no 'cells' list"),
        (b'{"cells": {"0": "import keras"}}', "notebook has no 'cells' list"),
        (b'{"cells": ["import keras"]}', "cell 1 is not a JSON object"),
        (b"[" * 100_000 + b"]" * 100_000, "notebook"),
    ],
)
def test_broken_notebook_is_mp000_and_the_others_are_fixed(project, capsys, content, message):
    (project / "bad.ipynb").write_bytes(content)
    code, doc, _ = run_json(capsys, ".", "--fix")
    assert code == 1
    [(rule, text)] = by_path(doc)["bad.ipynb"]
    assert rule == "MP000" and text.startswith(message), text
    assert (project / "bad.ipynb").read_bytes() == content
    assert (project / "good.py").read_text() == GOOD_FIXED


def test_notebook_with_no_cells_is_clean(project, capsys):
    (project / "empty.ipynb").write_text('{"cells": [], "metadata": {}, "nbformat": 4, "nbformat_minor": 5}')
    code, doc, errors = run_json(capsys, ".")
    assert (code, errors) == (1, "")
    assert "empty.ipynb" not in by_path(doc)
    assert_good_checked(doc)


# -- configs ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "text,message",
    [
        ("policy: 16\n", "'policy' must be one of"),
        ("keras: [3]\n", "'keras' must be 2 or 3, got [3]"),
        ("select: MP101\n", "'select' must be a list of strings, got 'MP101'"),
        ("ignore: [MP999]\n", "'ignore' names unknown rule 'MP999'"),
        ("per-file-ignores: {'*.py': [softmax-out]}\n", "names unknown rule 'softmax-out'"),
        ("unsafe-fixes: 1\n", "'unsafe-fixes' must be true or false, got 1"),
        ("polcy: mixed_float16\n", "unknown setting 'polcy' (did you mean 'policy'?)"),
        ("respect-gitignore: {}\n", "'respect-gitignore' must be true or false"),
    ],
)
def test_config_with_wrong_types_or_unknown_rules_exits_2_with_the_key(project, capsys, text, message):
    (project / ".mplint.yaml").write_text(text)
    assert main(["."]) == 2
    err = capsys.readouterr().err
    assert message in err and ".mplint.yaml" in err
    assert (project / "good.py").read_text() == GOOD


@pytest.mark.parametrize(
    "tag",
    [
        "!!python/object/apply:os.system ['touch pwned']",
        "!!python/object/new:os.system ['touch pwned']",
        "!!python/name:os.system",
        "!!python/module:os",
    ],
)
def test_yaml_config_with_python_tags_is_rejected_and_runs_nothing(project, capsys, tag):
    (project / ".mplint.yaml").write_text(f"policy: {tag}\n")
    with pytest.raises(ConfigError, match="invalid YAML"):
        load_config([project])
    assert main(["."]) == 2
    assert "invalid YAML (only plain YAML is accepted)" in capsys.readouterr().err
    assert not (project / "pwned").exists()
