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
from dataclasses import dataclass
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
        "this repository"
    )
    heads = facts["kmodels/heads.py"]  # the mixed benchmark adds its own context on top
    assert (heads.library_context, heads.policy_names) == (True, {"float32", "mixed_float16"})
    assert heads.describe_policy() == "mixed_float16 set at benchmarks/bench_head.py:10, which imports this module"
    tool = facts["tools/convert.py"]  # the tool script is a program, not library code
    assert (tool.library_context, tool.distribution) == (False, "")


@pytest.mark.parametrize(
    "paths",
    [
        ["kmodels/"],
        ["kmodels"],
        ["kmodels/layers.py", "kmodels/heads.py"],
        ["kmodels/__init__.py", "kmodels/heads.py", "kmodels/layers.py", "tools/convert.py"],  # a pre-commit file list
    ],
)
def test_the_same_findings_whatever_paths_are_given(library, capsys, paths):
    assert _lint(capsys, *paths) == EXPECTED


def test_one_file_at_a_time(library, capsys):
    for path, expected in EXPECTED.items():
        assert _lint(capsys, path) == {path: expected}
    assert _lint(capsys, "tools/convert.py") == {}


def test_from_above_the_project(library, capsys, monkeypatch):
    monkeypatch.chdir(library.parent)
    assert _lint(capsys, "library_with_tools/kmodels/layers.py") == {
        "library_with_tools/kmodels/layers.py": [
            (rule, line, column, message.replace("tools/convert.py", "library_with_tools/tools/convert.py"))
            for rule, line, column, message in EXPECTED["kmodels/layers.py"]
        ],
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
    return write_files(
        tmp_path,
        {
            **metadata,
            "kmodels/__init__.py": "",
            "kmodels/layers/__init__.py": "",
            "kmodels/layers/attention.py": "",
            "src/other/__init__.py": "",
            "tools/__init__.py": "",
            "tools/convert.py": "",
            "benchmarks/bench.py": "",
            "single.py": "",
        },
    )


def _shipped(root: Path) -> tuple[str, list[str], list[str]] | None:
    found = published(root)
    if found is None:
        return None
    folders = sorted(Path(f).relative_to(root).as_posix() for f in found.folders)
    return found.name, folders, sorted(Path(m).relative_to(root).as_posix() for m in found.modules)


@pytest.mark.parametrize(
    "metadata, expected",
    [
        (
            {
                "pyproject.toml": '[project]\nname = "kmodels"\n[tool.setuptools]\npackages = ["kmodels", "kmodels.layers"]\n'
            },
            ("kmodels", ["kmodels", "kmodels/layers"], []),
        ),
        (
            {"pyproject.toml": '[project]\nname = "kmodels"\n[tool.setuptools]\npackages = ["kmodels"]\n'},
            ("kmodels", ["kmodels"], []),
        ),  # a subpackage not listed is not shipped
        (
            {"pyproject.toml": '[project]\nname = "x"\n[tool.setuptools.packages.find]\ninclude = ["kmodels*"]\n'},
            ("x", ["kmodels", "kmodels/layers"], []),
        ),
        (
            {"pyproject.toml": '[project]\nname = "x"\n[tool.setuptools.packages.find]\nwhere = ["src"]\n'},
            ("x", ["src/other"], []),
        ),
        (
            {"pyproject.toml": '[project]\nname = "x"\n[tool.hatch.build.targets.wheel]\npackages = ["src/other"]\n'},
            ("x", ["src/other"], []),
        ),
        (
            {"pyproject.toml": '[tool.poetry]\nname = "x"\npackages = [{include = "other", from = "src"}]\n'},
            ("x", ["src/other"], []),
        ),
        (
            {"pyproject.toml": '[project]\nname = "x"\n[tool.flit.module]\nname = "kmodels"\n'},
            ("x", ["kmodels", "kmodels/layers"], []),
        ),
        # no packaging table: the package named like the distribution
        ({"pyproject.toml": '[project]\nname = "KModels"\n'}, ("KModels", ["kmodels", "kmodels/layers"], [])),
        # a name that matches no package: setuptools' discovery (src/ first)
        ({"pyproject.toml": '[project]\nname = "x"\n'}, ("x", ["src/other"], [])),
        (
            {
                "setup.py": 'from setuptools import setup, find_packages\nsetup(name="kmodels", '
                'packages=find_packages(exclude=["tools", "tools.*"]), py_modules=["single"])\n'
            },
            ("kmodels", ["kmodels", "kmodels/layers"], ["single.py"]),
        ),
        (
            {
                "setup.py": 'import setuptools\nPKGS = ["other"]\nsetuptools.setup(name="o", packages=PKGS, package_dir={"": "src"})\n'
            },
            ("o", ["src/other"], []),
        ),
        (
            {
                "setup.cfg": "[metadata]\nname = kmodels\n[options]\npackages = find:\n[options.packages.find]\n"
                "include =\n    kmodels\n    kmodels.*\n"
            },
            ("kmodels", ["kmodels", "kmodels/layers"], []),
        ),
        ({"pyproject.toml": "[tool.black]\nline-length = 100\n"}, None),  # only configures tools
    ],
)
def test_what_the_packaging_metadata_ships(tmp_path, metadata, expected):
    assert _shipped(_layout(tmp_path, metadata)) == expected


def test_flat_layout_discovery_skips_tools_and_benchmarks(tmp_path):
    root = write_files(
        tmp_path,
        {
            "pyproject.toml": '[project]\nname = "x"\n',
            "kmodels/__init__.py": "",
            "tools/__init__.py": "",
            "benchmarks/__init__.py": "",
        },
    )
    assert _shipped(root) == ("x", ["kmodels"], [])


def test_an_unpublished_float32_program_keeps_its_modules_float32(tmp_path, monkeypatch, capsys):
    """Without packaging metadata a float32 training script's helpers are the project's own float32 code."""
    write_files(
        tmp_path,
        {
            "requirements.txt": "keras>=3.0\n",
            "train.py": (REPO / "fixtures/library_with_tools/tools/convert.py")
            .read_text()
            .replace("kmodels", "models"),
            "models/__init__.py": "from models.layers import MaskedAttention\nfrom models.heads import ScoreHead\n",
            "models/layers.py": (REPO / "fixtures/library_with_tools/kmodels/layers.py").read_text(),
            "models/heads.py": (REPO / "fixtures/library_with_tools/kmodels/heads.py").read_text(),
        },
    )
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
    'if __name__ == "__main__":\n    print({uses})\n'
)


