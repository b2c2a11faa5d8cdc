"""The facts of a project's files: each file's record (cached), the program model over them, each
module's facts and the project summary. One implementation for the CLI, the language server and tests."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

from mplint.engine.notebooks import Notebook, is_notebook
from mplint.engine.notebooks import load as load_notebook
from mplint.engine.summaries import declared
from mplint.pool import parallel_map
from mplint.project.cache import ProjectCache, content_hash, settings_key
from mplint.project.config import Config, load_config, marked_root
from mplint.project.discovery import SourcePath, discover, module_name
from mplint.project.extract import FileFacts, extract_file_facts
from mplint.project.facts import ProjectFacts, ProjectSummary
from mplint.project.generation import TARGETS, Generation
from mplint.project.pins import PinFinder
from mplint.project.programs import Module, ProjectModel, module_facts, shared_code_bounds
from mplint.project.published import published


def read_source(source: SourcePath) -> bytes | None:
    try:
        return source.path.read_bytes()
    except OSError:
        return None


def python_source(source: SourcePath, data: bytes) -> bytes | None:
    """What project facts are read from: the file, or a notebook's code cells as one module."""
    if not is_notebook(source.path):
        return data
    nb = load_notebook(data)
    return nb.virtual.encode("utf-8") if isinstance(nb, Notebook) else None


class FactsMemo:
    """What a long-lived process (the language server) keeps of the facts between runs: each file's facts by
    content, and each project's module facts with the file facts they were built from. A run whose files'
    facts equal those (an edit that changes no import, policy or summary) reuses the module facts as they are."""

    def __init__(self):
        self.files: dict[tuple[str, str], FileFacts] = {}  # (display, content digest) -> facts
        self.projects: dict[tuple, tuple] = {}  # (root, target, policy, files) -> (their file facts, module facts)
        self.seen: dict[str, tuple] = {}  # root -> (the file facts of its last run, a digest of its module facts)
        self.pins: dict[tuple, str] = {}  # (root, the files' folders) -> pin_files_digest
        self.version = 0  # bumped whenever a project's module facts differ from its last run's

    def forget_projects(self) -> None:
        """After a configuration change: module facts are built again (file facts, keyed by content, stay)."""
        self.projects, self.seen, self.pins = {}, {}, {}
        self.version += 1

    def pin_files_digest(self, root: Path, sources: list[SourcePath]) -> str:
        """``pin_files_digest``, kept until the configuration (pin files are watched with it) may have changed."""
        key = (str(root), frozenset(s.path.parent for s in sources))
        if key not in self.pins:
            self.pins[key] = pin_files_digest(root, sources)
        return self.pins[key]


FILES_KEPT = 4096  # file facts a memo keeps (every version of an edited file adds one)
PROJECTS_KEPT = 16  # module facts a memo keeps (one per project, settings and checked file)


def facts_of(
    loaded,
    cache: ProjectCache | None,
    digests: dict[Path, str],
    jobs: int | None,
    expect: Callable[[str, int], None] | None = None,
    step: Callable[[], None] | None = None,
    memo: FactsMemo | None = None,
) -> dict[Path, FileFacts]:
    """Each readable file's facts: from the memo or the cache, else extracted (in parallel); ``expect("facts",
    n)`` is told how many files are extracted, ``step`` after each."""
    found: dict[Path, FileFacts] = {}
    missing = []
    for source, data in loaded:
        if isinstance(data, bytes):
            cached = memo.files.get((source.display, digests[source.path])) if memo else None
            if cached is None and cache:
                cached = cache.facts(source.display, digests[source.path])
            if cached is None:
                missing.append((source, data))
            else:
                found[source.path] = cached
    if expect:
        expect("facts", len(missing))
    if missing:
        declared()  # the rules that declare summary kinds, loaded before workers fork (not once in each)
    for (source, _), facts in zip(missing, parallel_map(_extract_facts, missing, jobs, step)):
        if facts is not None:
            if cache:
                cache.store_facts(source.display, digests[source.path], facts)
            found[source.path] = facts
    if memo is not None:
        for source, _ in loaded:
            if source.path in found:
                memo.files[(source.display, digests[source.path])] = found[source.path]
        while len(memo.files) > FILES_KEPT:
            del memo.files[next(iter(memo.files))]
    return found


