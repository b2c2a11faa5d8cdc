"""Hover on a finding: its rule, what the rule is about, the message, and a link to the rule's page."""

from __future__ import annotations

from mplint.server.edits import contains


def of(diagnostics: list[dict], line: int, character: int) -> dict | None:
    """The hover for an LSP position: every finding under it (``None`` when there is none)."""
    from mplint.catalog import load_catalog

    under = [d for d in diagnostics if contains(d["range"], line, character)]
    if not under:
        return None
    catalog = load_catalog()
    sections = []
    for d in under:
        meta = catalog.get(d["code"])
        title = f"**{d['code']}** `{d['data']['name']}`" + (f": {meta.summary}" if meta else "")
        sections.append(f"{title}\n\n{d['message']}\n\n[{d['code']} documentation]({d['codeDescription']['href']})")
    return {"contents": {"kind": "markdown", "value": "\n\n---\n\n".join(sections)}, "range": under[0]["range"]}