GENERATED_MASK = (
    "`-1e9` is outside float16's range (largest finite value 65504): combined with the compute-dtype tensor "
    "`(1.0 - ops.cast(mask, x.dtype))` it becomes -inf under a float16 policy, and 0 * inf is NaN, so an additive "
    "mask turns every unmasked score into NaN"
)
GENERATED_EPSILON = (
    "`1e-8` flushes to 0 in float16 (smallest subnormal 6e-8): combined with the compute-dtype tensor "
    "`ops.sigmoid(x)` under a float16 policy the epsilon vanishes and a log or division by it gives inf or NaN"
)


@dataclass
class _Generated:
    files: dict[str, str]
    modules: int
    published: bool  # a pyproject.toml ships kmodels
    programs: list[tuple[str, str, list[int]]]  # (script, policy, the kmodels.mN it imports) of this project


def _project(draw) -> _Generated:
    from hypothesis import strategies as st

    modules = draw(st.integers(1, 3))
    files = {"kmodels/__init__.py": "".join(f"from kmodels.m{n} import Block{n}\n" for n in range(modules))}
    files.update({f"kmodels/m{n}.py": LAYER.format(n=n) for n in range(modules)})
    marker = draw(st.sampled_from(["pyproject", "setup.py", "requirements", "git"]))
    files.update(
        {
            "pyproject": {"pyproject.toml": '[project]\nname = "kmodels"\n'},
            "setup.py": {"setup.py": 'from setuptools import setup\nsetup(name="kmodels", packages=["kmodels"])\n'},
            "requirements": {"requirements.txt": "keras>=3.0\n"},
            "git": {".git/HEAD": "ref: refs/heads/main\n"},
        }[marker]
    )
    programs = []
    for index, (folder, policy, reached) in enumerate(
        draw(
            st.lists(
                st.tuples(
                    st.sampled_from(["tools", "benchmarks", "examples", "."]),
                    st.sampled_from(["float32", "mixed_float16", "mixed_bfloat16"]),
                    st.lists(st.integers(0, modules - 1), min_size=1, max_size=2, unique=True),
                ),
                max_size=3,
            )
        )
    ):
        imports = "\n".join(f"from kmodels.m{n} import Block{n}" for n in reached)
        script = f"{folder}/run_{index}.py".removeprefix("./")
        files[script] = SCRIPT.format(imports=imports, policy=policy, uses=", ".join(f"Block{n}" for n in reached))
        programs.append((script, policy, reached))
    for index, (where, reached) in enumerate(
        draw(
            st.lists(
                st.tuples(
                    st.sampled_from(["examples/nested", "tools/other", "kmodels/vendored"]),
                    st.lists(st.integers(0, modules - 1), min_size=1, max_size=2, unique=True),
                ),
                max_size=2,
            )
        )
    ):
        # a nested project with its own pins: its mixed script is no program of this one
        files[f"{where}/requirements.txt"] = "keras>=3.0\n"
        files[f"{where}/train_{index}.py"] = SCRIPT.format(
            imports="\n".join(f"from kmodels.m{n} import Block{n}" for n in reached),
            policy="mixed_float16",
            uses=", ".join(f"Block{n}" for n in reached),
        )
    return _Generated(files, modules, marker in ("pyproject", "setup.py"), programs)


