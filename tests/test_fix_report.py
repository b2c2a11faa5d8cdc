"""What ``--fix`` reports is what a fresh check finds afterwards, and the check's "fixable" counts are
what ``--fix`` (then ``--unsafe-fixes``) really fixes: on a copy of every bundled fixture project."""

from __future__ import annotations

import json

import pytest
from conftest import REPO

from mplint.cli import main
from mplint.testing import copy_tree


def _findings(doc: dict) -> list[tuple]:
    return sorted(
        (d["path"], d["rule"], d["start"]["line"], d["start"]["column"], d["message"]) for d in doc["diagnostics"]
    )


def _fixable(doc: dict, safety: str) -> int:
    return sum(1 for d in doc["diagnostics"] if d.get("fix") and d["fix"]["safety"] == safety)


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """The check, --fix, a fresh check, --fix --unsafe-fixes and a last check, on one copy of fixtures/."""
    root = copy_tree(REPO / "fixtures", tmp_path_factory.mktemp("fx") / "fixtures")
    import contextlib
    import io
    import os

    docs = {}
    cwd = os.getcwd()
    os.chdir(root.parent)
    try:
        for name, argv in (
            ("check", []),
            ("fix", ["--fix"]),
            ("after_fix", []),
            ("unsafe_fix", ["--fix", "--unsafe-fixes"]),
            ("after_unsafe", []),
        ):
            out = io.StringIO()
            with contextlib.redirect_stdout(out):
                code = main(["--format", "json", "--no-cache", *argv, "fixtures"])
            docs[name] = (code, json.loads(out.getvalue()))
    finally:
        os.chdir(cwd)
    return docs


def test_fix_reports_what_a_fresh_check_then_finds(runs):
    assert _findings(runs["fix"][1]) == _findings(runs["after_fix"][1])
    assert _findings(runs["unsafe_fix"][1]) == _findings(runs["after_unsafe"][1])
    assert runs["fix"][0] == runs["after_fix"][0] == 1


def test_fixable_counts_are_what_fix_fixes(runs):
    assert _fixable(runs["check"][1], "safe") == runs["fix"][1]["summary"]["fixed"]
    assert _fixable(runs["after_fix"][1], "unsafe") == runs["unsafe_fix"][1]["summary"]["fixed"]
