"""One mplint run: config -> files -> project facts -> per-file checks -> writes."""

from __future__ import annotations

import gc
import io
import os
import tokenize
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Callable

import pathspec

import multiprocessing
from concurrent.futures import ProcessPoolExecutor

from mplint.baseline import add_noqa
from mplint.project.cache import ProjectCache, content_hash, settings_key
from mplint.catalog import load_catalog
from mplint.project.config import Config, load_config, marked_root
from mplint.diagnostics import Diagnostic, FileResult
from mplint.project.discovery import SourcePath, discover, module_name
from mplint.engine.check_options import FIX_REVERTED, PARSE_ERROR, RULE_CRASHED, CheckOptions
from mplint.project.facts import ProjectFacts, ProjectSummary
from mplint.project.extract import FileFacts, extract_file_facts
from mplint.project.pins import generation_from_pins
from mplint.project.programs import Module, ProjectModel, module_facts
from mplint.engine.notebooks import Notebook, NotebookResult, check_notebook, is_notebook, load as load_notebook
from mplint.engine.registry import all_rules, select
from mplint.fixes.writer import write_atomic


@dataclass
class RunOptions:
    paths: list[Path] = field(default_factory=lambda: [Path(".")])
    fix: bool = False
    unsafe_fixes: bool | None = None  # None: from config
    write: bool = True  # False for --diff
    select: list[str] | None = None
    ignore: list[str] = field(default_factory=list)
    extend_select: list[str] = field(default_factory=list)
    keras: int | None = None
    policy: str | None = None
    config_path: Path | None = None
    add_noqa: bool = False  # suppress every current finding with a noqa comment
    only: set[Path] | None = None  # check only these (absolute) files; the others still feed project facts
    stdin: tuple[Path, bytes] | None = None  # (file name, content) of a file read from standard input; never written
    on_progress: Callable[[int, int], None] | None = None  # (files checked, files to check)
    jobs: int | None = None  # worker processes; None: one per core
    cache: bool = True  # reuse results from .mplint_cache/ when nothing relevant changed
    prefilter: bool = True  # the rules' candidate tests; off only to show they hide nothing


@dataclass
class RunReport:
    results: list[FileResult]
    errors: list[str]  # fatal-for-one-path problems (missing paths, write failures)
    config: Config
    projects: list["ProjectSummary"] = field(default_factory=list)  # every project checked, in order
    noqa_added: int = 0  # lines that got a noqa comment (--add-noqa)
    noqa_skipped: int = 0  # findings whose line cannot carry a comment

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
        meta = load_catalog()[PARSE_ERROR]
        return Diagnostic(source.display, PARSE_ERROR, meta.name, f"cannot read file: {exc.strerror or exc}", 1, 1, 1, 2, meta.severity)


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
    ignored: set[str] = set()
    for glob, selectors in config.per_file_ignores.items():
        if pathspec.GitIgnoreSpec.from_lines([glob]).match_file(rel):
            ignored |= select(selectors)
    return ignored


def run(options: RunOptions) -> RunReport:
    """Check (and fix) the files under ``options.paths``.

    Files are grouped by project (the nearest folder with a pyproject.toml,
    setup.py, requirements.txt, .mplint.yaml or .git): each project has its
    own config, dependency pins and facts, so a policy set in one project never
    leaks into another checked in the same run.
    """
    stdin_path = Path(os.path.abspath(options.stdin[0])) if options.stdin else None
    top = load_config([stdin_path] if stdin_path else options.paths, options.config_path)
    found = discover(options.paths, top.root, top.exclude, top.extend_exclude, top.respect_gitignore)
    only = options.only
    if stdin_path is not None:
        found.files = [s for s in found.files if s.path != stdin_path]
        found.files.append(SourcePath(stdin_path, Path(options.stdin[0]).as_posix()))
        only = {stdin_path}
    groups: dict[Path, list[SourcePath]] = {}
    roots: dict[Path, Path] = {}
    for source in found.files:
        folder = source.path.parent
        if folder not in roots:
            roots[folder] = top.root if options.config_path else marked_root(folder) or top.root
        groups.setdefault(roots[folder], []).append(source)
    report = RunReport([], list(found.errors), top)
    progress = _Progress(options.on_progress, sum(1 for s in found.files if only is None or s.path in only))
    for root, given in groups.items():
        config = top if options.config_path else load_config([root])
        # Facts never depend on which paths were given: the whole project is read, the given files checked.
        sources = _whole_project(root, config, given, options.paths)
        wanted = {s.path for s in given} if only is None else only & {s.path for s in given}
        _check_until_facts_settle(config, sources, replace(options, only=wanted), report, progress)
    report.results.sort(key=lambda r: r.path)
    return report


