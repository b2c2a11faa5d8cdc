"""One mplint run: config -> files -> project facts -> per-file checks -> writes."""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path

from mplint.catalog import engine_diagnostic
from mplint.checks import all_rules
from mplint.diagnostics import Diagnostic, FileResult
from mplint.engine.check_options import PARSE_ERROR, CheckOptions
from mplint.engine.notebooks import check_notebook, is_notebook
from mplint.engine.registry import select
from mplint.engine.summaries import load_with
from mplint.fixes.write_back import write_back
from mplint.pool import parallel_map
from mplint.project.build import (
    FactsMemo,
    configured_target,
    facts_key,
    facts_of,
    module_facts_of,
    pin_files_digest,
    signature,
)
from mplint.project.cache import ProjectCache, content_hash, settings_key
from mplint.project.config import Config, is_marked, load_config
from mplint.project.discovery import Discovery, SourcePath, discover, is_excluded, module_name
from mplint.project.facts import ProjectFacts, ProjectSummary
from mplint.project.generation import Generation

PHASES = ("discovery", "facts", "programs", "checks", "fixes")  # what ``on_progress`` reports, in order

# The rules declare the kinds of function summaries that project facts read: they are loaded when the first file's
# facts are read (a run whose facts all come from the cache loads no rule).
load_with(all_rules)


@dataclass
class RunOptions:
    paths: list[Path] = field(default_factory=lambda: [Path(".")])
    fix: bool = False
    unsafe_fixes: bool | None = None  # None: from config
    write: bool = True  # False for --diff
    select: list[str] | None = None
    ignore: list[str] = field(default_factory=list)
    extend_select: list[str] = field(default_factory=list)
    per_file_ignores: dict[str, list[str]] | None = None  # None: the config's
    extend_per_file_ignores: dict[str, list[str]] = field(default_factory=dict)
    exclude: list[str] | None = None  # None: the config's
    extend_exclude: list[str] = field(default_factory=list)
    force_exclude: bool | None = None  # None: the config's
    keras: int | None = None
    target: str | None = None  # tf1 | tf2.3 | keras2 | keras3
    policy: str | None = None
    config_path: Path | None = None
    add_noqa: bool = False  # suppress every current finding with a noqa comment
    only: set[Path] | None = None  # check only these (absolute) files; the others still feed project facts
    facts_only: bool = False  # read the project facts and check no file (the language server's warm-up)
    stdin: tuple[Path, bytes] | None = None  # (file name, content) of a file read from standard input; never written
    on_progress: Callable[[str, int, int | None], None] | None = None  # (phase, files done, files in it): PHASES
    jobs: int | None = None  # worker processes; None: one per core
    cache: bool = True  # reuse results from .mplint_cache/ when nothing relevant changed
    prefilter: bool = True  # the rules' candidate tests; off only to show they hide nothing
    # Files whose text is not (yet) what is on disk: an editor's unsaved buffers, read instead of the disk
    overlays: dict[Path, bytes] = field(default_factory=dict)
    warm: Warm | None = None  # what a long-lived process keeps between runs (None: every run starts afresh)


