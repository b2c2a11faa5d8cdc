"""The layers of mplint go one way, and no two packages import each other.

The import graph is read statically (CPython's ``ast``) from every import statement, at module level or inside a
function (a lazy import is still a dependency) or under ``if TYPE_CHECKING`` (so is a type). A module may import its
own layer (without closing a cycle between packages) and the layers below it, never one above. A rule family's
package (``mplint/checks/loss_scaling/``) is part of the checks layer, and what is in it is that family's own: no
other module of the checks layer imports it (the layers above may), and ``analysis/`` keeps only what more than one
family uses.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

pytestmark = pytest.mark.quick  # the one-minute subset: python3 -m pytest -m quick

ROOT = Path(__file__).resolve().parent.parent / "mplint"

# Bottom to top. A unit is a subpackage of mplint (with all its modules) or a top-level module.
LAYERS: tuple[tuple[str, frozenset[str]], ...] = (
    # Facts about the frameworks (API names, policies, float16's range, loss-scale names, versions, NGC images) and
    # the package's version.
    ("knowledge", frozenset({"mplint", "mplint.knowledge"})),
    # The per-file engine, with the vocabulary it reports in: findings, fixes and severities (diagnostics) and the
    # rules' catalog entries (catalog, read from rules/*.yaml).
    ("engine", frozenset({"mplint.engine", "mplint.diagnostics", "mplint.catalog"})),
    ("analysis", frozenset({"mplint.analysis"})),
    # Project facts, and the worker pool that builds them (the runner checks files with it too).
    ("project", frozenset({"mplint.project", "mplint.pool"})),
    ("checks", frozenset({"mplint.checks"})),
    # What is done with findings: fixes written back, baselines, reports and the rules' documentation links.
    ("fixes/output", frozenset({"mplint.fixes", "mplint.output", "mplint.baseline", "mplint.rule_docs"})),
    # Entry points: the runner and what drives it, the runtime companion and its verifier (which import TensorFlow or
    # torch), and `testing` (the runner on code written to a temporary project, for tests).
    (
        "cli/server/verify",
        frozenset(
            {
                "mplint.__main__",
                "mplint.cli",
                "mplint.runner",
                "mplint.watch",
                "mplint.explain",
                "mplint.testing",
                "mplint.server",
                "mplint.verify",
                "mplint.runtime",
            }
        ),
    ),
)

# Imports that the layers allow but the design does not, (importing unit, imported module) -> why.
FORBIDDEN: dict[tuple[str, str], str] = {
    ("mplint.analysis", "mplint.engine.rule"): "analyses serve rules; the rules' base classes live in checks",
    (
        "mplint.checks",
        "mplint.project.torch_target",
    ): "a rule reads the torch target from its context's facts, not from the pin files on disk",
    (
        "mplint.checks",
        "mplint.project.trainer_target",
    ): "a rule reads the trainer stacks' ranges from its context's facts, not from the pin files on disk",
}

# Exceptions, (importer, imported) -> why it is still there: none today. An entry must say why, and the test fails on
# one that no longer matches an import, so the list can only shrink back to empty.
ALLOWED: dict[tuple[str, str], str] = {}


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imported_modules(source: str, module: str, is_package: bool, known: set[str]) -> set[str]:
    """The mplint modules ``source`` imports anywhere in its body (``from a import b`` names module a.b when there is
    one, else a)."""
    package = module if is_package else module.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            for alias in node.names:
                found.add(f"{target}.{alias.name}" if f"{target}.{alias.name}" in known else target)
    return {name for name in found if name == "mplint" or name.startswith("mplint.")}


def unit(module: str) -> str:
    return ".".join(module.split(".")[:2])


def import_graph() -> dict[str, set[str]]:
    paths = {module_name(p): p for p in ROOT.rglob("*.py")}
    known = set(paths)
    return {
        m: imported_modules(p.read_text(encoding="utf-8"), m, p.name == "__init__.py", known)
        for m, p in sorted(paths.items())
    }


def layer_of(module: str) -> int:
    return next(i for i, (_, units) in enumerate(LAYERS) if unit(module) in units)


def family(module: str, graph) -> str | None:
    """The rule family's package ``module`` belongs to (``mplint.checks.loss_scaling``), if any."""
    parts = module.split(".")
    if parts[:2] != ["mplint", "checks"] or len(parts) < 3:
        return None
    package = ".".join(parts[:3])
    return package if any(m.startswith(package + ".") for m in graph) else None


