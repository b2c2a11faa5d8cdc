"""Programs, not folders: the import graph of a project, its entry points, and what each program reaches.

A program is an entry point (notebook, ``__main__`` module, script, test module) plus the
project modules it reaches through the names it uses. A policy set by a program governs
the modules that program reaches and no other: ten tutorials in one folder are ten programs.
Each module's facts (``ProjectFacts``) are the union over the programs that reach it.
"""

from __future__ import annotations

import functools
import os
import re
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from mplint.engine.summaries import FunctionSummary
from mplint.knowledge.apinames import canonical
from mplint.knowledge.policies import FLOAT32_POLICIES, is_floatx_setter, is_policy_setter
from mplint.knowledge.torch_patches import PATCHING_PACKAGES
from mplint.project.extract import HERE, FileFacts, ImportRecord, PolicySite
from mplint.project.facts import ProgramLink, ProjectFacts
from mplint.project.generation import DEFAULT, Generation, from_imports
from mplint.project.pins import PinFinder
from mplint.project.published import Distribution, unpacked_wheel


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

    @functools.cached_property
    def folder(self) -> str:
        return os.path.dirname(self.key)

    @functools.cached_property
    def key(self) -> str:
        return os.path.normpath(self.path)


@dataclass(eq=False)
class Program:
    entry: Module
    parents: dict[Module, Module | None] = field(default_factory=dict)  # reached module -> the module it came from
    sites: list[PolicySite] = field(default_factory=list)
    keras_imports: frozenset[str] = frozenset()
    legacy_keras_env: bool = False
    tf1: bool = False
    trains: frozenset[str] = frozenset()  # what its modules compile or fit, by callable name
    tpu_sites: frozenset[tuple[str, int]] = frozenset()
    # The code's own version evidence in the modules it reaches: (package, specifier, "path:line what"), one per bound
    version_bounds: tuple[tuple[str, str, str], ...] = ()
    patching_imports: frozenset[str] = frozenset()  # packages it imports that replace torch names (anywhere)

    def link_to(self, module: Module) -> ProgramLink:
        chain: list[str] = []
        step = self.parents.get(module)
        while step is not None and step is not self.entry:
            chain.append(step.display)
            step = self.parents.get(step)
        return ProgramLink(self.entry.display, tuple(reversed(chain)))

    @property
    def sets_mixed_policy(self) -> bool:
        return any(s.policy not in FLOAT32_POLICIES for s in self.sites)


def _is_test_module(path: Path) -> bool:
    stem = path.stem
    return stem.startswith("test_") or stem.endswith("_test")


_TEST_FOLDER = re.compile(r"(?:tests?|testing|test_\w+|\w+_tests?)")


def _in_test_folder(path: Path, root: Path) -> bool:
    """Under a folder of tests inside the project (``tests/``, ``integration_test/``, ``testing/``): support code of
    the tests (models, fixtures), which only the tests run."""
    try:
        folders = path.parent.relative_to(root).parts
    except ValueError:
        return False
    return any(_TEST_FOLDER.fullmatch(folder) for folder in folders)


