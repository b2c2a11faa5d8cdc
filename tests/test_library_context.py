"""Library code stays library code, and findings never depend on the paths given.

A published package (what the project's packaging metadata ships) runs under whatever policy its
users pick: a float32 tool script of the repository does not decide for them. And each file is
judged with the facts of its whole project however the paths are named: the project root, a
folder, one file, a pre-commit file list or an editor buffer.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path

import pytest

from conftest import write_files

from mplint.cli import main
from mplint.project.build import project_facts
from mplint.project.published import published
from mplint.server.documents import Buffer, Part, check, project_folder

check_buffer = check

REPO = Path(__file__).resolve().parent.parent

MASK = (
    "`-1e9` is outside float16's range (largest finite value 65504): combined with the compute-dtype tensor "
    "`(1.0 - ops.cast(mask[:, None, :], x.d...` it becomes -inf under a float16 policy, and 0 * inf is NaN, so an "
    "additive mask turns every unmasked score into NaN; library code of kmodels (users pick the policy); "
    "tools/convert.py sets float32 but is a tool script of this repository"
)
EPSILON = (
    "`1e-8` flushes to 0 in float16 (smallest subnormal 6e-8): combined with the compute-dtype tensor `p` under a "
    "float16 policy the epsilon vanishes and a log or division by it gives inf or NaN"
)
EXPECTED = {
    "kmodels/heads.py": [("MP601", 14, 29, EPSILON)],  # benchmarks/bench_head.py runs it under mixed_float16
    "kmodels/layers.py": [("MP601", 16, 73, MASK)],  # reached by the float32 tool script only: library code
}


def _lint(capsys, *args: str) -> dict[str, list[tuple]]:
    code = main(["--format", "json", "--no-cache", *args])
    doc = json.loads(capsys.readouterr().out)
    found: dict[str, list[tuple]] = {}
    for d in doc["diagnostics"]:
        found.setdefault(d["path"], []).append((d["rule"], d["start"]["line"], d["start"]["column"], d["message"]))
    assert code == (1 if found else 0)
    return found


@pytest.fixture
def library(tmp_path, monkeypatch) -> Path:
    root = tmp_path / "library_with_tools"
    shutil.copytree(REPO / "fixtures" / "library_with_tools", root)
    monkeypatch.chdir(root)
    return root


def test_a_published_package_is_library_code_whatever_its_tool_scripts_set(library, capsys):
    assert _lint(capsys, ".") == EXPECTED
    facts = project_facts(library)
    layers = facts["kmodels/layers.py"]
    assert (layers.library_context, layers.distribution, layers.policy_names) == (True, "kmodels", {"float32"})
    assert layers.describe_policy() == (
        "library code of kmodels (users pick the policy); tools/convert.py sets float32 but is a tool script of "
        "this repository")
    heads = facts["kmodels/heads.py"]  # the mixed benchmark adds its own context on top
    assert (heads.library_context, heads.policy_names) == (True, {"float32", "mixed_float16"})
    assert heads.describe_policy() == "mixed_float16 set at benchmarks/bench_head.py:10, which imports this module"
    tool = facts["tools/convert.py"]  # the tool script is a program, not library code
    assert (tool.library_context, tool.distribution) == (False, "")


@pytest.mark.parametrize("paths", [
    ["kmodels/"],
    ["kmodels"],
    ["kmodels/layers.py", "kmodels/heads.py"],
    ["kmodels/__init__.py", "kmodels/heads.py", "kmodels/layers.py", "tools/convert.py"],  # a pre-commit file list
])
def test_the_same_findings_whatever_paths_are_given(library, capsys, paths):
    assert _lint(capsys, *paths) == EXPECTED


def test_one_file_at_a_time(library, capsys):
    for path, expected in EXPECTED.items():
        assert _lint(capsys, path) == {path: expected}
    assert _lint(capsys, "tools/convert.py") == {}


def test_from_above_the_project(library, capsys, monkeypatch):
    monkeypatch.chdir(library.parent)
    assert _lint(capsys, "library_with_tools/kmodels/layers.py") == {
        "library_with_tools/kmodels/layers.py": [(
            rule, line, column, message.replace("tools/convert.py", "library_with_tools/tools/convert.py"))
            for rule, line, column, message in EXPECTED["kmodels/layers.py"]],
    }


def test_an_editor_buffer_gets_the_same_findings(library):
    for name, expected in EXPECTED.items():
        path = library / name
        buffer = Buffer(path, (Part(path.as_uri(), path.read_text(encoding="utf-8")),))
        assert project_folder(path, [library]) == library
        result = check(buffer, project_folder(path, [library]))
        assert [(d.rule_id, d.line, d.column, d.message) for d in result.diagnostics] == expected


# --- what packaging metadata publishes ------------------------------------------------------

def _layout(tmp_path, metadata: dict[str, str]) -> Path:
    return write_files(tmp_path, {
        **metadata,
        "kmodels/__init__.py": "", "kmodels/layers/__init__.py": "", "kmodels/layers/attention.py": "",
        "src/other/__init__.py": "", "tools/__init__.py": "", "tools/convert.py": "", "benchmarks/bench.py": "",
        "single.py": "",
    })


def _shipped(root: Path) -> tuple[str, list[str], list[str]] | None:
    found = published(root)
    if found is None:
        return None
    folders = sorted(Path(f).relative_to(root).as_posix() for f in found.folders)
    return found.name, folders, sorted(Path(m).relative_to(root).as_posix() for m in found.modules)


@pytest.mark.parametrize("metadata, expected", [
    ({"pyproject.toml": '[project]\nname = "kmodels"\n[tool.setuptools]\npackages = ["kmodels", "kmodels.layers"]\n'},
     ("kmodels", ["kmodels", "kmodels/layers"], [])),
    ({"pyproject.toml": '[project]\nname = "kmodels"\n[tool.setuptools]\npackages = ["kmodels"]\n'},
     ("kmodels", ["kmodels"], [])),  # a subpackage not listed is not shipped
    ({"pyproject.toml": '[project]\nname = "x"\n[tool.setuptools.packages.find]\ninclude = ["kmodels*"]\n'},
     ("x", ["kmodels", "kmodels/layers"], [])),
    ({"pyproject.toml": '[project]\nname = "x"\n[tool.setuptools.packages.find]\nwhere = ["src"]\n'},
     ("x", ["src/other"], [])),
    ({"pyproject.toml": '[project]\nname = "x"\n[tool.hatch.build.targets.wheel]\npackages = ["src/other"]\n'},
     ("x", ["src/other"], [])),
    ({"pyproject.toml": '[tool.poetry]\nname = "x"\npackages = [{include = "other", from = "src"}]\n'},
     ("x", ["src/other"], [])),
    ({"pyproject.toml": '[project]\nname = "x"\n[tool.flit.module]\nname = "kmodels"\n'},
     ("x", ["kmodels", "kmodels/layers"], [])),
    # no packaging table: the package named like the distribution
    ({"pyproject.toml": '[project]\nname = "KModels"\n'}, ("KModels", ["kmodels", "kmodels/layers"], [])),
    # a name that matches no package: setuptools' discovery (src/ first)
    ({"pyproject.toml": '[project]\nname = "x"\n'}, ("x", ["src/other"], [])),
    ({"setup.py": 'from setuptools import setup, find_packages\nsetup(name="kmodels", '
                  'packages=find_packages(exclude=["tools", "tools.*"]), py_modules=["single"])\n'},
     ("kmodels", ["kmodels", "kmodels/layers"], ["single.py"])),
    ({"setup.py": 'import setuptools\nPKGS = ["other"]\nsetuptools.setup(name="o", packages=PKGS, package_dir={"": "src"})\n'},
     ("o", ["src/other"], [])),
    ({"setup.cfg": "[metadata]\nname = kmodels\n[options]\npackages = find:\n[options.packages.find]\n"
                   "include =\n    kmodels\n    kmodels.*\n"},
     ("kmodels", ["kmodels", "kmodels/layers"], [])),
    ({"pyproject.toml": "[tool.black]\nline-length = 100\n"}, None),  # only configures tools
])
def test_what_the_packaging_metadata_ships(tmp_path, metadata, expected):
    assert _shipped(_layout(tmp_path, metadata)) == expected


def test_flat_layout_discovery_skips_tools_and_benchmarks(tmp_path):
    root = write_files(tmp_path, {"pyproject.toml": '[project]\nname = "x"\n', "kmodels/__init__.py": "",
                                  "tools/__init__.py": "", "benchmarks/__init__.py": ""})
    assert _shipped(root) == ("x", ["kmodels"], [])


def test_an_unpublished_float32_program_keeps_its_modules_float32(tmp_path, monkeypatch, capsys):
    """Without packaging metadata a float32 training script's helpers are the project's own float32 code."""
    write_files(tmp_path, {
        "requirements.txt": "keras>=3.0\n",
        "train.py": (REPO / "fixtures/library_with_tools/tools/convert.py").read_text().replace("kmodels", "models"),
        "models/__init__.py": "from models.layers import MaskedAttention\nfrom models.heads import ScoreHead\n",
        "models/layers.py": (REPO / "fixtures/library_with_tools/kmodels/layers.py").read_text(),
        "models/heads.py": (REPO / "fixtures/library_with_tools/kmodels/heads.py").read_text(),
    })
    monkeypatch.chdir(tmp_path)
    assert _lint(capsys, ".") == {}
    assert not project_facts(tmp_path)["models/layers.py"].library_context


# --- generated projects: every way of naming paths, the same findings ------------------------

LAYER = (
    "import keras\nfrom keras import ops\n\n\nclass Block{n}(keras.layers.Layer):\n"
    "    def call(self, x, mask):\n"
    "        x = x + (1.0 - ops.cast(mask, x.dtype)) * -1e9\n"
    "        return -ops.log(ops.sigmoid(x) + 1e-8)\n"
)
SCRIPT = (
    "import keras\n{imports}\n\nkeras.mixed_precision.set_global_policy({policy!r})\n\n"
    "if __name__ == \"__main__\":\n    print({uses})\n"
)


def _project(draw) -> dict[str, str]:
    from hypothesis import strategies as st

    modules = draw(st.integers(1, 3))
    files = {"kmodels/__init__.py": "".join(f"from kmodels.m{n} import Block{n}\n" for n in range(modules))}
    files.update({f"kmodels/m{n}.py": LAYER.format(n=n) for n in range(modules)})
    marker = draw(st.sampled_from(["pyproject", "requirements", "git"]))
    files.update({"pyproject": {"pyproject.toml": '[project]\nname = "kmodels"\n'},
                  "requirements": {"requirements.txt": "keras>=3.0\n"},
                  "git": {".git/HEAD": "ref: refs/heads/main\n"}}[marker])
    for index, (folder, policy, reached) in enumerate(draw(st.lists(st.tuples(
            st.sampled_from(["tools", "benchmarks", "examples", "."]),
            st.sampled_from(["float32", "mixed_float16", "mixed_bfloat16"]),
            st.lists(st.integers(0, modules - 1), min_size=1, max_size=2, unique=True)), max_size=3))):
        imports = "\n".join(f"from kmodels.m{n} import Block{n}" for n in reached)
        files[f"{folder}/run_{index}.py".removeprefix("./")] = SCRIPT.format(
            imports=imports, policy=policy, uses=", ".join(f"Block{n}" for n in reached))
    if draw(st.booleans()):  # a nested project with its own pins: its mixed script is no program of this one
        files["examples/nested/requirements.txt"] = "keras>=3.0\n"
        files["examples/nested/train.py"] = SCRIPT.format(
            imports="from kmodels.m0 import Block0", policy="mixed_float16", uses="Block0")
    return files


def _findings(capsys, root: Path, *args: str) -> dict[str, list[tuple]]:
    found = _lint(capsys, *args)
    return {Path(os.path.abspath(p)).relative_to(root).as_posix(): v for p, v in found.items()}


def test_generated_projects_give_the_same_findings_for_every_way_of_naming_paths(capsys, monkeypatch):
    from hypothesis import HealthCheck, given, settings, strategies as st

    @settings(max_examples=10, deadline=None, suppress_health_check=list(HealthCheck), database=None)
    @given(st.data())
    def check(data):
        files = _project(data.draw)
        with tempfile.TemporaryDirectory() as folder:
            root = write_files(Path(folder).resolve() / "repo", files)
            monkeypatch.chdir(root)
            whole = _findings(capsys, root, ".")
            python = sorted(name for name in files if name.endswith(".py"))
            assert _findings(capsys, root, *python) == whole  # a pre-commit file list
            assert _findings(capsys, root, "kmodels/") == {k: v for k, v in whole.items() if k.startswith("kmodels/")}
            for name in python:
                alone = _findings(capsys, root, name)
                assert alone == ({name: whole[name]} if name in whole else {}), name
            monkeypatch.chdir(root.parent)  # from above the project
            above = _findings(capsys, root, "repo/kmodels/m0.py")
            assert [(r, line, col) for r, line, col, _ in above.get("kmodels/m0.py", [])] == \
                [(r, line, col) for r, line, col, _ in whole.get("kmodels/m0.py", [])]
            path = root / "kmodels/m0.py"
            buffer = Buffer(path, (Part(path.as_uri(), path.read_text(encoding="utf-8")),))
            result = check_buffer(buffer, project_folder(path, [root.parent]))
            assert [(d.rule_id, d.line, d.column) for d in result.diagnostics] == \
                [(r, line, col) for r, line, col, _ in whole.get("kmodels/m0.py", [])]

    check()


def test_a_nested_project_is_no_part_of_the_project_around_it(library, capsys):
    """examples/nested has its own pins: its mixed script is its own project's program, whatever paths are given."""
    write_files(library, {
        "examples/nested/requirements.txt": "keras>=3.0\n",
        "examples/nested/train.py": SCRIPT.format(imports="from kmodels.layers import MaskedAttention",
                                                 policy="mixed_float16", uses="MaskedAttention"),
    })
    assert _lint(capsys, ".") == EXPECTED
    assert _lint(capsys, "kmodels/layers.py") == {"kmodels/layers.py": EXPECTED["kmodels/layers.py"]}
    assert "examples/nested/train.py" not in project_facts(library)