def cyclic_units(edges: set[tuple[str, str]]) -> set[frozenset[str]]:
    """The strongly connected components (more than one unit) of the graph of units ``edges`` form."""
    graph: dict[str, set[str]] = {}
    for a, b in edges:
        graph.setdefault(a, set()).add(b)
        graph.setdefault(b, set())
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    components: set[frozenset[str]] = set()

    def visit(node: str) -> None:  # Tarjan's algorithm; the graph has a few dozen units
        index[node] = low[node] = len(index)
        stack.append(node)
        for nxt in graph[node]:
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                components.add(frozenset(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return components


def violations(graph: dict[str, set[str]], allowed) -> dict[tuple[str, str], str]:
    """Each import that goes up a layer, takes a module of another rule family's package, or joins two packages that
    import each other (directly or through others), with what is wrong; imports in ``allowed`` are left out of the cycles (an exception breaks its cycle)."""
    found: dict[tuple[str, str], str] = {}
    between: set[tuple[str, str]] = set()
    for importer, imported in sorted((a, b) for a, targets in graph.items() for b in targets):
        below, above = LAYERS[layer_of(importer)][0], LAYERS[layer_of(imported)][0]
        own = family(imported, graph)
        if (unit(importer), imported) in FORBIDDEN:
            found[importer, imported] = FORBIDDEN[unit(importer), imported]
        elif layer_of(imported) > layer_of(importer):
            found[importer, imported] = f"{below} imports {above}"
        elif own and own != family(importer, graph) and layer_of(importer) == layer_of(imported):
            found[importer, imported] = f"{imported} is {own.rpartition('.')[2]}'s own"
        elif unit(importer) != unit(imported) and (importer, imported) not in allowed:
            between.add((importer, imported))
    for component in cyclic_units({(unit(a), unit(b)) for a, b in between}):
        for importer, imported in between:
            if unit(importer) in component and unit(imported) in component:
                found[importer, imported] = "closes a cycle of " + " <-> ".join(sorted(component))
    return found


def test_every_package_and_top_level_module_has_a_layer():
    units = {unit(m) for m in import_graph()}
    placed = [u for _, members in LAYERS for u in members]
    assert len(placed) == len(set(placed))
    assert sorted(units - set(placed)) == []
    assert sorted(set(placed) - units) == []


def test_no_import_goes_up_a_layer_or_closes_a_cycle():
    found = violations(import_graph(), ALLOWED)
    new = {edge: why for edge, why in found.items() if edge not in ALLOWED}
    assert new == {}, "imports against the layers (fix them; see LAYERS):\n" + "\n".join(
        f"  {a} -> {b}: {why}" for (a, b), why in sorted(new.items())
    )
    gone = sorted(set(ALLOWED) - set(found))
    assert gone == [], "exceptions that no longer happen (remove them from ALLOWED):\n" + "\n".join(
        f"  {a} -> {b}" for a, b in gone
    )


def one_family_analyses(graph: dict[str, set[str]]) -> dict[str, str]:
    """The modules of ``analysis/`` that only one rule family's package uses (through other analyses too), with it."""
    importers: dict[str, set[str]] = {}
    for importer, targets in graph.items():
        for imported in targets:
            importers.setdefault(imported, set()).add(importer)

    def users(module: str, seen: frozenset[str] = frozenset()) -> set[str]:
        found: set[str] = set()
        for importer in importers.get(module, ()):
            if unit(importer) == "mplint.analysis" and importer not in seen:
                found |= users(importer, seen | {module})
            elif unit(importer) != "mplint.analysis":
                found.add(family(importer, graph) or importer)
        return found

    analyses = [m for m in graph if unit(m) == "mplint.analysis" and m != "mplint.analysis"]
    return {m: next(iter(u)) for m in analyses if len(u := users(m)) == 1 and family(next(iter(u)), graph) is not None}


def test_analysis_holds_no_module_that_only_one_family_package_uses():
    assert one_family_analyses(import_graph()) == {}, "move them into the family's package"


def test_lazy_relative_and_type_only_imports_count():
    source = (
        "from typing import TYPE_CHECKING\n"
        "import mplint.engine.walk\n"
        "from mplint.engine import check, notebooks\n"
        "from . import edits\n"
        "from ..project.facts import ProjectFacts\n"
        "if TYPE_CHECKING:\n"
        "    from mplint.catalog import RuleMeta\n"
        "def later():\n"
        "    from mplint.fixes.writer import write_atomic\n"
        "    import json\n"
    )
    known = {"mplint.engine.walk", "mplint.engine.check", "mplint.engine.notebooks", "mplint.fixes.edits"}
    assert imported_modules(source, "mplint.fixes.write_back", False, known) == {
        "mplint.engine.walk",
        "mplint.engine.check",
        "mplint.engine.notebooks",
        "mplint.fixes.edits",
        "mplint.project.facts",
        "mplint.catalog",
        "mplint.fixes.writer",
    }


def test_an_upward_import_a_sideways_cycle_and_a_forbidden_import_are_reported():
    graph = {
        "mplint.engine.check": {"mplint.project.facts", "mplint.catalog"},
        "mplint.catalog": {"mplint.engine.rule"},
        "mplint.project.facts": set(),
        "mplint.engine.rule": set(),
        "mplint.checks.torch_amp.mpt201_missing_grad_scaler": {"mplint.project.torch_target"},
        "mplint.project.torch_target": set(),
    }
    assert violations(graph, {}) == {
        ("mplint.engine.check", "mplint.project.facts"): "engine imports project",
        ("mplint.engine.check", "mplint.catalog"): "closes a cycle of mplint.catalog <-> mplint.engine",
        ("mplint.catalog", "mplint.engine.rule"): "closes a cycle of mplint.catalog <-> mplint.engine",
        ("mplint.checks.torch_amp.mpt201_missing_grad_scaler", "mplint.project.torch_target"): FORBIDDEN[
            "mplint.checks", "mplint.project.torch_target"
        ],
    }
    allowed = {("mplint.catalog", "mplint.engine.rule"): "why"}
    assert set(violations(graph, allowed)) == {  # an allowed import breaks its cycle
        ("mplint.engine.check", "mplint.project.facts"),
        ("mplint.checks.torch_amp.mpt201_missing_grad_scaler", "mplint.project.torch_target"),
    }


def test_a_family_package_s_modules_are_imported_by_that_family_and_the_layers_above_only():
    flow = "mplint.checks.loss_scaling.optimizer_flow"
    graph = {
        flow: set(),
        "mplint.checks.loss_scaling.mp201_missing_loss_scaling": {flow},
        "mplint.checks.mp602_float16_variables": {flow},
        "mplint.analysis.keras_guards": {flow},
        "mplint.verify.report": {flow},
    }
    assert violations(graph, {}) == {
        ("mplint.checks.mp602_float16_variables", flow): f"{flow} is loss_scaling's own",
        ("mplint.analysis.keras_guards", flow): "analysis imports checks",
    }


def test_an_analysis_only_one_family_package_uses_is_reported():
    graph = {
        "mplint.analysis.paths": set(),
        "mplint.analysis.sites": {"mplint.analysis.paths"},
        "mplint.analysis.guards": set(),
        "mplint.checks.loss_scaling.mp201_missing_loss_scaling": {"mplint.analysis.sites", "mplint.analysis.guards"},
        "mplint.checks.loss_scaling.mp202_unscaled_loss_gradient": {"mplint.analysis.sites"},
        "mplint.checks.mp501_experimental_mixed_precision_api": {"mplint.analysis.guards"},
    }
    assert one_family_analyses(graph) == {
        "mplint.analysis.paths": "mplint.checks.loss_scaling",
        "mplint.analysis.sites": "mplint.checks.loss_scaling",
    }