class ProjectModel:
    def __init__(
        self,
        modules: list[Module],
        root: Path,
        reexports: dict[str, str],
        expect: Callable[[str, int], None] | None = None,
        step: Callable[[], None] | None = None,
    ):
        """``expect("programs", n)`` is told how many programs there are once the entry points are known,
        ``step`` after each program's walk (the model of a large project takes seconds)."""
        self.modules = modules
        self.root = root
        self._by_file = {m.key: m for m in modules}
        self._found: dict[str, Module | None] = {}
        self._root_cache: dict[Module, list[str]] = {}
        self._resolved: dict[tuple[Module, int], list] = {}
        self._resolved_from_entry: dict[tuple[Module, int, str], list] = {}
        self._from_entries: dict[tuple[Module, int], set] | None = None  # ``_resolutions``, once programs are known
        self._fallbacks: dict[tuple[Module, str], bool] = {}
        self._edge_lists: dict[tuple, list] = {}
        # packages whose __init__ extends __path__ (Keras' generated api/ folders): their search paths
        self._package_paths = {m.folder: self._search_path(m) for m in modules if m.is_package and m.facts.package_path}
        self._walked: dict[tuple[str, tuple[str, ...]], Module | None] = {}
        for module in modules:
            module.uses = frozenset(module.facts.uses)
        self._relevant = self._relevant_names(modules)
        self.reexports = self._reexported_between_modules(reexports) if reexports else reexports
        self.imported = imported = {target for m in modules for target, _ in self._edges(m, m, every=True)}
        for module in modules:
            module.entry = self._is_entry(module, imported)
        # modules with an import the project does not resolve for them: an entry point's folder may resolve it
        self._unresolved = {
            m
            for m in modules
            if any(not record.level and not self._resolve(m, m, index) for index, record in enumerate(m.facts.imports))
        }
        entries = [m for m in modules if m.entry]
        if expect:
            expect("programs", len(entries))
        self.programs = []
        for module in entries:
            self.programs.append(self._reach(module))
            if step:
                step()

    # --- entry points --------------------------------------------------------------------
    def _is_entry(self, module: Module, imported: set[Module]) -> bool:
        facts = module.facts
        if module.notebook or facts.main_guard or module.path.name == "__main__.py" or _is_test_module(module.path):
            return True
        return facts.top_level_work and module not in imported and module.path.name != "__init__.py"

    # --- import resolution ---------------------------------------------------------------
    # Paths are handled as strings: resolution runs for every import of every program.
    def _module_at(self, folder: str, parts: tuple[str, ...]) -> Module | None:
        """The project module ``parts`` names under ``folder`` (a package wins over a same-named file)."""
        if self._package_paths and len(parts) > 1:
            return self._walk(folder, parts)
        base = "/".join((folder, *parts))
        found = self._found.get(base, False)
        if found is False:
            found = self._by_file.get(base + "/__init__.py") or (self._by_file.get(base + ".py") if parts else None)
            self._found[base] = found
        return found

    def _search_path(self, package: Module) -> list[str]:
        """Where a package's submodules are found: its folder, or its ``__path__`` as its ``__init__`` extends it."""
        return [
            os.path.normpath(package.folder + entry[len(HERE) :]) if entry.startswith(HERE) else os.path.normpath(entry)
            for entry in package.facts.package_path
        ] or [package.folder]

    def _walk(self, folder: str, parts: tuple[str, ...]) -> Module | None:
        """``_module_at`` as the import system finds it, one part at a time through each package's search path
        (a folder without ``__init__.py`` is a namespace package: its submodules are under it)."""
        key = (folder, parts)
        found = self._walked.get(key, False)
        if found is False:
            folders = [folder]
            for part in parts[:-1]:
                inner = []
                for outer in folders:
                    package = self._by_file.get(f"{outer}/{part}/__init__.py")
                    if package is not None:  # a regular package ends the search
                        inner = self._package_paths.get(package.folder, [package.folder])
                        break
                    inner.append(f"{outer}/{part}")
                folders = inner
            last = parts[-1]
            found = next(
                (
                    m
                    for outer in folders
                    for m in (self._by_file.get(f"{outer}/{last}/__init__.py"), self._by_file.get(f"{outer}/{last}.py"))
                    if m is not None
                ),
                None,
            )
            self._walked[key] = found
        return found

    def _roots(self, importer: Module) -> list[str]:
        """Folders on sys.path for ``importer``: its own folder, its package root, the project root, sys.path inserts."""
        roots = self._root_cache.get(importer)
        if roots is None:
            package_root = importer.path.parent
            for _ in range(importer.name.count(".") + (1 if importer.is_package else 0)):
                package_root = package_root.parent
            paths = [importer.path.parent, package_root, self.root, self.root / "src"]
            for entry_path in importer.facts.sys_paths:
                if entry_path.startswith(HERE):
                    paths.append(importer.path.parent / entry_path[len(HERE) :].lstrip("/"))
                elif entry_path.startswith("/"):
                    paths.append(Path(entry_path))
                else:
                    paths.append(self.root / entry_path)
            roots = list(dict.fromkeys(os.path.normpath(p) for p in paths))
            self._root_cache[importer] = roots
        return roots

    def _resolve(self, importer: Module, entry: Module, index: int) -> list[tuple[Module, frozenset[str] | None]]:
        """Modules an import brings in, each with the names asked of it (None: the importer's attribute uses)."""
        key = (importer, index)
        found = self._resolved.get(key)
        if found is None:
            record = importer.facts.imports[index]
            if record.level:
                folder = importer.path.parent
                for _ in range(record.level - 1):
                    folder = folder.parent
                found = self._resolve_in([os.path.normpath(folder)], record)
            else:
                found = self._resolve_in(self._roots(importer), record)
            self._resolved[key] = found
        if not found and entry is not importer and not importer.facts.imports[index].level:
            # The entry point's folder is sys.path[0] when it runs as a script.
            key = (importer, index, entry.folder)
            if key not in self._resolved_from_entry:
                self._resolved_from_entry[key] = self._resolve_in([entry.folder], importer.facts.imports[index])
            return self._resolved_from_entry[key]
        return found

    def _resolve_in(self, folders: list[str], record: ImportRecord) -> list[tuple[Module, frozenset[str] | None]]:
        parts = tuple(record.module.split(".")) if record.module else ()
        for folder in folders:
            base = self._module_at(folder, parts) if parts or record.level else None
            if record.name:  # from base import name: a submodule, or a name of base
                sub = self._module_at(folder, (*parts, record.name)) if record.name != "*" else None
                if sub is not None:
                    return [(sub, None)] + ([(base, frozenset())] if base is not None else [])
                if base is not None:
                    return [(base, None if record.name == "*" else frozenset({record.name}))]
            elif base is not None:  # import a.b.c: runs a, a.b and a.b.c
                found = [(base, None)]
                for end in range(1, len(parts)):
                    outer = self._module_at(folder, parts[:end])
                    if outer is not None:
                        found.append((outer, frozenset()))
                return found
        return []

    def _edges(self, module: Module, entry: Module, every: bool = False, asked: frozenset[str] | None = None) -> list:
        """The imports of ``module`` whose bound names are used (or asked for), resolved: computed once per module,
        names asked and, where an import falls back to it, entry point folder (every program walk asks again)."""
        if every:
            return list(self._edges_of(module, entry, every, asked))
        key = (module, asked, entry.folder if entry is not module and self._falls_back(module, entry) else None)
        found = self._edge_lists.get(key)
        if found is None:
            found = self._edge_lists[key] = [
                (target, names & self._relevant[target])
                for target, names in self._edges_of(module, entry, every, asked)
            ]
        return found

    @staticmethod
    def _relevant_names(modules: list[Module]) -> dict[Module, frozenset[str]]:
        """The names asked of each module that can change what a program reaches through it: the names its imports
        bind and it does not use itself (a used import is followed whatever is asked). A package or a module with
        a star import passes the names asked of it on: any name an import binds. Other names are dropped from the
        names asked, so that the program walk does not carry (and compare) every name its modules use."""
        bound = frozenset(record.bound for m in modules for record in m.facts.imports)
        return {
            m: bound
            if m.is_package or any(r.bound == "*" for r in m.facts.imports)
            else frozenset(r.bound for r in m.facts.imports) - m.uses
            for m in modules
        }

    def _falls_back(self, module: Module, entry: Module) -> bool:
        """Whether an import of ``module`` that the project does not resolve is found in ``entry``'s folder."""
        key = (module, entry.folder)
        found = self._fallbacks.get(key)
        if found is None:
            found = self._fallbacks[key] = any(
                not record.level and not self._resolve(module, module, index) and self._resolve(module, entry, index)
                for index, record in enumerate(module.facts.imports)
            )
        return found

    def _edges_of(self, module: Module, entry: Module, every: bool = False, asked: frozenset[str] | None = None):
        wanted = module.uses | asked if asked else module.uses  # no copy of a large set per edge walked
        for index, record in enumerate(module.facts.imports):
            used = every or record.bound == "*" or record.bound in wanted
            if not used and module.is_package:
                continue  # a package's unused imports are re-exports: followed only when asked for
            for target, names in self._resolve(module, entry, index):
                if target is module:
                    continue
                if not used:  # imported for its side effects: its module-level code runs
                    yield target, frozenset()
                elif record.bound == "*":  # the names used or asked of us may be defined there
                    yield target, wanted
                elif (
                    names is None
                ):  # `import a.b`: the attributes used here (and, re-exported by a package, asked of it)
                    yield target, wanted if module.is_package else module.uses
                else:  # `from a import b`: b
                    yield target, names

    # --- re-exports ----------------------------------------------------------------------
    def _public_names(self) -> dict[Module, str]:
        """The other dotted name of each module under a folder a package adds to its ``__path__``
        (``krs/api/backend`` is also ``krs.backend``)."""
        out: dict[Module, str] = {}
        folders = [
            (folder, package)
            for package in self.modules
            if package.folder in self._package_paths
            for folder in self._package_paths[package.folder]
            if folder != package.folder
        ]
        for module in self.modules:
            for folder, package in folders:
                if module.key.startswith(folder + "/"):
                    parts = module.key[len(folder) + 1 :].removesuffix(".py").split("/")
                    out[module] = ".".join([package.name, *(parts[:-1] if parts[-1] == "__init__" else parts)])
                    break
        return out

    def _reexported_between_modules(self, reexports: dict[str, str]) -> dict[str, str]:
        """The files' re-exports of Keras, and those the project's modules pass on from one another
        (``from pkg.src.backend import keras`` in ``pkg/backend``), under each name a module has."""
        out = dict(reexports)
        public = self._public_names()
        for _ in range(3):  # re-exports of re-exports
            added = False
            for module in self.modules:
                names = [module.name, public[module]] if module in public else [module.name]
                for index, record in enumerate(module.facts.imports):
                    if record.bound == "*" or (not record.name and record.bound == record.module.split(".")[0]):
                        continue  # `import a.b` binds the project's own package a
                    for target, asked in self._resolve(module, module, index)[:1]:
                        source = target.name if asked is None else f"{target.name}.{record.name}"
                        found = out.get(source)
                        if found is not None:
                            for key in (f"{name}.{record.bound}" for name in names):
                                if key not in out:
                                    out[key] = found
                                    added = True
                if module in public:
                    for key, value in list(out.items()):
                        if key == module.name or key.startswith(module.name + "."):
                            out.setdefault(public[module] + key[len(module.name) :], value)
            if not added:
                break
        return out

    # --- programs ------------------------------------------------------------------------
    def _reach(self, entry: Module) -> Program:
        # Breadth first: a module asked for more names is walked again with the names it had not been asked
        # (the order decides the chains messages cite). The hot loop of the program model: the edge lists are
        # looked up directly, and an entry point's folder is part of their key only for the modules with an
        # import the project does not resolve for them.
        program = Program(entry, {entry: None})
        parents = program.parents
        asked: dict[Module, set[str]] = {entry: set()}  # grown in place: a copy per new name is quadratic
        edge_lists = self._edge_lists
        unresolved = self._unresolved
        queue = deque([(entry, frozenset())])
        while queue:
            module, names = queue.popleft()
            folder = (
                entry.folder
                if module in unresolved and module is not entry and self._falls_back(module, entry)
                else None
            )
            edges = edge_lists.get((module, names, folder))
            if edges is None:
                edges = self._edges(module, entry, asked=names)
            for target, wanted in edges:
                before = asked.get(target)
                if before is None:
                    asked[target] = set(wanted)
                    parents[target] = module
                    queue.append((target, wanted))
                elif not wanted <= before:
                    queue.append((target, wanted - before))
                    before |= wanted
        testing = _is_test_module(entry.path)
        program.keras_imports = frozenset().union(*(m.facts.keras_imports for m in program.parents))
        program.legacy_keras_env = any(m.facts.legacy_keras_env for m in program.parents)
        program.tf1 = any(m.facts.tf1 for m in program.parents)
        program.trains = frozenset(name for m in program.parents for name in m.facts.trains)
        program.tpu_sites = frozenset((m.display, line) for m in program.parents for line in m.facts.tpu_lines)
        program.version_bounds = code_bounds(program.parents, self.root)
        program.patching_imports = frozenset().union(*(patching_imports(m.facts) for m in program.parents))
        for module in program.parents:
            for site in module.facts.policies:
                if not self._applies(site):
                    continue
                if site.function and testing:
                    continue  # set inside a test: it governs that test alone, whose models nobody trains
                function = site.function.rsplit(".", 1)[-1]
                # the union of the reached modules' uses is large (hundreds of modules): asked of them only here
                if module is entry or not site.function or any(function in m.uses for m in program.parents):
                    program.sites.append(site)
        return program

    def summaries(self) -> dict[str, dict[str, FunctionSummary]]:
        """The function summaries of every module (``FileFacts.summaries``), by qualified name and by the names
        imports re-export them as: name -> kind name -> summary."""
        table = {
            f"{m.name}.{name}": {
                role: FunctionSummary(s.value, s.position, s.default, m.display, s.line) for role, s in by_role.items()
            }
            for m in self.modules
            for name, by_role in m.facts.summaries.items()
        }
        if not table:
            return table
        for _ in range(3):  # re-exports of re-exports (pkg/__init__ -> pkg/sub/__init__ -> module)
            for module in self.modules:
                for index, record in enumerate(module.facts.imports):
                    if not record.name or record.name == "*" or f"{module.name}.{record.bound}" in table:
                        continue
                    for target, _ in self._resolve(module, module, index):
                        found = table.get(f"{target.name}.{record.name}")
                        if found is not None:
                            table[f"{module.name}.{record.bound}"] = found
                for name, value in module.facts.aliases.items():
                    key = f"{module.name}.{name}"
                    if key not in table and (found := self._aliased(module, value, table)) is not None:
                        table[key] = found
        self._add_written_paths(table)
        return table

    def _aliased(
        self, module: Module, value: str, table: dict[str, dict[str, FunctionSummary]]
    ) -> dict[str, FunctionSummary] | None:
        """The summaries of what ``name = value`` binds at the top of ``module``: a function of its own, one it
        imports (``from m import f``), or one of a module it imports (``_performance.get_loss_scale``)."""
        base, _, attribute = value.partition(".")
        if not attribute and f"{module.name}.{base}" in table:
            return table[f"{module.name}.{base}"]
        for index, record in enumerate(module.facts.imports):
            if record.bound != base or record.name == "*":
                continue
            for target, asked in self._resolutions(module, index):
                if asked is None and attribute:  # import m / from pkg import m: m.f
                    return table.get(f"{target.name}.{attribute}")
                if asked is not None and not attribute:  # from m import f: f
                    return table.get(f"{target.name}.{record.name}")
        return None

    def _resolutions(self, module: Module, index: int) -> list[tuple[Module, frozenset[str] | None]]:
        """The module an import of ``module`` brings in first, as the programs resolved it: from the project's
        roots, else from the folder of each entry point that reaches it (``tf2_common.utils.flags`` is found from
        the script's folder only); none where entry points disagree."""
        found = self._resolve(module, module, index)[:1]
        if found:
            return found
        if self._from_entries is None:
            self._from_entries = {}
            for (importer, number, _), resolved in self._resolved_from_entry.items():
                if resolved:
                    self._from_entries.setdefault((importer, number), set()).add(resolved[0])
        firsts = self._from_entries.get((module, index), set())
        # one module, asked for whole before by name (the order ``_resolve_in`` gives)
        return sorted(firsts, key=lambda found: found[1] is not None) if len({t for t, _ in firsts}) == 1 else []

    def possibly_run(self) -> set[Module]:
        """The modules that may run: those programs reach, what they import, and, for each import nothing resolves
        (not the project's roots, not an entry point's folder: ``sys.path`` set at run time), the modules its dotted
        path may name (``_named_by``), with all they import in turn; every module where one of them loads modules
        by a name computed at run time (``FileFacts.loads_modules``: plugin folders, registries)."""
        by_entry = {(importer, number) for (importer, number, _), found in self._resolved_from_entry.items() if found}
        spelled = {m: _path_parts(m, self.root) for m in self.modules}  # each module's path as an import spells it
        by_name: dict[str, list[Module]] = {}
        for m, parts in spelled.items():
            if parts:
                by_name.setdefault(parts[-1], []).append(m)
        found = {m for p in self.programs for m in p.parents}
        todo = list(found)
        while todo:
            m = todo.pop()
            more = [target for target, _ in self._edges(m, m, every=True)]
            if m in self._unresolved:
                for index, record in enumerate(m.facts.imports):
                    if not (record.level or (m, index) in by_entry or self._resolve(m, m, index)):
                        more += _named_by(m, record, by_name, spelled)
            for target in more:
                if target not in found:
                    found.add(target)
                    todo.append(target)
        if any(m.facts.loads_modules for m in found):
            return set(self.modules)  # a module loaded by a computed name may be any of them
        return found

    def _add_written_paths(self, table: dict[str, dict[str, FunctionSummary]]) -> None:
        """Each function's summary under the module paths the project's imports write for its module, where those
        differ from the module's name: a folder without ``__init__.py`` on the way (``tf2_common/utils/flags/core.py``
        is the module ``flags.core``, imported as ``tf2_common.utils.flags.core``). A path written for two modules
        (two sub-projects with the same layout) names neither."""
        written: dict[str, set[Module]] = {}
        for module in self.modules:
            for index, record in enumerate(module.facts.imports):
                if record.level or record.name == "*":
                    continue
                for target, asked in self._resolutions(module, index)[:1]:
                    path = f"{record.module}.{record.name}" if record.name and asked is None else record.module
                    if path != target.name:
                        written.setdefault(path, set()).add(target)
        if not written:
            return
        by_module: dict[str, list[tuple[str, dict[str, FunctionSummary]]]] = {}
        for key, found in table.items():
            module_name, _, name = key.rpartition(".")
            by_module.setdefault(module_name, []).append((name, found))
        for path, targets in written.items():
            if len(targets) == 1:
                for name, found in by_module.get(next(iter(targets)).name, ()):
                    table.setdefault(f"{path}.{name}", found)

    def _applies(self, site: PolicySite) -> bool:
        """A setter call is Keras' own (``runner.set_policy(pi)`` is not); layer dtypes always count."""
        if site.how == "layer":
            return True
        k = canonical(site.api, self.reexports)
        return is_floatx_setter(k) if site.how == "floatx" else is_policy_setter(k)