def _whole_project(root: Path, config: Config, given: list[SourcePath], paths: list[Path]) -> list[SourcePath]:
    if any(Path(os.path.abspath(p)) in (root, *root.parents) for p in paths):
        return given  # the given paths cover the project
    found = discover([root], config.root, config.exclude, config.extend_exclude, config.respect_gitignore)
    known = {s.path for s in found.files}
    return found.files + [s for s in given if s.path not in known]


def project_facts(root: Path, keras: int | None = None, policy: str | None = None) -> dict[str, ProjectFacts]:
    """The facts of every module of the project at ``root``, by path relative to it (for tools and tests)."""
    root = root.resolve()
    config = load_config([root])
    found = discover([root], config.root, config.exclude, config.extend_exclude, config.respect_gitignore)
    sources = [SourcePath(s.path, s.path.relative_to(root).as_posix()) for s in found.files]
    loaded = [(s, _read(s)) for s in sources]
    by_path, _ = _module_facts(config, sources, _facts_of(loaded, None, {}, 1), RunOptions(keras=keras, policy=policy))
    return {path.relative_to(root).as_posix(): facts for path, facts in by_path.items()}


class _Progress:
    def __init__(self, callback, total: int):
        self.callback, self.total, self.done = callback, total, 0

    def step(self) -> None:
        self.done += 1
        if self.callback:
            self.callback(self.done, self.total)


def _python_source(source: SourcePath, data: bytes) -> bytes | None:
    """What project facts are read from: the file, or a notebook's code cells as one module."""
    if not is_notebook(source.path):
        return data
    nb = load_notebook(data)
    return nb.virtual.encode("utf-8") if isinstance(nb, Notebook) else None


def _check_file(source: SourcePath, data: bytes, check: CheckOptions) -> FileResult:
    from mplint.engine.check import check_source  # libcst: imported only when a file is really checked

    name, is_package = module_name(source.path)
    if is_notebook(source.path):
        return check_notebook(source.display, data, check, name, is_package)
    return check_source(source.display, data, check, name, is_package)


_ENGINE_CODES = {PARSE_ERROR, FIX_REVERTED, RULE_CRASHED}


def _with_noqa(result: FileResult, data: bytes) -> tuple[bytes | None, int, int]:
    """The file's bytes with every finding suppressed: (new bytes or None, lines changed, lines skipped)."""
    found = [d for d in result.diagnostics if d.rule_id not in _ENGINE_CODES and not d.fixed]
    if not found:
        return None, 0, 0
    nb = result.notebook if isinstance(result, NotebookResult) else None
    targets: dict[int, set[str]] = {}
    for d in found:
        line = nb.virtual_line(d.cell, d.line) if nb else d.line
        targets.setdefault(line, set()).add(d.rule_id)
    if nb:
        code, changed, skipped = add_noqa(nb.virtual, targets)
        return (nb.rewrite(code) if changed else None), changed, skipped
    try:
        encoding, _ = tokenize.detect_encoding(io.BytesIO(data).readline)
        text = data.decode(encoding)
    except (SyntaxError, LookupError, UnicodeDecodeError):
        return None, 0, len(targets)
    code, changed, skipped = add_noqa(text, targets)
    return (code.encode(encoding) if changed else None), changed, skipped


