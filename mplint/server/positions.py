"""LSP positions: columns counted in the encoding the client and server agreed on.

mplint counts columns in code points (Python's ``str``); LSP counts UTF-16 code units unless
the client offers UTF-8 or UTF-32 (``general.positionEncodings``), and the server picks one.
"""

from __future__ import annotations

import re

SUPPORTED = ("utf-32", "utf-8", "utf-16")  # preferred first: code points need no conversion


_LINE = re.compile(r".*?(?:\r\n|\r|\n)|.+$", re.DOTALL)


def lines_of(text: str) -> list[str]:
    """The lines of ``text`` with their breaks, split where LSP and Python's tokenizer split (not at form feeds)."""
    return _LINE.findall(text) or [""]


def choose(offered: list[str] | None) -> str:
    """The encoding to answer ``initialize`` with: the best one the client offers, else UTF-16 (LSP's default)."""
    return next((e for e in SUPPORTED if e in (offered or ())), "utf-16")


class Codec:
    def __init__(self, encoding: str = "utf-16"):
        self.encoding = encoding

    def units(self, text: str) -> int:
        """The length of ``text`` in the client's units."""
        if self.encoding == "utf-32" or text.isascii():
            return len(text)
        if self.encoding == "utf-8":
            return len(text.encode("utf-8", errors="surrogatepass"))
        return len(text.encode("utf-16-le", errors="surrogatepass")) // 2

    def column(self, line: str, units: int) -> int:
        """The code-point column of a client column on ``line`` (clamped to the line's end)."""
        if self.encoding == "utf-32" or line.isascii():
            return min(units, len(line))
        count = 0
        for index, char in enumerate(line):
            if count >= units:
                return index
            count += self.units(char)
        return len(line)

    def offset(self, text: str, line: int, character: int) -> int:
        """The index in ``text`` of an LSP position (past the end: the end)."""
        lines = lines_of(text)
        if line >= len(lines) or not lines[line]:
            return len(text)
        start = sum(len(earlier) for earlier in lines[:line])
        body = lines[line].rstrip("\r\n")
        return start + self.column(body, character)

    def apply(self, text: str, change: dict) -> str:
        """One ``TextDocumentContentChangeEvent`` applied (a whole-document change has no range)."""
        if "range" not in change:
            return change["text"]
        start, end = change["range"]["start"], change["range"]["end"]
        return (
            text[: self.offset(text, start["line"], start["character"])]
            + change["text"]
            + text[self.offset(text, end["line"], end["character"]) :]
        )
