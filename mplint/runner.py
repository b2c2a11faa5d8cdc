"""One mplint run: config -> files -> project facts -> per-file checks -> writes."""

from __future__ import annotations

import gc
import io
import os
import tokenize
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Callable

from mplint.project.cache import ProjectCache, content_hash, settings_key
from mplint.catalog import load_catalog
from mplint.project.config import Config, load_config, marked_root
from mplint.diagnostics import Diagnostic, FileResult
from mplint.project.discovery import SourcePath, discover, module_name
from mplint.engine.check_options import FIX_REVERTED, PARSE_ERROR, RULE_CRASHED, CheckOptions
from mplint.project.facts import ProjectFacts, build_project_facts, extract_file_facts
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
    facts: ProjectFacts
    config: Config
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
    import pathspec  # imported only for a config with per-file-ignores

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
    report = RunReport([], list(found.errors), ProjectFacts(), top)
    progress = _Progress(options.on_progress, sum(1 for s in found.files if only is None or s.path in only))
    for root, sources in groups.items():
        config = top if options.config_path else load_config([root])
        report.facts = _check_until_facts_settle(config, sources, replace(options, only=only), report, progress)
    if not groups:
        report.facts = build_project_facts((), top.root, options.keras or top.keras, options.policy or top.policy)
    report.results.sort(key=lambda r: r.path)
    return report


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
    from mplint.baseline import add_noqa

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


def _facts_of(loaded, cache: ProjectCache, digests: dict[Path, str], jobs: int | None) -> list:
    """Each file's facts, in file order: from the cache, else extracted (in parallel)."""
    found, missing = [], []
    for source, data in loaded:
        if isinstance(data, bytes):
            found.append(cache.facts(source.display, digests[source.path]))
            if found[-1] is None:
                missing.append((len(found) - 1, source, data))
    extracted = _parallel_map(_extract_facts, [(source, data) for _, source, data in missing], jobs)
    for (index, source, _), facts in zip(missing, extracted):
        if facts is not None:
            cache.store_facts(source.display, digests[source.path], facts)
        found[index] = facts
    return [facts for facts in found if facts is not None]


def _extract_facts(item: tuple[SourcePath, bytes]):
    source, data = item
    code = _python_source(source, data)
    return None if code is None else extract_file_facts(code, source.display, module_name(source.path)[0])


MAX_FACT_ROUNDS = 3


def _facts_key(facts: ProjectFacts) -> tuple:
    """The facts as a value whose repr is the same in every process (no set iteration order)."""
    return (
        facts.policies, facts.generation, facts.tpu_sites, sorted(facts.reexports.items()),
        sorted(facts.keras_namespaces), facts.policy_from_config,
    )


def _signature(facts: ProjectFacts) -> tuple:
    return (facts.policy_names, facts.global_policy_names, facts.generation.value, facts.uses_tpu, facts.keras_namespaces)


def _check_until_facts_settle(config: Config, sources: list[SourcePath], options: RunOptions, report: RunReport,
                              progress: _Progress) -> ProjectFacts:
    """Check a project; when --fix changed what the project facts say (a fix that sets a policy), check again.

    A second ``mplint --fix`` must change nothing, so the fixes of one run must already
    see the facts the fixed project has.
    """
    fixed: dict[str, tuple[list[Diagnostic], int]] = {}  # what earlier rounds fixed, by file
    for _ in range(MAX_FACT_ROUNDS):
        mark = len(report.results)
        facts = _check_project(config, sources, options, report, progress)
        written = [r for r in report.results[mark:] if r.fixed_source is not None]
        if not (options.fix and options.write and written) or options.stdin is not None:
            break
        fresh = build_project_facts(
            (extract_file_facts(_python_source(s, s.path.read_bytes()) or b"", s.display, module_name(s.path)[0])
             for s in sources if s.path.is_file()),
            config.root, options.keras or config.keras, options.policy or config.policy,
        )
        if _signature(fresh) == _signature(facts):
            break
        for result in report.results[mark:]:  # check again: the files on disk are the fixed ones now
            earlier, count = fixed.get(result.path, ([], 0))
            fixed[result.path] = (earlier + [d for d in result.diagnostics if d.fixed], count + result.fixes_applied)
        del report.results[mark:]
    for result in report.results[mark:]:
        earlier, count = fixed.get(result.path, ([], 0))
        if count:
            result.diagnostics = earlier + result.diagnostics
            result.fixes_applied += count
            if result.fixed_source is None:
                result.fixed_source = result.original_source  # fixed in an earlier round, already written
    return facts


def _check_project(config: Config, sources: list[SourcePath], options: RunOptions, report: RunReport, progress: _Progress) -> ProjectFacts:
    enabled = _enabled_rules(config, options)
    stdin_path = Path(os.path.abspath(options.stdin[0])) if options.stdin else None
    loaded = [(s, options.stdin[1] if s.path == stdin_path else _read(s)) for s in sources]
    digests = {s.path: content_hash(data) for s, data in loaded if isinstance(data, bytes)}
    cache = ProjectCache(config.root, options.cache, read_only=stdin_path is not None)
    facts = build_project_facts(
        _facts_of(loaded, cache, digests, options.jobs), config.root, options.keras or config.keras, options.policy or config.policy
    )
    unsafe = config.unsafe_fixes if options.unsafe_fixes is None else options.unsafe_fixes
    # The key needs no rule module: which enabled rules are active follows from the facts it contains.
    cache.use_settings(settings_key(
        sorted(enabled), options.fix, unsafe, sorted(config.per_file_ignores.items()), _facts_key(facts)
    ))
    settings = CheckOptions((), facts, options.fix, unsafe, options.prefilter)
    active: list[tuple] = []

    def check_for(source: SourcePath) -> CheckOptions:
        """Rule modules are imported only when some file must really be checked (never on a warm run)."""
        if not active:
            active.append(tuple(r for rid, r in all_rules().items() if rid in enabled and r.active_for(facts)))
        ignored = _per_file_ignored(config, source.path)
        return replace(settings, rules=tuple(r for r in active[0] if r.id not in ignored))

    todo: list[tuple[SourcePath, bytes, CheckOptions]] = []
    done: dict[Path, FileResult] = {}
    for source, data in loaded:
        if options.only is not None and source.path not in options.only:
            continue
        if isinstance(data, Diagnostic):
            done[source.path] = FileResult(source.display, [data])
            continue
        cached = None if is_notebook(source.path) else cache.result(source.display, digests[source.path])
        if cached is not None and not any(d.fixable and settings.may_apply(d.fix_safety) for d in cached):
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
                cache.store_result(source.display, content_hash(final), [d for d in result.diagnostics if not d.fixed])
        report.results.append(_write_back(source, data, result, lambda s=source: check_for(s), options, report, stdin_path))
    cache.save()
    return facts


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
    if jobs <= 1 or len(items) < POOL_MIN_FILES or not hasattr(os, "fork"):
        results = []
        for item in items:
            results.append(function(item))
            if on_result:
                on_result()
        return results
    import multiprocessing  # a pool only when there is work for one: warm runs never start it
    from concurrent.futures import ProcessPoolExecutor

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