def _expected(project: _Generated) -> dict[str, list[tuple]]:
    """What each generated layer module gets: under a float16 program, plain findings; in a published package
    whatever its scripts set, findings that say whose library code it is and which float32 script does not decide;
    unpublished and reached by no program, library code; unpublished and reached by float32 or bfloat16 only, none."""
    out = {}
    for n in range(project.modules):
        reaching = [(script, policy) for script, policy, reached in project.programs if n in reached]
        if any(policy == "mixed_float16" for _, policy in reaching):
            note = ""
        elif project.published:
            note = "; library code of kmodels (users pick the policy)"
            float32 = sorted(script for script, policy in reaching if policy == "float32")
            if float32:
                note += f"; {float32[0]} sets float32 but is a tool script of this repository"
        elif not reaching:
            note = "; library code (no program of this project that reaches it sets a policy; any user may pick mixed_float16)"
        else:
            continue
        out[f"kmodels/m{n}.py"] = [("MP601", 7, 51, GENERATED_MASK + note), ("MP601", 8, 42, GENERATED_EPSILON + note)]
    return out


def _findings(capsys, root: Path, *args: str) -> dict[str, list[tuple]]:
    found = _lint(capsys, *args)
    return {Path(os.path.abspath(p)).relative_to(root).as_posix(): v for p, v in found.items()}