TINY = (
    "`{eps}` flushes to 0 in float16 (smallest subnormal 6e-8): combined with the compute-dtype tensor `{what}` under "
    "a float16 policy the epsilon vanishes and a log or division by it gives inf or NaN; library code of kmodels "
    "(users pick the policy); tools/convert.py sets float32 but is a tool script of this repository"
)


@pytest.mark.parametrize("eps", ["1e-8", "1e-9", "1e-12"])
def test_epsilons_below_the_smallest_subnormal_before_a_log_or_division_in_library_code(library, capsys, eps):
    write_files(library, {"kmodels/norm.py": (
        "import keras\nfrom keras import ops\n\n\n"
        "class Gate(keras.layers.Layer):\n    def call(self, x):\n        p = ops.sigmoid(x)\n"
        f"        return -ops.log(p + {eps})\n\n\n"
        "class Norm(keras.layers.Layer):\n    def call(self, x):\n"
        f"        return x / (ops.sqrt(ops.mean(ops.square(x), axis=-1)) + {eps})\n\n\n"
        "def focal(y_true, y_pred):  # a plain function: whether y_pred is float16 is its callers' business\n"
        f"    return -y_true * ops.log(y_pred + {eps})\n"),
        "tools/convert.py": (library / "tools/convert.py").read_text().replace("import kmodels\n", "import kmodels\nimport kmodels.norm\n"),
    })
    assert _lint(capsys, "kmodels/norm.py") == {"kmodels/norm.py": [
        ("MP601", 8, 29, TINY.format(eps=eps, what="p")),
        ("MP601", 13, 66, TINY.format(eps=eps, what="ops.sqrt(ops.mean(ops.square(x), axis...")),
    ]}
    assert project_facts(library)["kmodels/norm.py"].policy_names == {"float32"}  # the tool script reaches it