class Warm:
    """What the language server keeps from one run to the next, so that checking an edited buffer costs its
    own check and little else. Configuration, file discovery, project roots and files read are kept until
    ``forget_configuration`` (the server calls it when a config, pin or file is saved, added, removed or
    changed); a file is read again before that when its size or time changes; facts are reused while equal."""

    def __init__(self):
        self.facts = FactsMemo()
        self._configuration()

    def _configuration(self) -> None:
        self.files: dict[Path, tuple[tuple, bytes, str]] = {}  # path -> (stat, content, digest)
        self.configs: dict[tuple, Config] = {}
        self.found: dict[tuple, Discovery] = {}
        self.roots: dict[Path, Path] = {}

    def forget_configuration(self) -> None:
        self._configuration()
        self.facts.forget_projects()

    def config(self, paths: list[Path], explicit: Path | None) -> Config:
        key = (tuple(paths), explicit)
        if key not in self.configs:
            self.configs[key] = load_config(paths, explicit)
        return self.configs[key]

    def discover(self, paths, root, exclude, extend_exclude, respect_gitignore, force_exclude=False):
        key = (
            tuple(paths),
            root,
            tuple(exclude) if exclude is not None else None,
            tuple(extend_exclude),
            respect_gitignore,
            force_exclude,
        )
        if key not in self.found:
            self.found[key] = discover(
                paths, root, exclude, extend_exclude, respect_gitignore, force_exclude=force_exclude
            )
        found = self.found[key]
        return replace(found, files=list(found.files), errors=list(found.errors))

    def read(self, source: SourcePath) -> tuple[bytes | Diagnostic, str | None]:
        """The file's bytes and digest, read again only when its size or modification time changed."""
        try:
            stat = source.path.stat()
        except OSError:
            return _read(source), None
        mark = (stat.st_mtime_ns, stat.st_size, stat.st_ino)
        known = self.files.get(source.path)
        if known is not None and known[0] == mark:
            return known[1], known[2]
        data = _read(source)
        if isinstance(data, bytes):
            self.files[source.path] = (mark, data, content_hash(data))
            return data, self.files[source.path][2]
        return data, None


def _load_config(options: RunOptions, paths: list[Path], explicit: Path | None = None) -> Config:
    return options.warm.config(paths, explicit) if options.warm else load_config(paths, explicit)


def _discover(options: RunOptions, paths, root, exclude, extend_exclude, respect_gitignore, force_exclude=False):
    if options.warm:
        return options.warm.discover(paths, root, exclude, extend_exclude, respect_gitignore, force_exclude)
    return discover(paths, root, exclude, extend_exclude, respect_gitignore, force_exclude=force_exclude)


@dataclass
class RunReport:
    results: list[FileResult]
    errors: list[str]  # fatal-for-one-path problems (missing paths, write failures)
    config: Config
    projects: list[ProjectSummary] = field(default_factory=list)  # every project checked, in order
    noqa_added: int = 0  # lines that got a noqa comment (--add-noqa)
    noqa_skipped: int = 0  # findings whose line cannot carry a comment
    changed_on_disk: list[str] = field(default_factory=list)  # files left unfixed: changed after they were read
    notices: list[str] = field(default_factory=list)  # worth telling, no error (leftovers of an interrupted run)
    skipped: list[str] = field(default_factory=list)  # given paths that held nothing to check, and why
    found_no_files: bool = False  # the given paths held no file to check (and named none that is missing)

    @property
    def diagnostics(self) -> list[Diagnostic]:
        return [d for r in self.results for d in r.diagnostics]

    @property
    def remaining(self) -> list[Diagnostic]:
        return [d for d in self.diagnostics if not d.fixed]

    @property
    def fixed_count(self) -> int:
        return sum(r.fixes_applied for r in self.results)


def _read(source: SourcePath) -> bytes | Diagnostic:
    try:
        return source.path.read_bytes()
    except OSError as exc:
        return engine_diagnostic(source.display, PARSE_ERROR, f"cannot read file: {exc.strerror or exc}")


def _enabled_rules(config: Config, options: RunOptions) -> set[str]:
    chosen = options.select if options.select is not None else config.select
    return select(chosen, [*config.ignore, *options.ignore], [*config.extend_select, *options.extend_select])


def _per_file_ignored(config: Config, path: Path) -> set[str]:
    if not config.per_file_ignores:
        return set()
    try:
        rel = path.resolve().relative_to(config.root.resolve()).as_posix()
    except ValueError:
        rel = path.as_posix()
    import pathspec  # imported only for a config with per-file-ignores

    ignored: set[str] = set()
    for glob, selectors in config.per_file_ignores.items():
        if pathspec.GitIgnoreSpec.from_lines([glob]).match_file(rel):
            ignored |= select(selectors)
    return ignored


def with_overrides(config: Config, options: RunOptions) -> Config:
    """The config with the command line's file settings on top (they win, as Ruff's flags do)."""
    per_file = dict(config.per_file_ignores if options.per_file_ignores is None else options.per_file_ignores)
    for glob, rules in options.extend_per_file_ignores.items():
        per_file[glob] = [*per_file.get(glob, []), *rules]
    return replace(
        config,
        per_file_ignores=per_file,
        exclude=config.exclude if options.exclude is None else options.exclude,
        extend_exclude=[*config.extend_exclude, *options.extend_exclude],
        force_exclude=config.force_exclude if options.force_exclude is None else options.force_exclude,
    )


