"""One module per rule (``mpnnn_<name>.py``); see ``mplint.engine.rule.Rule``.

Modules whose names start with an underscore hold what several rules share (their base classes), not rules.
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from mplint.engine.rule import Rule


@functools.cache
def all_rules() -> dict[str, type[Rule]]:
    """Every rule, by ID: the ``Rule`` subclasses each rule module defines, with their catalog keys."""
    import importlib
    import inspect
    import pkgutil

    from mplint.catalog import CatalogError, keys_by_id
    from mplint.engine.rule import Rule  # libcst: needed only when rules run

    catalog = keys_by_id()
    found: dict[str, type[Rule]] = {}
    for info in pkgutil.iter_modules(__path__):
        if info.name.startswith("_"):
            continue
        module = importlib.import_module(f"{__name__}.{info.name}")
        for _, obj in inspect.getmembers(module, inspect.isclass):
            if issubclass(obj, Rule) and obj is not Rule and obj.__module__ == module.__name__:
                if obj.id not in catalog:
                    raise CatalogError(f"rule {obj.id} ({module.__name__}) has no YAML file in the catalog")
                if obj.id in found:
                    raise CatalogError(f"rule {obj.id} is defined twice")
                obj.key = catalog[obj.id]
                found[obj.id] = obj
    return dict(sorted(found.items()))
