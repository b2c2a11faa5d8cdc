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


class FileRegions:
    """Where a diagnostic is in the file as stored: a notebook cell's line and column become the line and
    column of that source text inside the ``.ipynb`` JSON (annotations and code scanning point into the file)."""

    def __init__(self, report):
        self.results = {r.path: r for r in report.results}
        self.maps: dict[str, object] = {}

    def _positions(self, path: str):
        if path not in self.maps:
            from mplint.engine.notebooks import file_positions

            result = self.results.get(path)
            if result is not None:
                data = result.fixed_source if result.fixed_source is not None else result.original_source
            else:  # a notebook named by a related location, not checked in this run
                try:
                    with open(path, "rb") as f:
                        data = f.read()
                except OSError:
                    data = None
            self.maps[path] = file_positions(data)
        return self.maps[path]

    def point(self, path: str, cell: int | None, line: int, column: int = 1) -> tuple[int, int]:
        positions = self._positions(path) if cell is not None else None
        found = positions.locate(cell, line, column) if positions is not None else None
        return found or (line, column)

    def region(self, d: Diagnostic) -> tuple[int, int, int, int]:
        """(line, column, end line, end column) of ``d`` in its file."""
        return (*self.point(d.path, d.cell, d.line, d.column), *self.point(d.path, d.cell, d.end_line, d.end_column))
