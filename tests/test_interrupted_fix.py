"""``--fix`` interrupted (SIGTERM, SIGKILL, a kill in the middle of a write) leaves every file wholly old or wholly new.

Each test runs mplint in a subprocess over a project of many files with
fixes, interrupts it, then byte-compares every file with its original and its
expected fixed version (from an uninterrupted run on a copy). Temporary files
a kill may leave behind must never look like sources: a later run ignores them.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from mplint.cli import main
from mplint.project.discovery import discover
from mplint.project.writer import write_atomic
from mplint.testing import copy_tree

FILES = 80
PADDING = "".join(f"# padding line {i}: keeps each write long enough to be interrupted\n" for i in range(400))


def source(i: int) -> str:
    return (
        f'"""Module {i}."""\n'
        "import keras\n"
        f'm{i} = keras.Sequential([keras.layers.Dense({i + 1}, activation="softmax")])\n'
        + PADDING
        + f'n{i} = keras.layers.Dense(2, activation="softmax")\n'
    )


@pytest.fixture(scope="module")
def expected(tmp_path_factory) -> tuple[Path, dict[str, bytes], dict[str, bytes]]:
    """A pristine project, and every file's bytes before and after an uninterrupted --fix."""
    pristine = tmp_path_factory.mktemp("pristine")
    (pristine / ".mplint.yaml").write_text("policy: mixed_float16\n")
    for i in range(FILES):
        (pristine / f"mod_{i:03d}.py").write_text(source(i))
    before = {p.name: p.read_bytes() for p in pristine.glob("*.py")}
    fixed_copy = tmp_path_factory.mktemp("fixed") / "project"
    copy_tree(pristine, fixed_copy)
    cwd = os.getcwd()
    os.chdir(fixed_copy)
    try:
        assert main([".", "--fix", "--format", "json"]) == 0
    finally:
        os.chdir(cwd)
    after = {p.name: p.read_bytes() for p in fixed_copy.glob("*.py")}
    assert all(after[name] != before[name] for name in before)  # every file has a fix
    return pristine, before, after


def fresh_copy(pristine: Path, tmp_path: Path) -> Path:
    project = tmp_path / "project"
    copy_tree(pristine, project)
    return project


def states(project: Path, before: dict[str, bytes], after: dict[str, bytes]) -> tuple[int, int]:
    """(files still old, files wholly new); fails on any file that is neither."""
    old = new = 0
    for name in before:
        data = (project / name).read_bytes()
        if data == before[name]:
            old += 1
        elif data == after[name]:
            new += 1
        else:
            pytest.fail(f"{name} is neither its original nor its fixed version ({len(data)} bytes)")
    return old, new


def assert_leftovers_are_not_sources(project: Path, before: dict[str, bytes]) -> None:
    leftovers = sorted(
        p.name for p in project.iterdir() if p.name not in before and p.name not in (".mplint.yaml", ".mplint_cache")
    )
    for name in leftovers:
        assert not name.endswith((".py", ".ipynb")), f"a temporary file looks like a source: {name}"
    # a later run sees exactly the real files
    found = discover([project], project)
    assert sorted(f.path.name for f in found.files) == sorted(before) and found.errors == []


def mplint_fix(project: Path, prelude: str = "") -> subprocess.Popen:
    code = prelude + "\nimport sys\nfrom mplint.cli import main\nsys.exit(main(['.', '--fix', '--format', 'json']))\n"
    return subprocess.Popen(
        [sys.executable, "-c", code], cwd=project, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
    )