def test_generated_projects_give_the_same_findings_for_every_way_of_naming_paths(capsys, monkeypatch):
    """Each generated project's findings are those its structure implies (so a nested project's program or a
    published package's float32 tool script that changed them fails here), for every way of naming paths."""
    from hypothesis import HealthCheck, given, settings
    from hypothesis import strategies as st

    @settings(max_examples=12, deadline=None, suppress_health_check=list(HealthCheck), database=None, derandomize=True)
    @given(st.data())
    def check(data):
        project = _project(data.draw)
        files = project.files
        with tempfile.TemporaryDirectory() as folder:
            root = write_files(Path(folder).resolve() / "repo", files)
            monkeypatch.chdir(root)
            whole = _findings(capsys, root, ".")
            assert whole == _expected(project)
            python = sorted(name for name in files if name.endswith(".py"))
            assert _findings(capsys, root, *python) == whole  # a pre-commit file list
            assert _findings(capsys, root, "kmodels/") == {k: v for k, v in whole.items() if k.startswith("kmodels/")}
            for name in python:
                alone = _findings(capsys, root, name)
                assert alone == ({name: whole[name]} if name in whole else {}), name
            monkeypatch.chdir(root.parent)  # from above the project
            above = _findings(capsys, root, "repo/kmodels/m0.py")
            assert [(r, line, col) for r, line, col, _ in above.get("kmodels/m0.py", [])] == [
                (r, line, col) for r, line, col, _ in whole.get("kmodels/m0.py", [])
            ]
            path = root / "kmodels/m0.py"
            buffer = Buffer(path, (Part(path.as_uri(), path.read_text(encoding="utf-8")),))
            result = check_buffer(
                buffer, project_folder(path, [root.parent])
            )  # from above too: paths as `above` names them
            assert [(d.rule_id, d.line, d.column, d.message) for d in result.diagnostics] == above.get(
                "kmodels/m0.py", []
            )

    check()


def test_a_nested_project_is_no_part_of_the_project_around_it(library, capsys):
    """examples/nested has its own pins: its mixed script is its own project's program, whatever paths are given."""
    write_files(
        library,
        {
            "examples/nested/requirements.txt": "keras>=3.0\n",
            "examples/nested/train.py": SCRIPT.format(
                imports="from kmodels.layers import MaskedAttention", policy="mixed_float16", uses="MaskedAttention"
            ),
        },
    )
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
    write_files(
        library,
        {
            "kmodels/norm.py": (
                "import keras\nfrom keras import ops\n\n\n"
                "class Gate(keras.layers.Layer):\n    def call(self, x):\n        p = ops.sigmoid(x)\n"
                f"        return -ops.log(p + {eps})\n\n\n"
                "class Norm(keras.layers.Layer):\n    def call(self, x):\n"
                f"        return x / (ops.sqrt(ops.mean(ops.square(x), axis=-1)) + {eps})\n\n\n"
                "def focal(y_true, y_pred):  # a plain function: whether y_pred is float16 is its callers' business\n"
                f"    return -y_true * ops.log(y_pred + {eps})\n"
            ),
            "tools/convert.py": (library / "tools/convert.py")
            .read_text()
            .replace("import kmodels\n", "import kmodels\nimport kmodels.norm\n"),
        },
    )
    assert _lint(capsys, "kmodels/norm.py") == {
        "kmodels/norm.py": [
            ("MP601", 8, 29, TINY.format(eps=eps, what="p")),
            ("MP601", 13, 66, TINY.format(eps=eps, what="ops.sqrt(ops.mean(ops.square(x), axis...")),
        ]
    }
    assert project_facts(library)["kmodels/norm.py"].policy_names == {"float32"}  # the tool script reaches it