def run(options: RunOptions) -> RunReport:
    """Check (and fix) the files under ``options.paths``.

    Files are grouped by project (the nearest folder with a pyproject.toml,
    setup.py, requirements.txt, .mplint.yaml or .git): each project has its
    own config, dependency pins and facts, so a policy set in one project never
    leaks into another checked in the same run.
    """
    stdin_path = Path(os.path.abspath(options.stdin[0])) if options.stdin else None
    top = with_overrides(
        _load_config(options, [stdin_path] if stdin_path else options.paths, options.config_path), options
    )
    progress = _Progress(options.on_progress)
    progress.expect("discovery", None)
    found = _discover(
        options,
        options.paths,
        top.root,
        top.exclude,
        top.extend_exclude,
        top.respect_gitignore,
        force_exclude=top.force_exclude,
    )
    progress.finish("discovery", len(found.files))
    only = options.only
    if stdin_path is not None:
        found.files = [s for s in found.files if s.path != stdin_path]
        only = set()
        if not (top.force_exclude and is_excluded(stdin_path, top.root, top.exclude, top.extend_exclude)):
            found.files.append(SourcePath(stdin_path, Path(options.stdin[0]).as_posix()))
            only = {stdin_path}
    if options.facts_only:
        only = set()
    project_of = _ProjectOf(top, options.config_path is not None, options.warm.roots if options.warm else None)
    groups: dict[Path, list[SourcePath]] = {}
    for source in found.files:
        groups.setdefault(project_of(source.path), []).append(source)
    report = RunReport([], list(found.errors), top)
    if stdin_path is None:
        report.notices += _leftovers(found.files, options)
        report.skipped = list(found.skipped)
        report.found_no_files = not found.files and not found.errors
    for root, given in groups.items():
        config = top if options.config_path else with_overrides(_load_config(options, [root]), options)
        # Facts never depend on which paths were given: the whole project is read, the given files checked.
        sources = _whole_project(root, config, given, options, project_of, config is top or config.root == top.root)
        wanted = {s.path for s in given} if only is None else only & {s.path for s in given}
        _check_until_facts_settle(config, sources, replace(options, only=wanted), report, progress, root)
    report.results.sort(key=lambda r: r.path)
    return report


class _ProjectOf:
    """The project root of a file: the nearest folder at or above it with a project marker (packaging
    metadata, dependency pins, an mplint config, .git); in an unmarked tree the working folder when it
    holds the file, else the root of the paths given. ``--config`` makes every file one project."""

    def __init__(self, top: Config, explicit: bool, roots: dict[Path, Path] | None = None):
        self.top, self.explicit = top, explicit
        self.cwd = Path.cwd().resolve()
        # kept between runs only by the language server, whose working folder and --config never change
        self.roots: dict[Path, Path] = {} if roots is None else roots
        self._marked: dict[Path, Path | None] = {}  # resolved folder -> its marked root (this run's)

    def __call__(self, path: Path) -> Path:
        folder = path.parent
        root = self.roots.get(folder)
        if root is None:
            if self.explicit:
                root = self.top.root
            else:
                resolved = folder.resolve()
                root = self._marked_root(resolved)
                if root is None:
                    root = self.cwd if resolved.is_relative_to(self.cwd) else self.top.root
            self.roots[folder] = root
        return root

    def _marked_root(self, folder: Path) -> Path | None:
        """``config.marked_root`` of a resolved folder, each folder above it looked at once per run."""
        chain = []
        while folder not in self._marked:
            if is_marked(folder):
                self._marked[folder] = folder
                break
            chain.append(folder)
            if folder.parent == folder:
                self._marked[folder] = None
                break
            folder = folder.parent
        found = self._marked[folder]
        for below in chain:
            self._marked[below] = found
        return found