def _extract_facts(item: tuple[SourcePath, bytes]) -> FileFacts | None:
    source, data = item
    code = python_source(source, data)
    if code is None:
        return None
    facts = extract_file_facts(code, source.display, module_name(source.path)[0])
    if is_notebook(source.path):  # sites are named by cell and line in it, as the notebook shows them
        nb = load_notebook(data)
        facts.policies = [replace(p, cell=nb.locate(p.line)[0], cell_line=nb.locate(p.line)[1]) for p in facts.policies]
    return facts


def module_facts_of(
    config: Config,
    sources: list[SourcePath],
    file_facts: dict[Path, FileFacts],
    configured: Generation | None,
    policy: str | None,
    cache: ProjectCache | None = None,
    digests: dict[Path, str] | None = None,
    root: Path | None = None,
    memo: FactsMemo | None = None,
    expect: Callable[[str, int], None] | None = None,
    step: Callable[[], None] | None = None,
    pins_digest: str | None = None,
) -> tuple[dict[Path, ProjectFacts], ProjectSummary]:
    """Every module's facts, from the program model of the project at ``root`` (the config's folder unless
    given: a nested project may use a config above it), cached while no file changes; with a ``memo``,
    kept while no file's facts change. ``expect`` and ``step`` follow the program model's walks (``ProjectModel``).
    ``pins_digest``: ``pin_files_digest(root, sources)`` where the caller has it (it reads every pin file)."""
    root = root or config.root
    pins_digest = (
        pins_digest
        if pins_digest is not None
        else memo.pin_files_digest(root, sources)
        if memo is not None
        else pin_files_digest(root, sources)
        if cache is not None
        else ""
    )
    if memo is None:
        return _module_facts(
            config, sources, file_facts, configured, policy, cache, digests, root, pins_digest, expect, step
        )
    key = (str(root), configured, policy, tuple((s.path, s.display) for s in sources), pins_digest)
    last = memo.projects.pop(key, None)
    if last is None or not _same_facts(last[0], file_facts):
        last = (
            dict(file_facts),
            _module_facts(
                config, sources, file_facts, configured, policy, cache, digests, root, pins_digest, expect, step
            ),
        )
    memo.projects[key] = last  # the newest last: the oldest go first
    while len(memo.projects) > PROJECTS_KEPT:
        del memo.projects[next(iter(memo.projects))]
    seen = memo.seen.get(str(root))
    if seen is None or not _same_facts(seen[0], file_facts):  # some file's facts changed: did the modules'?
        digest = _modules_digest(last[1][0])
        if seen is None or seen[1] != digest:
            memo.version += 1
        memo.seen[str(root)] = (dict(file_facts), digest)
    return last[1]


def _modules_digest(by_path: dict[Path, ProjectFacts]) -> str:
    """One digest of what every module is checked with (``facts_key``: what results are cached by)."""
    shared: dict[int, str] = {}
    keys = []
    for path, facts in sorted(by_path.items()):
        if id(facts.reexports) not in shared:
            shared[id(facts.reexports)] = content_hash(
                repr((sorted(facts.reexports.items()), sorted(facts.summaries.items()))).encode()
            )
        keys.append((str(path), facts_key(facts, shared[id(facts.reexports)])))
    return content_hash(repr(keys).encode())


def _same_facts(before: dict[Path, FileFacts], now: dict[Path, FileFacts]) -> bool:
    """Whether every file's facts are what they were (the same record, or an equal one extracted again)."""
    return before.keys() == now.keys() and all(
        now[path] is facts or now[path] == facts for path, facts in before.items()
    )


