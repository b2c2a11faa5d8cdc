"""Human output with rich: ``path:line:col: ID [*] message``, a code frame and a fix hint.

Colour only when the stream is a terminal (rich decides; NO_COLOR is honoured).
"""

from __future__ import annotations

from collections import Counter
from typing import TextIO

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from mplint.diagnostics import FixSafety
from mplint.output.common import location, sort_key, source_lines


def _frame(console: Console, lines: list[str], d) -> None:
    if not 0 < d.line <= len(lines):
        return
    text = lines[d.line - 1].expandtabs(1)
    gutter = len(str(d.line))
    end = d.end_column if d.end_line == d.line else len(text) + 1
    width = max(1, end - d.column)
    console.print(f"[blue]{' ' * gutter} |[/]")
    console.print(f"[blue]{d.line} |[/] {escape(text)}")
    console.print(f"[blue]{' ' * gutter} |[/] {' ' * (d.column - 1)}[red]{'^' * width}[/]")


def render(report, stream: TextIO, statistics: bool = False, show_source: bool = True, **_) -> None:
    console = Console(file=stream, highlight=False, soft_wrap=True)
    remaining = sorted(report.remaining, key=sort_key)
    if statistics:
        _statistics(console, remaining)
    else:
        by_path = {r.path: r for r in report.results}
        for d in remaining:
            mark = " [cyan]\\[*][/]" if d.fix_safety is FixSafety.SAFE else " [yellow]\\[-][/]" if d.fix_safety is FixSafety.UNSAFE else ""
            console.print(f"[bold]{escape(location(d))}[/]: [red bold]{d.rule_id}[/]{mark} {escape(d.message)}")
            if show_source:
                _frame(console, source_lines(by_path[d.path], d.cell), d)
            if d.fix_description:
                console.print(f"  [cyan]= help[/]: {escape(d.fix_description)} ({d.fix_safety.value} fix)")
            if show_source:
                console.print()
    for error in report.errors:
        console.print(f"[red bold]error[/]: {escape(error)}")
    _summary(console, report, remaining)


def _statistics(console: Console, remaining) -> None:
    counts = Counter((d.rule_id, d.name) for d in remaining)
    fixable = Counter(d.rule_id for d in remaining if d.fixable)
    table = Table(box=None, show_header=True, header_style="bold")
    for column in ("count", "rule", "name", "fixable"):
        table.add_column(column, justify="right" if column == "count" else "left")
    for (rule_id, name), n in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])):
        table.add_row(str(n), rule_id, name, str(fixable[rule_id]) if fixable[rule_id] else "")
    console.print(table)


def _summary(console: Console, report, remaining) -> None:
    fixed = report.fixed_count
    if fixed:
        console.print(f"Fixed {fixed} error{'s' if fixed != 1 else ''}.")
    if not remaining:
        if not fixed and not report.errors:
            console.print("[green]All checks passed![/]")
        return
    safe = sum(1 for d in remaining if d.fix_safety is FixSafety.SAFE)
    unsafe = sum(1 for d in remaining if d.fix_safety is FixSafety.UNSAFE)
    n = len(remaining)
    line = f"Found {n} error{'s' if n != 1 else ''}"
    hints = []
    if safe:
        hints.append(f"{safe} fixable with `--fix`")
    if unsafe:
        hints.append(f"{unsafe} more with `--unsafe-fixes`")
    console.print(line + (f" ({', '.join(hints)})" if hints else "") + ".")
