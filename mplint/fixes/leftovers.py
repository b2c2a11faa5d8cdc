"""Temporary files a killed ``--fix`` left next to the files it was writing: found by the next run.

A ``.NAME.XXXX.mplint-tmp`` file holds new bytes that never replaced NAME (NAME is whole and old): once
stale, a writing run removes it. A ``.NAME.XXXX.orig.mplint-tmp`` file holds the old bytes of a file that
was being rewritten in place (a hard-linked file): NAME may be partly written, so it is only ever reported.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterable
from pathlib import Path

from mplint.project.writer import BACKUP_SUFFIX, TEMP_SUFFIX

STALE_SECONDS = 60  # a live write keeps its temporary file for milliseconds; an older one belongs to no run


def leftover_notices(folders: Iterable[Path], remove: bool, now: float | None = None) -> list[tuple[Path, str]]:
    """(file, what) for each leftover temporary file in ``folders``; stale ones are removed when ``remove``."""
    now = time.time() if now is None else now
    notices = []
    for folder in sorted(set(folders)):
        try:
            entries = [e for e in os.scandir(folder) if e.name.startswith(".") and e.name.endswith(TEMP_SUFFIX)]
        except OSError:
            continue
        for entry in sorted(entries, key=lambda e: e.name):
            what = _handle(Path(entry.path), remove, now)
            if what:
                notices.append((Path(entry.path), what))
    return notices


def _handle(path: Path, remove: bool, now: float) -> str | None:
    try:
        age = now - path.lstat().st_mtime
    except OSError:
        return None  # gone meanwhile: its run finished
    if path.name.endswith(BACKUP_SUFFIX):
        original = path.name[1 : -len(BACKUP_SUFFIX)].rsplit(".", 1)[0]
        return (
            f"backup of {original} left by an interrupted in-place rewrite; {original} may be partly "
            "written: compare the two, then delete the backup"
        )
    if age < STALE_SECONDS:
        return "temporary file of a write in progress (another mplint run?); left alone"
    if not remove:
        return "temporary file left by an interrupted run; the next --fix removes it"
    try:
        path.unlink()
    except OSError as exc:
        return f"temporary file left by an interrupted run; cannot remove it: {exc.strerror or exc}"
    return "removed a temporary file left by an interrupted run"
