"""One module per rule (``mpnnn_<name>.py``), here or in a family's subpackage; see ``mplint.engine.rule.Rule``.

A family of rules may live in a subpackage (``loss_scaling/``) with the analyses that only it uses; rules are found
at any depth. Modules and packages whose names start with an underscore hold what several rules share (their base
classes), not rules.
"""

from __future__ import annotations

import functools
import os
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from mplint.engine.rule import Rule


@functools.cache
def all_rules() -> dict[str, type[Rule]]:
    """Every rule, by ID: the ``Rule`` subclasses each rule module defines, with their catalog keys."""
    import importlib
    import inspect

    from mplint.catalog import CatalogError, keys_by_id
    from mplint.engine.rule import Rule  # libcst: needed only when rules run

    catalog = keys_by_id()
    found: dict[str, type[Rule]] = {}
    # By module name whatever the folder (rule-ID order): the order rules are imported in does not depend on layout.
    for name in sorted(_modules(__path__, __name__), key=lambda name: name.rpartition(".")[2]):
        module = importlib.import_module(name)
        for _, obj in inspect.getmembers(module, inspect.isclass):
            if issubclass(obj, Rule) and obj is not Rule and obj.__module__ == module.__name__:
                if obj.id not in catalog:
                    raise CatalogError(f"rule {obj.id} ({module.__name__}) has no YAML file in the catalog")
                if obj.id in found:
                    raise CatalogError(f"rule {obj.id} is defined twice")
                obj.key = catalog[obj.id]
                found[obj.id] = obj
    return dict(sorted(found.items()))


def _modules(path, package: str) -> list[str]:
    """The modules of ``package`` and its subpackages, at any depth, but those named ``_*``."""
    import pkgutil

    found = []
    for info in pkgutil.iter_modules(path):
        if info.name.startswith("_"):
            continue
        name = f"{package}.{info.name}"
        if info.ispkg:
            found += _modules([os.path.join(p, info.name) for p in path], name)
        else:
            found.append(name)
    return found
