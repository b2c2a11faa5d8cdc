"""Every example in rules/*.yaml runs as a test.

Flagged examples: the rule fires exactly at the stated positions, with exactly the
messages recorded in tests/snapshots/rules/<rule>.txt; ``--fix`` (with
``--unsafe-fixes`` for unsafe rules) produces exactly the stated text; the fixed text
is clean for that rule and a second ``--fix`` changes nothing. Clean examples: the
rule stays silent.

One-file examples are checked in memory (``check_code``: the runner's fact builders
over that file, no folder); examples with other project files (``files:``) go
through the real runner in a throwaway folder (``lint_code``). After reviewing a
change of messages, accept it with:

    MPLINT_UPDATE_SNAPSHOTS=1 python -m pytest tests/test_rule_examples.py
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from mplint.catalog import load_catalog
from mplint.diagnostics import FixSafety
from mplint.testing import check_code, lint_code

pytestmark = pytest.mark.quick  # the one-minute subset: python3 -m pytest -m quick

STATIC = [m for m in load_catalog().values() if m.kind == "static"]
SNAPSHOTS = Path(__file__).parent / "snapshots" / "rules"
UPDATE = os.environ.get("MPLINT_UPDATE_SNAPSHOTS") == "1"


def _key(kind: str, i: int, example) -> str:
    return f"{kind}-{i}-{example.title or 'example'}"


def _cases(kind: str):
    for meta in STATIC:
        for i, example in enumerate(getattr(meta, kind)):
            yield pytest.param(meta, example, _key(kind, i, example), id=f"{meta.id}-{_key(kind, i, example)}"[:90])


def _lint(meta, example, code: str | None = None, **kwargs):
    """In memory unless the example needs other project files; ``code`` instead of the example's own."""
    s = example.settings
    common = {
        "keras": s.get("keras"),
        "policy": s.get("policy"),
        "path": s.get("path", "example.py"),
        "select": [meta.id],
        **kwargs,
    }
    code = example.code if code is None else code
    if s.get("files"):
        return lint_code(code, files=s["files"], **common)
    return check_code(code, **common)


def _read_snapshot(rule_id: str) -> dict[str, str]:
    """``## <example key>`` headings, each followed by that example's findings, one a line."""
    path = SNAPSHOTS / f"{rule_id}.txt"
    if not path.exists():
        return {}
    entries: dict[str, str] = {}
    for block in path.read_text(encoding="utf-8").split("## ")[1:]:
        key, _, body = block.partition("\n")
        entries[key] = body.rstrip("\n")
    return entries


def _write_snapshot(rule_id: str, entries: dict[str, str]) -> None:
    meta = load_catalog()[rule_id]
    order = [_key("flagged", i, e) for i, e in enumerate(meta.flagged)]
    SNAPSHOTS.mkdir(parents=True, exist_ok=True)
    text = "".join(f"## {key}\n{entries[key]}\n\n" for key in order if key in entries)
    (SNAPSHOTS / f"{rule_id}.txt").write_text(text, encoding="utf-8")


def _compare_snapshot(rule_id: str, key: str, actual: str) -> None:
    entries = _read_snapshot(rule_id)
    if UPDATE:
        entries[key] = actual
        _write_snapshot(rule_id, entries)
    assert key in entries, f"no snapshot of {rule_id} {key}: review it, then write it with MPLINT_UPDATE_SNAPSHOTS=1"
    assert actual == entries[key], (
        f"{rule_id} {key} changed: review the diff, then accept it with MPLINT_UPDATE_SNAPSHOTS=1"
    )


def test_every_static_rule_has_examples():
    for meta in STATIC:
        assert meta.flagged, f"{meta.id} has no flagged example"
        assert meta.clean, f"{meta.id} has no clean example"
        if meta.fix_safety is not FixSafety.NONE:
            assert any(e.fixed is not None for e in meta.flagged), f"{meta.id} has a fix but no fixed example"


