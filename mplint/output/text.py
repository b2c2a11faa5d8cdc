"""Human output: ``path:line:col: ID [*] message``, a code frame and a fix hint.

Written as plain text, never through a markup or emoji renderer: paths, messages and
source lines are user text, and ``train.py:100:5`` or a folder named ``[bold]`` or
``:smile:`` must print as they are. Colour is ANSI codes around whole fields, only for
a terminal unless asked (``--color``/``--no-color``, then the environment as Ruff reads it).
"""

from __future__ import annotations

import os
from collections import Counter
from typing import TextIO

from mplint.diagnostics import FixSafety
from mplint.output.common import location, sort_key, source_lines
from mplint.rule_docs import rule_url

_CODES = {"bold": "1", "red": "31", "green": "32", "yellow": "33", "blue": "34", "cyan": "36"}


def use_colour(stream, environ=os.environ, choice: bool | None = None) -> bool:
    """``--color``/``--no-color`` first; then as Ruff decides: a non-empty ``FORCE_COLOR`` forces colour,
    ``CLICOLOR_FORCE`` other than ``0`` too, ``NO_COLOR`` set to anything turns it off, ``CLICOLOR=0`` as
    well; otherwise colour only at a terminal (not a dumb one)."""
    if choice is not None:
        return choice
    if environ.get("FORCE_COLOR"):
        return True
    if environ.get("CLICOLOR_FORCE", "0") != "0":
        return True
    if "NO_COLOR" in environ or environ.get("CLICOLOR") == "0":
        return False
    return environ.get("TERM") != "dumb" and bool(getattr(stream, "isatty", lambda: False)())


class _Paint:
    def __init__(self, colour: bool):
        self.colour = colour

    def __call__(self, text: str, *styles: str) -> str:
        if not self.colour or not styles:
            return text
        return f"\x1b[{';'.join(_CODES[s] for s in styles)}m{text}\x1b[0m"


def _frame(paint: _Paint, lines: list[str], d) -> list[str]:
    if not 0 < d.line <= len(lines):
        return []
    text = lines[d.line - 1].expandtabs(1)
    gutter = " " * len(str(d.line))
    end = d.end_column if d.end_line == d.line else len(text) + 1
    width = max(1, end - d.column)
    return [
        paint(f"{gutter} |", "blue"),
        f"{paint(f'{d.line} |', 'blue')} {text}",
        f"{paint(f'{gutter} |', 'blue')} {' ' * (d.column - 1)}{paint('^' * width, 'red')}",
    ]


def _mark(paint: _Paint, safety: FixSafety) -> str:
    if safety is FixSafety.SAFE:
        return " " + paint("[*]", "cyan")
    if safety is FixSafety.UNSAFE:
        return " " + paint("[-]", "yellow")
    return ""


def render(
    report,
    stream: TextIO,
    statistics: bool = False,
    show_source: bool = True,
    colour: bool | None = None,
    quiet: bool = False,
    show_fixes: bool = False,
    fix_only: bool = False,
    **_,
) -> None:
    """``quiet``: the findings and nothing else; ``fix_only``: what was fixed and nothing else (Ruff's meanings)."""
    paint = _Paint(use_colour(stream, choice=colour))
    out: list[str] = []
    remaining = [] if fix_only else sorted(report.remaining, key=sort_key)
    if statistics:
        out += _statistics(paint, remaining)
    else:
        by_path = {r.path: r for r in report.results}
        for d in remaining:
            out.append(
                f"{paint(location(d), 'bold')}: {paint(d.rule_id, 'red', 'bold')}{_mark(paint, d.fix_safety)} {d.message}"
            )
            if show_source:
                out += _frame(paint, source_lines(by_path[d.path], d.cell), d)
            if d.fix_description:
                out.append(f"  {paint('= help', 'cyan')}: {d.fix_description} ({d.fix_safety.value} fix)")
            if show_fixes:
                out.append(f"  {paint('= docs', 'cyan')}: {rule_url(d.rule_id, report.config.docs_url)}")
            if show_source:
                out.append("")
    for notice in report.notices:
        out.append(f"{paint('note', 'cyan', 'bold')}: {notice}")
    for error in report.errors:
        out.append(f"{paint('error', 'red', 'bold')}: {error}")
    if not quiet:
        fixes = _fix_summary(report) if show_fixes and report.fixed_count else []
        summary = _summary(paint, report, remaining, listed=show_fixes, fix_only=fix_only)
        out += fixes + ([""] if fixes and summary else []) + summary
    stream.write("".join(line + "\n" for line in out))


def _fix_summary(report) -> list[str]:
    """Ruff's enumeration of the fixes applied: per file, how many of each rule."""
    n = report.fixed_count
    out = [f"Fixed {n} error{'s' if n != 1 else ''}:"]
    for result in sorted(report.results, key=lambda r: r.path):
        counts = Counter((d.rule_id, d.name) for d in result.diagnostics if d.fixed)
        if counts:
            out.append(f"- {result.path}:")
            out += [f"    {count} \u00d7 {rule_id} ({name})" for (rule_id, name), count in sorted(counts.items())]
    return out


def _statistics(paint: _Paint, remaining) -> list[str]:
    counts = Counter((d.rule_id, d.name) for d in remaining)
    fixable = Counter(d.rule_id for d in remaining if d.fixable)
    rows = [
        (str(n), rule_id, name, str(fixable[rule_id] or ""))
        for (rule_id, name), n in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))
    ]
    header = ("count", "rule", "name", "fixable")
    widths = [max(len(row[i]) for row in [header, *rows]) for i in range(4)]

    def line(row, style=()):
        cells = [row[0].rjust(widths[0]), *(cell.ljust(width) for cell, width in zip(row[1:], widths[1:]))]
        return paint(" " + "  ".join(cells).rstrip(), *style)

    return [line(header, ("bold",)), *(line(row) for row in rows)]


def _summary(paint: _Paint, report, remaining, listed: bool = False, fix_only: bool = False) -> list[str]:
    out = []
    fixed = report.fixed_count
    if fixed and not listed:
        out.append(f"Fixed {fixed} error{'s' if fixed != 1 else ''}.")
    changed = len(report.changed_on_disk)
    if changed:
        out.append(
            f"Left {changed} file{'s' if changed != 1 else ''} unfixed: changed on disk during the run "
            "(run mplint again)."
        )
    if fix_only:
        return out
    if not remaining:
        if not fixed and not report.errors and not report.found_no_files:  # nothing checked: a warning says so
            out.append(paint("All checks passed!", "green"))
        return out
    safe = sum(1 for d in remaining if d.fix_safety is FixSafety.SAFE)
    unsafe = sum(1 for d in remaining if d.fix_safety is FixSafety.UNSAFE)
    n = len(remaining)
    hints = []
    if safe:
        hints.append(f"{safe} fixable with `--fix`")
    if unsafe:
        hints.append(f"{unsafe} more with `--unsafe-fixes`")
    out.append(f"Found {n} error{'s' if n != 1 else ''}" + (f" ({', '.join(hints)})" if hints else "") + ".")
    return out
