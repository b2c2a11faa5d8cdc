"""Jupyter notebooks: cell positions, magics, byte-preserving fixes, malformed files.

The notebooks under tests/data/notebooks are real: outputs, metadata, magics,
one in Jupyter's layout (sorted keys, indent 1, final newline) and one in
Colab's (own key order, indent 2, sources as strings, no final newline).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from mplint.cli import main
from mplint.engine.notebooks import Notebook, load

DATA = Path(__file__).parent / "data" / "notebooks"
SOFTMAX = '    layers.Dense(10, activation=\\"softmax\\"),\\n'
SOFTMAX_FIXED = '    layers.Dense(10, activation=\\"softmax\\", dtype=\\"float32\\"),\\n'


@pytest.fixture
def project(tmp_path, monkeypatch):
    (tmp_path / ".mplint.yaml").write_text("{}\n")
    monkeypatch.chdir(tmp_path)
    return tmp_path


def _copy(project: Path, name: str) -> Path:
    return Path(shutil.copy(DATA / name, project / name))


def test_finding_is_reported_in_its_cell(project, capsys):
    _copy(project, "train.ipynb")
    assert main(["--select", "MP101", "train.ipynb"]) == 1
    out = capsys.readouterr().out
    assert out.startswith("train.ipynb:cell 4:3:5: MP101 [*] ")
    assert '3 |     layers.Dense(10, activation="softmax"),' in out  # the frame shows the cell's own line


def test_json_output_carries_the_cell(project, capsys):
    _copy(project, "train.ipynb")
    assert main(["--select", "MP101", "--format", "json", "train.ipynb"]) == 1
    [d] = json.loads(capsys.readouterr().out)["diagnostics"]
    assert (d["path"], d["cell"], d["rule"], d["start"], d["end"]) == (
        "train.ipynb",
        4,
        "MP101",
        {"line": 3, "column": 5},
        {"line": 3, "column": 43},
    )
    assert d["fix"]["edits"][0]["start"]["line"] == 3


def test_magics_and_shell_lines_are_not_syntax_errors(project, capsys):
    _copy(project, "train.ipynb")
    main(["--select", "MP101", "--format", "json", "train.ipynb"])
    rules = [d["rule"] for d in json.loads(capsys.readouterr().out)["diagnostics"]]
    assert rules == ["MP101"]


def test_fix_rewrites_only_the_changed_line_of_the_changed_cell(project, capsys):
    path = _copy(project, "train.ipynb")
    before = path.read_bytes()
    assert main(["--select", "MP101", "--fix", "train.ipynb"]) == 0
    assert before.count(SOFTMAX.encode()) == 1
    assert path.read_bytes() == before.replace(SOFTMAX.encode(), SOFTMAX_FIXED.encode())
    assert "Fixed 1 error." in capsys.readouterr().out


def test_fix_keeps_colab_layout_and_missing_final_newline(project):
    path = _copy(project, "colab.ipynb")
    before = path.read_bytes()
    assert not before.endswith(b"\n")
    assert main(["--select", "MP101", "--fix", "colab.ipynb"]) == 0
    old = "tf.keras.layers.Dense(10, activation='softmax'),"
    new = "tf.keras.layers.Dense(10, activation='softmax', dtype='float32'),"
    assert path.read_bytes() == before.replace(old.encode(), new.encode())
    assert "Précision mixte — «float16»".encode() in path.read_bytes()  # not escaped to \\u


def test_magics_survive_a_fix_in_their_cell(project):
    nb = json.loads((DATA / "train.ipynb").read_text())
    nb["cells"][3]["source"] = [
        "!nvidia-smi\n",
        "%time x = 1\n",
        "model = keras.Sequential([\n",
        '    layers.Dense(10, activation="softmax"),\n',
        "])\n",
        "model?",
    ]
    path = project / "nb.ipynb"
    path.write_text(json.dumps(nb, sort_keys=True, indent=1, ensure_ascii=False) + "\n")
    assert main(["--select", "MP101", "--fix", "nb.ipynb"]) == 0
    fixed = json.loads(path.read_text())["cells"][3]["source"]
    assert fixed == [
        "!nvidia-smi\n",
        "%time x = 1\n",
        "model = keras.Sequential([\n",
        '    layers.Dense(10, activation="softmax", dtype="float32"),\n',
        "])\n",
        "model?",
    ]


def test_notebook_without_fixes_is_not_rewritten(project):
    path = _copy(project, "train.ipynb")
    nb = json.loads(path.read_text())
    nb["cells"][3]["source"][2] = '    layers.Dense(10, activation="softmax", dtype="float32"),\n'
    path.write_text(json.dumps(nb, sort_keys=True, indent=1, ensure_ascii=False) + "\n")
    before = path.stat().st_mtime_ns, path.read_bytes()
    assert main(["--select", "MP101", "--fix", "train.ipynb"]) == 0
    assert (path.stat().st_mtime_ns, path.read_bytes()) == before


def test_check_without_fix_never_writes(project):
    path = _copy(project, "train.ipynb")
    before = path.stat().st_mtime_ns
    assert main(["--select", "MP101", "train.ipynb"]) == 1
    assert path.stat().st_mtime_ns == before


def test_syntax_error_points_into_its_cell_and_the_other_cells_are_checked(project, capsys):
    path = _copy(project, "train.ipynb")
    nb = json.loads(path.read_text())
    nb["cells"][2]["source"] = ["!ls\n", "def broken(:\n", "    pass\n"]
    path.write_text(json.dumps(nb, indent=1))
    assert main(["--select", "MP101", "--format", "json", "train.ipynb"]) == 1
    found = json.loads(capsys.readouterr().out)["diagnostics"]
    assert [(d["rule"], d["cell"], d["start"], d["message"]) for d in found] == [
        ("MP000", 3, {"line": 2, "column": 12}, "syntax error: invalid syntax"),
        ("MP101", 4, {"line": 3, "column": 5}, found[1]["message"]),
    ]


@pytest.mark.parametrize(
    "content,message,line",
    [
        (
            b'{"cells": [\n  {"cell_type": "code",}\n]}',
            "notebook is not valid JSON: Expecting property name enclosed in double quotes",
            2,
        ),
        (
            b'{"nbformat": 4, "metadata": {}}',
            "notebook has no 'cells' list (only nbformat 4 notebooks are supported)",
            1,
        ),
        (b"[1, 2]", "notebook has no 'cells' list (only nbformat 4 notebooks are supported)", 1),
        (
            b'{"cells": [{"cell_type": "code", "source": 3}]}',
            "cell 1: 'source' must be a string or a list of strings",
            1,
        ),
    ],
)
def test_malformed_notebook_is_a_parse_error(project, capsys, content, message, line):
    (project / "bad.ipynb").write_bytes(content)
    assert main(["--select", "MP101", "--format", "json", "--fix", "bad.ipynb"]) == 1
    [d] = json.loads(capsys.readouterr().out)["diagnostics"]
    assert (d["rule"], d["message"], d["start"]["line"], d["cell"]) == ("MP000", message, line, None)
    assert (project / "bad.ipynb").read_bytes() == content


def test_folders_yield_notebooks_but_not_checkpoints(project, capsys):
    _copy(project, "train.ipynb")
    (project / ".ipynb_checkpoints").mkdir()
    shutil.copy(DATA / "train.ipynb", project / ".ipynb_checkpoints" / "train-checkpoint.ipynb")
    (project / "clean.py").write_text("x = 1\n")
    assert main(["--select", "MP101", "--format", "json", "."]) == 1
    doc = json.loads(capsys.readouterr().out)
    assert doc["summary"]["files"] == 2
    assert [d["path"] for d in doc["diagnostics"]] == ["train.ipynb"]


def test_policy_set_in_a_module_the_notebook_imports_governs_it(project, capsys):
    (project / "setup_policy.py").write_text('import keras\nkeras.mixed_precision.set_global_policy("mixed_float16")\n')
    (project / "other.py").write_text('import keras\nkeras.mixed_precision.set_global_policy("mixed_float16")\n')
    nb = json.loads((DATA / "train.ipynb").read_text())
    nb["cells"][1]["source"] = ["import keras\n", "import setup_policy\n", "from keras import layers"]
    (project / "nb.ipynb").write_text(json.dumps(nb))
    assert main(["--select", "MP101", "--format", "json", "."]) == 1
    assert [(d["path"], d["cell"]) for d in json.loads(capsys.readouterr().out)["diagnostics"]] == [("nb.ipynb", 4)]


def test_diff_shows_the_cell(project, capsys):
    path = _copy(project, "train.ipynb")
    before = path.read_bytes()
    assert main(["--select", "MP101", "--diff", "train.ipynb"]) == 1
    assert capsys.readouterr().out == (
        "--- a/train.ipynb:cell 4\n+++ b/train.ipynb:cell 4\n@@ -1,5 +1,5 @@\n"
        ' model = keras.Sequential([\n     layers.Dense(64, activation="relu"),\n'
        '-    layers.Dense(10, activation="softmax"),\n+    layers.Dense(10, activation="softmax", dtype="float32"),\n'
        " ])\n model\n\nWould fix 1 error.\n"
    )
    assert path.read_bytes() == before


def test_virtual_module_keeps_every_line_position():
    nb = load((DATA / "train.ipynb").read_bytes())
    assert isinstance(nb, Notebook)
    assert [c.index for c in nb.cells] == [2, 3, 4, 5]  # markdown and %%bash cells are not Python
    lines = nb.virtual.splitlines()
    for cell in nb.cells:
        for n, text in enumerate(cell.text.splitlines(), start=1):
            at = nb.virtual_line(cell.index, n)
            assert nb.locate(at) == (cell.index, n)
            if not text.lstrip().startswith(("%", "!")) and not text.endswith("?") and " = !" not in text:
                assert lines[at - 1] == text
    assert nb.rewrite(nb.virtual) is None


IPYTHON_CELLS = [
    "!pip install -q keras \\\n    tensorflow",
    "ls ./data/train/",
    'import keras\nfrom keras import layers\nkeras.mixed_precision.set_global_policy("mixed_float16")',
    '    model = keras.Sequential([\n        layers.Dense(10, activation="softmax"),\n    ])',
    'print("epoch %(epoch)d"\n      %{"epoch": 1})',
    "model.fit?",
    "%%time\ncd ..",
]


def _ipython_notebook(project: Path) -> Path:
    nb = {
        "cells": [
            {"cell_type": "code", "source": c, "metadata": {}, "outputs": [], "execution_count": None}
            for c in IPYTHON_CELLS
        ],
        "metadata": {},
        "nbformat": 4,
        "nbformat_minor": 5,
    }
    path = project / "ipy.ipynb"
    path.write_text(json.dumps(nb, indent=1) + "\n")
    return path


def test_cells_ipython_accepts_are_checked_and_columns_count_their_indentation(project, capsys):
    _ipython_notebook(project)
    assert main(["--format", "json", "ipy.ipynb"]) == 1
    found = json.loads(capsys.readouterr().out)["diagnostics"]
    assert [(d["rule"], d["cell"], d["start"], d["end"]) for d in found] == [
        ("MP101", 4, {"line": 2, "column": 9}, {"line": 2, "column": 47})
    ]
    assert found[0]["fix"]["edits"][0]["start"] == {"line": 2, "column": 9}


def test_fix_in_an_indented_cell_keeps_the_indentation(project):
    path = _ipython_notebook(project)
    assert main(["--fix", "ipy.ipynb"]) == 0
    cells = [c["source"] for c in json.loads(path.read_text())["cells"]]
    assert (
        cells[3]
        == '    model = keras.Sequential([\n        layers.Dense(10, activation="softmax", dtype="float32"),\n    ])'
    )
    assert cells[:3] + cells[4:] == IPYTHON_CELLS[:3] + IPYTHON_CELLS[4:]


# -- positions that land in the .ipynb file -------------------------------------


def _json_line(path: Path, text: str) -> tuple[int, int]:
    """(1-based line, 1-based column) of the first occurrence of ``text`` in the notebook's JSON text."""
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        if text in line:
            return number, line.index(text) + 1
    raise AssertionError(text)


