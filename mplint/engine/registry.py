"""Rule discovery and selection.

Every module in ``mplint.checks`` defining a ``Rule`` subclass is a rule; its
YAML in the catalog is its metadata. Adding a rule is one module plus one YAML
file, nothing else.
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Iterable

from mplint import checks
from mplint.catalog import CatalogError, RuleKey, RuleMeta, load_catalog, rule_keys

if TYPE_CHECKING:
    from mplint.engine.rule import Rule


@functools.lru_cache(maxsize=None)
def all_rules() -> dict[str, type["Rule"]]:
    import importlib
    import inspect
    import pkgutil

    from mplint.engine.rule import Rule  # libcst: needed only when rules run

    catalog = load_catalog()
    found: dict[str, type[Rule]] = {}
    for info in pkgutil.iter_modules(checks.__path__):
        module = importlib.import_module(f"{checks.__name__}.{info.name}")
        for _, obj in inspect.getmembers(module, inspect.isclass):
            if issubclass(obj, Rule) and obj is not Rule and obj.__module__ == module.__name__:
                if obj.id not in catalog:
                    raise CatalogError(f"rule {obj.id} ({module.__name__}) has no YAML file in the catalog")
                if obj.id in found:
                    raise CatalogError(f"rule {obj.id} is defined twice")
                obj.meta = catalog[obj.id]
                found[obj.id] = obj
    return dict(sorted(found.items()))


def matches(selector: str, meta: RuleMeta | RuleKey) -> bool:
    """An ID (MP101), an ID prefix (MP1, MP), a name (float16-softmax-output) or ALL."""
    s = selector.strip()
    return s.upper() == "ALL" or meta.id.startswith(s.upper()) or s.lower() == meta.name


def unknown_selectors(selectors: Iterable[str]) -> list[str]:
    metas = rule_keys()
    return [s for s in selectors if not any(matches(s, m) for m in metas)]


def select(
    select: Iterable[str] | None, ignore: Iterable[str] = (), extend_select: Iterable[str] = ()
) -> set[str]:
    """Rule IDs enabled by ``select``/``ignore``/``extend_select`` (Ruff's semantics)."""
    metas = rule_keys()
    if select is None:
        chosen = {m.id for m in metas if m.default_enabled}
    else:
        chosen = {m.id for m in metas if any(matches(s, m) for s in select)}
    chosen |= {m.id for m in metas if any(matches(s, m) for s in extend_select)}
    chosen -= {m.id for m in metas if any(matches(s, m) for s in ignore)}
    return chosen