def patching_imports(facts: FileFacts) -> frozenset[str]:
    """The packages a module imports, at module level or inside a function, that replace torch names on import."""
    return frozenset(r.module.split(".", 1)[0] for r in facts.imports if not r.level) & PATCHING_PACKAGES


def code_bounds(modules, root: Path) -> tuple[tuple[str, str, str], ...]:
    """The version evidence of ``modules``' code, one entry per (package, specifier), cited by its first module
    (by its path in the project at ``root``, as pin files are)."""
    found: dict[tuple[str, str], str] = {}
    for module in modules:
        for package, spec, what, line in module.facts.version_bounds:
            place = module.path.relative_to(root).as_posix() if module.path.is_relative_to(root) else module.display
            found.setdefault((package, spec), f"{place}:{line} {what}")
    return tuple((package, spec, where) for (package, spec), where in found.items())


def shared_code_bounds(model: ProjectModel) -> dict[Module, tuple[tuple[str, str, str], ...]]:
    """The code's version evidence that holds for each module: the bounds every program reaching it shares (a module
    runs wherever one of them runs), or its own where no program reaches it."""
    reaching: dict[Module, list[Program]] = {}
    for program in model.programs:
        for module in program.parents:
            reaching.setdefault(module, []).append(program)
    out = {}
    for module in model.modules:
        programs = reaching.get(module)
        if not programs:
            out[module] = code_bounds([module], model.root)
            continue
        shared = set.intersection(*({b[:2] for b in p.version_bounds} for p in programs))
        out[module] = tuple(b for b in programs[0].version_bounds if b[:2] in shared)
    return out


