"""Untouched text stays byte for byte: what libcst's code generation loses is put back around the fixes.

libcst does not print every source back exactly: it drops a form feed before a statement, the last
line break of a file whose lines end in a bare CR, and a last line that is a bare CR. The fixed text is
libcst's, so it is compared line by line with libcst's print of the original: lines no fix touched are taken from the original itself, and a
fixed line gets back the leading whitespace and line ending the original line had, where libcst lost them.
"""

from __future__ import annotations

import difflib
import re

_LINES = re.compile(rb"[^\r\n]*(?:\r\n|\r|\n)|[^\r\n]+$")
_PARTS = re.compile(rb"([ \t\f]*)(.*?)(\r\n|\r|\n|)$", re.DOTALL)


def lines(data: bytes) -> list[bytes]:
    """``data`` split after each line ending (CRLF, CR or LF), the endings kept."""
    return _LINES.findall(data)


def keep_untouched(source: bytes, printed: bytes, fixed: bytes) -> bytes:
    """``fixed`` (libcst's print of the fixed module) with the lines libcst printed unchanged as ``source`` has
    them. ``printed`` is libcst's print of ``source``'s module, unfixed."""
    if source == printed:
        return fixed
    original, before, after = lines(source), lines(printed), lines(fixed)
    tail: list[bytes] = []
    if len(original) > len(before) and not b"".join(original[len(before) :]).strip():
        original, tail = original[: len(before)], original[len(before) :]  # blank last lines libcst dropped
    if len(original) != len(before):
        return fixed  # not a difference of whitespace within lines: nothing to map
    out: list[bytes] = []
    matcher = difflib.SequenceMatcher(None, before, after, autojunk=False)
    for tag, i1, i2, j1, j2 in matcher.get_opcodes():
        if tag == "equal":
            out += original[i1:i2]
            continue
        for k, new in enumerate(after[j1:j2]):
            i = i1 + k
            out.append(_restore(original[i], before[i], new) if i < i2 else new)
    return b"".join(out + tail)


def _restore(original: bytes, printed: bytes, fixed: bytes) -> bytes:
    """``fixed`` with ``original``'s leading whitespace and ending where libcst printed those differently."""
    lead_o, body_o, end_o = _PARTS.match(original).groups()
    lead_p, body_p, end_p = _PARTS.match(printed).groups()
    lead_f, body_f, end_f = _PARTS.match(fixed).groups()
    if body_o != body_p:
        return fixed
    return (lead_o if lead_f == lead_p else lead_f) + body_f + (end_o if end_f == end_p else end_f)