def test_github_annotation_lands_on_the_json_line_of_the_source_line(project, capsys):
    path = _copy(project, "train.ipynb")
    assert main(["--select", "MP101", "--format", "github", "train.ipynb"]) == 1
    line, column = _json_line(path, SOFTMAX)
    assert (line, column) == (76, 6)  # the cell's line starts at column 6 (after the JSON string's quote)
    escaped = len('layers.Dense(10, activation=\\"softmax\\")')
    assert capsys.readouterr().out == (
        f"::error title=MP101 float16-softmax-output,file=train.ipynb,line={line},col={column + 4},endLine={line},"
        f"endColumn={column + 4 + escaped}::MP101 (cell 4:3) softmax output layer computes in reduced precision "
        "(mixed_float16 set at train.ipynb:cell 2:5): float16 probabilities round to 0 or 1, and the loss saturates or becomes "
        'inf/NaN; give this layer dtype="float32"\n'
    )


def test_sarif_points_into_the_json_with_the_cell_in_properties(project, capsys):
    import jsonschema

    path = _copy(project, "train.ipynb")
    assert main(["--select", "MP101", "--format", "sarif", "train.ipynb"]) == 1
    doc = json.loads(capsys.readouterr().out)
    jsonschema.Draft4Validator(json.loads((DATA.parent / "sarif-schema-2.1.0.json").read_text())).validate(doc)
    [result] = doc["runs"][0]["results"]
    line, column = _json_line(path, SOFTMAX)
    assert result["locations"][0]["physicalLocation"]["region"] == {
        "startLine": line,
        "startColumn": column + 4,
        "endLine": line,
        "endColumn": column + 4 + 40,
    }
    assert result["properties"] == {"cell": 4, "cellLine": 3, "cellColumn": 5}
    [policy_site] = result["relatedLocations"]
    assert policy_site["physicalLocation"]["region"] == {"startLine": _json_line(path, "set_global_policy")[0]}
    assert policy_site["properties"] == {"cell": 2, "cellLine": 5}
    assert "fixes" not in result  # a cell's edits are not replacements of the JSON text