def module_facts(
    model: ProjectModel,
    pins: PinFinder | None,
    policy_setting: str | None,
    configured: Generation | None,
    distribution: Distribution | None = None,
) -> dict[str, ProjectFacts]:
    """Each module's facts, by display path: the union over the programs that reach it. Modules of the
    ``distribution`` the project publishes are library code whatever its own scripts set."""
    roles = model.summaries()
    reaching: dict[Module, list[Program]] = {}
    for program in model.programs:
        for module in program.parents:
            reaching.setdefault(module, []).append(program)
    # What each package imports (its top-level package, or the folder of a module outside packages): the Keras of
    # library code that imports none itself. Never the whole project: a monorepo's packages are unrelated.
    package_imports: dict[str, tuple[frozenset[str], bool]] = {}
    for m in model.modules:
        imports, legacy = package_imports.get(_package_of(m), (frozenset(), False))
        package_imports[_package_of(m)] = (imports | m.facts.keras_imports, legacy or m.facts.legacy_keras_env)
    program_generation: dict[Program, Generation] = {}
    uncalled, never_run = uncalled_functions(model, distribution)
    out: dict[str, ProjectFacts] = {}
    for module in model.modules:
        defines = frozenset(module.facts.defines)
        # messages cite the nearest program, preferring one that trains what this module defines
        programs = sorted(
            reaching.get(module, []),
            key=lambda p: (p.entry is not module, not p.trains & defines, len(p.parents), p.entry.display),
        )
        sites: dict[PolicySite, ProgramLink] = {}
        for program in programs:
            for site in program.sites:
                if module is not program.entry and _runs_before(model, program.entry, site):
                    continue  # the entry point runs this module's code only before the setter: float32
                sites.setdefault(site, program.link_to(module))
        testing = _is_test_module(module.path)
        published = distribution is not None and distribution.ships(module.path)
        for site in module.facts.policies:  # dtype="mixed_float16" on a layer governs that layer wherever it runs
            if site.how == "layer" and not (testing and site.function):
                sites.setdefault(site, ProgramLink(module.display))
        if policy_setting:
            policies, links = (PolicySite(policy_setting, "", 0, "config"),), ()
        else:
            ordered = sorted(sites, key=lambda s: (s.path != module.display, s.path, s.line))  # stable: source order
            policies, links = tuple(ordered), tuple(sites[s] for s in ordered)
        mixed = any(p.policy not in FLOAT32_POLICIES for p in policies)
        if programs:
            namespaces = frozenset().union(*(p.keras_imports for p in programs))
            tpu = sorted(frozenset().union(*(p.tpu_sites for p in programs)))
        else:
            namespaces = frozenset(module.facts.keras_imports)
            tpu = [(module.display, line) for line in module.facts.tpu_lines]
        patching = (
            frozenset().union(*(p.patching_imports for p in programs)) if programs else patching_imports(module.facts)
        )
        out[module.display] = ProjectFacts(
            policies=policies,
            generation=_generation(module, programs, program_generation, pins, configured, package_imports),
            tpu_sites=tuple(tpu),
            reexports=model.reexports,
            summaries=roles,
            keras_namespaces=namespaces,
            policy_from_config=bool(policy_setting),
            links=links,
            # Library code: a module of the published package (its users pick the policy, not the repository's
            # tool scripts), or one no program of the project runs except tests. Unpublished code the project
            # runs in float32 (a float32 training script reaches it) is the project's own float32 code, and so is
            # unpublished support code in a test folder (an integration test's model): only the tests run it.
            library_context=not policy_setting
            and not module.entry
            and (
                published
                or not mixed
                and all(_is_test_module(p.entry.path) for p in programs)
                and not _in_test_folder(module.path, model.root)
            ),
            distribution=distribution.name if published else "",
            path=module.display,
            test_module=testing,
            trained_names=defines & frozenset().union(*(p.trains for p in programs)),
            uncalled=uncalled.get(module, frozenset()),
            never_runs=module in never_run,
            patching_imports=patching,
            run_lines=_run_lines(module, model.modules),
        )
    return out