def wait_for_first_write(project: Path, before: dict[str, bytes], proc: subprocess.Popen, limit: float = 120) -> bool:
    """Block until some file has changed (the run is writing); False if the run ended first."""
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            return False
        if any(
            (project / name).stat().st_mtime_ns != 0 and (project / name).read_bytes() != data
            for name, data in list(before.items())[:3]
        ):
            return True
        time.sleep(0.002)
    return False


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGKILL], ids=["SIGTERM", "SIGKILL"])
def test_fix_killed_at_random_moments_leaves_files_wholly_old_or_new(expected, tmp_path, sig):
    pristine, before, after = expected
    rng = random.Random(f"interrupted-fix-{sig.name}")  # reproducible moments
    mixed_runs = 0
    for attempt in range(3):
        project = fresh_copy(pristine, tmp_path / f"run{attempt}")
        proc = mplint_fix(project)
        writing = wait_for_first_write(project, before, proc)
        time.sleep(rng.uniform(0, 0.05))
        proc.send_signal(sig)
        proc.wait(timeout=60)
        old, new = states(project, before, after)
        assert old + new == FILES
        mixed_runs += writing and old > 0 and new > 0
        assert_leftovers_are_not_sources(project, before)
    assert mixed_runs > 0, "no kill landed in the middle of a run: the test proved nothing"


KILL_IN_WRITE = textwrap.dedent('''
    import builtins, io, os, signal
    from pathlib import Path

    WRITES_BEFORE_KILL = {n}
    count = [0]

    class HalfThenDie:
        """A file object whose write puts half the bytes on disk, then the process dies."""

        def __init__(self, handle):
            self._handle = handle

        def write(self, data):
            count[0] += 1
            if count[0] > WRITES_BEFORE_KILL:
                self._handle.write(data[: len(data) // 2])
                self._handle.flush()
                os.kill(os.getpid(), signal.SIGKILL)
            return self._handle.write(data)

        def __getattr__(self, name):
            return getattr(self._handle, name)

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            return self._handle.__exit__(*exc)

    def wrap(opener):
        def patched(file, mode="r", *args, **kwargs):
            handle = opener(file, mode, *args, **kwargs)
            writing = any(c in mode for c in "wax+")
            if writing and (isinstance(file, int) or str(file).startswith(os.getcwd())):
                return HalfThenDie(handle)
            return handle
        return patched

    builtins.open = io.open = wrap(io.open)
    os.fdopen = wrap(os.fdopen)
''')


@pytest.mark.parametrize("writes_before_kill", [0, 5, 40])
def test_kill_in_the_middle_of_a_write_keeps_the_old_file(expected, tmp_path, writes_before_kill):
    pristine, before, after = expected
    project = fresh_copy(pristine, tmp_path)
    proc = mplint_fix(project, KILL_IN_WRITE.format(n=writes_before_kill))
    proc.wait(timeout=120)
    assert proc.returncode == -signal.SIGKILL, proc.stderr.read().decode()[-2000:]
    old, new = states(project, before, after)
    assert old > 0  # the file being written when the process died is whole and old
    assert new <= writes_before_kill  # (other files opened for writing count too)
    assert_leftovers_are_not_sources(project, before)


def test_writer_temporary_names_are_never_sources(tmp_path, monkeypatch):
    import tempfile

    seen = []
    mkstemp = tempfile.mkstemp

    def recording_mkstemp(*args, **kwargs):
        fd, name = mkstemp(*args, **kwargs)
        seen.append(Path(name))
        return fd, name

    monkeypatch.setattr(tempfile, "mkstemp", recording_mkstemp)
    target = tmp_path / "mod.py"
    target.write_bytes(b"x = 1\n")
    target.chmod(0o640)
    write_atomic(target, b"x = 2\n")
    assert target.read_bytes() == b"x = 2\n" and target.stat().st_mode & 0o777 == 0o640
    [temp] = seen
    assert temp.parent == tmp_path and temp.name.startswith(".mod.py.") and temp.suffix == ".mplint-tmp"
    assert not temp.exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["mod.py"]


def test_writer_failure_mid_write_keeps_the_old_file_and_removes_the_temporary(tmp_path, monkeypatch):
    target = tmp_path / "mod.py"
    target.write_bytes(b"x = 1\n")

    def failing_fsync(fd):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "fsync", failing_fsync)
    with pytest.raises(OSError, match="No space left"):
        write_atomic(target, b"x = 2\n" * 1000)
    assert target.read_bytes() == b"x = 1\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["mod.py"]