def test_set_at_and_related_locations_name_the_cell(project, capsys):
    _copy(project, "train.ipynb")
    assert main(["--select", "MP101", "--format", "json", "train.ipynb"]) == 1
    [d] = json.loads(capsys.readouterr().out)["diagnostics"]
    assert "(mixed_float16 set at train.ipynb:cell 2:5)" in d["message"]
    assert d["context"]["set_at"] == {"path": "train.ipynb", "cell": 2, "line": 5}
    assert main(["--show-facts", "train.ipynb"]) == 0
    assert "    policy mixed_float16 set at train.ipynb:cell 2:5\n" in capsys.readouterr().out


def test_related_location_in_the_same_notebook_is_a_cell_line(project, capsys):
    cells = [
        "import keras\nkeras.mixed_precision.set_global_policy('mixed_float16')\nNEG_INF = -1e9\n",
        "class Attn(keras.layers.Layer):\n    def call(self, scores, mask):\n        return scores + (1.0 - mask) * NEG_INF\n",
    ]
    notebook = {
        "cells": [
            {"cell_type": "code", "execution_count": None, "metadata": {}, "outputs": [], "source": c} for c in cells
        ],
        "metadata": {},
        "nbformat": 4,
        "nbformat_minor": 5,
    }
    (project / "nb.ipynb").write_text(json.dumps(notebook, indent=1))
    assert main(["--select", "MP601", "--format", "json", "nb.ipynb"]) == 1
    [d] = json.loads(capsys.readouterr().out)["diagnostics"]
    assert (d["cell"], d["start"]["line"]) == (2, 3)
    assert "line 3" not in d["message"] or "cell" in d["message"]
    assert d["related"] == [{"path": "nb.ipynb", "cell": 1, "line": 3, "message": "the constant's value"}]


