"""mplint's positions (1-based lines, 1-based code-point columns) as LSP positions and text edits.

LSP counts columns in the encoding the client and server agreed on (UTF-16 unless
told otherwise); pygls' position codec converts from code points.
"""

from __future__ import annotations

import difflib
from pathlib import Path

from lsprotocol import types
from pygls.workspace.position_codec import PositionCodec, ServerTextPosition

from mplint.diagnostics import Diagnostic, Edit, Related, Severity
from mplint.rule_docs import rule_url

_SEVERITY = {
    Severity.ERROR: types.DiagnosticSeverity.Error,
    Severity.WARNING: types.DiagnosticSeverity.Warning,
    Severity.INFO: types.DiagnosticSeverity.Information,
}


def lines_of(text: str) -> list[str]:
    return text.splitlines(keepends=True) or [""]


def position(codec: PositionCodec, lines: list[str], line: int, column: int) -> types.Position:
    """A 1-based (line, code-point column) of ``lines`` as an LSP position."""
    if line > len(lines):  # past the end: the end of the last line
        last = lines[-1].rstrip("\r\n")
        return codec.position_to_client_units(lines, ServerTextPosition(len(lines) - 1, len(last)))
    return codec.position_to_client_units(lines, ServerTextPosition(line - 1, max(column - 1, 0)))


def to_lsp(codec: PositionCodec, text: str, d: Diagnostic, docs_url: str | None = None) -> types.Diagnostic:
    """``docs_url``: the config's base of the rule pages (the rule's page is the diagnostic's code link)."""
    lines = lines_of(text)
    return types.Diagnostic(
        range=types.Range(position(codec, lines, d.line, d.column), position(codec, lines, d.end_line, d.end_column)),
        message=d.message,
        severity=_SEVERITY[d.severity],
        code=d.rule_id,
        code_description=types.CodeDescription(href=rule_url(d.rule_id, docs_url)),
        source="mplint",
        data={"rule": d.rule_id, "name": d.name, "safety": d.fix_safety.value, "fix": d.fix_description,
              "line": d.line, "column": d.column, "cell": d.cell,
              "edits": [[e.line, e.column, e.end_line, e.end_column, e.text] for e in d.edits]},
        related_information=[related(r) for r in d.related] or None,
    )


def related(r: Related) -> types.DiagnosticRelatedInformation:
    """The other end of a finding across modules, on its whole line (display paths are relative to the
    working directory when inside it, as the runner writes them)."""
    at = types.Position(r.line - 1, 0)
    uri = (Path.cwd() / r.path).resolve().as_uri()
    return types.DiagnosticRelatedInformation(types.Location(uri, types.Range(at, at)), r.message)


def from_edits(codec: PositionCodec, text: str, edits: tuple[Edit, ...]) -> list[types.TextEdit]:
    lines = lines_of(text)
    return [types.TextEdit(types.Range(position(codec, lines, e.line, e.column), position(codec, lines, e.end_line, e.end_column)),
                           e.text) for e in edits]


def line_hunks(before: str, after: str) -> list[tuple[int, int, str]]:
    """The whole lines that differ: (first line, end line, both 0-based and end exclusive, new text)."""
    old, new = before.splitlines(keepends=True), after.splitlines(keepends=True)
    matcher = difflib.SequenceMatcher(None, old, new, autojunk=False)
    return [(i1, i2, "".join(new[j1:j2])) for op, i1, i2, j1, j2 in matcher.get_opcodes() if op != "equal"]


def from_hunks(codec: PositionCodec, text: str, hunks: list[tuple[int, int, str]]) -> list[types.TextEdit]:
    lines = text.splitlines(keepends=True)
    closed = not lines or lines[-1].endswith(("\n", "\r"))  # the text ends with a line break

    def at(line: int) -> types.Position:
        if line < len(lines) or closed:
            return types.Position(line, 0)
        return position(codec, lines, len(lines) + 1, 1)  # the end of an unterminated last line

    out = []
    for start, end, new in hunks:
        if start >= len(lines) and not closed:
            new = "\n" + new
        out.append(types.TextEdit(types.Range(at(start), at(end)), new))
    return out


def whole_change(codec: PositionCodec, before: str, after: str) -> list[types.TextEdit]:
    """``before`` -> ``after`` as edits of the changed lines only (the cursor and folds elsewhere stay)."""
    return from_hunks(codec, before, line_hunks(before, after))