def test_show_facts_shows_the_project_of_the_path_and_the_programs_that_reach_it(capsys, monkeypatch):
    monkeypatch.chdir(REPO)
    assert main(["--show-facts", "--no-cache", "fixtures/tf28_container"]) == 0
    target = "Keras 2 (TF 2.8) (tensorflow/tensorflow:2.8.0-gpu in Dockerfile: TF 2.8)"
    assert capsys.readouterr().out == (
        f"project {(REPO / 'fixtures/tf28_container').as_posix()} (1 files)\n"
        f"  target for every program: {target}\n"
        "  program fixtures/tf28_container/train.py (reaches 1 module)\n"
        "    policy mixed_float16 set at fixtures/tf28_container/train.py:6\n"
        f"    target: {target}\n"
        "  fixtures/tf28_container/train.py: not library code: mixed_float16 set at fixtures/tf28_container/train.py:6\n"
    )
    assert main(["--show-facts", "--no-cache", "fixtures/library_with_tools/kmodels/layers.py"]) == 0
    assert capsys.readouterr().out == (
        f"project {(REPO / 'fixtures/library_with_tools').as_posix()} (5 files)\n"
        "  target for every program: Keras 3 (pyproject.toml pins keras>=3.0)\n"
        "  program fixtures/library_with_tools/tools/convert.py (reaches 4 modules)\n"
        "    policy float32 set at fixtures/library_with_tools/tools/convert.py:10\n"
        "    target: Keras 3 (pyproject.toml pins keras>=3.0)\n"
        "  fixtures/library_with_tools/kmodels/layers.py: library code of kmodels (users pick the policy); "
        "fixtures/library_with_tools/tools/convert.py sets float32 but is a tool script of this repository\n"
    )


# --- api_gen packages: the public API is an `api/` folder added to the package's __path__ ---------

API_MASK = (
    "`-1e9` is outside float16's range (largest finite value 65504): combined with the compute-dtype tensor "
    "`(1.0 - ops.cast(mask[:, {axes}], x.d...` it becomes -inf under a float16 policy, and 0 * inf is NaN, so an "
    "additive mask turns every unmasked score into NaN"
)
API_EXPECTED = {
    # reached by examples/train_mixed.py through krs.layers (krs/api/layers): its mixed_float16 is the context
    "krs/src/layers/attention.py": [("MP601", 14, 73, API_MASK.format(axes="None, :"))],
    # exported but used by no program: library code
    "krs/src/layers/pooling.py": [
        ("MP601", 9, 74, API_MASK.format(axes=":, None") + "; library code of krs (users pick the policy)")
    ],
    "krs/src/layers/scoring.py": [("MP601", 14, 29, EPSILON)],  # `from krs.layers import ScoreHead`
}


@pytest.fixture
def api_library(tmp_path, monkeypatch) -> Path:
    root = tmp_path / "library_with_api_path"
    shutil.copytree(REPO / "fixtures" / "library_with_api_path", root)
    monkeypatch.chdir(root)
    return root


@pytest.mark.parametrize(
    "paths",
    [
        ["."],
        ["krs/"],
        ["krs/src/layers"],
        [
            "krs/src/layers/attention.py",
            "krs/src/layers/pooling.py",
            "krs/src/layers/scoring.py",
            "examples/train_mixed.py",
        ],
    ],
)
def test_public_names_resolve_through_the_api_folder_on_the_package_path(api_library, capsys, paths):
    assert _lint(capsys, *paths) == API_EXPECTED


def test_the_program_reaches_the_defining_modules_through_the_api_folder(api_library):
    facts = project_facts(api_library)
    reached = {name for name, f in facts.items() if f.policy_names == {"mixed_float16"}}
    assert reached == {
        "examples/train_mixed.py",
        "krs/__init__.py",
        "krs/api/__init__.py",
        "krs/api/layers/__init__.py",
        "krs/api/ops/__init__.py",  # `import krs.ops as krs_ops`
        "krs/src/layers/attention.py",  # krs.layers.MaskedDotAttention, through `import krs`
        "krs/src/layers/scoring.py",  # from krs.layers import ScoreHead
        "krs/src/ops/scores.py",  # krs_ops.clip_scores
    }
    # the program imports krs.layers itself (`from krs.layers import ScoreHead`): the shortest way there
    assert facts["krs/src/layers/attention.py"].links[0].via == ("krs/api/layers/__init__.py",)


