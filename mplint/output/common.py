"""Helpers shared by the output formats."""

from __future__ import annotations

import io
import tokenize

from mplint.diagnostics import Diagnostic, FileResult


def source_lines(result: FileResult, cell: int | None = None) -> list[str]:
    """Lines of the file (or notebook cell) the remaining diagnostics point into (the fixed text after --fix)."""
    if cell is not None and hasattr(result, "cell_lines"):
        return result.cell_lines(cell)
    data = result.fixed_source if result.fixed_source is not None else result.original_source
    if not data:
        return []
    try:
        encoding, _ = tokenize.detect_encoding(io.BytesIO(data).readline)
        return data.decode(encoding).splitlines()
    except (SyntaxError, LookupError, UnicodeDecodeError):
        return data.decode("utf-8", errors="replace").splitlines()


def sort_key(d: Diagnostic):
    return (d.path, d.cell or 0, d.line, d.column, d.rule_id)


def location(d: Diagnostic) -> str:
    if d.cell is not None:
        return f"{d.path}:cell {d.cell}:{d.line}:{d.column}"
    return f"{d.path}:{d.line}:{d.column}"
