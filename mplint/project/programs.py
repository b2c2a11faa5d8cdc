"""Programs, not folders: the import graph of a project, its entry points, and what each program reaches.

A program is an entry point (notebook, ``__main__`` module, script, test module) plus the
project modules it reaches through the names it uses. A policy set by a program governs
the modules that program reaches and no other: ten tutorials in one folder are ten programs.
Each module's facts (``ProjectFacts``) are the union over the programs that reach it.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from pathlib import Path

from mplint.engine.apinames import canonical
from mplint.project.extract import HERE, FileFacts, ImportRecord, PolicySite
from mplint.project.facts import ProgramLink, ProjectFacts
from mplint.project.generation import DEFAULT, Generation, from_imports
from mplint.project.policies import MIXED_POLICIES, UNKNOWN_POLICY, is_floatx_setter, is_policy_setter

_NOT_MIXED = frozenset({"float32", "float64"})


@dataclass(eq=False)
class Module:
    path: Path  # absolute
    display: str
    name: str  # dotted module name from the package folders around it
    is_package: bool
    notebook: bool
    facts: FileFacts
    uses: frozenset[str] = frozenset()
    entry: bool = False


@dataclass(eq=False)
class Program:
    entry: Module
    parents: dict[Module, Module | None] = field(default_factory=dict)  # reached module -> the module it came from
    sites: list[PolicySite] = field(default_factory=list)

    def link_to(self, module: Module) -> ProgramLink:
        chain: list[str] = []
        step = self.parents.get(module)
        while step is not None and step is not self.entry:
            chain.append(step.display)
            step = self.parents.get(step)
        return ProgramLink(self.entry.display, tuple(reversed(chain)))

    @property
    def sets_mixed_policy(self) -> bool:
        return any(s.policy not in _NOT_MIXED for s in self.sites)


def _is_test_module(path: Path) -> bool:
    stem = path.stem
    return stem.startswith("test_") or stem.endswith("_test")


class ProjectModel:
    def __init__(self, modules: list[Module], root: Path, reexports: dict[str, str]):
        self.modules = modules
        self.root = root
        self.reexports = reexports
        self._by_path = {m.path: m for m in modules}
        self._found: dict[Path, Module | None] = {}
        for module in modules:
            module.uses = frozenset(module.facts.uses)
        imported = {target for m in modules for target, _ in self._edges(m, m, every=True)}
        for module in modules:
            module.entry = self._is_entry(module, imported)
        self.programs = [self._reach(m) for m in modules if m.entry]

    # --- entry points --------------------------------------------------------------------
    def _is_entry(self, module: Module, imported: set[Module]) -> bool:
        facts = module.facts
        if module.notebook or facts.main_guard or module.path.name == "__main__.py" or _is_test_module(module.path):
            return True
        return facts.top_level_work and module not in imported and module.path.name != "__init__.py"

    # --- import resolution ---------------------------------------------------------------
    def _module_at(self, folder: Path, parts: list[str]) -> Module | None:
        """The project module ``parts`` names under ``folder`` (a package wins over a same-named file)."""
        base = folder.joinpath(*parts)
        if base not in self._found:
            package = self._by_path.get(base / "__init__.py")
            self._found[base] = package or (self._by_path.get(base.parent / f"{base.name}.py") if parts else None)
        return self._found[base]

    def _roots(self, importer: Module, entry: Module) -> list[Path]:
        """Folders on sys.path for ``importer`` run by ``entry``: the entry's folder first."""
        roots = [entry.path.parent, importer.path.parent]
        package_root = importer.path.parent
        for _ in range(importer.name.count(".") + (1 if importer.is_package else 0)):
            package_root = package_root.parent
        roots += [package_root, self.root, self.root / "src"]
        for owner in (entry, importer):
            for entry_path in owner.facts.sys_paths:
                if entry_path.startswith(HERE):
                    roots.append(owner.path.parent / entry_path[len(HERE):].lstrip("/"))
                elif entry_path.startswith("/"):
                    roots.append(Path(entry_path))
                else:
                    roots.append(self.root / entry_path)
        return roots

    def _resolve(self, importer: Module, entry: Module, record: ImportRecord) -> list[tuple[Module, frozenset[str] | None]]:
        """Modules an import brings in, each with the names asked of it (None: the importer's attribute uses)."""
        parts = record.module.split(".") if record.module else []
        if record.level:
            folder = importer.path.parent
            for _ in range(record.level - 1):
                folder = folder.parent
            candidates = [folder]
        else:
            candidates = self._roots(importer, entry)
        for folder in candidates:
            base = self._module_at(folder, parts) if parts or record.level else None
            if record.name:  # from base import name: a submodule, or a name of base
                sub = self._module_at(folder, [*parts, record.name]) if record.name != "*" else None
                if sub is not None:
                    return [(sub, None)] + ([(base, frozenset())] if base is not None else [])
                if base is not None:
                    asked = None if record.name == "*" else frozenset({record.name})
                    return [(base, asked)]
            elif base is not None:  # import a.b.c: runs a, a.b and a.b.c
                found = [(base, None)]
                for end in range(1, len(parts)):
                    outer = self._module_at(folder, parts[:end])
                    if outer is not None:
                        found.append((outer, frozenset()))
                return found
        return []

    def _edges(self, module: Module, entry: Module, every: bool = False, asked: frozenset[str] | None = None):
        """The imports of ``module`` whose bound names are used (or asked for), resolved."""
        asked = asked or frozenset()
        wanted = module.uses | asked
        for record in module.facts.imports:
            used = every or record.bound == "*" or record.bound in wanted
            if not used and module.is_package:
                continue  # a package's unused imports are re-exports: followed only when asked for
            for target, names in self._resolve(module, entry, record):
                if target is module:
                    continue
                if not used:  # imported for its side effects: its module-level code runs
                    yield target, frozenset()
                elif record.bound == "*":  # the names used or asked of us may be defined there
                    yield target, wanted
                else:  # `import a.b`: the attributes used here; `from a import b`: b
                    yield target, module.uses if names is None else names

    # --- programs ------------------------------------------------------------------------
    def _reach(self, entry: Module) -> Program:
        program = Program(entry, {entry: None})
        asked: dict[Module, frozenset[str]] = {entry: frozenset()}
        queue = deque([(entry, frozenset())])
        while queue:
            module, names = queue.popleft()
            for target, wanted in self._edges(module, entry, asked=names):
                before = asked.get(target)
                if before is not None and wanted <= before:
                    continue
                asked[target] = (before or frozenset()) | wanted
                program.parents.setdefault(target, module)
                queue.append((target, wanted if before is None else wanted - before))
        uses = frozenset().union(*(m.uses for m in program.parents))
        for module in program.parents:
            for site in module.facts.policies:
                if not self._applies(site):
                    continue
                function = site.function.rsplit(".", 1)[-1]
                if module is entry or not site.function or function in uses:
                    program.sites.append(site)
        return program

    def _applies(self, site: PolicySite) -> bool:
        """A setter call is Keras' own (``runner.set_policy(pi)`` is not); layer dtypes always count."""
        if site.how == "layer":
            return True
        k = canonical(site.api, self.reexports)
        return is_floatx_setter(k) if site.how == "floatx" else is_policy_setter(k)


