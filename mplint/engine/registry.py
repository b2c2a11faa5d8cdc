"""Rule selection, by the catalog: which rules ``select``/``ignore`` settings and ``noqa`` comments name.

The rules themselves are found in ``mplint.checks`` (``all_rules``): every module there defining a ``Rule``
subclass is a rule, and its YAML in the catalog is its metadata.
"""

from __future__ import annotations

from collections.abc import Iterable

from mplint.catalog import RuleKey, RuleMeta, rule_keys


def matches(selector: str, meta: RuleMeta | RuleKey) -> bool:
    """An ID (MP101), an ID prefix (MP1, MP), a name (float16-softmax-output) or ALL."""
    s = selector.strip()
    return s.upper() == "ALL" or meta.id.startswith(s.upper()) or s.lower() == meta.name


def unknown_selectors(selectors: Iterable[str]) -> list[str]:
    metas = rule_keys()
    return [s for s in selectors if not any(matches(s, m) for m in metas)]


def select(select: Iterable[str] | None, ignore: Iterable[str] = (), extend_select: Iterable[str] = ()) -> set[str]:
    """Rule IDs enabled by ``select``/``ignore``/``extend_select`` (Ruff's semantics)."""
    metas = rule_keys()
    if select is None:
        chosen = {m.id for m in metas if m.default_enabled}
    else:
        chosen = {m.id for m in metas if any(matches(s, m) for s in select)}
    chosen |= {m.id for m in metas if any(matches(s, m) for s in extend_select)}
    chosen -= {m.id for m in metas if any(matches(s, m) for s in ignore)}
    return chosen
