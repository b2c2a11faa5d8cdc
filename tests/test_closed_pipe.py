"""A reader that closes standard output early (``mplint ... | head -1``) ends the run quietly, in every format:
no traceback, nothing on standard error, and the exit code the run would have had (1 here: findings remain)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from mplint.output import FORMAT_NAMES

REPO = Path(__file__).resolve().parent.parent
LINE = 'm{i} = keras.Sequential([keras.layers.Dense({i}, activation="softmax")])\n'


@pytest.fixture(scope="module")
def project(tmp_path_factory) -> Path:
    """Findings enough for any format's report to overflow a pipe's buffer (64 KiB)."""
    root = tmp_path_factory.mktemp("pipe")
    (root / ".mplint.yaml").write_text("policy: mixed_float16\n")
    for n in range(4):
        (root / f"mod_{n}.py").write_text("import keras\n" + "".join(LINE.format(i=i + 1) for i in range(150)))
    return root


def mplint(project: Path, *args: str) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": str(REPO), "MPLINT_NO_PROGRESS": "1"}
    return subprocess.Popen(
        [sys.executable, "-m", "mplint", *args], cwd=project, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )


def assert_quiet(proc: subprocess.Popen, code: int = 1) -> None:
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=300) == code, err
    assert err == ""


@pytest.mark.parametrize("fmt", FORMAT_NAMES)
def test_reader_gone_before_the_first_byte(project, fmt):
    proc = mplint(project, ".", "--format", fmt, "--no-cache")
    proc.stdout.close()  # the reader quits at once: the first write (or the last flush) meets a closed pipe
    assert_quiet(proc)


@pytest.mark.parametrize("fmt", FORMAT_NAMES)
def test_reader_gone_after_one_line(project, fmt):
    proc = mplint(project, ".", "--format", fmt)
    assert proc.stdout.readline()
    proc.stdout.close()
    assert_quiet(proc)


@pytest.mark.parametrize(
    "args,code",
    [
        (["rules"], 0),
        (["rules", "--format", "markdown"], 0),
        (["explain", "MP101"], 0),
        ([".", "--diff"], 1),
        ([".", "--statistics"], 1),
        ([".", "--show-facts"], 0),
        ([".", "--exit-zero"], 0),
    ],
)
def test_other_outputs_reader_gone(project, args, code):
    proc = mplint(project, *args)
    proc.stdout.close()
    assert_quiet(proc, code)


def test_a_report_that_fits_the_pipe_is_still_written_whole(project):
    """The quiet exit is for a closed pipe only: a reader that reads everything gets everything."""
    proc = mplint(project, ".", "--format", "json")
    out, err = proc.communicate(timeout=300)
    assert proc.returncode == 1 and err == b"" and out.endswith(b"}\n")
