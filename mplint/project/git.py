"""``--changed-since REV``: the files git sees as changed since a revision, plus untracked ones."""

from __future__ import annotations

import subprocess
from pathlib import Path


class GitError(Exception):
    pass


def _git(args: list[str], cwd: Path) -> str:
    try:
        done = subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, check=False)
    except OSError as exc:
        raise GitError(f"cannot run git: {exc.strerror or exc}") from exc
    if done.returncode != 0:
        raise GitError(done.stderr.strip() or f"git {' '.join(args)} failed")
    return done.stdout


def changed_files(rev: str, start: Path) -> set[Path]:
    """Absolute paths changed between ``rev`` and the working tree (staged or not), and untracked files."""
    folder = start if start.is_dir() else start.parent
    try:
        top = Path(_git(["rev-parse", "--show-toplevel"], folder).strip())
    except GitError as exc:
        raise GitError(f"--changed-since needs a git repository ({exc})") from exc
    try:
        _git(["rev-parse", "--verify", "--quiet", f"{rev}^{{commit}}"], top)
    except GitError:
        raise GitError(f"--changed-since: unknown git revision {rev!r}") from None
    changed = _git(["diff", "--name-only", "--no-renames", "-z", rev, "--"], top)
    untracked = _git(["ls-files", "--others", "--exclude-standard", "-z"], top)
    return {(top / name).resolve() for name in (changed + untracked).split("\0") if name}