def test_show_facts_shows_the_project_of_the_path_and_the_programs_that_reach_it(capsys, monkeypatch):
    monkeypatch.chdir(REPO)
    assert main(["--show-facts", "--no-cache", "fixtures/tf28_container"]) == 0
    image = "tensorflow/tensorflow:2.8.0-gpu in Dockerfile: TF 2.8"
    assert capsys.readouterr().out == (
        f"project {(REPO / 'fixtures/tf28_container').as_posix()} (1 files)\n"
        f"  target for every program: Keras 2 (TF 2.8) ({image})\n"
        "  program fixtures/tf28_container/train.py (reaches 1 module)\n"
        "    policy mixed_float16 set at fixtures/tf28_container/train.py:6\n"
        f"    target: Keras 2 (TF 2.8) ({image})\n"
    )
    assert main(["--show-facts", "--no-cache", "fixtures/library_with_tools/kmodels/layers.py"]) == 0
    assert capsys.readouterr().out == (
        f"project {(REPO / 'fixtures/library_with_tools').as_posix()} (5 files)\n"
        "  target for every program: Keras 3 (pyproject.toml pins keras>=3.0)\n"
        "  program fixtures/library_with_tools/tools/convert.py (reaches 4 modules)\n"
        "    policy float32 set at fixtures/library_with_tools/tools/convert.py:10\n"
        "    target: Keras 3 (pyproject.toml pins keras>=3.0)\n"
    )
