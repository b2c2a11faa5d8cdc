"""An executed proof runs the fix of the rule it proves.

A rule's ``proof:`` (rules/*.yaml) names tests that run code before and after mplint's fix. While such a test runs,
and while the fixtures it uses are set up, mplint appends every fix it applies to the file ``MPLINT_RECORD_FIXES``
names, in the test's process and in every process it starts (``mplint --fix`` in a subprocess, the runner's workers).
A proof that passes without a fix of each rule it proves applied, by itself or by one of its fixtures, fails: a proof
cannot pass without the fix it is cited for.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Iterator, Mapping
from pathlib import Path

import pytest

RECORD = "MPLINT_RECORD_FIXES"

# Named proofs that do not apply the fix themselves yet, with why; the check leaves them out.
NOT_APPLYING: dict[str, str] = {
    "tests/test_keras_fixes_executed.py::test_mp601_normalization_fix_leaves_every_other_input_as_it_was": (
        "runs the fixed text of _NORMALIZE_CASES, which "
        "test_mp601_normalization_in_float32_keeps_zero_and_tiny_vectors_finite checks against the fix"
    ),
    "tests/test_backend_neutral_fixes_executed.py::test_the_fixed_layer_pools_padding_to_zero_and_keeps_float32": (
        "runs FIXED, which test_the_fix_tests_the_dtype_the_same_way_on_every_backend checks against the fix"
    ),
    "tests/test_api_migration.py::test_fixed_fixture_runs_on_keras3": (
        "its keras2_loop_on_keras3 case has MP502 findings only, and the proof is named for MP501 too"
    ),
}


@contextlib.contextmanager
def recording() -> Iterator[set[str]]:
    """The rules whose fixes mplint applies inside the block (filled in when it ends)."""
    applied: set[str] = set()
    with tempfile.TemporaryDirectory() as folder:
        record = Path(folder) / "fixes.tsv"
        before = os.environ.get(RECORD)
        os.environ[RECORD] = str(record)
        try:
            yield applied
        finally:
            if before is None:
                del os.environ[RECORD]
            else:
                os.environ[RECORD] = before
            if record.exists():
                applied.update(line.split("\t")[0] for line in record.read_text(encoding="utf-8").splitlines())


class ProofRuns:
    """A pytest plugin: ``proofs`` maps ``tests/test_x.py::test_name`` to the rules it proves."""

    def __init__(self, proofs: Mapping[str, set[str]]):
        self.proofs = proofs
        self.by_fixture: dict[tuple[int, int | None], set[str]] = {}  # (fixture, its parameter's index) -> rules

    def rules_of(self, item: pytest.Item) -> set[str]:
        name = getattr(item, "originalname", item.name)  # test_x[cpu] -> test_x
        if not item.path.is_relative_to(item.config.rootpath):
            return set()
        return self.proofs.get(f"{item.path.relative_to(item.config.rootpath).as_posix()}::{name}", set())

    @pytest.hookimpl(wrapper=True)
    def pytest_fixture_setup(self, fixturedef, request):
        with recording() as applied:
            result = yield
        if applied:
            index = request.param_index if hasattr(request, "param") else None
            self.by_fixture[id(fixturedef), index] = applied
        return result

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_call(self, item: pytest.Item):
        rules = self.rules_of(item)
        if not rules:
            return (yield)
        with recording() as applied:
            result = yield  # a failed or skipped proof stays as it is
        indices = getattr(getattr(item, "callspec", None), "indices", {})
        for name, fixturedefs in item._fixtureinfo.name2fixturedefs.items():
            for fixturedef in fixturedefs:
                applied |= self.by_fixture.get((id(fixturedef), indices.get(name)), set())
        missing = sorted(rules - applied)
        if missing:
            pytest.fail(f"{item.nodeid} is named as the proof of {', '.join(missing)} but applied no fix of it", False)
        return result


def proofs_of(catalog) -> dict[str, set[str]]:
    """Each named proof and the rules it proves, from the catalog's entries (but ``NOT_APPLYING``)."""
    proofs: dict[str, set[str]] = {}
    for meta in catalog.values():
        for proof in meta.proof:
            if proof not in NOT_APPLYING:
                proofs.setdefault(proof, set()).add(meta.id)
    return proofs
