"""MP601 executed: the additive -1e9 mask is NaN under mixed_float16, the fix is finite and float32-identical.

The fixture layer runs in subprocesses (each picks its own global policy) on CPU, on each Keras 3 backend
(TensorFlow hidden from the JAX and torch runs); mplint fixes a copy of the fixture folder.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from keras_backends import backend_env, backend_params, warm_module

from mplint.testing import copy_tree
from mplint.verify.warm import run_python

np = pytest.importorskip("numpy")

FIXTURE = Path(__file__).resolve().parent.parent / "fixtures" / "attention_mask"
MASK_LINE = 21
ORIGINAL_LINE = "        scores = scores + (1.0 - mask) * -1e9\n"
FIXED_LINE = (
    '        scores = scores + (1.0 - mask) * (-3e4 if keras.backend.standardize_dtype(mask.dtype) == "float16" else '
    "-1e9)\n"
)


def _forward(folder: Path, policy: str, backend: str) -> np.ndarray:
    out = folder / f"out-{backend}-{policy}.npy"
    env = backend_env(backend, folder.parent)
    done = run_python(["run_attention.py", policy, str(out)], module=warm_module(backend), cwd=folder, env=env)
    assert done.returncode == 0, done.stderr[-3000:]
    return np.load(out)


def _mplint(folder: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "mplint", "--select", "MP601", *args, "attention.py"],
        cwd=folder,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


@pytest.fixture(scope="module", params=backend_params())
def runs(request, tmp_path_factory):
    backend = request.param
    original = tmp_path_factory.mktemp("original") / "attention_mask"
    copy_tree(FIXTURE, original)
    fixed = tmp_path_factory.mktemp("fixed") / "attention_mask"
    copy_tree(FIXTURE, fixed)
    before = _mplint(fixed, "--format", "json")
    fix = _mplint(fixed, "--fix")
    after = _mplint(fixed)
    return {
        "before": before,
        "fix": fix,
        "after": after,
        "fixed_source": (fixed / "attention.py").read_text(encoding="utf-8"),
        "backend": backend,
        "original_mixed": _forward(original, "mixed_float16", backend),
        "original_float32": _forward(original, "float32", backend),
        "fixed_mixed": _forward(fixed, "mixed_float16", backend),
        "fixed_float32": _forward(fixed, "float32", backend),
    }


def test_fixture_uses_the_additive_mask():
    assert FIXTURE.joinpath("attention.py").read_text(encoding="utf-8").splitlines(True)[MASK_LINE - 1] == ORIGINAL_LINE


def test_original_is_nan_under_mixed_float16(runs):
    # torch multiplies a float16 tensor by a Python number in float32 and rounds the product: 0 * -1e9 stays 0 and
    # only the masked positions become -inf, whose softmax weight is 0; TensorFlow and JAX round -1e9 to -inf first
    assert bool(np.isnan(runs["original_mixed"]).any()) == (runs["backend"] != "torch")
    assert np.isfinite(runs["original_float32"]).all()


def test_mplint_reports_the_mask_constant(runs):
    assert runs["before"].returncode == 1
    found = json.loads(runs["before"].stdout)["diagnostics"]
    assert [(d["rule"], d["start"]["line"], d["start"]["column"]) for d in found] == [("MP601", MASK_LINE, 42)]


def test_fix_rewrites_only_the_constant(runs):
    assert runs["fix"].returncode == 0, runs["fix"].stdout + runs["fix"].stderr
    assert runs["after"].returncode == 0
    expected = FIXTURE.joinpath("attention.py").read_text(encoding="utf-8").replace(ORIGINAL_LINE, FIXED_LINE)
    assert runs["fixed_source"] == expected


def test_fixed_code_is_finite_under_mixed_float16(runs):
    mixed = runs["fixed_mixed"]
    assert np.isfinite(mixed).all()
    np.testing.assert_allclose(mixed, runs["original_float32"], rtol=0.05, atol=0.05)


def test_fixed_code_keeps_float32_results_identical(runs):
    np.testing.assert_array_equal(runs["fixed_float32"], runs["original_float32"])
