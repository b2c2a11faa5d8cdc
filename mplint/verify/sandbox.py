"""Network access is refused (and reported) before anything is sent. Without a private view of the
file system (``--no-isolation``), Python-level writes outside the scratch directory are redirected
there too; with one (isolate.py) the file system itself keeps them away from the user's files."""

from __future__ import annotations

import builtins
import io
import os
import shutil
import socket

from mplint.verify import recorder

_ALLOWED_SYSTEM = ("/dev/", "/proc/", "/sys/")


class DownloadBlocked(OSError):
    pass


def _scratch() -> str:
    return recorder.RECORDER.config["scratch"]


def _inside(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip(os.sep) + os.sep)


def redirect(path, *, writing: bool = True):
    """Where a write to ``path`` really goes: unchanged inside the scratch directory, else a
    mirror of the absolute path under ``scratch/redirected``. Reads follow earlier redirects."""
    if isinstance(path, int) or recorder.RECORDER is None or recorder.RECORDER.config.get("isolated"):
        return path
    try:
        text = os.fsdecode(os.fspath(path))
    except TypeError:
        return path
    absolute = os.path.abspath(text)
    scratch = _scratch()
    if _inside(absolute, scratch) or absolute.startswith(_ALLOWED_SYSTEM):
        return path
    mirror = os.path.join(scratch, "redirected", absolute.lstrip(os.sep))
    if not writing:
        return mirror if os.path.lexists(mirror) else path
    _real["os_makedirs"](os.path.dirname(mirror), exist_ok=True)
    recorder.RECORDER.note("writes_redirected", f"{absolute} -> {os.path.relpath(mirror, scratch)}")
    return mirror


_real: dict = {}


def _writes(mode: str) -> bool:
    return any(c in mode for c in "wax+")


def _open(file, mode="r", *args, **kwargs):
    return _real["open"](redirect(file, writing=_writes(mode)), mode, *args, **kwargs)


_DELETIONS = ("remove", "unlink", "rmdir", "rmtree")


def _path_wrapper(name: str, count: int = 1):
    original = _real[name]

    def wrapper(*args, **kwargs):
        redirected = [redirect(a) if i < count else a for i, a in enumerate(args)]
        if name in _DELETIONS and args and redirected[0] is not args[0] and not os.path.lexists(redirected[0]):
            # deleting a file of the user's tree: pretend it worked, touch nothing
            recorder.RECORDER.note("writes_redirected", f"deletion of {os.path.abspath(os.fspath(args[0]))} skipped")
            return None
        return original(*redirected, **kwargs)

    return wrapper


def _connect(self, address):
    if self.family == getattr(socket, "AF_UNIX", None):
        return _real["connect"](self, address)
    host = address[0] if isinstance(address, tuple) else str(address)
    recorder.RECORDER.note("downloads_blocked", f"network connection to {host}")
    raise DownloadBlocked(f"mplint verify: network access blocked (connection to {host})")


def _getaddrinfo(host, *args, **kwargs):
    if host in (None, "localhost", "127.0.0.1", "::1"):
        return _real["getaddrinfo"](host, *args, **kwargs)
    recorder.RECORDER.note("downloads_blocked", f"network lookup of {host}")
    raise DownloadBlocked(f"mplint verify: network access blocked (lookup of {host})")


def install() -> None:
    _real.update(open=builtins.open, connect=socket.socket.connect, getaddrinfo=socket.getaddrinfo)
    socket.socket.connect = _connect
    socket.getaddrinfo = _getaddrinfo
    if not recorder.RECORDER.config.get("isolated"):
        _install_redirects()


def _install_redirects() -> None:
    for name in ("mkdir", "remove", "unlink", "rmdir"):
        _real[name] = getattr(os, name)
        setattr(os, name, _path_wrapper(name))
    for name in ("rename", "replace"):
        _real[name] = getattr(os, name)
        setattr(os, name, _path_wrapper(name, count=2))
    _real["os_makedirs"] = os.makedirs
    os.makedirs = _path_wrapper("os_makedirs")
    _real["rmtree"] = shutil.rmtree
    shutil.rmtree = _path_wrapper("rmtree")
    builtins.open = io.open = _open