def test_show_facts_shows_the_program_that_reaches_a_module_through_the_api_folder(capsys, monkeypatch):
    monkeypatch.chdir(REPO)
    assert main(["--show-facts", "--no-cache", "fixtures/library_with_api_path/krs/src/layers/attention.py"]) == 0
    assert capsys.readouterr().out == (
        f"project {(REPO / 'fixtures/library_with_api_path').as_posix()} (13 files)\n"
        "  target for every program: Keras 3 (pyproject.toml pins keras>=3.0)\n"
        "  program fixtures/library_with_api_path/examples/train_mixed.py (reaches 8 modules)\n"
        "    policy mixed_float16 set at fixtures/library_with_api_path/examples/train_mixed.py:10\n"
        "    target: Keras 3 (pyproject.toml pins keras>=3.0)\n"
        "  fixtures/library_with_api_path/krs/src/layers/attention.py: library code of krs (users pick the policy); "
        "also mixed_float16 set at fixtures/library_with_api_path/examples/train_mixed.py:10, which reaches this module through "
        "fixtures/library_with_api_path/krs/api/layers/__init__.py\n"
    )
    assert main(["--show-facts", "--no-cache", "fixtures/library_with_api_path/krs/src/layers/pooling.py"]) == 0
    assert capsys.readouterr().out.endswith(
        "  no program of this project reaches the files given: library code\n"
        "  fixtures/library_with_api_path/krs/src/layers/pooling.py: library code of krs (users pick the policy)\n"
    )


PATH_LINES = {
    "append": '__path__.append(os.path.join(os.path.dirname(__file__), "api"))\n',
    "insert": '__path__.insert(0, os.path.join(os.path.dirname(__file__), "api"))\n',
    "extend": '__path__.extend([os.path.join(os.path.dirname(os.path.abspath(__file__)), "api")])\n',
    "pathlib": '__path__.append(str(Path(__file__).parent / "api"))\n',
}


def _api_project(tmp_path, path_line: str, api: str = "api", extra: dict[str, str] | None = None) -> Path:
    return write_files(
        tmp_path,
        {
            "requirements.txt": "keras>=3.0\n",
            "pkg/__init__.py": f"import os\nfrom pathlib import Path\n\nfrom pkg.{api} import *\n\n{path_line.replace('api', api)}",
            f"pkg/{api}/__init__.py": f"from pkg.{api} import layers\nfrom pkg.{api} import ops\n",
            f"pkg/{api}/layers/__init__.py": "from pkg.src.layers.dense import Dense as Dense\n",
            f"pkg/{api}/ops/__init__.py": "from pkg.src.ops.math import softplus as softplus\n",
            "pkg/src/__init__.py": "",
            "pkg/src/layers/__init__.py": "",
            "pkg/src/ops/__init__.py": "",
            "pkg/src/layers/dense.py": "class Dense:\n    pass\n",
            "pkg/src/ops/math.py": "def softplus(x):\n    return x\n",
            **(extra or {}),
        },
    )


def _reached_by(root: Path, entry: str) -> set[str]:
    return {name for name, f in project_facts(root).items() if any(link.entry == entry for link in f.links)}


@pytest.mark.parametrize("how", sorted(PATH_LINES))
@pytest.mark.parametrize("api", ["api", "_api"])
@pytest.mark.parametrize(
    "program, reaches",
    [
        ("from pkg import layers\nlayers.Dense()\n", "pkg/src/layers/dense.py"),
        ("from pkg.layers import Dense\nDense()\n", "pkg/src/layers/dense.py"),
        ("import pkg.ops as ops\nops.softplus(1.0)\n", "pkg/src/ops/math.py"),
        ("import pkg\npkg.layers.Dense()\n", "pkg/src/layers/dense.py"),
        ("import pkg\npkg.ops.softplus(1.0)\n", "pkg/src/ops/math.py"),
    ],
)
def test_every_form_of_public_import_reaches_the_defining_module(tmp_path, how, api, program, reaches):
    script = f"import keras\nkeras.mixed_precision.set_global_policy('mixed_float16')\n{program}"
    root = _api_project(tmp_path, PATH_LINES[how], api, {"train.py": script})
    other = {"pkg/src/layers/dense.py", "pkg/src/ops/math.py"} - {reaches}
    reached = _reached_by(root, "train.py")
    assert reaches in reached and not other & reached, reached


