"""``workspace/executeCommand`` helpers: what ``mplint.explainRule`` answers."""

from __future__ import annotations


def explain(rule: str, docs_url: str | None = None) -> dict | None:
    """A rule's page (the Markdown of ``docs/rules/MPxxx.md``) and its link (under ``docs_url``, the config's
    ``docs-url``, when given), by ID or name; ``None`` for no rule of mplint's."""
    from mplint.catalog import load_catalog
    from mplint.rule_docs import page, rule_url

    meta = next((m for m in load_catalog().values() if rule.upper() == m.id or rule.lower() == m.name), None)
    if meta is None:
        return None
    return {"rule": meta.id, "name": meta.name, "url": rule_url(meta.id, docs_url), "markdown": page(meta)}
