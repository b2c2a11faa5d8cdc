"""``# mplint: ignore[...]``, ``# noqa: ...`` and ``# mplint: ignore-file[...]`` comments."""

from __future__ import annotations

import io
import re
import tokenize
from dataclasses import dataclass, field

from mplint.catalog import RuleKey, RuleMeta
from mplint.engine.registry import matches

_IGNORE = re.compile(r"#\s*mplint\s*:\s*ignore(?P<file>-file)?(?:\[(?P<codes>[^\]]*)\])?", re.I)
_NOQA = re.compile(r"#\s*noqa(?::\s*(?P<codes>[A-Za-z0-9_\-]+(?:[\s,]+[A-Za-z0-9_\-]+)*))?", re.I)
ALL = None  # a bare suppression: every rule


@dataclass
class Suppressions:
    by_line: dict[int, list] = field(default_factory=dict)  # line -> list of code lists or ALL
    whole_file: list = field(default_factory=list)

    def suppressed(self, meta: RuleMeta | RuleKey, line: int) -> bool:
        for codes in self.whole_file + self.by_line.get(line, []):
            if codes is ALL or any(matches(c, meta) for c in codes):
                return True
        return False


def _codes(text: str | None):
    if text is None:
        return ALL
    return [c for c in re.split(r"[\s,]+", text) if c]


def parse_suppressions(code: str) -> Suppressions:
    """Read suppression comments with the tokenizer, so strings that look like comments don't count."""
    out = Suppressions()
    if "mplint" not in code and "noqa" not in code.lower():
        return out
    try:
        tokens = list(tokenize.generate_tokens(io.StringIO(code).readline))
    except (tokenize.TokenError, SyntaxError, IndentationError):
        return out
    lines = code.splitlines()
    for tok in tokens:
        if tok.type != tokenize.COMMENT:
            continue
        line = tok.start[0]
        own_line = lines[line - 1][: tok.start[1]].strip() == ""
        for m in _IGNORE.finditer(tok.string):
            codes = _codes(m.group("codes"))
            if m.group("file"):
                out.whole_file.append(codes)
            else:
                out.by_line.setdefault(line, []).append(codes)
                if own_line:  # a comment on its own line covers the next line
                    out.by_line.setdefault(line + 1, []).append(codes)
        m = _NOQA.search(tok.string)
        if m:
            out.by_line.setdefault(line, []).append(_codes(m.group("codes")))
    return out
