"""The budget of one file's check: syntax nodes (what libcst's tree and its metadata cost in memory) and time.

A file over either is reported as not fully checked (MP003) and the run goes on with the other files.
"""

from __future__ import annotations

import ast
import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager

# libcst costs about 5-8 KB of memory per CPython syntax node (its tree, positions and the rules' index).
# Measured on a list literal just under the limit (49,942 nodes): 271 MB peak for a check, 396 MB for
# --fix (two trees alive); 100,000 elements took 506 MB and 85 s before this limit, 143 MB and 6 s with it.
# The largest hand-written module of keras/src has 45,000 nodes.
MAX_SYNTAX_NODES = 50_000
# What a file within the node budget may still take; a backstop for a rule or analysis that goes quadratic.
MAX_SECONDS = 120.0


class OverBudget(BaseException):
    """Raised in the middle of a check whose time is up: a BaseException, so that no rule's
    ``except Exception`` (nor the engine's crash handler) takes it for the rule's own error."""


def syntax_nodes(tree: ast.AST, limit: int) -> int:
    """The number of nodes of ``tree``, counted up to ``limit + 1`` (a huge file is not walked to its end)."""
    count = 0
    for _ in ast.walk(tree):
        count += 1
        if count > limit:
            break
    return count


@contextmanager
def time_limit(seconds: float | None) -> Iterator[None]:
    """Raise OverBudget in this thread once ``seconds`` have passed (only where a timer signal can: the main
    thread of a POSIX process, as the CLI and its workers are; elsewhere no limit)."""
    if not seconds or not hasattr(signal, "setitimer") or threading.current_thread() is not threading.main_thread():
        yield
        return

    def expire(signum, frame):
        raise OverBudget

    previous = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