def _leftovers(files: list[SourcePath], options: RunOptions) -> list[str]:
    """Temporary files an interrupted run left where this run may write: removed when stale (if this run
    writes), reported either way."""
    writes = options.write and (options.fix or options.add_noqa)
    folders = {s.path.parent for s in files}
    if writes:  # a symlink is written through: its target's folder holds the temporary files
        folders |= {Path(os.path.realpath(s.path)).parent for s in files}
    from mplint.fixes.leftovers import leftover_notices
    from mplint.project.discovery import display_path

    cwd = Path.cwd().resolve()
    return [f"{display_path(path, cwd)}: {what}" for path, what in leftover_notices(folders, remove=writes)]


def _whole_project(
    root: Path, config: Config, given: list[SourcePath], options: RunOptions, project_of: _ProjectOf, same_config: bool
) -> list[SourcePath]:
    """Every file of the project at ``root`` (not those of projects nested in it), and the given ones."""
    if same_config and any(Path(os.path.abspath(p)) in (root, *root.parents) for p in options.paths):
        return given  # the given paths cover the project, discovered with its own config
    found = _discover(options, [root], config.root, config.exclude, config.extend_exclude, config.respect_gitignore)
    by_path = {s.path: s for s in given}  # a given file keeps its name (standard input's, say)
    files = [by_path.pop(s.path, s) for s in found.files if project_of(s.path) == root]
    return files + list(by_path.values())


class _Progress:
    """Files done and to do per phase, summed over the run's projects (a phase's total grows as each project
    starts it; None while discovery has not counted the files)."""

    def __init__(self, callback):
        self.callback = callback
        self.done: dict[str, int] = {}
        self.total: dict[str, int | None] = {}

    def expect(self, phase: str, count: int | None) -> None:
        if self.callback:
            self.total[phase] = None if count is None else (self.total.get(phase) or 0) + count
            self.callback(phase, self.done.setdefault(phase, 0), self.total[phase])

    def finish(self, phase: str, count: int) -> None:
        if self.callback:
            self.done[phase] = self.total[phase] = count
            self.callback(phase, count, count)

    def stepper(self, phase: str) -> Callable[[], None] | None:
        if not self.callback:
            return None

        def step() -> None:
            self.done[phase] += 1
            self.callback(phase, self.done[phase], self.total[phase])

        return step


def _check_file(source: SourcePath, data: bytes, check: CheckOptions) -> FileResult:
    from mplint.engine.check import check_source  # libcst: imported only when a file is really checked

    name, is_package = module_name(source.path)
    if is_notebook(source.path):
        return check_notebook(source.display, data, check, name, is_package)
    return check_source(source.display, data, check, name, is_package)


def _targets(rule, facts: ProjectFacts) -> bool:
    """The rule applies to the module's target generation (PyTorch rules name none: they apply everywhere)."""
    return not rule.key.generations or facts.generation.value in rule.key.generations


def _settings(config: Config, options: RunOptions) -> tuple[Generation | None, str | None]:
    """The target and policy that options or config impose on every program (None: each program's own)."""
    return configured_target(config, options.target, options.keras), options.policy or config.policy


MAX_FACT_ROUNDS = 3