def test_file_positions_follow_escapes_lists_and_strings():
    from mplint.engine.notebooks import FilePositions

    raw = (
        '{\n "cells": [\n  {"source": "a = \\"\\u00e9\\ud83d\\ude00\\"\\nb = 1\\n"},\n'
        '  {"cell_type": "code", "source": [\n    "x = 1\\n",\n    "  \\"y\\"\\n"\n   ]}\n ]\n}'
    )
    positions = FilePositions(raw)
    assert json.loads(raw)["cells"][0]["source"] == 'a = "\u00e9\U0001f600"\nb = 1\n'
    assert positions.locate(1, 1, 1) == (3, 15)
    assert positions.locate(1, 1, 7) == (3, 27)  # past the 6-character escape of é
    assert positions.locate(1, 1, 8) == (3, 39)  # past the surrogate pair: one character
    assert positions.locate(1, 2, 1) == (3, 43)
    assert positions.locate(2, 2, 3) == (6, 8)
    assert positions.locate(2, 9, 1) is None and positions.locate(3, 1, 1) is None


def _notebook(*cells: str) -> str:
    return json.dumps(
        {
            "cells": [
                {
                    "cell_type": "code",
                    "execution_count": None,
                    "metadata": {},
                    "outputs": [],
                    "source": cell.splitlines(keepends=True),
                }
                for cell in cells
            ],
            "metadata": {},
            "nbformat": 4,
            "nbformat_minor": 5,
        }
    )