def _facts_of(loaded, cache: ProjectCache | None, digests: dict[Path, str], jobs: int | None) -> dict[Path, FileFacts]:
    """Each readable file's facts: from the cache, else extracted (in parallel)."""
    found: dict[Path, FileFacts] = {}
    missing = []
    for source, data in loaded:
        if isinstance(data, bytes):
            cached = cache.facts(source.display, digests[source.path]) if cache else None
            if cached is None:
                missing.append((source, data))
            else:
                found[source.path] = cached
    for (source, _), facts in zip(missing, _parallel_map(_extract_facts, missing, jobs)):
        if facts is not None:
            if cache:
                cache.store_facts(source.display, digests[source.path], facts)
            found[source.path] = facts
    return found


def _extract_facts(item: tuple[SourcePath, bytes]) -> FileFacts | None:
    source, data = item
    code = _python_source(source, data)
    return None if code is None else extract_file_facts(code, source.display, module_name(source.path)[0])


def _module_facts(config: Config, sources: list[SourcePath], file_facts: dict[Path, FileFacts], options: RunOptions,
                  cache: ProjectCache | None = None, digests: dict[Path, str] | None = None,
                  ) -> tuple[dict[Path, ProjectFacts], ProjectSummary]:
    """Every module's facts, from the program model of the project (cached while no file changes)."""
    keras, policy = options.keras or config.keras, options.policy or config.policy
    pinned = None if keras else generation_from_pins(config.root)
    key = None
    if cache is not None and digests is not None:
        key = settings_key(sorted((s.display, digests.get(s.path)) for s in sources), keras, policy, pinned, str(config.root))
        cached = cache.module_facts(key)
        if cached is not None:
            by_display, summary = cached
            return {s.path: by_display[s.display] for s in sources if s.display in by_display}, summary
    modules = []
    for source in sources:
        if source.path in file_facts:
            name, is_package = module_name(source.path)
            modules.append(Module(source.path, source.display, name, is_package, is_notebook(source.path), file_facts[source.path]))
    reexports: dict[str, str] = {}
    for module in modules:
        reexports.update(module.facts.reexports)
    model = ProjectModel(modules, config.root, reexports)
    by_display = module_facts(model, pinned, policy, keras)
    summary = ProjectSummary(
        config.root, len(modules),
        [{"entry": p.entry.display, "policies": [{"policy": s.policy, "path": s.path, "line": s.line} for s in p.sites]}
         for p in model.programs if p.sites],
        {"value": keras, "source": f"keras = {keras} in the mplint config"} if keras
        else {"value": pinned.value, "source": pinned.source} if pinned else None,
    )
    if key is not None:
        cache.store_module_facts(key, by_display, summary)
    return {m.path: by_display[m.display] for m in modules}, summary


MAX_FACT_ROUNDS = 3


def _facts_key(facts: ProjectFacts) -> tuple:
    """The facts as a value whose repr is the same in every process (no set iteration order)."""
    return (
        facts.policies, facts.links, facts.generation, facts.tpu_sites, sorted(facts.reexports.items()),
        sorted(facts.keras_namespaces), facts.policy_from_config, facts.library_context,
    )


def _signature(facts: dict[Path, ProjectFacts]) -> dict:
    return {path: (f.policy_names, f.global_policy_names, f.generation.value, f.uses_tpu, f.keras_namespaces, f.library_context)
            for path, f in facts.items()}


