"""Packaging: a wheel that carries the rule catalog, TensorFlow only as an extra, one version, a light --version."""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

import mplint

REPO = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> zipfile.ZipFile:
    builders = pytest.importorskip("hatchling.builders.wheel")
    out = tmp_path_factory.mktemp("dist")
    [path] = list(builders.WheelBuilder(str(REPO)).build(directory=str(out), versions=["standard"]))
    return zipfile.ZipFile(path)


def test_wheel_carries_the_rule_catalog(wheel):
    names = set(wheel.namelist())
    rules = sorted(p.name for p in (REPO / "rules").glob("*.yaml"))
    assert rules and [n for n in rules if f"mplint/catalog/{n}" not in names] == []
    assert "mplint/cli.py" in names and "mplint/engine/notebooks.py" in names
    pages = sorted(p.name for p in (REPO / "docs" / "rules").glob("*.md"))
    assert len(pages) == len(rules) + 1 and [n for n in pages if f"mplint/rule_docs/{n}" not in names] == []
    assert not any(n.startswith(("tests/", "rules/")) for n in names)


def test_wheel_metadata(wheel):
    [meta_name] = [n for n in wheel.namelist() if n.endswith(".dist-info/METADATA")]
    meta = wheel.read(meta_name).decode()
    assert f"\nVersion: {mplint.__version__}\n" in meta
    requires = [line.split(": ", 1)[1] for line in meta.splitlines() if line.startswith("Requires-Dist: ")]
    assert [r for r in requires if r.startswith("tensorflow") and "extra ==" not in r] == []
    assert any(r.startswith("tensorflow") and "extra == 'runtime'" in r for r in requires)
    [entry] = [n for n in wheel.namelist() if n.endswith("entry_points.txt")]
    assert "mplint = mplint.cli:main" in wheel.read(entry).decode()


def test_version_does_not_import_tensorflow():
    code = (
        "import sys\nfrom mplint.cli import main\n"
        "rc = main(['--version'])\n"
        "assert rc == 0, rc\n"
        "assert not any(m == 'tensorflow' or m.startswith(('tensorflow.', 'keras', 'tf_keras')) for m in sys.modules), "
        "sorted(m for m in sys.modules if 'tensorflow' in m or 'keras' in m)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert done.stdout == f"mplint {mplint.__version__}\n"


def test_linting_does_not_import_tensorflow(tmp_path):
    (tmp_path / "m.py").write_text(
        'import tensorflow as tf\ntf.keras.mixed_precision.set_global_policy("mixed_float16")\n'
    )
    code = (
        "import sys\nfrom mplint.cli import main\n"
        f"main([{str(tmp_path / 'm.py')!r}])\n"
        "assert 'tensorflow' not in sys.modules and 'keras' not in sys.modules\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