def _module_facts(
    config, sources, file_facts, configured, policy, cache, digests, root, pins_digest, expect=None, step=None
):
    pins = PinFinder(root)
    pinned = None if configured else pins.target_for(root)
    key = None
    if cache is not None and digests is not None:
        key = settings_key(
            sorted((s.display, digests.get(s.path)) for s in sources), configured, policy, str(root), pins_digest
        )
        cached = cache.module_facts(key)
        if cached is not None:
            by_display, summary = cached
            return {s.path: by_display[s.display] for s in sources if s.display in by_display}, summary
    modules = []
    for source in sources:
        if source.path in file_facts:
            name, is_package = module_name(source.path)
            modules.append(
                Module(source.path, source.display, name, is_package, is_notebook(source.path), file_facts[source.path])
            )
    reexports: dict[str, str] = {}
    for module in modules:
        reexports.update(module.facts.reexports)
    model = ProjectModel(modules, root, reexports, expect, step)
    by_display = module_facts(model, None if configured else pins, policy, configured, published(root))
    from mplint.project.torch_target import TorchTargets

    torch = TorchTargets(pins.parsed, pins.root)  # programs in one folder share its torch pins
    code = shared_code_bounds(model)
    for module in modules:  # the torch pin nearest each module: what the PyTorch rules' fixes may write for
        target = torch.of(module.path, code.get(module, ()))
        if target.pinned:
            by_display[module.display] = replace(by_display[module.display], torch_pin=target)
    from mplint.project.trainer_target import TrainerTargets

    trainers = TrainerTargets(pins.parsed)
    for module in modules:  # the trainer stacks' ranges: what the MPT7xx rules' messages and fixes hold on
        if stacks := trainers.of(module.path):
            by_display[module.display] = replace(by_display[module.display], trainer_pins=stacks)
    # The root's pins are the target of every program unless some code says otherwise (tf_keras on a TF pin)
    project_wide = configured or (pinned if all(f.generation == pinned for f in by_display.values()) else None)
    summary = ProjectSummary(
        root,
        len(modules),
        [_program_record(p, by_display[p.entry.display], torch, trainers) for p in model.programs],
        _target_record(project_wide) if project_wide else None,
        {p.entry.display: sorted(m.display for m in p.parents) for p in model.programs},
    )
    if key is not None:
        cache.store_module_facts(key, by_display, summary)
    return {m.path: by_display[m.display] for m in modules}, summary


def _program_record(program, facts: ProjectFacts, torch, trainers) -> dict:
    """What ``--show-facts`` and the JSON ``projects`` block say of one program."""
    return {
        "entry": program.entry.display,
        "policies": [
            {"policy": s.policy, "path": s.path, "line": s.line}
            if s.cell is None
            else {"policy": s.policy, "path": s.path, "cell": s.cell, "line": s.cell_line}
            for s in program.sites
        ],
        "keras_generation": _target_record(facts.generation),
        "torch": _torch_record(program, torch),
        "trainers": _trainer_records(program, trainers),
        "tpu": [f"{path}:{line}" for path, line in sorted(program.tpu_sites)],
        "modules": len(program.parents),
    }


def _target_record(generation: Generation) -> dict:
    """A target as ``--show-facts`` and JSON give it: the range (newest ``value``, ``oldest``), its label and evidence."""
    return {"value": generation.value, "oldest": generation.low, "label": generation.label, "source": generation.source}


def _torch_record(program, torch) -> dict | None:
    """The torch range of a program whose modules import torch (None for the others)."""
    if not any(i.module.split(".")[0] == "torch" for m in program.parents for i in m.facts.imports):
        return None
    target = torch.of(program.entry.path, program.version_bounds)
    return {"label": target.label, "source": target.source if target.pinned else "no torch pin"}


def _trainer_records(program, trainers) -> list[dict]:
    """Each trainer stack a program's modules import or configure: its range and the precision settings found."""
    from mplint.knowledge.trainer_versions import STACKS, stack_of
    from mplint.project.trainer_target import unpinned

    imported = {stack_of(i.module.split(".")[0]) for m in program.parents for i in m.facts.imports}
    settings = [
        (m.display, s) for m in sorted(program.parents, key=lambda m: m.display) for s in m.facts.trainer_settings
    ]
    pinned = {t.stack: t for t in trainers.of(program.entry.path)}
    records = []
    for stack in STACKS:
        mine = [(path, s) for path, s in settings if s[0] == stack]
        if stack not in imported and not mine:
            continue
        target = pinned.get(stack) or unpinned(stack)
        records.append(
            {
                "stack": stack,
                "label": target.label,
                "source": target.source if target.pinned else f"no {STACKS[stack].label} pin",
                "settings": [f"{kind}({text}) at {path}:{line}" for path, (_, kind, text, line) in mine],
            }
        )
    return records


