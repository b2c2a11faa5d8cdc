"""Safe writes: a file is either wholly old or wholly new, and only ever replaced if it still holds what was read.

What a write keeps: the file behind a symlink is written (the link stays a link), a file with several
hard links is rewritten in place (every name keeps seeing it), and mode, owner and group are kept.
"""

from __future__ import annotations

import errno
import hashlib
import os
import tempfile
from pathlib import Path

TEMP_SUFFIX = ".mplint-tmp"  # never *.py or *.ipynb: a later run never takes a temporary file for a source
BACKUP_SUFFIX = ".orig" + TEMP_SUFFIX  # the old bytes of a file rewritten in place, until the rewrite is synced


class FileChangedError(OSError):
    """The file no longer holds the bytes the fixes were computed from (an editor or a formatter saved it)."""

    def __init__(self, path: Path):
        super().__init__(errno.EAGAIN, "the file changed on disk since it was read", str(path))


def digest(data: bytes) -> bytes:
    return hashlib.sha256(data).digest()


def write_atomic(path: Path, data: bytes, expected: bytes | None = None) -> bool:
    """Replace the contents of ``path`` by ``data``; returns False when it already holds them.

    With ``expected`` (the bytes the new contents were computed from), the file is checked to hold
    them still, just before it is replaced: if not, FileChangedError and nothing is written.
    A read-only file is refused (PermissionError) even where the folder would allow replacing it,
    and even for root: its mode says it must not change.
    """
    target = Path(os.path.realpath(path))  # through symlinks: the link itself stays
    info = os.stat(target)
    mode = info.st_mode & 0o7777
    if not mode & 0o222 or not os.access(target, os.W_OK):
        raise PermissionError(errno.EACCES, "file is read-only", str(path))
    if expected is not None:
        current = target.read_bytes()
        if current == data:
            return False  # already fixed (the same file reached through another name)
        if digest(current) != digest(expected):
            raise FileChangedError(path)
    if info.st_nlink > 1:
        _rewrite_in_place(target, data, expected)
        return True
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=TEMP_SUFFIX, dir=target.parent)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            if not _same_owner(handle.fileno(), info):
                os.unlink(tmp)  # a file of another user the caller may write: replacing it would take it over
                _rewrite_in_place(target, data, expected)
                return True
            os.fchmod(handle.fileno(), mode)
            os.fsync(handle.fileno())
        if expected is not None and digest(target.read_bytes()) != digest(expected):
            raise FileChangedError(path)  # saved while the temporary file was written
        os.replace(tmp, target)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
    return True


def _same_owner(fd: int, info: os.stat_result) -> bool:
    if (os.fstat(fd).st_uid, os.fstat(fd).st_gid) == (info.st_uid, info.st_gid):
        return True
    try:
        os.fchown(fd, info.st_uid, info.st_gid)
    except PermissionError:
        return False
    return True


def _rewrite_in_place(target: Path, data: bytes, expected: bytes | None) -> None:
    """Overwrite the file itself (its inode, so hard links and ownership stay), with its old bytes kept in a
    synced backup next to it until the new ones are synced: a run killed in between leaves the backup,
    which the next run reports."""
    with open(target, "r+b") as handle:
        old = handle.read()
        if expected is not None and digest(old) != digest(expected):
            raise FileChangedError(target)
        fd, backup = tempfile.mkstemp(prefix=f".{target.name}.", suffix=BACKUP_SUFFIX, dir=target.parent)
        try:
            with os.fdopen(fd, "wb") as saved:
                saved.write(old)
                saved.flush()
                os.fsync(saved.fileno())
        except BaseException:
            os.unlink(backup)
            raise
        try:
            _overwrite(handle, data)
        except OSError:
            _overwrite(handle, old)  # the file must stay wholly old; if even this fails, the backup stays
            os.unlink(backup)
            raise
    os.unlink(backup)


def _overwrite(handle, data: bytes) -> None:
    handle.seek(0)
    handle.write(data)
    handle.truncate()
    handle.flush()
    os.fsync(handle.fileno())