def module_facts(model: ProjectModel, generation: Generation | None, policy_setting: str | None,
                 keras_setting: int | None) -> dict[str, ProjectFacts]:
    """Each module's facts, by display path: the union over the programs that reach it."""
    reaching: dict[Module, list[Program]] = {}
    for program in model.programs:
        for module in program.parents:
            reaching.setdefault(module, []).append(program)
    project_imports = frozenset().union(*(m.facts.keras_imports for m in model.modules))
    project_legacy = any(m.facts.legacy_keras_env for m in model.modules)
    program_generation: dict[Program, Generation] = {}
    out: dict[str, ProjectFacts] = {}
    for module in model.modules:
        programs = sorted(reaching.get(module, []), key=lambda p: (p.entry is not module, len(p.parents), p.entry.display))
        sites: dict[PolicySite, ProgramLink] = {}
        for program in programs:
            for site in program.sites:
                sites.setdefault(site, program.link_to(module))
        for site in module.facts.policies:  # dtype="mixed_float16" on a layer governs that layer wherever it runs
            if site.how == "layer":
                sites.setdefault(site, ProgramLink(module.display))
        if policy_setting:
            policies, links = (PolicySite(policy_setting, "", 0, "config"),), ()
        else:
            ordered = sorted(sites, key=lambda s: (s.path != module.display, s.path, s.line))  # stable: source order
            policies, links = tuple(ordered), tuple(sites[s] for s in ordered)
        mixed = any(p.policy not in _NOT_MIXED for p in policies)
        namespaces = frozenset().union(*(m.facts.keras_imports for p in programs for m in p.parents)) if programs else frozenset(module.facts.keras_imports)
        tpu = sorted({(m.display, line) for p in programs for m in p.parents for line in m.facts.tpu_lines}) if programs \
            else [(module.display, line) for line in module.facts.tpu_lines]
        out[module.display] = ProjectFacts(
            policies=policies,
            generation=_generation(module, programs, program_generation, generation, keras_setting, project_imports, project_legacy),
            tpu_sites=tuple(tpu),
            reexports=model.reexports,
            keras_namespaces=namespaces,
            policy_from_config=bool(policy_setting),
            links=links,
            library_context=not policy_setting and not module.entry and not mixed,
            path=module.display,
        )
    return out


def _generation(module: Module, programs: list[Program], memo: dict, pinned: Generation | None, keras_setting: int | None,
                project_imports: frozenset[str], project_legacy: bool) -> Generation:
    if keras_setting:
        return Generation(keras_setting, f"keras = {keras_setting} in the mplint config", "config")
    if pinned is not None:
        return pinned
    if not programs:  # library code: what the project as a whole imports
        return from_imports(project_imports, project_legacy, "the project") or DEFAULT
    found = []
    for program in programs:
        if program not in memo:
            imports = frozenset().union(*(m.facts.keras_imports for m in program.parents))
            legacy = any(m.facts.legacy_keras_env for m in program.parents)
            memo[program] = from_imports(imports, legacy, f"program {program.entry.display}") or DEFAULT
        found.append(memo[program])
    # Keras 2 wins a disagreement: the Keras 3 fixes (scale_loss) crash on Keras 2, not the reverse.
    return min(found, key=lambda g: g.value)


def in_memory_facts(files: dict[str, bytes], keras: int | None = None, policy: str | None = None) -> dict[str, ProjectFacts]:
    """Module facts of a project held in memory (``{"pkg/m.py": source}``), for tests and fuzzing: no pins."""
    from mplint.project.extract import extract_file_facts

    root = Path("/nonexistent-mplint-project")
    modules = []
    for name, source in files.items():
        parts = name.removesuffix(".py").split("/")
        is_package = parts[-1] == "__init__"
        if is_package:
            parts.pop()
        while len(parts) > 1 and "/".join(parts[:-1]) + "/__init__.py" not in files:
            parts.pop(0)
        dotted = ".".join(parts)
        facts = extract_file_facts(source, name, dotted)
        modules.append(Module(root / name, name, dotted, is_package, name.endswith(".ipynb"), facts))
    reexports = {k: v for m in modules for k, v in m.facts.reexports.items()}
    return module_facts(ProjectModel(modules, root, reexports), None, policy, keras)