def configured_target(config: Config, target: str | None = None, keras: int | None = None) -> Generation | None:
    """--target/--keras, else the config's `target`/`keras`: the generation every program targets."""
    if target:
        return Generation(TARGETS[target], f"--target {target}", "config")
    if keras:
        return Generation(keras, f"keras = {keras} in the mplint config", "config")
    if config.target:
        return Generation(TARGETS[config.target], f"target = {config.target} in the mplint config", "config")
    if config.keras:
        return Generation(config.keras, f"keras = {config.keras} in the mplint config", "config")
    return None


def facts_key(facts: ProjectFacts, reexports_digest: str = "") -> tuple:
    """The facts as a value whose repr is the same in every process (no set iteration order). The project's
    re-exports, shared by every module and large in big projects, enter as their digest."""
    return (
        facts.policies,
        facts.links,
        facts.generation,
        facts.tpu_sites,
        reexports_digest or (sorted(facts.reexports.items()), sorted(facts.summaries.items())),
        sorted(facts.keras_namespaces),
        facts.policy_from_config,
        facts.library_context,
        facts.distribution,
        facts.test_module,
        sorted(facts.trained_names),
        facts.torch_pin,
        facts.trainer_pins,
        sorted(facts.uncalled),
        sorted(facts.patching_imports),
        facts.run_lines,
    )


def signature(facts: dict[Path, ProjectFacts]) -> tuple:
    """What a fix can change in the facts other files are checked with: each module's context, and the
    project's re-exports and function summaries (a fix that gives a builder a float32 dtype settles its callers)."""
    per_module = {
        path: (
            f.policy_names,
            f.global_policy_names,
            f.generation.value,
            f.uses_tpu,
            f.keras_namespaces,
            f.library_context,
        )
        for path, f in facts.items()
    }
    tables = {id(f.summaries): (f.reexports, f.summaries) for f in facts.values()}
    return per_module, repr(sorted(repr(t) for t in tables.values()))


def project_facts(root: Path, keras: int | None = None, policy: str | None = None) -> dict[str, ProjectFacts]:
    """The facts of every module of the project at ``root``, by path relative to it (for tools and tests)."""
    root = root.resolve()
    config = load_config([root])
    found = discover([root], config.root, config.exclude, config.extend_exclude, config.respect_gitignore)
    nested = {folder: (marked_root(folder) or root) != root for folder in {s.path.parent for s in found.files}}
    sources = [
        SourcePath(s.path, s.path.relative_to(root).as_posix()) for s in found.files if not nested[s.path.parent]
    ]
    loaded = [(s, read_source(s)) for s in sources]
    by_path, _ = module_facts_of(
        config, sources, facts_of(loaded, None, {}, 1), configured_target(config, None, keras), policy or config.policy
    )
    return {path.relative_to(root).as_posix(): facts for path, facts in by_path.items()}


def pin_files_digest(root: Path, sources: list[SourcePath] = ()) -> str:
    """One digest of every file the pin finder may read for the project's files (the folders from each file up
    to the root, and what their pin files include, at any depth): a changed pin changes targets without changing
    code."""
    from mplint.project.pins import pin_files

    root = root.resolve()
    folders = {root}
    for source in sources:
        folder = source.path.parent.resolve()  # the folder holding the file, not a link target (links can loop)
        while folder not in folders and folder.is_relative_to(root):
            folders.add(folder)
            folder = folder.parent
    parts = []
    for path in sorted(p for p in pin_files(folders) if ".mplint_cache" not in p.parts):
        try:
            parts.append((str(path), content_hash(path.read_bytes())))
        except OSError:
            continue
    return content_hash(repr(parts).encode())