def _check_until_facts_settle(
    config: Config, sources: list[SourcePath], options: RunOptions, report: RunReport, progress: _Progress, root: Path
) -> None:
    """Check a project; when fixes changed what the project facts say (a fix that sets a policy), check again.

    A second ``mplint --fix`` must change nothing, so the fixes of one run must already see the
    facts the fixed project has; ``--diff`` follows the same rounds on the fixed text in memory.
    """
    fixed: dict[str, tuple[list[Diagnostic], int]] = {}  # what earlier rounds fixed, by file
    overrides: dict[Path, bytes] = dict(options.overlays)  # unsaved buffers; the fixed text of earlier rounds
    originals: dict[str, bytes | None] = {}  # the text the user had, of files fixed in an earlier round
    for _ in range(MAX_FACT_ROUNDS):
        mark = len(report.results)
        facts, summary = _check_project(config, sources, options, report, progress, overrides, root)
        by_display = {s.display: s for s in sources}
        written = [r for r in report.results[mark:] if r.fixed_source is not None and r.path in by_display]
        if not (options.fix and written) or options.stdin is not None:
            break
        for result in written:
            originals.setdefault(result.path, result.original_source)
            overrides[by_display[result.path].path] = result.fixed_source
        fresh = facts_of(
            [(s, overrides.get(s.path) or _read(s)) for s in sources],
            None,
            {},
            options.jobs,
            progress.expect,
            progress.stepper("facts"),
        )
        if signature(
            module_facts_of(
                config,
                sources,
                fresh,
                *_settings(config, options),
                root=root,
                expect=progress.expect,
                step=progress.stepper("programs"),
            )[0]
        ) == signature(facts):
            break
        for result in report.results[mark:]:  # check again: the files are the fixed ones now
            earlier, count = fixed.get(result.path, ([], 0))
            fixed[result.path] = (earlier + [d for d in result.diagnostics if d.fixed], count + result.fixes_applied)
        del report.results[mark:]
    checked = [s for s in sources if options.only is None or s.path in options.only]
    report.projects.append(
        summary.reaching(
            {s.display for s in checked},
            {s.display: facts[s.path].library_status() for s in checked if s.path in facts},
        )
    )
    for result in report.results[mark:]:
        earlier, count = fixed.get(result.path, ([], 0))
        if count:
            result.diagnostics = earlier + result.diagnostics
            result.fixes_applied += count
            if result.fixed_source is None:
                result.fixed_source = result.original_source  # fixed in an earlier round only
            result.original_source = originals.get(result.path, result.original_source)