def _runs_before(model: ProjectModel, entry: Module, site: PolicySite) -> bool:
    """Whether all project code an entry point imports runs before the top-level statement that sets ``site``:
    its imports of project modules and every later use of the names they bind come before it. Project code runs
    only where the entry point's own code calls it, directly or through objects it handed that code to."""
    if site.runs_at is None or site.path != entry.display:
        return False
    lines = entry.facts.run_lines
    latest = -1
    for index, record in enumerate(entry.facts.imports):
        if not model._resolve(entry, entry, index):
            continue  # a package from outside the project
        last = lines.get(record.bound.partition(".")[0])
        if last is None:
            return False  # bound in a function, a star import, or a name used where its runs cannot be told
        latest = max(latest, record.line, last)
    return latest < site.runs_at


def _run_lines(module: Module, modules: list[Module]) -> tuple[tuple[str, int], ...]:
    """Where the module's own top-level code runs its functions, less those a module that may import it names (it
    may call them at any time). Nothing imports a notebook."""
    lines = module.facts.run_lines
    if not lines or module.notebook:
        return tuple(sorted(lines.items()))
    stem = module.name.rpartition(".")[2]
    importers = [
        m for m in modules if m is not module and any(stem in (*r.module.split("."), r.name) for r in m.facts.imports)
    ]
    named = frozenset().union(*(m.uses for m in importers))
    return tuple(sorted((name, line) for name, line in lines.items() if name not in named))


