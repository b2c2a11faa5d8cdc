"""One mplint run: config -> files -> project facts -> per-file checks -> writes."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path

import pathspec

from mplint.catalog import load_catalog
from mplint.config import Config, load_config, project_root
from mplint.diagnostics import Diagnostic, FileResult
from mplint.discovery import SourcePath, discover, module_name
from mplint.engine import PARSE_ERROR, CheckOptions, check_source
from mplint.facts import ProjectFacts, build_project_facts, extract_file_facts
from mplint.registry import all_rules, select
from mplint.writer import write_atomic


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


@dataclass
class RunReport:
    results: list[FileResult]
    errors: list[str]  # fatal-for-one-path problems (missing paths, write failures)
    facts: ProjectFacts
    config: Config

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
    top = load_config(options.paths, options.config_path)
    found = discover(options.paths, top.root, top.exclude, top.extend_exclude, top.respect_gitignore)
    groups: dict[Path, list[SourcePath]] = {}
    roots: dict[Path, Path] = {}
    for source in found.files:
        folder = source.path.parent
        if folder not in roots:
            roots[folder] = top.root if options.config_path else project_root(folder)
        groups.setdefault(roots[folder], []).append(source)
    results: list[FileResult] = []
    errors = list(found.errors)
    facts = ProjectFacts()
    for root, sources in groups.items():
        config = top if options.config_path else load_config([root])
        facts = _check_project(config, sources, options, results, errors)
    if not groups:
        facts = build_project_facts((), top.root, options.keras or top.keras, options.policy or top.policy)
    results.sort(key=lambda r: r.path)
    return RunReport(results, errors, facts, top)


def _check_project(config: Config, sources: list[SourcePath], options: RunOptions, results: list, errors: list) -> ProjectFacts:
    enabled = _enabled_rules(config, options)
    loaded = [(s, _read(s)) for s in sources]
    facts = build_project_facts(
        (extract_file_facts(data, s.display, module_name(s.path)[0]) for s, data in loaded if isinstance(data, bytes)),
        config.root,
        options.keras or config.keras,
        options.policy or config.policy,
    )
    rules = tuple(r for rid, r in all_rules().items() if rid in enabled and r.active_for(facts))
    unsafe = config.unsafe_fixes if options.unsafe_fixes is None else options.unsafe_fixes
    for source, data in loaded:
        if isinstance(data, Diagnostic):
            results.append(FileResult(source.display, [data]))
            continue
        ignored = _per_file_ignored(config, source.path)
        check = CheckOptions(tuple(r for r in rules if r.id not in ignored), facts, options.fix, unsafe)
        name, is_package = module_name(source.path)
        result = check_source(source.display, data, check, name, is_package)
        if result.fixed_source is not None and options.write:
            try:
                write_atomic(source.path, result.fixed_source)
            except OSError as exc:
                errors.append(f"{source.display}: cannot write fixes: {exc.strerror or exc}")
                result = check_source(source.display, data, replace(check, fix=False), name, is_package)
        results.append(result)
    return facts
