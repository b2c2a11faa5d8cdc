"""``--add-noqa``: suppress every current finding in place, so a codebase can adopt mplint and block only new ones.

Each finding's first line gets ``# noqa: MPnnn`` (the line the engine checks for
suppressions); codes merge into an existing ``# noqa: ...`` comment. Lines that
cannot carry a trailing comment (a string or a backslash continuation runs on)
are left alone and counted as skipped.
"""

from __future__ import annotations

import io
import re
import tokenize

_NOQA_CODES = re.compile(
    r"#\s*noqa(?P<colon>:\s*)?(?P<codes>[A-Za-z0-9_\-]+(?:[ \t]*,[ \t]*[A-Za-z0-9_\-]+|[ \t]+[A-Za-z0-9_\-]+)*)?", re.I
)


def _merge(comment: str, codes: list[str]) -> str | None:
    """``comment`` with ``codes`` added to its noqa list; None when it already suppresses everything."""
    m = _NOQA_CODES.search(comment)
    if m is None:
        return f"{comment}  # noqa: {', '.join(codes)}"
    if not m.group("codes"):
        return None  # a bare noqa covers every rule
    existing = [c for c in re.split(r"[\s,]+", m.group("codes")) if c]
    merged = existing + [c for c in codes if c.upper() not in {e.upper() for e in existing}]
    return comment[: m.start("codes")] + ", ".join(merged) + comment[m.end("codes") :]


def add_noqa(code: str, targets: dict[int, set[str]]) -> tuple[str, int, int]:
    """``code`` with noqa comments for ``targets`` (line -> rule IDs): (new code, lines changed, lines skipped)."""
    lines = code.splitlines(keepends=True)
    comments: dict[int, tokenize.TokenInfo] = {}
    line_ends: set[int] = set()
    try:
        for tok in tokenize.generate_tokens(io.StringIO(code).readline):
            if tok.type == tokenize.COMMENT:
                comments[tok.start[0]] = tok
            elif tok.type in (tokenize.NEWLINE, tokenize.NL):
                line_ends.add(tok.start[0])
    except (tokenize.TokenError, SyntaxError):
        return code, 0, len(targets)
    changed = skipped = 0
    for number, rule_ids in sorted(targets.items()):
        codes = sorted(rule_ids)
        if number > len(lines) or (number not in line_ends and number not in comments):
            skipped += 1
            continue
        text = lines[number - 1]
        body = text.rstrip("\r\n")
        ending = text[len(body) :]
        if number in comments:
            tok = comments[number]
            merged = _merge(tok.string, codes)
            if merged is None or merged == tok.string:
                continue
            body = body[: tok.start[1]] + merged + body[tok.end[1] :]
        else:
            body = f"{body.rstrip()}  # noqa: {', '.join(codes)}"
        lines[number - 1] = body + ending
        changed += 1
    return "".join(lines), changed, skipped
