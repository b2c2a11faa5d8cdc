"""The whole output of `mplint fixtures/` (text and JSON), reviewed like Ruff's snapshots.

A change to any rule, message, position, fix or project fact shows up here as a diff to read.
After reviewing it, accept the new output with:

    MPLINT_UPDATE_SNAPSHOTS=1 python -m pytest tests/test_fixture_snapshot.py
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from mplint.testing import copy_tree

pytestmark = pytest.mark.quick  # the one-minute subset: python3 -m pytest -m quick

REPO = Path(__file__).resolve().parent.parent
SNAPSHOTS = Path(__file__).parent / "snapshots"
UPDATE = os.environ.get("MPLINT_UPDATE_SNAPSHOTS") == "1"


@pytest.fixture(scope="module")
def fixtures_copy(tmp_path_factory) -> Path:
    """A copy, so that no cache or stray file of the checkout changes the output."""
    root = tmp_path_factory.mktemp("snapshot")
    copy_tree(REPO / "fixtures", root / "fixtures")
    return root


def _mplint(cwd: Path, *args: str) -> str:
    env = {**os.environ, "NO_COLOR": "1", "COLUMNS": "200"}
    env.pop("FORCE_COLOR", None)
    done = subprocess.run(
        [sys.executable, "-m", "mplint", "--no-cache", *args, "fixtures"],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode in (0, 1), done.stderr
    return done.stdout


def _compare(name: str, actual: str) -> None:
    path = SNAPSHOTS / name
    if UPDATE or not path.exists():
        path.parent.mkdir(exist_ok=True)
        path.write_text(actual, encoding="utf-8")
        if not UPDATE:
            pytest.fail(f"{path.name} did not exist: written, review it and run again")
    expected = path.read_text(encoding="utf-8")
    assert actual == expected, f"{name} changed: review the diff, then accept it with MPLINT_UPDATE_SNAPSHOTS=1"


def test_text_output(fixtures_copy):
    _compare("fixtures.txt", _mplint(fixtures_copy))


def test_json_output(fixtures_copy):
    doc = json.loads(_mplint(fixtures_copy, "--format", "json"))
    doc["tool"]["version"] = "<version>"
    for project in doc["projects"]:
        project["root"] = Path(project["root"]).relative_to(fixtures_copy.resolve()).as_posix()
    _compare("fixtures.json", json.dumps(doc, indent=2, sort_keys=True) + "\n")