def test_without_the_path_line_the_public_names_are_not_found(tmp_path):
    root = _api_project(
        tmp_path,
        "",
        extra={
            "train.py": "import keras\nfrom pkg.layers import Dense\n"
            "keras.mixed_precision.set_global_policy('mixed_float16')\nDense()\n"
        },
    )
    assert "pkg/src/layers/dense.py" not in _reached_by(root, "train.py")


@pytest.mark.parametrize("how, found", [("append", "pkg/layers.py"), ("insert", "pkg/src/layers/dense.py")])
def test_the_package_path_order_decides_which_module_a_name_is(tmp_path, how, found):
    """`insert(0, api)` puts api/ before the package's own folder, `append` after it."""
    root = _api_project(
        tmp_path,
        PATH_LINES[how],
        extra={
            "pkg/layers.py": "class Dense:\n    pass\n",
            "train.py": "import keras\nfrom pkg.layers import Dense\nkeras.mixed_precision.set_global_policy('mixed_float16')\nDense()\n",
        },
    )
    assert _reached_by(root, "train.py") & {"pkg/layers.py", "pkg/src/layers/dense.py"} == {found}


def test_package_path_facts():
    from mplint.project.extract import HERE, extract_file_facts

    def path_of(line: str) -> list[str]:
        return extract_file_facts(
            f"import os\nfrom pathlib import Path\n{line}".encode(), "pkg/__init__.py", "pkg"
        ).package_path

    assert path_of(PATH_LINES["append"]) == [HERE, f"{HERE}/api"]
    assert path_of(PATH_LINES["insert"]) == [f"{HERE}/api", HERE]
    assert path_of(PATH_LINES["extend"]) == [HERE, f"{HERE}/api"]
    assert path_of(PATH_LINES["pathlib"]) == [HERE, f"{HERE}/api"]
    assert path_of('__path__.append("api")\n') == []  # relative to the working directory: unknown
    assert path_of(f"def f():\n    {PATH_LINES['append']}") == []  # not at module level


# --- re-exports of Keras modules between a package's own modules ------------------------------

SHIM = "from pkg.src.backend.config import keras_3\n\nif keras_3():\n    import keras\nelse:\n    from tensorflow import keras\n"
STAR_SHIM = (
    "from pkg.src.backend.config import keras_3\n\nif keras_3():\n    from keras import *  # noqa: F403\n"
    "else:\n    from tensorflow.keras import *  # noqa: F403\n"
)
BACKEND_LAYER = (
    "from pkg.src.backend import keras\n\n\nclass Block(keras.layers.Layer):\n    def call(self, x, mask):\n"
    "        return x + (1.0 - keras.ops.cast(mask, x.dtype)) * -1e9\n"
)
BACKEND_MASK = (
    "`-1e9` is outside float16's range (largest finite value 65504): combined with the compute-dtype tensor "
    "`(1.0 - keras.ops.cast(mask, x.dtype))` it becomes -inf under a float16 policy, and 0 * inf is NaN, so an "
    "additive mask turns every unmasked score into NaN"
)


