"""An exception raised in mplint's own instrumentation is mplint's error, not the script's.

The hooks run mplint's code inside the script's calls (``optimizer.step()``, ``loss.backward()``): an exception
there would otherwise surface at the script's line as if the script had crashed, and the script could even catch
it. Instead the run ends where it happened, recorded as ``instrumentation-failed`` with the exception and the last
frame of mplint's code in its traceback, which the report names; the traceback goes to stderr. Exceptions the hooks
raise on purpose (a blocked download, the end of a loop at its cap) are not caught here, nor are exceptions of the
script's own calls that a hook passes on."""

from __future__ import annotations

import functools
import os
import sys
import traceback
from typing import NoReturn

import mplint
from mplint.verify import recorder

STATUS = "instrumentation-failed"
_PACKAGE = os.path.dirname(os.path.abspath(mplint.__file__))


def own_frame(exc: BaseException) -> dict | None:
    """The last frame of mplint's code in ``exc``'s traceback: file (relative to mplint's parent folder), line and
    function; None when no frame is mplint's."""
    found = None
    for frame, line in traceback.walk_tb(exc.__traceback__):
        path = os.path.abspath(frame.f_code.co_filename)
        if path.startswith(_PACKAGE + os.sep):
            relative = os.path.relpath(path, os.path.dirname(_PACKAGE)).replace(os.sep, "/")
            found = {"file": relative, "line": line, "function": frame.f_code.co_name}
    return found


def describe(exc: BaseException) -> str:
    """``TypeError: message (at mplint/verify/torch_hooks.py:97, in _pre_step)``."""
    lines = [line for line in str(exc).splitlines() if line.strip()]
    text = f"{type(exc).__name__}: {lines[0].strip()}" if lines else type(exc).__name__
    frame = own_frame(exc)
    return f"{text} (at {frame['file']}:{frame['line']}, in {frame['function']})" if frame else text


def failed(exc: BaseException) -> NoReturn:
    """End the run: mplint's instrumentation raised ``exc``."""
    traceback.print_exception(type(exc), exc, exc.__traceback__, file=sys.stderr)
    rec = recorder.RECORDER
    assert rec is not None, "the hooks run only in a recorded script"
    rec.instrumentation_error = {"error": describe(exc), **(own_frame(exc) or {})}
    rec.finish(STATUS, describe(exc), 1)


class _OwnCode:
    """``with own_code():`` around mplint's code in a hook, never around the script's call it wraps. A class, not a
    generator: the step hooks enter it several times a step, and a timed run counts every microsecond."""

    def __enter__(self) -> None:
        return None

    def __exit__(self, kind, exc, tb) -> None:
        if isinstance(exc, Exception):  # not LoopCapped, KeyboardInterrupt, SystemExit
            failed(exc)


_OWN_CODE = _OwnCode()


def own_code() -> _OwnCode:
    return _OWN_CODE


def guarded(function):
    """``function`` (a hook or an installer, all of it mplint's code) under ``own_code``."""

    @functools.wraps(function)
    def run(*args, **kwargs):
        with _OWN_CODE:
            return function(*args, **kwargs)

    return run
