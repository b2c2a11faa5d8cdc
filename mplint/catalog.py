"""The rule catalog: one YAML file per rule in ``rules/`` (shipped as ``mplint/catalog`` in wheels).

The YAML carries everything a person reads about a rule (docs, fix safety,
examples); the Python module under ``mplint.checks`` carries only detection.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass, field
from pathlib import Path

from mplint.diagnostics import Diagnostic, FixSafety, Severity

_PACKAGE_DIR = Path(__file__).resolve().parent
_CATALOG_DIRS = (_PACKAGE_DIR / "catalog", _PACKAGE_DIR.parent / "rules")


class CatalogError(Exception):
    pass


@dataclass(frozen=True)
class Example:
    code: str
    expect: tuple[tuple[int, int], ...] = ()  # (line, column) of each finding of this rule
    fixed: str | None = None  # expected text after --fix (with --unsafe-fixes for unsafe rules)
    settings: dict = field(default_factory=dict)  # keras, policy, files (extra project files), path
    title: str = ""


@dataclass(frozen=True)
class RuleMeta:
    id: str
    name: str
    summary: str
    what: str
    why: str
    fix: str
    fix_safety: FixSafety
    severity: Severity
    kind: str  # "static" or "runtime"
    default_enabled: bool
    generations: tuple[int, ...]
    references: tuple[str, ...]
    example: str
    example_fixed: str
    flagged: tuple[Example, ...]
    clean: tuple[Example, ...]
    source: Path
    proof: tuple[str, ...] = ()  # the tests that execute the fix or the defect (test ids or paths)


def catalog_dir() -> Path:
    for candidate in _CATALOG_DIRS:
        if candidate.is_dir():
            return candidate
    raise CatalogError(f"rule catalog not found (looked in {', '.join(map(str, _CATALOG_DIRS))})")


def _example(raw: dict, where: str) -> Example:
    if not isinstance(raw, dict) or "code" not in raw:
        raise CatalogError(f"{where}: each example needs a 'code' key")
    expect = tuple(tuple(int(p) for p in str(e).split(":")) for e in raw.get("expect", ()))
    if any(len(e) != 2 for e in expect):
        raise CatalogError(f"{where}: 'expect' entries are 'line:column'")
    settings = {k: raw[k] for k in ("keras", "policy", "files", "path", "unsafe") if k in raw}
    return Example(
        code=raw["code"], expect=expect, fixed=raw.get("fixed"), settings=settings, title=raw.get("title", "")
    )


@functools.cache
def _load(path: Path) -> RuleMeta:
    import yaml  # only runs that print a rule's documentation or check files read the whole catalog

    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # libyaml's when PyYAML has it: about 10x faster
    try:
        raw = yaml.load(path.read_text(encoding="utf-8"), Loader=loader)
    except yaml.YAMLError as exc:
        raise CatalogError(f"{path}: {exc}") from exc
    try:
        examples = raw.get("examples") or {}
        return RuleMeta(
            id=raw["id"],
            name=raw["name"],
            summary=raw["summary"].strip(),
            what=raw["what"].strip(),
            why=raw["why"].strip(),
            fix=raw["fix"].strip(),
            fix_safety=FixSafety(raw["fix_safety"]),
            severity=Severity(raw.get("severity", "error")),
            kind=raw.get("kind", "static"),
            default_enabled=bool(raw.get("default", True)),
            generations=tuple(raw.get("generations", (1, 2, 3))),
            references=tuple(raw.get("references", ())),
            example=raw.get("example", "").rstrip("\n"),
            example_fixed=raw.get("example_fixed", "").rstrip("\n"),
            flagged=tuple(_example(e, f"{path}: flagged[{i}]") for i, e in enumerate(examples.get("flagged", ()))),
            clean=tuple(_example(e, f"{path}: clean[{i}]") for i, e in enumerate(examples.get("clean", ()))),
            source=path,
            proof=tuple(raw.get("proof", ())),
        )
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise CatalogError(f"{path}: malformed rule file ({exc!r})") from exc


@functools.cache
def load_catalog() -> dict[str, RuleMeta]:
    """All rules by ID, in ID order."""
    metas = [_load(p) for p in sorted(catalog_dir().glob("MP*.yaml"))]
    by_id = {m.id: m for m in metas}
    if len(by_id) != len(metas):
        raise CatalogError("duplicate rule IDs in the catalog")
    return dict(sorted(by_id.items()))


def rule_meta(rule_id: str) -> RuleMeta:
    """One rule's whole entry, reading only its own file (a check that reports a finding needs no other)."""
    key = keys_by_id().get(rule_id)
    if key is None:
        raise CatalogError(f"rule {rule_id} has no YAML file in the catalog")
    return _load(key.source)