@pytest.mark.parametrize("meta,example,key", list(_cases("flagged")))
def test_flagged_example(meta, example, key):
    found = _lint(meta, example)
    # every finding of the run (the engine's MP000-MP003 included), message and fix safety exactly
    assert all("\n" not in d.message for d in found.diagnostics)
    _compare_snapshot(
        meta.id,
        key,
        "\n".join(
            f"{d.line}:{d.column}-{d.end_line}:{d.end_column} {d.rule_id} [{d.fix_safety.value}] {d.message}"
            for d in found.diagnostics
        ),
    )
    positions = [(d.line, d.column) for d in found.diagnostics if d.rule_id == meta.id]
    assert positions == list(example.expect), "\n".join(f"{d.line}:{d.column} {d.message}" for d in found.diagnostics)
    if example.fixed is None:  # the rule offers no fix in this case, and says so
        assert all(d.fix_safety is FixSafety.NONE for d in found.diagnostics if d.rule_id == meta.id)
        return
    # A fix's declared safety is its rule's catalog safety (a safe rule's fix must apply without --unsafe-fixes),
    # except in an example marked `unsafe: true`: a fix that holds on part of the target range only.
    unsafe = meta.fix_safety is FixSafety.UNSAFE or bool(example.settings.get("unsafe"))
    expected = FixSafety.UNSAFE if example.settings.get("unsafe") else meta.fix_safety
    assert {d.fix_safety for d in found.diagnostics if d.rule_id == meta.id and d.fixable} <= {expected}
    fixed = _lint(meta, example, fix=True, unsafe_fixes=unsafe)
    assert fixed.fixed_code == example.fixed
    assert [d for d in fixed.diagnostics if d.rule_id == meta.id] == []
    again = _lint(meta, example, fixed.fixed_code, fix=True, unsafe_fixes=unsafe)
    assert not again.written, "a second --fix changed the file"
    assert again.fixed_code == example.fixed


@pytest.mark.parametrize("meta,example,key", list(_cases("clean")))
def test_clean_example(meta, example, key):
    found = _lint(meta, example)
    assert [(d.line, d.column, d.message) for d in found.diagnostics if d.rule_id == meta.id] == []


@pytest.mark.parametrize("meta", STATIC, ids=[m.id for m in STATIC])
def test_snapshot_holds_exactly_the_flagged_examples(meta):
    """Run after the examples: under MPLINT_UPDATE_SNAPSHOTS=1 they write it, and this drops what no example has."""
    keys = [_key("flagged", i, e) for i, e in enumerate(meta.flagged)]
    entries = _read_snapshot(meta.id)
    if UPDATE and set(entries) - set(keys):
        _write_snapshot(meta.id, {k: v for k, v in entries.items() if k in keys})  # examples gone or renamed
        entries = _read_snapshot(meta.id)
    assert list(entries) == [k for k in keys if k in entries] and set(entries) == set(keys), sorted(
        set(entries) ^ set(keys)
    )


# One-file examples whose facts matter most: settings, a test module's path, fixes that change the file's own
# facts (a second round of checks). The in-memory check must say what the runner says, fix or not.
AGREEMENT = [
    ("MP101", "flagged", 12),
    ("MP201", "flagged", 5),
    ("MP301", "clean", 0),
    ("MP501", "flagged", 3),
    ("MP602", "flagged", 4),
    ("MPT101", "clean", 0),
]


@pytest.mark.parametrize("rule_id,kind,index", AGREEMENT, ids=[f"{r}-{k}-{i}" for r, k, i in AGREEMENT])
@pytest.mark.parametrize("fix", [False, True], ids=["check", "fix"])
def test_in_memory_check_agrees_with_the_runner(rule_id, kind, index, fix):
    meta = load_catalog()[rule_id]
    example = getattr(meta, kind)[index]
    assert not example.settings.get("files")
    options = {
        "keras": example.settings.get("keras"),
        "policy": example.settings.get("policy"),
        "path": example.settings.get("path", "example.py"),
        "select": [rule_id],
        "fix": fix,
        "unsafe_fixes": True,
    }
    memory, runner = check_code(example.code, **options), lint_code(example.code, **options)
    assert memory.diagnostics == runner.diagnostics
    assert (memory.fixed_code, memory.written) == (runner.fixed_code, runner.written)


def test_a_test_is_selected_by_the_rule_code_its_source_names(request):
    """``pytest -k MP201`` selects this test: conftest gives each test the codes it names as keywords."""
    assert sorted(k for k in request.node.listextrakeywords() if k.startswith("MP")) == ["MP201"]
