"""Every rule with a safe fix names its executed proof (``proof:`` in rules/*.yaml, cited by ``mplint explain``),
or is listed here as lacking one: a safe fix is safe because running the fixed code says so. A named proof must run
that rule's fix: the suite's plugin ``tests/proof_runs.py`` fails a proof that passes without applying it."""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path

import pytest
from proof_runs import NOT_APPLYING

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


# A rule's fix run in-process and in a subprocess, and two tests named as proofs that do not apply it.
PROOFS = '''
import subprocess
import sys

from mplint.testing import lint_code

CODE = """
import torch

def step(model, optimizer, scaler, loss):
    scaler.scale(loss).backward()
    scaler.unscale_(optimizer)
    scaler.unscale_(optimizer)
    scaler.step(optimizer)
    scaler.update()
"""


def test_runs_the_fix():
    assert lint_code(CODE, select=["MPT203"], fix=True).fixed_code.count("unscale_") == 1


def test_runs_the_fix_in_a_subprocess(tmp_path):
    (tmp_path / "step.py").write_text(CODE)
    argv = [sys.executable, "-m", "mplint", "--no-cache", "--fix", "--select", "MPT203", "step.py"]
    assert subprocess.run(argv, cwd=tmp_path).returncode == 0
    assert (tmp_path / "step.py").read_text().count("unscale_") == 1


def test_only_lints():
    assert lint_code(CODE, select=["MPT203"]).diagnostics


def test_proves_two_rules_and_fixes_one():
    assert lint_code(CODE, select=["MPT203"], fix=True).fixed_code.count("unscale_") == 1
'''

CONFTEST = """
from proof_runs import ProofRuns

PROOFS = {
    "test_proofs.py::test_runs_the_fix": {"MPT203"},
    "test_proofs.py::test_runs_the_fix_in_a_subprocess": {"MPT203"},
    "test_proofs.py::test_only_lints": {"MPT203"},
    "test_proofs.py::test_proves_two_rules_and_fixes_one": {"MPT203", "MPT204"},
}


def pytest_configure(config):
    config.pluginmanager.register(ProofRuns(PROOFS), "proof-runs")
"""


def test_a_named_proof_that_applies_no_fix_of_its_rule_fails(tmp_path):
    (tmp_path / "test_proofs.py").write_text(PROOFS)
    (tmp_path / "conftest.py").write_text(CONFTEST)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), str(ROOT / "tests")]), "COLUMNS": "500"}
    env.pop("MPLINT_RECORD_FIXES", None)
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:xdist", "-o", "addopts=", "-rf"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    failed = sorted(line for line in done.stdout.splitlines() if line.startswith("FAILED "))
    assert failed == [
        "FAILED test_proofs.py::test_only_lints - Failed: test_proofs.py::test_only_lints is named as the proof of "
        "MPT203 but applied no fix of it",
        "FAILED test_proofs.py::test_proves_two_rules_and_fixes_one - Failed: "
        "test_proofs.py::test_proves_two_rules_and_fixes_one is named as the proof of MPT204 but applied no fix of it",
    ], done.stdout + done.stderr
    assert done.stdout.splitlines()[-1].startswith("2 failed, 2 passed"), done.stdout


def test_the_proofs_left_out_of_the_fix_check_are_named_proofs():
    named = {proof for meta in load_catalog().values() for proof in meta.proof}
    assert set(NOT_APPLYING) <= named, "remove the entries of proofs no longer named from proof_runs.NOT_APPLYING"
