"""``mplint explain``: a rule's page (what, why, example, fix, fix safety), rendered with rich."""

from __future__ import annotations

import difflib

from rich.console import Console
from rich.markdown import Markdown
from rich.panel import Panel
from rich.syntax import Syntax
from rich.text import Text

from mplint.catalog import load_catalog
from mplint.rule_docs import SAFETY as _SAFETY
from mplint.rule_docs import rule_url


def find(rule: str) -> list:
    """Every rule ``rule`` denotes, as ``--select`` reads it: one ID, or a name that a Keras/TensorFlow rule and its
    PyTorch counterpart share (``clip-before-unscale`` is MP204 and MPT204)."""
    return [m for m in load_catalog().values() if rule.upper() == m.id or rule.lower() == m.name]


def explain(rule: str, console: Console | None = None) -> bool:
    console = console or Console(highlight=False, emoji=False)
    metas = find(rule)
    if not metas:
        known = [m.id for m in load_catalog().values()] + [m.name for m in load_catalog().values()]
        hint = difflib.get_close_matches(rule, known, n=1)
        console.print(
            f"mplint: error: unknown rule {rule!r}" + (f" (did you mean {hint[0]!r}?)" if hint else ""), markup=False
        )
        return False
    if len(metas) > 1:
        ids = [m.id for m in metas]
        console.print(
            f"{rule} names {len(metas)} rules: {', '.join(ids[:-1])} and {ids[-1]}.", markup=False, soft_wrap=True
        )
    for meta in metas:
        _page(meta, console)
    return True


def _page(meta, console: Console) -> None:
    console.print(Panel(Text.assemble((f"{meta.id} {meta.name}", "bold"), "\n", meta.summary), expand=False))
    generations = ", ".join(f"G{g}" for g in meta.generations) or "PyTorch (torch.amp, torch.cuda.amp, apex.amp)"
    console.print(Markdown(f"## What it does\n\n{meta.what}\n\n## Why is this bad?\n\n{meta.why}"))
    if meta.example:
        console.print(Markdown("## Example"))
        console.print(Syntax(meta.example, "python", theme="ansi_dark", background_color="default"))
    if meta.example_fixed:
        console.print(Markdown("Use instead:"))
        console.print(Syntax(meta.example_fixed, "python", theme="ansi_dark", background_color="default"))
    console.print(Markdown(f"## Fix\n\n{meta.fix}\n\n## Fix safety\n\n{_SAFETY[meta.fix_safety.value]}"))
    extra = [
        f"Applies to: {generations}",
        f"Kind: {meta.kind}",
        f"Enabled by default: {'yes' if meta.default_enabled else 'no'}",
    ]
    console.print(Markdown("## Details\n\n" + "\n".join(f"- {e}" for e in extra)))
    if meta.proof:
        console.print(Markdown("## Proof\n\n" + "\n".join(f"- {p}" for p in meta.proof)))
    if meta.references:
        console.print(Markdown("## References\n\n" + "\n".join(f"- {r}" for r in meta.references)))
    console.print(f"Documentation: {rule_url(meta.id)}", markup=False, soft_wrap=True)


def explain_all(console: Console | None = None) -> None:
    """Every rule's page, in ID order (``mplint rule --all``)."""
    console = console or Console(highlight=False, emoji=False)
    for meta in load_catalog().values():
        explain(meta.id, console)
