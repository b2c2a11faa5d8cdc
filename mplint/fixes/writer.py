"""Atomic writes: a file is either wholly old or wholly new, with its mode kept."""

from __future__ import annotations

import errno
import os
import tempfile
from pathlib import Path


def write_atomic(path: Path, data: bytes) -> None:
    """Replace ``path`` by ``data`` through a temporary file (never named ``*.py``) in the same folder.

    A read-only file is refused (PermissionError) even where the folder would
    allow replacing it, and even for root: its mode says it must not change.
    """
    mode = os.stat(path).st_mode & 0o7777
    if not mode & 0o222 or not os.access(path, os.W_OK):
        raise PermissionError(errno.EACCES, "file is read-only", str(path))
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".mplint-tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