def _generation(
    module: Module,
    programs: list[Program],
    memo: dict,
    pins: PinFinder | None,
    configured: Generation | None,
    package_imports: dict[str, tuple[frozenset[str], bool]],
) -> Generation:
    """Config, else the pins nearest above the program intersected with its code's version evidence (``from
    torch._six``, ``tf.contrib``), else the program's own imports, else every supported generation."""
    if configured is not None:
        return configured
    if not programs:  # library code: the pins above it and its own code
        tf = [b for b in code_bounds([module], pins.root if pins else module.path.parent) if b[0] == "tensorflow"]
        pinned = pins.target_for(module.path.parent, tf) if pins else _code_generation(tf)
        whose = f"module {module.display}"
        imports, package_legacy = package_imports[_package_of(module)]
        if package_legacy and not module.facts.legacy_keras_env:  # the package sets it on import: before this code
            whose = f"the package of {module.display}"
        own = from_imports(module.facts.keras_imports, module.facts.legacy_keras_env or package_legacy, whose)
        own = _tf_keras_package(own, whose, module, [module])
        package = from_imports(imports, package_legacy, f"the package of {module.display}")
        return _tf_keras_chosen(pinned, own) or own or package or DEFAULT
    found = []
    for program in programs:
        if program not in memo:
            whose = f"program {program.entry.display}"
            tf = [b for b in program.version_bounds if b[0] == "tensorflow"]
            pinned = pins.target_for(program.entry.path.parent, tf) if pins else _code_generation(tf)
            own = from_imports(
                program.keras_imports, program.legacy_keras_env, whose, program.tf1 and not program.sites
            )
            own = _tf_keras_package(own, whose, program.entry, program.parents)
            memo[program] = _tf_keras_chosen(pinned, own) or own or DEFAULT
        found.append(memo[program])
    # The oldest wins a disagreement: the newer API's fixes (scale_loss) crash on an older Keras, not the reverse.
    return min(found, key=lambda g: g.value)


