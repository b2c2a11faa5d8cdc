"""GitHub Actions workflow commands: one annotation line per diagnostic."""

from __future__ import annotations

from typing import TextIO

from mplint.output.common import FileRegions, sort_key


def _escape_data(value: str) -> str:
    return value.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def _escape_property(value: str) -> str:
    return _escape_data(value).replace(":", "%3A").replace(",", "%2C")


def render(report, stream: TextIO, **_) -> None:
    regions = FileRegions(report)  # a notebook's findings land on the lines of the .ipynb file
    for d in sorted(report.remaining, key=sort_key):
        line, column, end_line, end_column = regions.region(d)
        level = {"error": "error", "warning": "warning", "info": "notice"}[d.severity.value]
        title = _escape_property(f"{d.rule_id} {d.name}")
        where = f"file={_escape_property(d.path)},line={line},col={column},endLine={end_line},endColumn={end_column}"
        message = f"{d.rule_id} {d.message}" if d.cell is None else f"{d.rule_id} (cell {d.cell}:{d.line}) {d.message}"
        stream.write(f"::{level} title={title},{where}::{_escape_data(message)}\n")
    for notice in report.notices:
        stream.write(f"::notice title=mplint::{_escape_data(notice)}\n")
    for error in report.errors:
        stream.write(f"::error title=mplint::{_escape_data(error)}\n")