@dataclass(frozen=True)
class RuleKey:
    """What choosing and running rules needs, read from the head of the rule's file without a YAML parser."""

    id: str
    name: str
    default_enabled: bool
    severity: Severity = Severity.ERROR
    generations: tuple[int, ...] = (1, 2, 3)
    fix_title: str = ""  # the first line of the fix section: what a fix's description says
    source: Path = Path()
    fix_safety: FixSafety = FixSafety.NONE  # the safest fix the rule may offer: its fixes are never marked safer


# The top-level keys a check reads, each written as a plain scalar on its own line (a flow list for
# generations), and the first line of the fix section. tests/test_catalog_index.py holds every rule file
# to it: what is read here equals what the YAML parser reads. A check so never loads the YAML parser or
# the rules' prose and examples unless a finding's fix is described or a rule's documentation is shown.
_FIRST = re.compile(r"\Aid: (MPT?\d+)\nname: ([a-z0-9-]+)\n")
_KEY = re.compile(r"^(default|severity|generations|fix_safety): *(.*?) *$", re.MULTILINE)
_FIX = re.compile(r"^fix: *(?:[|>][-+]?\n +)?(.*?) *$", re.MULTILINE)


def _key(path: Path) -> RuleKey:
    text = path.read_text(encoding="utf-8")
    first = _FIRST.match(text)
    if first is None:
        raise CatalogError(f"{path}: must start with 'id: MPnnn' (or MPTnnn) and 'name: kebab-case-name'")
    keys = dict(_KEY.findall(text))
    fix = _FIX.search(text)
    try:
        generations = keys.get("generations", "[1, 2, 3]").strip("[]")
        return RuleKey(
            first.group(1),
            first.group(2),
            keys.get("default", "true") != "false",
            Severity(keys.get("severity", "error")),
            tuple(int(g) for g in generations.split(",") if g.strip()),
            fix.group(1) if fix else "",
            path,
            FixSafety(keys.get("fix_safety", "none")),
        )
    except ValueError as exc:
        raise CatalogError(f"{path}: malformed rule file ({exc})") from exc


@functools.cache
def rule_keys() -> tuple[RuleKey, ...]:
    """Every rule's key, in ID order (the same rules as ``load_catalog``)."""
    return tuple(sorted((_key(path) for path in catalog_dir().glob("MP*.yaml")), key=lambda k: k.id))


@functools.cache
def keys_by_id() -> dict[str, RuleKey]:
    keys = rule_keys()
    by_id = {k.id: k for k in keys}
    if len(by_id) != len(keys):
        raise CatalogError("duplicate rule IDs in the catalog")
    return by_id


def engine_diagnostic(
    path: str, rule_id: str, message: str, line: int = 1, column: int = 1, cell: int | None = None
) -> Diagnostic:
    """A finding of the engine itself (MP000-MP003: a file it cannot read, a fix it reverted, a rule that crashed),
    one character wide, named and graded as the rule's catalog entry says."""
    key = keys_by_id()[rule_id]
    return Diagnostic(path, rule_id, key.name, message, line, column, line, column + 1, key.severity, cell=cell)


def by_name() -> dict[str, RuleMeta]:
    return {m.name: m for m in load_catalog().values()}