@pytest.mark.parametrize("shim", ["pkg/src/backend/__init__.py", "pkg/src/backend/keras.py"])
@pytest.mark.parametrize(
    "public",
    [
        "pkg/backend/__init__.py",  # a public subpackage
        "pkg/api/backend/__init__.py",  # an api/ folder on the package's __path__
    ],
)
def test_a_keras_module_reexported_by_a_backend_shim_resolves(tmp_path, monkeypatch, capsys, shim, public):
    """`import keras` under a version test in a backend shim (or a shim module that star-imports Keras), passed on
    by the public API as `from pkg.src.backend import keras`: the program's `keras.mixed_precision` is Keras'."""
    root = write_files(
        tmp_path,
        {
            "requirements.txt": "keras>=3.0\n",
            "pkg/__init__.py": 'import os\n__path__.append(os.path.join(os.path.dirname(__file__), "api"))\n',
            "pkg/api/__init__.py": "",
            "pkg/src/__init__.py": "",
            "pkg/src/backend/__init__.py": "",
            "pkg/src/backend/config.py": "def keras_3():\n    return True\n",
            shim: SHIM if shim.endswith("__init__.py") else STAR_SHIM,
            public: "from pkg.src.backend import keras as keras\n",
            "pkg/src/layers.py": BACKEND_LAYER,
            "train.py": (
                "from pkg.backend import keras\nfrom pkg.src.layers import Block\n\n"
                "keras.mixed_precision.set_global_policy('mixed_float16')\n\n"
                "if __name__ == '__main__':\n    print(Block())\n"
            ),
        },
    )
    facts = project_facts(root)
    assert facts["pkg/src/layers.py"].policy_names == {"mixed_float16"}
    reexports = facts["pkg/src/layers.py"].reexports
    assert (reexports["pkg.src.backend.keras"], reexports["pkg.backend.keras"]) == ("keras", "keras")
    assert "pkg/src/backend/__init__.py" in _reached_by(root, "train.py")
    monkeypatch.chdir(root)
    assert _lint(capsys, "pkg/src/layers.py") == {"pkg/src/layers.py": [("MP601", 6, 60, BACKEND_MASK)]}


def test_reexports_under_a_version_test_keep_the_first_arm():
    from mplint.project.extract import extract_file_facts

    assert extract_file_facts(SHIM.encode(), "pkg/src/backend/__init__.py", "pkg.src.backend").reexports == {
        "pkg.src.backend.keras": "keras"
    }
    assert extract_file_facts(STAR_SHIM.encode(), "pkg/src/backend/keras.py", "pkg.src.backend.keras").reexports == {
        "pkg.src.backend.keras": "keras"
    }
    inside = "def load():\n    import keras\n    return keras\n"  # a function's import binds no name of the module
    assert extract_file_facts(inside.encode(), "pkg/m.py", "pkg.m").reexports == {}


def test_show_facts_says_whether_each_file_given_is_library_code_and_why(library, capsys):
    assert main(["--show-facts", "--no-cache", "kmodels/heads.py", "tools/convert.py", "benchmarks/bench_head.py"]) == 0
    lines = [
        line
        for line in capsys.readouterr().out.splitlines()
        if not line.startswith(("project", "    ", "  program", "  target"))
    ]
    assert lines == [
        "  benchmarks/bench_head.py: not library code: mixed_float16 set at benchmarks/bench_head.py:10",
        # a mixed benchmark reaches it: both contexts, as the messages give them
        "  kmodels/heads.py: library code of kmodels (users pick the policy); tools/convert.py sets float32 but is a "
        "tool script of this repository; also mixed_float16 set at benchmarks/bench_head.py:10, which imports this module",
        "  tools/convert.py: not library code: this project's programs run it with float32 set at tools/convert.py:10",
    ]


def test_show_facts_counts_the_library_files_of_many(tmp_path, monkeypatch, capsys):
    write_files(
        tmp_path,
        {
            "pyproject.toml": '[project]\nname = "kmodels"\n',
            "kmodels/__init__.py": "",
            **{f"kmodels/m{n}.py": "" for n in range(20)},
            "tools/run.py": SCRIPT.format(imports="import kmodels.m0", policy="float32", uses="kmodels.m0"),
        },
    )
    monkeypatch.chdir(tmp_path)
    assert main(["--show-facts", "--no-cache", "."]) == 0
    assert capsys.readouterr().out.splitlines()[-2:] == [
        "  21 of 22 files given: library code of kmodels",
        "  1 of 22 files given: not library code",
    ]