def _check_until_facts_settle(config: Config, sources: list[SourcePath], options: RunOptions, report: RunReport,
                              progress: _Progress) -> None:
    """Check a project; when fixes changed what the project facts say (a fix that sets a policy), check again.

    A second ``mplint --fix`` must change nothing, so the fixes of one run must already see the
    facts the fixed project has; ``--diff`` follows the same rounds on the fixed text in memory.
    """
    fixed: dict[str, tuple[list[Diagnostic], int]] = {}  # what earlier rounds fixed, by file
    overrides: dict[Path, bytes] = {}  # the fixed text of earlier rounds (written too, unless --diff)
    originals: dict[str, bytes | None] = {}  # the text the user had, of files fixed in an earlier round
    for _ in range(MAX_FACT_ROUNDS):
        mark = len(report.results)
        facts, summary = _check_project(config, sources, options, report, progress, overrides)
        by_display = {s.display: s for s in sources}
        written = [r for r in report.results[mark:] if r.fixed_source is not None and r.path in by_display]
        if not (options.fix and written) or options.stdin is not None:
            break
        for result in written:
            originals.setdefault(result.path, result.original_source)
            overrides[by_display[result.path].path] = result.fixed_source
        fresh = _facts_of([(s, overrides.get(s.path) or _read(s)) for s in sources], None, {}, options.jobs)
        if _signature(_module_facts(config, sources, fresh, options)[0]) == _signature(facts):
            break
        for result in report.results[mark:]:  # check again: the files are the fixed ones now
            earlier, count = fixed.get(result.path, ([], 0))
            fixed[result.path] = (earlier + [d for d in result.diagnostics if d.fixed], count + result.fixes_applied)
        del report.results[mark:]
    report.projects.append(summary)
    for result in report.results[mark:]:
        earlier, count = fixed.get(result.path, ([], 0))
        if count:
            result.diagnostics = earlier + result.diagnostics
            result.fixes_applied += count
            if result.fixed_source is None:
                result.fixed_source = result.original_source  # fixed in an earlier round only
            result.original_source = originals.get(result.path, result.original_source)


def _check_project(config: Config, sources: list[SourcePath], options: RunOptions, report: RunReport,
                   progress: _Progress, overrides: dict[Path, bytes]) -> tuple[dict[Path, ProjectFacts], ProjectSummary]:
    enabled = _enabled_rules(config, options)
    stdin_path = Path(os.path.abspath(options.stdin[0])) if options.stdin else None
    loaded = [(s, options.stdin[1] if s.path == stdin_path else overrides.get(s.path) or _read(s)) for s in sources]
    digests = {s.path: content_hash(data) for s, data in loaded if isinstance(data, bytes)}
    cache = ProjectCache(config.root, options.cache and stdin_path is None)
    facts_by_path, summary = _module_facts(config, sources, _facts_of(loaded, cache, digests, options.jobs), options, cache, digests)
    unsafe = config.unsafe_fixes if options.unsafe_fixes is None else options.unsafe_fixes
    # The key needs no rule module: which enabled rules are active follows from each file's facts.
    cache.use_settings(settings_key(sorted(enabled), options.fix, unsafe, sorted(config.per_file_ignores.items())))
    active: dict[ProjectFacts, tuple] = {}
    facts_digests: dict[ProjectFacts, str] = {}

    def facts_digest(facts: ProjectFacts) -> str:
        if facts not in facts_digests:
            facts_digests[facts] = content_hash(repr(_facts_key(facts)).encode())
        return facts_digests[facts]

    def check_for(source: SourcePath) -> CheckOptions:
        """Rule modules are imported only when some file must really be checked (never on a warm run)."""
        facts = facts_by_path.get(source.path, ProjectFacts(path=source.display))
        if facts not in active:
            active[facts] = tuple(r for rid, r in all_rules().items() if rid in enabled and r.active_for(facts))
        ignored = _per_file_ignored(config, source.path)
        return CheckOptions(tuple(r for r in active[facts] if r.id not in ignored), facts, options.fix, unsafe, options.prefilter)

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
    for (source, data, check), result in zip(todo, _check_all(todo, options.jobs, progress)):
        done[source.path] = result
    for source, data in loaded:
        if source.path not in done:
            continue
        result = done[source.path]
        if isinstance(data, bytes) and not is_notebook(source.path):
            final = result.fixed_source if result.fixed_source is not None else data
            if not any(d.rule_id in _ENGINE_CODES for d in result.diagnostics):
                facts = facts_by_path.get(source.path, ProjectFacts(path=source.display))
                cache.store_result(source.display, f"{content_hash(final)}-{facts_digest(facts)}",
                                   [d for d in result.diagnostics if not d.fixed])
        report.results.append(_write_back(source, data, result, lambda s=source: check_for(s), options, report, stdin_path))
    cache.save()
    return facts_by_path, summary


