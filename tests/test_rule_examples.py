"""Every example in rules/*.yaml runs as a test.

Flagged examples: the rule fires exactly at the stated positions; ``--fix``
(with ``--unsafe-fixes`` for unsafe rules) produces exactly the stated text;
the fixed text is clean for that rule and a second ``--fix`` changes nothing.
Clean examples: the rule stays silent.
"""

from __future__ import annotations

import pytest

from mplint.catalog import load_catalog
from mplint.diagnostics import FixSafety
from mplint.testing import lint_code

STATIC = [m for m in load_catalog().values() if m.kind == "static"]


def _cases(kind: str):
    for meta in STATIC:
        for i, example in enumerate(getattr(meta, kind)):
            yield pytest.param(meta, example, id=f"{meta.id}-{kind}-{i}-{example.title or 'example'}"[:90])


def _kwargs(example) -> dict:
    s = example.settings
    return {"keras": s.get("keras"), "policy": s.get("policy"), "files": s.get("files"), "path": s.get("path", "example.py")}


def test_every_static_rule_has_examples():
    for meta in STATIC:
        assert meta.flagged, f"{meta.id} has no flagged example"
        assert meta.clean, f"{meta.id} has no clean example"
        if meta.fix_safety is not FixSafety.NONE:
            assert any(e.fixed is not None for e in meta.flagged), f"{meta.id} has a fix but no fixed example"


@pytest.mark.parametrize("meta,example", list(_cases("flagged")))
def test_flagged_example(meta, example):
    kwargs = _kwargs(example)
    found = lint_code(example.code, select=[meta.id], **kwargs)
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
    fixed = lint_code(example.code, select=[meta.id], fix=True, unsafe_fixes=unsafe, **kwargs)
    assert fixed.fixed_code == example.fixed
    assert [d for d in fixed.diagnostics if d.rule_id == meta.id] == []
    again = lint_code(fixed.fixed_code, select=[meta.id], fix=True, unsafe_fixes=unsafe, **kwargs)
    assert not again.written, "a second --fix changed the file"
    assert again.fixed_code == example.fixed


@pytest.mark.parametrize("meta,example", list(_cases("clean")))
def test_clean_example(meta, example):
    found = lint_code(example.code, select=[meta.id], **_kwargs(example))
    assert [(d.line, d.column, d.message) for d in found.diagnostics if d.rule_id == meta.id] == []
