"""libcst trees of a file's unchanged top-level statements, reused from the last parse (the language server's).

An editor checks the same file again and again with one statement changed; libcst's parse of the whole
file is a third of a check. Cut at the lines where CPython's syntax tree says each top-level statement
(decorators included) ends, a file is a run of chunks, each one statement with the blank lines and
comments above it; libcst parses each chunk as a module of its own, and those modules put together give
the tree the whole file's parse gives (tests hold every fixture and hundreds of Keras modules to
``deep_equals``). A chunk seen before is not parsed again. Where the cut could land differently from
libcst's own (a comment or blank line with indentation between statements, ``\\r`` line breaks, another
encoding than UTF-8, statements sharing a line's chunk twice), ``parse`` answers ``None`` and the whole
file is parsed as before.

Off unless ``enable()`` is called: the command line parses each file once and keeps nothing.
"""

from __future__ import annotations

import io
import tokenize
from typing import TYPE_CHECKING

from mplint.engine.python_tree import parse_python

if TYPE_CHECKING:  # libcst is imported by the first parse: enabling reuse must not wait for it
    import libcst as cst

KEPT = 8192  # chunks kept (each version of an edited statement adds one)


class StatementReuse:
    def __init__(self):
        self.chunks: dict[str, cst.Module] = {}  # chunk text -> its parse, the newest last

    def parse(self, source: bytes) -> cst.Module | None:
        """The module ``source`` parses to, put together from its chunks; ``None`` where that cannot be trusted."""
        try:
            text = _utf8_text(source)
            parts = None if text is None else _chunks(source, text)
            return None if parts is None else self._assemble(text, parts)
        except Exception:  # noqa: BLE001 - anything unexpected: the whole file's parse decides
            return None

    def _assemble(self, text: str, parts: list[str]) -> cst.Module | None:
        import libcst as cst

        body, header, footer, indent, used = [], (), (), None, set()
        for i, part in enumerate(parts):
            if part in used:  # the same statement twice in one file: its nodes must not be shared
                module = cst.parse_module(part)
            else:
                module = self.chunks.pop(part, None)
                if module is None:
                    module = cst.parse_module(part)
                self.chunks[part] = module
                used.add(part)
            if len(module.body) != 1:
                return None
            statement = module.body[0]
            if i == 0:
                header = module.header
            else:  # lines above a statement: the module's header when alone, its own leading lines in a file
                statement = statement.with_changes(leading_lines=(*module.header, *statement.leading_lines))
            if isinstance(getattr(statement, "body", None), cst.IndentedBlock):
                # the file's indentation is its first indented block's: every chunk's must agree with it
                if indent is None:
                    indent = module.default_indent
                elif module.default_indent != indent:
                    return None
            body.append(statement)
            footer = module.footer
        while len(self.chunks) > KEPT:
            del self.chunks[next(iter(self.chunks))]
        return cst.Module(
            body=body,
            header=header,
            footer=footer,
            encoding="utf-8",
            default_indent=indent or "    ",
            default_newline="\n",
            has_trailing_newline=text.endswith("\n"),
        )


def _utf8_text(source: bytes) -> str | None:
    if source.startswith(b"\xef\xbb\xbf") or b"\r" in source:
        return None
    encoding, _ = tokenize.detect_encoding(io.BytesIO(source).readline)
    return source.decode("utf-8") if encoding == "utf-8" else None


def _chunks(source: bytes, text: str) -> list[str] | None:
    """The file (``text``, its UTF-8 ``source`` decoded) cut after each top-level statement's last line (the last
    chunk keeps the file's end)."""
    spans: list[list[int]] = []  # [first line, last line] of statements, those sharing a line merged
    for statement in parse_python(source).body:
        first = min([statement.lineno] + [d.lineno for d in getattr(statement, "decorator_list", ())])
        if spans and first <= spans[-1][1]:
            spans[-1][1] = max(spans[-1][1], statement.end_lineno)
        else:
            spans.append([first, statement.end_lineno])
    if not spans:
        return None
    lines = [line + "\n" for line in text.split("\n")]  # CPython's lines (str.splitlines breaks at more)
    lines[-1] = lines[-1][:-1]
    out, cut = [], 0
    for i, (first, last) in enumerate(spans):
        end = len(lines) if i == len(spans) - 1 else last
        if any(line != "\n" and not line.startswith("#") for line in lines[cut : first - 1]):
            return None  # something with indentation between statements: libcst may give it to the block above
        out.append("".join(lines[cut:end]))
        cut = end
    return out


_REUSE: StatementReuse | None = None
_SUBTREES = None  # mplint.engine.walk.SharedSubtrees, made with the first walk


def enable() -> None:
    global _REUSE
    if _REUSE is None:
        _REUSE = StatementReuse()


def descendants(module: cst.Module):
    """``mplint.engine.walk.descendants`` of the module; when enabled, the walks of the subtrees the last
    module checked shared with this one are reused (the nodes of unchanged statements are the same)."""
    global _SUBTREES
    from mplint.engine import walk

    if _REUSE is None:
        return walk.descendants(module)
    if _SUBTREES is None:
        _SUBTREES = walk.SharedSubtrees()
    return _SUBTREES.descendants(module)


def parse(source: bytes) -> cst.Module | None:
    """The module from reused chunks when enabled and trustworthy, else ``None`` (parse the whole file)."""
    return _REUSE.parse(source) if _REUSE is not None else None
