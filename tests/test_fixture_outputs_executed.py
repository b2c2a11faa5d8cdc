"""MP101/MP102 end to end: fix the keras3_classifier fixture, then train the fixed models under mixed_float16.

The fixture's policy is set in train.py and its models are built in model.py, so the findings
depend on project facts gathered across files. TensorFlow runs in a subprocess: the global
policy it sets must not leak into other tests.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from mplint.testing import copy_tree
from mplint.verify.warm import run_python

FIXTURE = Path(__file__).resolve().parent.parent / "fixtures" / "keras3_classifier"
SELECT = ["--select", "MP101,MP102"]

_PROBE = """
import json
import numpy as np
import train

classifier, regressor, scorer = train.main()
dtype = lambda tensor: train.keras.backend.standardize_dtype(tensor.dtype)
batch = np.zeros((2, train.NUM_FEATURES), "float32")
print(json.dumps({
    "policy": train.keras.mixed_precision.global_policy().name,
    "classifier": dtype(classifier(batch)),
    "regressor": dtype(regressor(batch)),
    "scorer": dtype(scorer(batch)),
    "hidden": str(classifier.layers[0].compute_dtype),
}))
"""


def _mplint(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "mplint", *args], cwd=cwd, capture_output=True, text=True, timeout=120)


def _findings(project: Path) -> list[tuple[str, str, int]]:
    result = _mplint(*SELECT, "--format", "json", "--exit-zero", str(project), cwd=project)
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)
    items = data if isinstance(data, list) else data.get("diagnostics", [])
    return sorted((Path(d["path"]).name, d["rule"], d["start"]["line"]) for d in items)


@pytest.fixture
def project(tmp_path: Path) -> Path:
    copy = tmp_path / "keras3_classifier"
    copy_tree(FIXTURE, copy)
    return copy


def test_fixture_findings_come_from_the_policy_in_train_py(project: Path):
    assert _findings(project) == [
        ("model.py", "MP101", 14),
        ("model.py", "MP102", 22),
        ("model.py", "MP102", 32),
    ]
    result = _mplint(*SELECT, str(project), cwd=project)
    assert result.returncode == 1
    assert "train.py:8" in result.stdout


def test_fix_leaves_no_output_findings(project: Path):
    original_train = (project / "train.py").read_text()
    result = _mplint(*SELECT, "--fix", str(project), cwd=project)
    assert result.returncode == 0, result.stdout + result.stderr
    assert _findings(project) == []
    assert (project / "train.py").read_text() == original_train
    fixed = (project / "model.py").read_text()
    assert 'layers.Dense(NUM_CLASSES, activation="softmax", dtype="float32"),' in fixed
    assert 'price = layers.Dense(1, name="price", dtype="float32")(x)' in fixed
    assert 'self.score = layers.Dense(1, activation="sigmoid", dtype="float32")' in fixed


def test_fixed_models_produce_float32_outputs(project: Path):
    pytest.importorskip("tensorflow")
    assert _mplint(*SELECT, "--fix", str(project), cwd=project).returncode == 0
    result = run_python(["-c", _PROBE], module="tensorflow", cwd=project)
    assert result.returncode == 0, result.stderr[-3000:]
    dtypes = json.loads(result.stdout.strip().splitlines()[-1])
    assert dtypes == {
        "policy": "mixed_float16",
        "classifier": "float32",
        "regressor": "float32",
        "scorer": "float32",
        "hidden": "float16",  # the fix touches only the outputs: the body still runs in float16
    }