_FLOAT16_TUTORIAL = (
    "import numpy as np",
    "# float16 holds integers exactly only up to 2048\nx = np.array(1, dtype=np.float16)\nprint(x + 2048)",
)


def test_float16_tutorial_without_a_mixed_policy_is_not_preprocessing(project, capsys):
    (project / "float16.ipynb").write_text(_notebook(*_FLOAT16_TUTORIAL))
    assert main(["--select", "MP401", "--format", "json", "float16.ipynb"]) == 0
    assert json.loads(capsys.readouterr().out)["diagnostics"] == []


def test_float16_preprocessing_under_a_mixed_policy_is_reported(project, capsys):
    policy = 'import keras\nkeras.mixed_precision.set_global_policy("mixed_float16")'
    (project / "pipeline.ipynb").write_text(_notebook(policy, *_FLOAT16_TUTORIAL))
    assert main(["--select", "MP401", "--format", "json", "pipeline.ipynb"]) == 1
    found = json.loads(capsys.readouterr().out)["diagnostics"]
    assert [(d["cell"], d["rule"], d["start"]["line"], d["start"]["column"]) for d in found] == [(3, "MP401", 2, 5)]


_DEMO_CELLS = (
    'import keras\nfrom keras import layers\nkeras.mixed_precision.set_global_policy("mixed_float16")',
    'inputs = keras.Input(shape=(784,))\nx = layers.Dense(100, activation="relu")(inputs)',
    '# what not to do: a float16 softmax\noutputs = layers.Dense(10, activation="softmax")(x)\nhidden = layers.Dense(100)(x)',
    'hidden = layers.Dense(128, activation="relu")(x)\noutputs = layers.Dense(10)(hidden)\n'
    'outputs = layers.Activation("softmax", dtype="float32")(outputs)\nmodel = keras.Model(inputs, outputs)',
)


def test_demo_layers_a_later_cell_replaces_keep_their_sizes(project, capsys):
    """The demo softmax holds the class count and the demo ``hidden`` is bound again before any use: only
    the hidden layer the model uses (cell 2) is reported."""
    (project / "demo.ipynb").write_text(_notebook(*_DEMO_CELLS))
    assert main(["--select", "MP301", "--format", "json", "demo.ipynb"]) == 1
    found = json.loads(capsys.readouterr().out)["diagnostics"]
    assert [(d["cell"], d["rule"], d["start"]["line"], d["start"]["column"]) for d in found] == [(2, "MP301", 2, 18)]