def uncalled_functions(
    model: ProjectModel, distribution: Distribution | None
) -> tuple[dict[Module, frozenset[str]], set[Module]]:
    """The plain functions and methods of the project's helper modules that never run: those no live code names; and
    the modules none of whose code runs (``modules_never_run``).

    Helper modules are the unpublished, non-test modules the project imports, the orphans beside an entry point that
    imports a framework (a module nothing imports in a folder of training scripts: a stale copy), and the modules no
    program reaches in a top-level folder whose programs train or infer (a monorepo's unused copies), whose top-level
    code never runs either. An imported helper's top-level code runs on import; every other
    module's code may be called from outside (a script's functions from a notebook, a library's by its users), so
    all of it counts as live. Liveness then follows names: a live function's body makes the names it reads live, so
    a function that only an uncalled function calls is uncalled too. A method runs only if its class is named by
    live code, and, for a class deriving from none, if its name is; dunder methods and ``main`` (often named only
    by a packaging entry point) always run."""
    entry_folders = {m.folder for m in model.modules if m.entry and _runs_a_framework(m)}
    shipped = [d for d in (distribution, unpacked_wheel(model.root)) if d is not None]
    own = [
        m
        for m in model.modules
        if not _is_test_module(m.path) and not any(d.ships(m.path) for d in shipped) and not m.entry
    ]
    helpers = {m for m in own if m in model.imported or m.folder in entry_folders and m.path.name != "__init__.py"}
    # Modules no program reaches, in a tree whose programs run: their top-level code never runs either.
    reached = {m for p in model.programs for m in (p.entry, *p.parents)}
    running_trees = {_tree_of(p.entry, model.root) for p in model.programs if _runs_a_framework(p.entry)}
    unreached = {m for m in own if m not in reached and _tree_of(m, model.root) in running_trees}
    helpers |= unreached
    never_run = modules_never_run(model, unreached)
    live: set[str] = set()
    # each helper function that may be dead -> the names that must all be live for it to run
    keys: dict[tuple[Module, str], set[str]] = {}
    for module in model.modules:
        if module in never_run:
            continue  # nothing it names runs, and nothing names what it defines
        if module not in helpers:
            live.update(module.uses)
            continue
        if module not in unreached:
            live.update(module.facts.outside_uses)
        derived = set(module.facts.subclasses)
        for qualified in module.facts.functions:
            owner, _, name = qualified.rpartition(".")
            implicit = name.startswith("__") or not owner and name == "main"
            needed = {owner} if owner else set()
            if not implicit and owner not in derived:
                needed.add(name)
            keys[module, qualified] = needed
    waiting: dict[str, list[tuple[Module, str]]] = {}
    remaining = {function: len(needed) for function, needed in keys.items()}
    pending = list(live)
    for function, needed in keys.items():
        for key in needed:
            waiting.setdefault(key, []).append(function)
        if not needed:
            pending.extend(function[0].facts.functions[function[1]])
    seen: set[str] = set()
    while pending:
        name = pending.pop()
        if name in seen:
            continue
        seen.add(name)
        for function in waiting.get(name, ()):
            remaining[function] -= 1
            if remaining[function] == 0:  # every key live: it runs, and so does what it names
                pending.extend(function[0].facts.functions[function[1]])
    out: dict[Module, set[str]] = {module: set(module.facts.functions) for module in never_run}
    for (module, qualified), left in remaining.items():
        if left:
            out.setdefault(module, set()).add(qualified)
    return {module: frozenset(names) for module, names in out.items()}, never_run


