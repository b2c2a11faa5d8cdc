"""CPython's syntax tree of a file, parsed once for every step that reads it.

The project facts read a file's tree, then the check's pre-filter reads it again, and the language server's
statement reuse cuts the file where its statements end: checking one file (the server does, at every pause in
typing) parsed it three times. The last text parsed keeps its tree until the next one is parsed: one tree at a
time, so a run over many files holds no more than before. Nobody may change a tree it gets: the next caller
gets the same object.
"""

from __future__ import annotations

import ast

_last: tuple[bytes, ast.Module] | None = None


def parse_python(source: bytes) -> ast.Module:
    """``ast.parse(source)``, raising what it raises (SyntaxError, ValueError, RecursionError, MemoryError)."""
    global _last
    if _last is not None and (_last[0] is source or _last[0] == source):
        return _last[1]
    _last = None  # the old tree is not kept alive while the new one is built
    tree = ast.parse(source)
    _last = (source, tree)
    return tree
