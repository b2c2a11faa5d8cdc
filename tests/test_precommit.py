"""The pre-commit hooks, run by the real pre-commit tool, in both setups docs/ci.md gives.

- The local hook: docs/ci.md's `repo: local` configuration, verbatim, with `mplint` on PATH
  running this working tree (as after `pip install /path/to/mplint`). No network.
- The hook manifest: the working tree (tracked and untracked, not ignored) is copied into a
  scratch git repository that a user project's .pre-commit-config.yaml points to; pre-commit
  builds its own virtualenv from it with pip (needs the package index).
"""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from markdown_it import MarkdownIt

REPO = Path(__file__).resolve().parent.parent
BAD = (
    'import keras\nfrom keras import layers\n\nkeras.mixed_precision.set_global_policy("mixed_float16")\n'
    'model = keras.Sequential([layers.Dense(64), layers.Dense(10, activation="softmax")])\n'
)
pytestmark = pytest.mark.skipif(shutil.which("git") is None, reason="needs git")


def _run(args, cwd, env=None, check=True):
    done = subprocess.run(args, cwd=cwd, env=env, capture_output=True, text=True)
    if check and done.returncode != 0:
        raise AssertionError(f"{args} failed:\n{done.stdout}\n{done.stderr}")
    return done


def _git(cwd, *args, check=True, env=None):
    return _run(
        ["git", "-c", "user.name=t", "-c", "user.email=t@t", "-c", "commit.gpgsign=false", *args], cwd, env, check
    )


def _hook_repo(tmp: Path) -> tuple[Path, str]:
    """A git repository holding this working tree as one commit."""
    files = _run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], REPO).stdout.split("\0")
    hooks = tmp / "hooks"
    for name in filter(None, files):
        if (REPO / name).is_file() and not name.startswith(("tests/", "bench/", "fixtures/")):
            (hooks / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(REPO / name, hooks / name)
    _git(hooks, "init", "-q")
    _git(hooks, "add", "-A")
    _git(hooks, "commit", "-q", "-m", "mplint")
    return hooks, _git(hooks, "rev-parse", "HEAD").stdout.strip()


def _documented_local_hooks() -> str:
    """The `repo: local` configuration of docs/ci.md."""
    fences = MarkdownIt().parse((REPO / "docs" / "ci.md").read_text(encoding="utf-8"))
    [config] = [t.content for t in fences if t.type == "fence" and t.info == "yaml" and "repo: local" in t.content]
    return config


def _mplint_on_path(tmp: Path) -> str:
    """A bin folder whose `mplint` runs this working tree's mplint, as an installed console script would."""
    bin_dir = tmp / "bin"
    bin_dir.mkdir()
    script = bin_dir / "mplint"
    script.write_text(
        f'#!/bin/sh\nPYTHONPATH={shlex.quote(str(REPO))} exec {shlex.quote(sys.executable)} -m mplint "$@"\n'
    )
    script.chmod(0o755)
    return str(bin_dir)


def test_documented_local_hooks_fail_on_a_bad_commit_and_pass_after_the_fix(tmp_path):
    pytest.importorskip("pre_commit")
    env = dict(os.environ, PRE_COMMIT_HOME=str(tmp_path / "cache"))
    env["PATH"] = _mplint_on_path(tmp_path) + os.pathsep + env["PATH"]
    _commit_blocked_then_fixed(tmp_path, _documented_local_hooks(), env)


def test_hooks_fail_on_a_bad_commit_and_pass_after_the_fix(tmp_path):
    pytest.importorskip("pre_commit")
    hooks, rev = _hook_repo(tmp_path)
    config = (
        f"repos:\n- repo: {hooks}\n  rev: {rev}\n  hooks:\n  - id: mplint\n  - id: mplint-fix\n    stages: [manual]\n"
    )
    env = dict(os.environ, PRE_COMMIT_HOME=str(tmp_path / "cache"), PIP_DISABLE_PIP_VERSION_CHECK="1")
    _commit_blocked_then_fixed(tmp_path, config, env)


def _commit_blocked_then_fixed(tmp_path: Path, config: str, env: dict) -> None:
    project = tmp_path / "project"
    project.mkdir()
    _git(project, "init", "-q")
    (project / ".pre-commit-config.yaml").write_text(config)
    env.pop("CI", None)
    pre_commit = [sys.executable, "-m", "pre_commit"]
    _run([*pre_commit, "install"], project, env)
    (project / "train.py").write_text(BAD)
    _git(project, "add", ".")
    blocked = _git(project, "commit", "-m", "bad model", check=False, env=env)
    assert blocked.returncode != 0
    assert "train.py:5:45: MP101" in blocked.stdout + blocked.stderr

    fixed = _run(
        [*pre_commit, "run", "--hook-stage", "manual", "mplint-fix", "--files", "train.py"], project, env, check=False
    )
    assert fixed.returncode == 1  # pre-commit fails a hook that modified files
    assert (project / "train.py").read_text() == BAD.replace('"softmax")', '"softmax", dtype="float32")')
    _git(project, "add", ".")
    committed = _git(project, "commit", "-m", "fixed model", check=False, env=env)
    assert committed.returncode == 0, committed.stdout + committed.stderr