def _write_back(source: SourcePath, data, result: FileResult, check_for: Callable[[], CheckOptions],
                options: RunOptions, report: RunReport, stdin_path) -> FileResult:
    if not isinstance(data, bytes):
        return result
    writable = options.write and source.path != stdin_path
    if result.fixed_source is not None and writable:
        try:
            write_atomic(source.path, result.fixed_source)
        except OSError as exc:
            report.errors.append(f"{source.display}: cannot write fixes: {exc.strerror or exc}")
            result = _check_file(source, data, replace(check_for(), fix=False))
    if options.add_noqa and writable:
        new, changed, skipped = _with_noqa(result, data)
        report.noqa_skipped += skipped
        if new is not None:
            try:
                write_atomic(source.path, new)
            except OSError as exc:
                report.errors.append(f"{source.display}: cannot write noqa comments: {exc.strerror or exc}")
            else:
                report.noqa_added += changed
                result = _check_file(source, new, replace(check_for(), fix=False))
    return result


# Worker processes: forked after the project's state is set, so nothing but indexes and results
# crosses the process boundary. Runs of a few files stay in-process (a pool costs more than it saves).
POOL_MIN_FILES = 8
_WORK: tuple[Callable, list] | None = None


def _work_on(index: int):
    function, items = _WORK
    return function(items[index])


def _parallel_map(function: Callable, items: list, jobs: int | None, on_result: Callable[[], None] | None = None) -> list:
    """``[function(item) for item in items]``, over a fork pool of ``jobs`` workers when it pays."""
    global _WORK
    jobs = jobs or os.cpu_count() or 1
    _collect_garbage_less()
    if jobs <= 1 or len(items) < POOL_MIN_FILES or "fork" not in multiprocessing.get_all_start_methods():
        results = []
        for item in items:
            results.append(function(item))
            if on_result:
                on_result()
        return results
    _WORK = (function, items)
    try:
        with ProcessPoolExecutor(max_workers=min(jobs, len(items)), mp_context=multiprocessing.get_context("fork")) as pool:
            results = []
            # Small chunks: a few files of a project cost most of its time, and must not queue behind each other.
            for result in pool.map(_work_on, range(len(items)), chunksize=max(1, len(items) // (jobs * 32))):
                results.append(result)
                if on_result:
                    on_result()
    finally:
        _WORK = None
    return results


def _collect_garbage_less() -> None:
    """Syntax trees make millions of short-lived objects: CPython's default collector thresholds
    rescan them constantly (about a tenth of a cold run). Objects alive now (modules, the
    catalog) are frozen out of collection, which also keeps forked workers from copying them."""
    gc.freeze()
    gc.set_threshold(50_000, 20, 50)


def _check_one(work: tuple[SourcePath, bytes, CheckOptions]) -> FileResult:
    source, data, check = work
    result = _check_file(source, data, check)
    if not result.diagnostics and result.fixed_source is None:
        result.original_source = None  # the parent has the bytes; don't ship them back
    return result


def _check_all(todo, jobs: int | None, progress: _Progress) -> list[FileResult]:
    results = _parallel_map(_check_one, todo, jobs, progress.step)
    for (source, data, _), result in zip(todo, results):
        if result.original_source is None:
            result.original_source = data
    return results
