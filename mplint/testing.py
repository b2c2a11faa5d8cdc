"""Run mplint on code held in strings: for rule examples, tests and fuzzing.

``check_code`` checks one file in memory: its project facts come from the same
fact builders the runner uses, over that file alone, with the settings given
(no folder, no config file, no pins). ``lint_code`` builds a throwaway project
folder (the main file plus any extra files) with a ``.mplint.yaml`` carrying
the settings, then goes through the real runner, so project facts (policies set
in other files, pins, aliases) behave exactly as on disk.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

import yaml

from mplint.diagnostics import Diagnostic
from mplint.project.build import signature
from mplint.project.facts import ProjectFacts
from mplint.project.programs import in_memory_facts
from mplint.runner import MAX_FACT_ROUNDS, RunOptions, run
from mplint.runner import _targets as targets_the_generation

# What a run leaves in a project: a copy for a test holds only the project's own files.
RUN_LEFTOVERS = shutil.ignore_patterns(".mplint_cache", "__pycache__", ".pytest_cache", ".*.mplint-tmp")


def copy_tree(source: Path, target: Path) -> Path:
    """A copy of a fixture project without what earlier runs left in it (``mplint fixtures/``)."""
    return Path(shutil.copytree(source, target, ignore=RUN_LEFTOVERS))


@dataclass
class Outcome:
    diagnostics: list[Diagnostic]  # remaining after the run, in the main file only
    fixed_code: str  # the main file's text after the run (unchanged without fix)
    written: bool  # whether the main file was rewritten


def lint_code(
    code: str,
    *,
    path: str = "example.py",
    files: dict[str, str] | None = None,
    keras: int | None = None,
    policy: str | None = None,
    select: list[str] | None = None,
    fix: bool = False,
    unsafe_fixes: bool = False,
    config: dict | None = None,
) -> Outcome:
    with tempfile.TemporaryDirectory(prefix="mplint-") as tmp:
        root = Path(tmp)
        settings = dict(config or {})
        if keras is not None:
            settings["keras"] = keras
        if policy is not None:
            settings["policy"] = policy
        (root / ".mplint.yaml").write_text(yaml.safe_dump(settings) if settings else "{}\n", encoding="utf-8")
        for name, text in (files or {}).items():
            (root / name).parent.mkdir(parents=True, exist_ok=True)
            (root / name).write_text(text, encoding="utf-8")
        main = root / path
        main.parent.mkdir(parents=True, exist_ok=True)
        main.write_bytes(code.encode("utf-8"))
        before = main.stat().st_mtime_ns
        cwd = os.getcwd()
        os.chdir(root)
        try:
            report = run(RunOptions(paths=[root], fix=fix, unsafe_fixes=unsafe_fixes, select=select))
        finally:
            os.chdir(cwd)
        rel = Path(path).as_posix()
        diagnostics = [d for d in report.remaining if d.path == rel]
        return Outcome(diagnostics, main.read_bytes().decode("utf-8"), main.stat().st_mtime_ns != before)


def memory_facts(code: str, path: str, keras: int | None, policy: str | None) -> ProjectFacts:
    """The facts the runner gives the one file of a project with no pins, built from memory."""
    return in_memory_facts({path: code.encode("utf-8")}, keras, policy)[path]


def check_code(
    code: str,
    *,
    path: str = "example.py",
    keras: int | None = None,
    policy: str | None = None,
    select: list[str] | None = None,
    fix: bool = False,
    unsafe_fixes: bool = False,
) -> Outcome:
    """``lint_code`` for a one-file project, in memory: no folder, no config file, no runner.

    As in the runner, a fix that changes the file's own facts (one that sets a policy) is checked again
    with the new facts, so that a second ``--fix`` changes nothing.
    """
    from mplint.checks import all_rules
    from mplint.engine.check import CheckOptions, check_source
    from mplint.engine.registry import select as select_rules

    enabled = select_rules(select, [], [])
    display = Path(path).as_posix()
    name, is_package = Path(path).stem, False  # one file: no package folder around it
    text = code
    for _ in range(MAX_FACT_ROUNDS):
        facts = memory_facts(text, display, keras, policy)
        rules = tuple(
            r
            for rid, r in all_rules().items()
            if rid in enabled and targets_the_generation(r, facts) and r.applies_to(facts)
        )
        result = check_source(
            display, text.encode("utf-8"), CheckOptions(rules, facts, fix, unsafe_fixes), name, is_package
        )
        if result.fixed_source is None:
            break
        text = result.fixed_source.decode("utf-8")
        if signature({display: memory_facts(text, display, keras, policy)}) == signature({display: facts}):
            result.diagnostics = [d for d in result.diagnostics if not d.fixed]
            break
    remaining = [d for d in result.diagnostics if not d.fixed]
    return Outcome(remaining, text, text != code)
