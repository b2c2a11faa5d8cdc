"""mplint's positions (1-based lines, 1-based code-point columns) as LSP positions, diagnostics and text edits.

Everything here is plain JSON-ready dicts in LSP's shapes: the server answers without
importing a protocol library (lsprotocol's types take over a second to import).
"""

from __future__ import annotations

import difflib
from pathlib import Path

from mplint.diagnostics import Diagnostic, Edit, Related, Severity
from mplint.rule_docs import rule_url
from mplint.server.positions import Codec, lines_of

_SEVERITY = {Severity.ERROR: 1, Severity.WARNING: 2, Severity.INFO: 3}  # LSP's DiagnosticSeverity


def position(codec: Codec, lines: list[str], line: int, column: int) -> dict:
    """A 1-based (line, code-point column) of ``lines`` as an LSP position."""
    if line > len(lines):  # past the end: the end of the last line
        last = lines[-1].rstrip("\r\n")
        return {"line": len(lines) - 1, "character": codec.units(last)}
    body = lines[line - 1].rstrip("\r\n")
    return {"line": line - 1, "character": codec.units(body[: max(column - 1, 0)])}


def span(codec: Codec, lines: list[str], line: int, column: int, end_line: int, end_column: int) -> dict:
    return {"start": position(codec, lines, line, column), "end": position(codec, lines, end_line, end_column)}


def to_lsp(codec: Codec, text: str, d: Diagnostic, docs_url: str | None = None) -> dict:
    """``docs_url``: the config's base of the rule pages (the rule's page is the diagnostic's code link)."""
    out = {
        "range": span(codec, lines_of(text), d.line, d.column, d.end_line, d.end_column),
        "severity": _SEVERITY[d.severity],
        "code": d.rule_id,
        "codeDescription": {"href": rule_url(d.rule_id, docs_url)},
        "source": "mplint",
        "message": d.message,
        "data": {
            "rule": d.rule_id,
            "name": d.name,
            "safety": d.fix_safety.value,
            "fix": d.fix_description,
            "line": d.line,
            "column": d.column,
            "cell": d.cell,
            "edits": [[e.line, e.column, e.end_line, e.end_column, e.text] for e in d.edits],
            "imports": [[i.module, i.obj, i.asname] for i in d.imports],
        },
    }
    if d.related:
        out["relatedInformation"] = [related(r) for r in d.related]
    return out


def related(r: Related) -> dict:
    """The other end of a finding across modules, on its whole line (display paths are relative to the
    working directory when inside it, as the runner writes them)."""
    at = {"line": r.line - 1, "character": 0}
    uri = (Path.cwd() / r.path).resolve().as_uri()
    return {"location": {"uri": uri, "range": {"start": at, "end": at}}, "message": r.message}


def from_edits(codec: Codec, text: str, edits: tuple[Edit, ...]) -> list[dict]:
    lines = lines_of(text)
    return [{"range": span(codec, lines, e.line, e.column, e.end_line, e.end_column), "newText": e.text} for e in edits]


def line_hunks(before: str, after: str) -> list[tuple[int, int, str]]:
    """The whole lines that differ: (first line, end line, both 0-based and end exclusive, new text)."""
    old, new = lines_of(before) if before else [], lines_of(after) if after else []
    matcher = difflib.SequenceMatcher(None, old, new, autojunk=False)
    return [(i1, i2, "".join(new[j1:j2])) for op, i1, i2, j1, j2 in matcher.get_opcodes() if op != "equal"]


def from_hunks(codec: Codec, text: str, hunks: list[tuple[int, int, str]]) -> list[dict]:
    lines = lines_of(text) if text else []
    closed = not lines or lines[-1].endswith(("\n", "\r"))  # the text ends with a line break

    def at(line: int) -> dict:
        if line < len(lines) or closed:
            return {"line": line, "character": 0}
        return position(codec, lines, len(lines) + 1, 1)  # the end of an unterminated last line

    out = []
    for start, end, new in hunks:
        if start >= len(lines) and not closed:
            new = "\n" + new
        out.append({"range": {"start": at(start), "end": at(end)}, "newText": new})
    return out


def whole_change(codec: Codec, before: str, after: str) -> list[dict]:
    """``before`` -> ``after`` as edits of the changed lines only (the cursor and folds elsewhere stay)."""
    return from_hunks(codec, before, line_hunks(before, after))


def contains(range_: dict, line: int, character: int) -> bool:
    """Whether an LSP position lies in an LSP range (its end included: a cursor just after a name is on it)."""
    start, end = range_["start"], range_["end"]
    return (start["line"], start["character"]) <= (line, character) <= (end["line"], end["character"])
