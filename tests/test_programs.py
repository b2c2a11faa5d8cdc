"""Programs, not folders: a policy governs the program that sets it and the modules that program reaches."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import write_files

from mplint.cli import main
from mplint.project.build import project_facts
from mplint.testing import copy_tree

REPO = Path(__file__).resolve().parent.parent


def _lint(capsys, *args: str) -> tuple[int, list[tuple]]:
    code = main(["--format", "json", "--no-cache", *args])
    doc = json.loads(capsys.readouterr().out)
    return code, [
        (d["path"], d["cell"], d["rule"], d["start"]["line"], d["start"]["column"]) for d in doc["diagnostics"]
    ]


@pytest.fixture
def fixture(tmp_path, monkeypatch):
    def copy(name: str) -> Path:
        copy_tree(REPO / "fixtures" / name, tmp_path / name)
        monkeypatch.chdir(tmp_path / name)
        return tmp_path / name

    return copy


def test_independent_notebooks_are_independent_programs(fixture, capsys):
    fixture("tutorial_notebooks")
    assert _lint(capsys, ".") == (1, [("mixed_precision.ipynb", 3, "MP101", 4, 11)])


def test_unsafe_fixes_touch_only_the_notebook_that_sets_the_policy(fixture, capsys):
    root = fixture("tutorial_notebooks")
    before = {p.name: p.read_bytes() for p in root.iterdir()}
    assert main(["--fix", "--unsafe-fixes", "--no-cache", "."]) == 0
    changed = sorted(p.name for p in root.iterdir() if p.is_file() and p.read_bytes() != before.get(p.name))
    assert changed == ["mixed_precision.ipynb"]  # Conv2D(28) in the TPU tutorial stays as it is


def test_gpu_and_tpu_scripts_side_by_side(fixture, capsys):
    fixture("gpu_tpu_scripts")
    code, found = _lint(capsys, "--select", "ALL", ".")
    # the bfloat16 TPU script needs no loss scaling; the float16 GPU script does
    assert (code, found) == (1, [("train_gpu.py", None, "MP201", 20, 5)])
    facts = project_facts(Path("."))
    assert facts["model.py"].policy_names == {"mixed_float16", "mixed_bfloat16"}  # reached by both programs
    assert facts["train_tpu.py"].bfloat16_only and facts["train_tpu.py"].uses_tpu
    assert not facts["train_gpu.py"].uses_tpu


def test_a_set_policy_method_of_another_library_is_no_keras_policy(fixture, capsys):
    fixture("rl_agent")
    assert _lint(capsys, "--select", "ALL", ".") == (0, [])
    assert project_facts(Path("."))["agent.py"].policies == ()


def test_library_reached_by_an_example_and_library_context(fixture, capsys):
    root = fixture("library_with_examples")
    code, found = _lint(capsys, "--select", "ALL", ".")
    assert (code, found) == (
        1,
        [
            ("imgcls/attention.py", None, "MP601", 15, 58),  # library code: float16-capable for any user
            ("imgcls/models.py", None, "MP101", 12, 9),  # reached by examples/train_mixed.py
        ],
    )
    facts = project_facts(root)
    assert facts["imgcls/attention.py"].library_context and not facts["imgcls/attention.py"].reduced_precision
    models = facts["imgcls/models.py"]
    assert models.describe_policy() == (
        "mixed_float16 set at examples/train_mixed.py:8, which reaches this module through imgcls/__init__.py"
    )
    assert not facts["tests/test_models.py"].reduced_precision  # the test program sets no policy


def test_findings_do_not_depend_on_the_paths_given(tmp_path, monkeypatch, capsys):
    write_files(
        tmp_path,
        {
            ".mplint.yaml": "{}\n",
            "train.py": "import keras\nkeras.mixed_precision.set_global_policy('mixed_float16')\nfrom nets import model\nmodel.fit()\n",
            "nets.py": "import keras\nmodel = keras.Sequential([keras.layers.Dense(10, activation='softmax')])\n",
        },
    )
    monkeypatch.chdir(tmp_path)
    whole = _lint(capsys, "--select", "MP101", ".")
    alone = _lint(capsys, "--select", "MP101", "nets.py")
    assert whole == alone == (1, [("nets.py", None, "MP101", 2, 27)])


def test_a_policy_set_in_a_helper_governs_only_programs_that_call_it(tmp_path):
    facts = project_facts(
        write_files(
            tmp_path,
            {
                ".mplint.yaml": "{}\n",
                "lib/__init__.py": "",
                "lib/performance.py": (
                    "import tensorflow as tf\n"
                    "def set_mixed_precision_policy(dtype):\n"
                    "    if dtype == tf.float16:\n        tf.keras.mixed_precision.set_global_policy('mixed_float16')\n"
                    "    elif dtype == tf.bfloat16:\n        tf.keras.mixed_precision.set_global_policy('mixed_bfloat16')\n"
                    "def other():\n    return 1\n"
                ),
                "lib/model.py": "import tensorflow as tf\ndef build():\n    return tf.keras.Sequential()\n",
                "train.py": (
                    "import sys\nfrom lib import performance\nfrom lib.model import build\n"
                    "performance.set_mixed_precision_policy(sys.argv[1])\nmodel = build()\n"
                ),
                "evaluate.py": "from lib import performance\nfrom lib.model import build\nperformance.other()\nmodel = build()\n",
            },
        )
    )
    assert facts["train.py"].policy_names == {"mixed_float16", "mixed_bfloat16"}
    assert facts["lib/model.py"].policy_names == {"mixed_float16", "mixed_bfloat16"}
    assert facts["evaluate.py"].policy_names == frozenset()


def test_a_package_reexport_leads_to_the_defining_module_only(tmp_path):
    facts = project_facts(
        write_files(
            tmp_path,
            {
                ".mplint.yaml": "{}\n",
                "pkg/__init__.py": "from .models import Net\nfrom .other import Other\n",
                "pkg/models.py": "import keras\nclass Net(keras.Model):\n    pass\n",
                "pkg/other.py": "import keras\nclass Other(keras.Model):\n    pass\n",
                "train.py": "import keras\nfrom pkg import Net\nkeras.mixed_precision.set_global_policy('mixed_float16')\nNet().fit()\n",
            },
        )
    )
    assert facts["pkg/models.py"].float16 and not facts["pkg/other.py"].float16
    assert facts["pkg/other.py"].library_context


def test_script_folder_and_sys_path_insert_are_import_roots(tmp_path):
    facts = project_facts(
        write_files(
            tmp_path,
            {
                ".mplint.yaml": "{}\n",
                "examples/train.py": (
                    "import os, sys\nsys.path.insert(0, os.path.join(os.path.dirname(__file__), '..', 'src'))\n"
                    "import keras\nfrom model import build\nfrom shared.blocks import head\n"
                    "keras.mixed_precision.set_global_policy('mixed_float16')\nbuild(head())\n"
                ),
                "examples/model.py": "def build(x):\n    return x\n",
                "src/shared/__init__.py": "",
                "src/shared/blocks.py": "def head():\n    return 1\n",
                "src/shared/unused.py": "def nothing():\n    return 1\n",
            },
        )
    )
    assert facts["examples/model.py"].float16 and facts["src/shared/blocks.py"].float16
    assert not facts["src/shared/unused.py"].float16


def test_the_keras_generation_is_the_programs_own(tmp_path, capsys, monkeypatch):
    write_files(
        tmp_path,
        {
            ".mplint.yaml": "{}\n",
            "legacy.py": "import os\nos.environ['TF_USE_LEGACY_KERAS'] = '1'\nimport tf_keras\nm = tf_keras.Sequential()\nm.fit()\n",
            "off.py": "import os\nos.environ['TF_USE_LEGACY_KERAS'] = '0'\nimport keras\nm = keras.Sequential()\nm.fit()\n",
            "train.py": (
                "import tensorflow as tf\nimport keras\nkeras.mixed_precision.set_global_policy('mixed_float16')\n"
                "opt = keras.optimizers.SGD()\nopt = keras.mixed_precision.LossScaleOptimizer(opt)\n"
                "def step(model, x, y):\n    with tf.GradientTape() as tape:\n        loss = model.compute_loss(x, y)\n"
                "        scaled = opt.get_scaled_loss(loss)\n    grads = tape.gradient(scaled, model.trainable_variables)\n"
                "    grads = opt.get_unscaled_gradients(grads)\n    opt.apply_gradients(zip(grads, model.trainable_variables))\n"
                "if __name__ == '__main__':\n    step(None, None, None)\n"
            ),
        },
    )
    facts = project_facts(tmp_path)
    assert facts["legacy.py"].generation.value == 2
    assert facts["off.py"].generation.value == 3  # TF_USE_LEGACY_KERAS=0 asks for Keras 3
    assert facts["train.py"].generation.value == 3
    monkeypatch.chdir(tmp_path)
    code, found = _lint(capsys, "--select", "MP502", ".")
    assert [(path, rule, line) for path, _, rule, line, _ in found] == [
        ("train.py", "MP502", 9),
        ("train.py", "MP502", 11),
    ]


def test_diff_shows_what_fix_writes(tmp_path, monkeypatch, capsys):
    """A fix that changes the facts (float16 -> mixed_float16) is followed by a second round in --diff too."""
    write_files(
        tmp_path,
        {
            ".mplint.yaml": "{}\n",
            "train.py": (
                "import keras\nkeras.mixed_precision.set_global_policy('float16')\n"
                "model = keras.Sequential([keras.layers.Dense(10, activation='softmax')])\nmodel.fit()\n"
            ),
        },
    )
    monkeypatch.chdir(tmp_path)
    main(["--diff", "--no-cache", "--select", "MP602,MP101", "."])
    diff = capsys.readouterr().out
    main(["--fix", "--no-cache", "--select", "MP602,MP101", "."])
    capsys.readouterr()
    written = (tmp_path / "train.py").read_text()
    assert written == (
        'import keras\nkeras.mixed_precision.set_global_policy("mixed_float16")\n'
        "model = keras.Sequential([keras.layers.Dense(10, activation='softmax', dtype='float32')])\nmodel.fit()\n"
    )
    added = [line[1:] for line in diff.splitlines() if line.startswith("+") and not line.startswith("+++")]
    assert added == written.splitlines()[1:3]


def test_a_policy_set_inside_a_test_governs_that_test_alone(tmp_path, monkeypatch, capsys):
    write_files(
        tmp_path,
        {
            ".mplint.yaml": "{}\n",
            "models.py": "import keras\ndef build():\n    return keras.Sequential([keras.layers.Dense(10, activation='softmax')])\n",
            "models_test.py": (
                "import keras\nfrom models import build\n\n"
                "def test_mixed():\n    keras.mixed_precision.set_global_policy('mixed_float16')\n    try:\n"
                "        build().fit(batch_size=20)\n    finally:\n        keras.mixed_precision.set_global_policy('float32')\n\n"
                "def test_float16_weights():\n    layer = keras.layers.Dense(4, dtype='float16')\n"
                "    with __import__('pytest').raises(ValueError):\n        keras.layers.Dense(4, dtype='float16')\n"
            ),
        },
    )
    facts = project_facts(tmp_path)
    assert not facts["models_test.py"].reduced_precision and facts["models_test.py"].test_module
    assert facts["models.py"].library_context
    monkeypatch.chdir(tmp_path)
    assert _lint(capsys, "--select", "ALL", ".") == (0, [])  # no MP101, MP302 or MP602 in test code


def test_findings_inside_expected_errors_are_not_reported(tmp_path, monkeypatch, capsys):
    write_files(
        tmp_path,
        {
            ".mplint.yaml": "{}\n",
            "check.py": (
                "import keras\nimport pytest\n\nopt = keras.optimizers.SGD()\n"
                "with pytest.raises(ValueError):\n    keras.mixed_precision.LossScaleOptimizer(opt, dynamic=False)\n"
                "keras.mixed_precision.LossScaleOptimizer(opt, dynamic=False)\n"
            ),
        },
    )
    monkeypatch.chdir(tmp_path)
    assert _lint(capsys, "--select", "MP502", ".") == (1, [("check.py", None, "MP502", 7, 47)])


def test_a_builder_parameter_that_makes_a_float16_softmax_output_is_reported_at_the_call(fixture, capsys):
    """examples/train_mixed.py passes activation="softmax" to the library's ImageClassifier under mixed_float16:
    MP101 at the call, with the layer that receives it as related location; the library's head is the model
    output (MP102, whose fix gives it dtype="float32"). Without the example, the library alone is silent."""
    root = fixture("classifier_builder")
    assert _lint(capsys, ".") == (
        1,
        [
            ("examples/train_mixed.py", None, "MP101", 10, 9),
            ("examples/train_mlp.py", None, "MP101", 10, 9),
            ("vision_models/classifier.py", None, "MP102", 14, 21),
        ],
    )
    main(["--format", "json", "--no-cache", "--select", "MP101", "."])
    activation, dtype = json.loads(capsys.readouterr().out)["diagnostics"]
    assert activation["related"] == [
        {
            "path": "vision_models/classifier.py",
            "cell": None,
            "line": 14,
            "message": "`ImageClassifier` builds its output layer from `activation` here",
        }
    ]
    assert dtype["message"].startswith(
        "`build_mlp` builds a softmax output layer at vision_models/mlp.py:11 whose dtype "
        "is its `dtype` parameter, left at its default None: it computes in reduced precision"
    )
    assert dtype["related"] == [
        {
            "path": "vision_models/mlp.py",
            "cell": None,
            "line": 11,
            "message": "`build_mlp` gives its softmax layer `dtype=dtype` here",
        }
    ]
    # the build_mlp call is fixed where the program makes it; the library is not touched
    assert main(["--no-cache", "--select", "MP101", "--fix", "."]) == 1
    capsys.readouterr()
    assert 'model = build_mlp(10, hidden=512, dtype="float32")\n' in (root / "examples" / "train_mlp.py").read_text()
    assert (root / "vision_models" / "mlp.py").read_text() == (
        REPO / "fixtures/classifier_builder/vision_models/mlp.py"
    ).read_text()
    (root / "examples" / "train_mixed.py").unlink()
    (root / "examples" / "train_mlp.py").unlink()
    assert _lint(capsys, ".") == (0, [])