def _check_project(
    config: Config,
    sources: list[SourcePath],
    options: RunOptions,
    report: RunReport,
    progress: _Progress,
    overrides: dict[Path, bytes],
    root: Path,
) -> tuple[dict[Path, ProjectFacts], ProjectSummary]:
    enabled = _enabled_rules(config, options)
    stdin_path = Path(os.path.abspath(options.stdin[0])) if options.stdin else None
    loaded, digests = _load(sources, options, overrides, stdin_path)
    cache = ProjectCache(config.root, options.cache, read_only=stdin_path is not None)
    memo = options.warm.facts if options.warm else None
    file_facts = facts_of(loaded, cache, digests, options.jobs, progress.expect, progress.stepper("facts"), memo)
    # Pins decide targets (the torch pin too, in each module's facts): they key the module facts and the results.
    pins = memo.pin_files_digest(config.root, sources) if memo else pin_files_digest(config.root, sources)
    facts_by_path, summary = module_facts_of(
        config,
        sources,
        file_facts,
        *_settings(config, options),
        cache,
        digests,
        root,
        memo,
        progress.expect,
        progress.stepper("programs"),
        pins if root == config.root else None,
    )
    unsafe = config.unsafe_fixes if options.unsafe_fixes is None else options.unsafe_fixes
    # The key needs no rule module: which enabled rules are active follows from each file's facts.
    cache.use_settings(
        settings_key(sorted(enabled), options.fix, unsafe, sorted(config.per_file_ignores.items()), pins)
    )
    active: dict[ProjectFacts, tuple] = {}
    facts_digests: dict[int, str] = {}  # by id: the facts live as long as this function

    reexports_digests: dict[int, str] = {}

    def facts_digest(facts: ProjectFacts) -> str:
        digest = facts_digests.get(id(facts))
        if digest is None:
            shared = reexports_digests.get(id(facts.reexports))
            if shared is None:
                shared = reexports_digests[id(facts.reexports)] = content_hash(
                    repr((sorted(facts.reexports.items()), sorted(facts.summaries.items()))).encode()
                )
            digest = facts_digests[id(facts)] = content_hash(repr(facts_key(facts, shared)).encode())
        return digest

    def check_for(source: SourcePath) -> CheckOptions:
        """Rule modules are imported only when some file must really be checked (never on a warm run)."""
        facts = facts_by_path.get(source.path, ProjectFacts(path=source.display))
        if facts not in active:
            active[facts] = tuple(
                r for rid, r in all_rules().items() if rid in enabled and _targets(r, facts) and r.applies_to(facts)
            )
        ignored = _per_file_ignored(config, source.path)
        parses = source.path in file_facts and file_facts[source.path].parses and not is_notebook(source.path)
        return CheckOptions(
            tuple(r for r in active[facts] if r.id not in ignored),
            facts,
            options.fix,
            unsafe,
            options.prefilter,
            parses,
        )

    def key_of(source: SourcePath) -> str:
        facts = facts_by_path.get(source.path, ProjectFacts(path=source.display))
        return f"{digests[source.path]}-{facts_digest(facts)}"

    may_apply = CheckOptions((), ProjectFacts(), options.fix, unsafe, options.prefilter).may_apply
    todo: list[tuple[SourcePath, bytes, CheckOptions]] = []
    done: dict[Path, FileResult] = {}
    for source, data in loaded:
        if options.only is not None and source.path not in options.only:
            continue
        if isinstance(data, Diagnostic):
            done[source.path] = FileResult(source.display, [data])
            continue
        cached = None if is_notebook(source.path) else cache.result(source.display, key_of(source))
        if cached is not None and not any(d.fixable and may_apply(d.fix_safety) for d in cached):
            done[source.path] = FileResult(source.display, cached, original_source=data)
        else:
            todo.append((source, data, check_for(source)))
    progress.expect("checks", len(todo))
    for (source, _, _), result in zip(todo, _check_all(todo, options.jobs, progress.stepper("checks"))):
        done[source.path] = result
    writes = [
        s.path for s, _ in loaded if s.path in done and done[s.path].fixed_source is not None and s.path != stdin_path
    ]
    if options.write and writes:
        progress.expect("fixes", len(writes))
    step_fix = progress.stepper("fixes")
    for source, data in loaded:
        if source.path not in done:
            continue
        result = done[source.path]
        if isinstance(data, bytes) and not is_notebook(source.path):
            final = result.fixed_source if result.fixed_source is not None else data
            if result.repeatable:  # a syntax error or the node budget too: they follow from the text
                facts = facts_by_path.get(source.path, ProjectFacts(path=source.display))
                cache.store_result(
                    source.display,
                    f"{content_hash(final)}-{facts_digest(facts)}",
                    [d for d in result.diagnostics if not d.fixed],
                )
        if isinstance(data, bytes) and options.write and source.path != stdin_path:
            fixing = result.fixed_source is not None
            # the written text is not what the facts parsed
            recheck = lambda new, s=source: _check_file(s, new, replace(check_for(s), fix=False, parses=False))  # noqa: E731
            result, added, skipped = write_back(
                source.path,
                source.display,
                data,
                result,
                recheck,
                options.add_noqa,
                report.errors,
                report.changed_on_disk,
            )
            report.noqa_added += added
            report.noqa_skipped += skipped
            if step_fix and fixing:
                step_fix()
        report.results.append(result)
    cache.save()
    return facts_by_path, summary


def _load(sources: list[SourcePath], options: RunOptions, overrides: dict[Path, bytes], stdin_path: Path | None):
    """Each file's content (standard input's, an overriding text, else the disk's) and the digests of those read."""
    loaded: list[tuple[SourcePath, bytes | Diagnostic]] = []
    digests: dict[Path, str] = {}
    for source in sources:
        digest = None
        if source.path == stdin_path:
            data = options.stdin[1]
        elif source.path in overrides:
            data = overrides[source.path]
        elif options.warm:
            data, digest = options.warm.read(source)
        else:
            data = _read(source)
        loaded.append((source, data))
        if isinstance(data, bytes):
            digests[source.path] = digest or content_hash(data)
    return loaded, digests


def _check_one(work: tuple[SourcePath, bytes, CheckOptions]) -> FileResult:
    source, data, check = work
    result = _check_file(source, data, check)
    if not result.diagnostics and result.fixed_source is None:
        result.original_source = None  # the parent has the bytes; don't ship them back
    return result


def _check_all(todo, jobs: int | None, step: Callable[[], None] | None) -> list[FileResult]:
    results = parallel_map(_check_one, todo, jobs, step)
    for (_, data, _), result in zip(todo, results):
        if result.original_source is None:
            result.original_source = data
    return results
