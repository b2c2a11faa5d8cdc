"""Every rule with a safe fix names its executed proof (``proof:`` in rules/*.yaml, cited by ``mplint explain``),
or is listed here as lacking one: a safe fix is safe because running the fixed code says so."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from mplint.catalog import load_catalog
from mplint.cli import main
from mplint.diagnostics import FixSafety

ROOT = Path(__file__).resolve().parent.parent

# Safe fixes whose before/after behaviour no test executes yet: their examples pin the fixed text only.
LACKING_PROOF: set[str] = set()


def _test_functions(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    return {node.name for node in tree.body if isinstance(node, ast.FunctionDef) and node.name.startswith("test_")}


def test_every_safe_fix_names_a_proof_or_is_listed_as_lacking_one():
    safe = {meta.id for meta in load_catalog().values() if meta.fix_safety is FixSafety.SAFE}
    proven = {meta.id for meta in load_catalog().values() if meta.proof}
    assert safe - proven == LACKING_PROOF
    assert LACKING_PROOF <= safe, "a rule listed as lacking a proof has no safe fix any more"


@pytest.mark.parametrize("meta", [m for m in load_catalog().values() if m.proof], ids=lambda m: m.id)
def test_each_named_proof_is_a_test_function_of_tests(meta):
    for proof in meta.proof:
        path, _, function = proof.partition("::")
        assert path.startswith("tests/test_") and (ROOT / path).is_file(), proof
        assert function in _test_functions(ROOT / path), proof


def test_explain_cites_the_proofs(capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "300")  # one proof a line, unwrapped
    assert main(["explain", "MPT601"]) == 0
    out = capsys.readouterr().out
    assert "Proof" in out
    assert "tests/test_torch_executed.py::test_c_the_kept_value_matters_where_masks_add_up_in_float32" in out


def test_explain_names_no_proof_for_a_rule_without_a_fix(capsys):
    assert main(["explain", "MP205"]) == 0
    assert "::test_" not in capsys.readouterr().out