_FRAMEWORKS = frozenset({"torch", "tensorflow", "keras", "tf_keras", "jax"})


def _path_parts(module: Module, root: Path) -> tuple[str, ...]:
    """The module's path below ``root`` as an import would spell it (``a/b/c.py`` and ``a/b/c/__init__.py``: a, b, c)."""
    try:
        parts = module.path.relative_to(root).with_suffix("").parts
    except ValueError:
        return ()
    return parts[:-1] if parts and parts[-1] == "__init__" else parts


def _named_by(
    importer: Module, record, by_name: dict[str, list[Module]], spelled: dict[Module, tuple[str, ...]]
) -> list[Module]:
    """The modules an import the project does not resolve may load: those whose path ends with its dotted path
    (``from TensorFlow.common import performance``: ``.../TensorFlow/common/performance.py``, or the package where
    the name is an attribute), nearest the importer (the folder above it a launcher puts on ``sys.path``)."""
    wanted = (*record.module.split("."), *([record.name] if record.name and record.name != "*" else []))
    for parts in (wanted, wanted[:-1]) if len(wanted) > 1 else (wanted,):
        candidates = [m for m in by_name.get(parts[-1], []) if spelled[m][-len(parts) :] == parts]
        if candidates:
            shared = {m: len(os.path.commonprefix([importer.path.parts, m.path.parts])) for m in candidates}
            nearest = max(shared.values())
            return [m for m in candidates if shared[m] == nearest]
    return []


def modules_never_run(model: ProjectModel, unreached: set[Module]) -> set[Module]:
    """The ``unreached`` modules (no program reaches them, in a tree whose programs run) that nothing which may run
    could load either (``ProjectModel.possibly_run``: an import the project does not resolve may load a module by
    its last name). They never run at all: a same-named function elsewhere (a sibling copy of the same library)
    calls its own."""
    return unreached - model.possibly_run()


def _tree_of(module: Module, root: Path) -> str:
    """The top-level folder of the project that holds the module (a monorepo's submitter or product tree)."""
    try:
        parts = module.path.relative_to(root).parts
    except ValueError:
        return ""
    return parts[0] if len(parts) > 1 else ""


def _runs_a_framework(module: Module) -> bool:
    """Imports a training framework itself (a training or inference script, not ``setup.py`` or a docs build)."""
    return any(not r.level and r.module.split(".")[0] in _FRAMEWORKS for r in module.facts.imports)


def _package_of(module: Module) -> str:
    """The module's top-level package (``keras_hub`` for ``keras_hub.src.models.x``), or its folder where it lies
    outside any package."""
    return module.name.split(".")[0] if "." in module.name or module.is_package else module.folder


def _code_generation(bounds) -> Generation | None:
    """The target the code's own version evidence gives where no pins are read (in-memory projects)."""
    from mplint.project.pins import PinFinder

    return PinFinder.from_code(bounds) if bounds else None


def _tf_keras_package(own: Generation | None, whose: str, entry: Module, modules) -> Generation | None:
    """Keras 2 where the code is (or runs) the tf_keras package itself, as in the keras-team/tf-keras repository or
    an unpacked tf-keras wheel: that code is Keras 2 by definition, whatever its imports say (``from . import
    backend``, ``tensorflow.python`` internals, a TF1 session in its backend)."""
    if own is not None and own.value == 2:
        return own
    ours = [m for m in modules if m.name == "tf_keras" or m.name.startswith("tf_keras.")]
    if not ours:
        return own
    how = (
        "is part of the tf_keras package"
        if entry in ours
        else f"runs the tf_keras package ({min(m.display for m in ours)})"
    )
    return Generation(2, f"{whose} {how}: Keras 2", "imports")


def _tf_keras_chosen(pinned: Generation | None, own: Generation | None) -> Generation | None:
    """The pinned target, unless the code chose tf_keras: a TensorFlow pin says what ``tf.keras`` is and a keras
    pin what ``import keras`` is, but tf_keras (or TF_USE_LEGACY_KERAS=1) is Keras 2 on every TensorFlow that has it."""
    if own is not None and own.value == 2 and (pinned is None or pinned.origin in ("pin-tensorflow", "pin-keras")):
        return own
    return pinned


def in_memory_facts(
    files: dict[str, bytes], keras: int | None = None, policy: str | None = None
) -> dict[str, ProjectFacts]:
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
    configured = Generation(keras, f"keras = {keras} in the mplint config", "config") if keras is not None else None
    return module_facts(ProjectModel(modules, root, reexports), None, policy, configured)
