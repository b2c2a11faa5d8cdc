"""One module per rule (``mpnnn_<name>.py``), here or in a family's subpackage; see ``mplint.engine.rule.Rule``.

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
    for info in pkgutil.walk_packages(__path__, f"{__name__}."):
        if info.name.rsplit(".", 1)[-1].startswith("_"):
            continue
        module = importlib.import_module(info.name)
        for _, obj in inspect.getmembers(module, inspect.isclass):
            if issubclass(obj, Rule) and obj is not Rule and obj.__module__ == module.__name__:
                if obj.id not in catalog:
                    raise CatalogError(f"rule {obj.id} ({module.__name__}) has no YAML file in the catalog")
                if obj.id in found:
                    raise CatalogError(f"rule {obj.id} is defined twice")
                obj.key = catalog[obj.id]
                found[obj.id] = obj
    return dict(sorted(found.items()))
