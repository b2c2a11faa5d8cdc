"""The target TensorFlow/Keras per program: real pin parsers, container images, TF1 programs, --target."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import write_files

from mplint.cli import main
from mplint.project.build import project_facts
from mplint.project.generation import from_imports, from_setting
from mplint.project.pins import PinFinder, generation_from_pins
from mplint.testing import copy_tree

REPO = Path(__file__).resolve().parent.parent


def _lint(capsys, *args: str) -> list[tuple]:
    main(["--format", "json", "--no-cache", *args])
    doc = json.loads(capsys.readouterr().out)
    return [(d["path"], d["rule"], d["severity"], d["start"]["line"], d["start"]["column"]) for d in doc["diagnostics"]]


@pytest.mark.parametrize(
    "image,value,tf",
    [
        ("nvcr.io/nvidia/tensorflow:22.12-tf1-py3", 0, "TF 1.15"),
        ("tensorflow/tensorflow:2.8.0-gpu", 2, "TF 2.8"),
        ("tensorflow/tensorflow:2.3.1-gpu-jupyter", 1, "TF 2.3"),
        ("tensorflow/tensorflow:2.16.1", 3, "TF 2.16"),
        ("gcr.io/deeplearning-platform-release/tf2-gpu.2-8", 2, "TF 2.8"),
    ],
)
def test_container_images_name_their_tensorflow(tmp_path, image, value, tf):
    (tmp_path / "Dockerfile").write_text(f"FROM python:3.10 AS build\nRUN pip wheel .\nFROM {image}\nCOPY . /app\n")
    found = generation_from_pins(tmp_path)
    assert (found.value, found.low, found.source) == (value, value, f"{image} in Dockerfile: {tf}")


@pytest.mark.parametrize(
    "files,expected",
    [
        (
            {"requirements.txt": "-r base.txt\n", "base.txt": "tensorflow==2.8.0 --hash=sha256:abc\n"},
            (2, "requirements.txt pins tensorflow==2.8.0"),
        ),
        (
            {"requirements.txt": "tensorflow\n-c constraints.txt\n", "constraints.txt": "tensorflow<2.9\n"},
            (2, "requirements.txt pins tensorflow<2.9"),
        ),
        (
            {
                "setup.py": "from setuptools import setup\nTF = '>=2.6,<2.14'\nsetup(install_requires=['tensorflow' + TF])\n"
            },
            (2, "setup.py pins tensorflow<2.14,>=2.6"),
        ),
        ({"setup.py": "import logging\nlogging.getLogger('tensorflow')\nREQS = ['tensorflow']\n"}, None),
        (
            {"setup.cfg": "[options]\ninstall_requires =\n    numpy\n    tensorflow>=2.4,<2.9\n"},
            (2, "setup.cfg pins tensorflow<2.9,>=2.4"),
        ),
        (
            {"environment.yml": "name: x\ndependencies:\n  - python=3.8\n  - tensorflow-gpu=2.3\n"},
            (1, "environment.yml pins tensorflow-gpu==2.3.*"),
        ),
        (
            {"environment.yml": "dependencies:\n  - pip:\n    - tensorflow==2.15.1\n"},
            (2, "environment.yml pins tensorflow==2.15.1"),
        ),
        ({"Pipfile": '[packages]\ntensorflow = "==2.5.0"\n'}, (2, "Pipfile pins tensorflow==2.5.0")),
        (
            {"pyproject.toml": "[tool.poetry.group.train.dependencies]\ntensorflow = '~2.13'\n"},
            (2, "pyproject.toml pins tensorflow<2.14,>=2.13"),
        ),
    ],
)
def test_pin_sources(tmp_path, files, expected):
    found = generation_from_pins(write_files(tmp_path, files))
    assert ((found.value, found.source) if found else None) == expected


def test_only_the_default_range_is_unevidenced(tmp_path):
    write_files(tmp_path, {"train.py": "import tensorflow as tf\n", ".mplint.yaml": "{}\n"})
    assert not project_facts(tmp_path)["train.py"].generation.evidenced  # any supported TensorFlow
    assert generation_from_pins(write_files(tmp_path, {"requirements.txt": "tensorflow>=2.6\n"})).evidenced
    assert from_setting(2, "--target keras2").evidenced
    assert from_imports({"keras"}, legacy_env=False).evidenced


def test_the_nearest_pins_above_a_program_win(tmp_path):
    write_files(
        tmp_path,
        {
            "requirements.txt": "tensorflow>=2.16\n",
            "legacy/requirements.txt": "tensorflow==2.3.0\n",
            "legacy/train.py": "import tensorflow as tf\ntf.keras.Sequential().fit()\n",
            "train.py": "import tensorflow as tf\ntf.keras.Sequential().fit()\n",
            ".mplint.yaml": "{}\n",
        },
    )
    facts = project_facts(tmp_path)
    assert "legacy/train.py" not in facts  # a folder with its own pins is a project of its own
    legacy = project_facts(tmp_path / "legacy")["train.py"].generation
    assert (legacy.value, legacy.source) == (1, "legacy/requirements.txt pins tensorflow==2.3.0")
    assert facts["train.py"].generation.value == 3
    assert PinFinder(tmp_path).target_for(tmp_path / "legacy" / "sub").value == 1


def test_tf1_programs_are_g0_and_draw_no_keras_findings(tmp_path, monkeypatch, capsys):
    copy_tree(REPO / "fixtures" / "ngc_tf1_estimator", tmp_path / "p")
    monkeypatch.chdir(tmp_path / "p")
    assert _lint(capsys, "--select", "ALL", ".") == []
    (tmp_path / "p" / "Dockerfile").unlink()  # without the image, the code itself says TF1
    facts = project_facts(tmp_path / "p")["train.py"]
    assert facts.generation.value == 0 and facts.generation.source.startswith("program train.py uses TF1")
    assert _lint(capsys, "--select", "ALL", ".") == []


def test_experimental_api_in_a_tf_2_8_container_is_a_deprecation_warning(tmp_path, monkeypatch, capsys):
    copy_tree(REPO / "fixtures" / "tf28_container", tmp_path / "p")
    monkeypatch.chdir(tmp_path / "p")
    assert _lint(capsys, ".") == [("train.py", "MP501", "warning", 4, 1)]
    (tmp_path / "p" / "Dockerfile").write_text("FROM tensorflow/tensorflow:2.3.1-gpu\n")  # TF 2.3: the right API
    assert _lint(capsys, ".") == []
    (tmp_path / "p" / "Dockerfile").write_text("FROM tensorflow/tensorflow:2.9.1-gpu\n")  # TF 2.9: removed
    assert _lint(capsys, ".") == [("train.py", "MP501", "error", 4, 1)]
    # An NGC TensorFlow 2 tag has no verified version: any TF 2 released by its month; 22.03 is at most TF 2.8
    (tmp_path / "p" / "Dockerfile").write_text("FROM nvcr.io/nvidia/tensorflow:22.03-tf2-py3\n")
    assert _lint(capsys, ".") == [("train.py", "MP501", "warning", 4, 1)]
    (tmp_path / "p" / "Dockerfile").write_text("FROM nvcr.io/nvidia/tensorflow:22.06-tf2-py3\n")  # TF 2.9 was out
    assert _lint(capsys, ".") == [("train.py", "MP501", "error", 4, 1)]


def test_a_computed_pin_and_a_helper_named_setup_py(tmp_path, monkeypatch, capsys):
    copy_tree(REPO / "fixtures" / "computed_pin", tmp_path / "p")
    monkeypatch.chdir(tmp_path / "p")
    assert _lint(capsys, "--select", "MP502", ".") == []  # Keras 2 API on the Keras 2 that setup.py pins
    assert project_facts(tmp_path / "p")["trainer/task.py"].generation.source == "setup.py pins tensorflow<2.14,>=2.6"
    assert [r[:2] for r in _lint(capsys, "--select", "MP502", "--target", "keras3", ".")] == [
        ("trainer/task.py", "MP502"),
        ("trainer/task.py", "MP502"),
    ]


def test_a_compatibility_import_is_not_a_choice_of_keras(tmp_path):
    facts = project_facts(
        write_files(
            tmp_path,
            {
                ".mplint.yaml": "{}\n",
                "train.py": (
                    "try:\n    import keras.src as keras_src\nexcept ImportError:\n    keras_src = None\n"
                    "import tf_keras\ntf_keras.Sequential().fit()\n"
                ),
            },
        )
    )
    assert facts["train.py"].generation.value == 2 and facts["train.py"].keras_namespaces == {"tf_keras"}


def test_target_in_config(tmp_path, monkeypatch, capsys):
    write_files(
        tmp_path,
        {".mplint.yaml": "target: tf2.3\n", "train.py": "import tensorflow as tf\ntf.keras.Sequential().fit()\n"},
    )
    assert project_facts(tmp_path)["train.py"].generation.value == 1
    (tmp_path / ".mplint.yaml").write_text("target: tf9\n")
    monkeypatch.chdir(tmp_path)
    assert main(["."]) == 2
    assert "'target' must be one of tf1, tf2.3, keras2, keras3" in capsys.readouterr().err


def test_show_facts_prints_each_program(monkeypatch, capsys):
    monkeypatch.chdir(REPO / "fixtures" / "gpu_tpu_scripts")
    assert main(["--show-facts", "--no-cache", "."]) == 0
    assert capsys.readouterr().out == (
        f"project {(REPO / 'fixtures' / 'gpu_tpu_scripts').as_posix()} (3 files)\n"
        "  target for every program: Keras 3 (TF >= 2.16) (requirements.txt pins tensorflow>=2.16)\n"
        "  program train_gpu.py (reaches 2 modules)\n"
        "    policy mixed_float16 set at train_gpu.py:8\n"
        "    target: Keras 3 (TF >= 2.16) (requirements.txt pins tensorflow>=2.16)\n"
        "  program train_tpu.py (reaches 2 modules)\n"
        "    policy mixed_bfloat16 set at train_tpu.py:11\n"
        "    target: Keras 3 (TF >= 2.16) (requirements.txt pins tensorflow>=2.16)\n"
        "    TPU: train_tpu.py:8, train_tpu.py:9, train_tpu.py:10\n"
        "  model.py: not library code: mixed_float16 set at train_gpu.py:8, which imports this module\n"
        "  train_gpu.py: not library code: mixed_float16 set at train_gpu.py:8\n"
        "  train_tpu.py: not library code: mixed_bfloat16 set at train_tpu.py:11\n"
    )


def test_compatibility_shims_are_left_alone(tmp_path, monkeypatch, capsys):
    write_files(
        tmp_path,
        {
            ".mplint.yaml": "keras: 3\n",
            "train.py": (
                "import tensorflow as tf\nfrom packaging import version\n\n"
                "if version.parse(tf.__version__) < version.parse('2.4'):\n"
                "    from tensorflow.keras.mixed_precision import experimental as mixed_precision\n"
                "    mixed_precision.set_policy('mixed_float16')\n"
                "else:\n"
                "    tf.keras.mixed_precision.set_global_policy('mixed_float16')\n"
                "try:\n"
                "    from tensorflow.keras.mixed_precision import experimental as old_api\n"
                "except ImportError:\n"
                "    old_api = None\n"
                "def scaled(opt, loss):\n"
                "    if hasattr(opt, 'get_scaled_loss'):\n"
                "        return opt.get_scaled_loss(loss)\n"
                "    return opt.scale_loss(loss)\n"
                "from tensorflow.keras.mixed_precision import experimental\n"
            ),
        },
    )
    monkeypatch.chdir(tmp_path)
    assert [r[1:4:2] for r in _lint(capsys, "--select", "MP501,MP502", ".")] == [("MP501", 17)]


def test_library_code_that_imports_tf_keras_is_keras_2_whatever_tensorflow_is_pinned(tmp_path, monkeypatch, capsys):
    """A TensorFlow pin says what ``tf.keras`` is; tf_keras is Keras 2 on every TensorFlow (the tf-keras
    repository pins tf-nightly, and its own Keras 2 code must not get Keras 3 rewrites)."""
    write_files(
        tmp_path,
        {
            "requirements.txt": "tf-nightly\n",
            "setup.py": "from setuptools import setup\nsetup(name='legacy_lib', packages=['legacy_lib'])\n",
            "legacy_lib/__init__.py": "",
            "legacy_lib/train.py": (
                "import tensorflow as tf\n"
                "from tf_keras.mixed_precision import loss_scale_optimizer\n\n\n"
                "def step(optimizer, model, x, y):\n"
                "    with tf.GradientTape() as tape:\n"
                "        loss = tf.reduce_mean(tf.square(model(x) - y))\n"
                "        scaled = optimizer.get_scaled_loss(loss)\n"
                "    grads = optimizer.get_unscaled_gradients(tape.gradient(scaled, model.trainable_variables))\n"
                "    optimizer.apply_gradients(zip(grads, model.trainable_variables))\n"
            ),
            "legacy_lib/new.py": "import tensorflow as tf\nlayer = tf.keras.layers.Dense(4)\n",
        },
    )
    facts = project_facts(tmp_path)
    assert (facts["legacy_lib/train.py"].generation.value, facts["legacy_lib/train.py"].generation.source) == (
        2,
        "module legacy_lib/train.py imports tf_keras / sets TF_USE_LEGACY_KERAS=1",
    )
    assert facts["legacy_lib/new.py"].generation.value == 3  # tf.keras on a TF nightly is Keras 3
    monkeypatch.chdir(tmp_path)
    assert _lint(capsys, "--select", "MP502", ".") == []


TF_KERAS_REPOSITORY = {  # the keras-team/tf-keras repository in small: tf-nightly pinned, the package is tf_keras
    "requirements.txt": "tf-nightly\n",
    "tf_keras/__init__.py": "",
    "tf_keras/backend.py": "import tensorflow as tf\n\n\ndef get_session():\n    return tf.compat.v1.Session()\n",
    "tf_keras/engine/__init__.py": "",
    "tf_keras/engine/training.py": (
        "import tensorflow as tf\n\n\nclass Model(tf.Module):\n"
        "    def fit(self, x, y):\n        return self.train_step((x, y))\n"
    ),
    "tf_keras/engine/training_eager_v1.py": (
        "import tensorflow.compat.v2 as tf\n\nfrom tf_keras import backend\n\n\n"
        "def train_step(model, x, y):\n"
        "    with tf.GradientTape() as tape:\n"
        "        loss = model.loss(y, model(x))\n"
        "        scaled_loss = model.optimizer.get_scaled_loss(loss)\n"
        "    grads = model.optimizer.get_unscaled_gradients(tape.gradient(scaled_loss, model.trainable_weights))\n"
        "    model.optimizer.apply_gradients(zip(grads, model.trainable_weights))\n"
        "    return backend.get_session()\n"
    ),
    "tf_keras/mixed_precision/__init__.py": "",
    "tf_keras/mixed_precision/model_test.py": (
        "import tensorflow.compat.v2 as tf\n\nfrom tf_keras import backend\nfrom tf_keras.engine import training_eager_v1\n\n\n"
        "class ModelTest(tf.test.TestCase):\n"
        "    def test_loss_scale(self):\n"
        "        model = backend.get_session()\n"
        "        training_eager_v1.train_step(model, 1.0, 1.0)\n"
        "        self.assertEqual(model.optimizer.loss_scale, 2.0)\n"
        "        self.assertEqual(model.optimizer.dynamic_counter, 1)\n"
    ),
    "tf_keras/mixed_precision/graph_rewrite_test.py": (  # the rewrite wraps a Keras 2 optimizer: what it tests
        "import tensorflow.compat.v2 as tf\n\nfrom tf_keras.optimizers.legacy import gradient_descent\n\n\n"
        "class GraphRewriteTest(tf.test.TestCase):\n"
        "    def test_wrap_optimizer(self):\n"
        "        opt = tf.compat.v1.mixed_precision.enable_mixed_precision_graph_rewrite(gradient_descent.SGD(1.0))\n"
    ),
    "tf_keras/models/__init__.py": "",
    "tf_keras/models/sharpness.py": (  # relative imports only: nothing but the package says tf_keras
        "import tensorflow.compat.v2 as tf\n\nfrom ..engine.training import Model\n\n\n"
        "class SharpnessAwareMinimization(Model):\n"
        "    def train_step(self, data):\n"
        "        x, y = data\n"
        "        with tf.GradientTape() as tape:\n"
        "            loss = self.compiled_loss(y, self(x))\n"
        "        gradients = tape.gradient(loss, self.trainable_variables)\n"
        "        self.optimizer.apply_gradients(zip(gradients, self.trainable_variables))\n"
    ),
}


def test_the_tf_keras_package_itself_is_keras_2_on_a_tf_nightly_pin(tmp_path, monkeypatch, capsys):
    """The tf-keras repository pins tf-nightly (TF >= 2.0: G1 to Keras 3), but its code is Keras 2 by definition.
    Its tests import tf_keras and reach the TF1 sessions of its backend: tf_keras decides, not the TF1 code (tf_keras
    runs on TF 2 only). A module that reaches tf_keras only through relative imports is part of the package, and
    the package is library code: its model classes run under whatever policy their users pick."""
    write_files(tmp_path, TF_KERAS_REPOSITORY)
    facts = project_facts(tmp_path)
    test_target = "program tf_keras/mixed_precision/model_test.py imports tf_keras / sets TF_USE_LEGACY_KERAS=1"
    assert {
        path: (f.generation.low, f.generation.value, f.generation.source)
        for path, f in facts.items()
        if path.endswith(("_test.py", "eager_v1.py", "sharpness.py"))
    } == {
        "tf_keras/engine/training_eager_v1.py": (2, 2, test_target),
        "tf_keras/mixed_precision/graph_rewrite_test.py": (
            2,
            2,
            test_target.replace("model_test", "graph_rewrite_test"),
        ),
        "tf_keras/mixed_precision/model_test.py": (2, 2, test_target),
        "tf_keras/models/sharpness.py": (
            2,
            2,
            "module tf_keras/models/sharpness.py is part of the tf_keras package: Keras 2",
        ),
    }
    monkeypatch.chdir(tmp_path)
    assert main(["--show-facts", "--no-cache", "tf_keras/mixed_precision/model_test.py"]) == 0
    assert capsys.readouterr().out == (
        f"project {tmp_path.resolve().as_posix()} (10 files)\n"  # no "target for every program": the code decides
        "  program tf_keras/mixed_precision/model_test.py (reaches 5 modules)\n"
        "    policy: none set (float32)\n"
        f"    target: Keras 2 ({test_target})\n"
        "  tf_keras/mixed_precision/model_test.py: not library code: a program of this project\n"
    )
    # The one finding is the library's SAM train_step, which never scales the loss: under a user's
    # mixed_float16, compile() wraps the optimizer and the float16 gradients underflow. Its fix tests the optimizer
    # by what it can do, not by a class spelled through `tf.keras` (Keras 3 on the pinned nightly).
    assert _lint(capsys, "--select", "ALL", ".") == [("tf_keras/models/sharpness.py", "MP202", "error", 11, 21)]
    before = {path: (tmp_path / path).read_text() for path in TF_KERAS_REPOSITORY}
    assert _lint(capsys, "--select", "ALL", "--fix", "--unsafe-fixes", ".") == []
    sam = before["tf_keras/models/sharpness.py"].replace(
        "            loss = self.compiled_loss(y, self(x))\n"
        "        gradients = tape.gradient(loss, self.trainable_variables)\n",
        "            loss = self.compiled_loss(y, self(x))\n"
        '            if hasattr(self.optimizer, "get_scaled_loss"):\n'
        "                scaled_loss = self.optimizer.get_scaled_loss(loss)\n"
        "            else:\n"
        "                scaled_loss = loss\n"
        "        gradients = tape.gradient(scaled_loss, self.trainable_variables)\n"
        '        if hasattr(self.optimizer, "get_scaled_loss"):\n'
        "            gradients = self.optimizer.get_unscaled_gradients(gradients)\n",
    )
    assert {path: (tmp_path / path).read_text() for path in TF_KERAS_REPOSITORY} == {
        **before,
        "tf_keras/models/sharpness.py": sam,
    }
    write_files(tmp_path, TF_KERAS_REPOSITORY)  # as committed, for the reading as Keras 3
    # Read as Keras 3, the same code draws Keras 3 rewrites that break it on tf_keras. The graph rewrite stays
    # silent on any target: no Keras policy is set (the catalog's MP503).
    assert _lint(capsys, "--select", "MP202,MP502,MP503", "--target", "keras3", ".") == [
        ("tf_keras/engine/training_eager_v1.py", "MP502", "error", 9, 39),
        ("tf_keras/engine/training_eager_v1.py", "MP502", "error", 10, 29),
        ("tf_keras/mixed_precision/model_test.py", "MP502", "error", 11, 42),
        ("tf_keras/mixed_precision/model_test.py", "MP502", "error", 12, 42),
        ("tf_keras/models/sharpness.py", "MP202", "error", 11, 21),
    ]


def test_a_tf_keras_program_with_tf1_sessions_is_keras_2_without_pins(tmp_path):
    facts = project_facts(
        write_files(
            tmp_path,
            {
                ".mplint.yaml": "{}\n",
                "train.py": "import tensorflow as tf\nimport tf_keras\n\nsession = tf.compat.v1.Session()\ntf_keras.Sequential().fit()\n",
                "legacy.py": "import tensorflow as tf\n\nsession = tf.compat.v1.Session()\n",
            },
        )
    )
    assert [(f.generation.value, f.generation.source) for _, f in sorted(facts.items())] == [
        (0, "program legacy.py uses TF1 (sessions, Estimators, tf.compat.v1 graphs) and sets no Keras policy"),
        (2, "program train.py imports tf_keras / sets TF_USE_LEGACY_KERAS=1"),
    ]


@pytest.mark.parametrize(
    "pins, expected",
    [
        ({"requirements.txt": "keras>=3\n"}, (2, "program train.py imports tf_keras / sets TF_USE_LEGACY_KERAS=1")),
        ({}, (2, "program train.py imports tf_keras / sets TF_USE_LEGACY_KERAS=1")),
        ({"requirements.txt": "tf-keras~=2.15.0\n"}, (2, "requirements.txt pins tf-keras~=2.15.0 (legacy Keras 2)")),
    ],
)
def test_a_keras_pin_says_what_import_keras_is_not_what_tf_keras_is(tmp_path, pins, expected):
    facts = project_facts(
        write_files(
            tmp_path,
            {
                ".mplint.yaml": "{}\n",
                **pins,
                "train.py": "import tf_keras\n\ntf_keras.Sequential().fit()\n",
                "tf_keras/__init__.py": "",
                "tf_keras/losses.py": "from . import backend\n",  # unreached, unpinned or not
            },
        )
    )
    assert (facts["train.py"].generation.value, facts["train.py"].generation.source) == expected
    assert facts["tf_keras/losses.py"].generation.value == 2


@pytest.mark.parametrize(
    "line",
    [
        "tensorflow",
        "tensorflow==2.15.0",
        "tensorflow >= 2.6 , < 3",
        "tensorflow>=2.6,<3",
        "Tensor_Flow.GPU>=1.15",
        "torch==2.1.*",
        "torch==2.0.0+cu118",
        "torch>=1!2.0",
        "keras===3.0",
        "tf-keras~=2.15.0",
        "keras<=3.0.0rc1",
        "tensorflow==2.x",  # not a version: no requirement
        "tensorflow>=",
        "tensorflow>=2.6,",
        "tensorflow[and-cuda]>=2.15",  # extras, markers, URLs and parentheses go through packaging's parser
        "torch>=1.6; python_version>'3.6'",
        "torch (>=1.6)",
        "torch @ https://download.pytorch.org/whl/torch-2.1.0.whl",
    ],
)
def test_a_pin_line_reads_as_packaging_reads_it(line):
    """Plain lines skip packaging's PEP 508 parser (its import is a tenth of an editor's first diagnostics);
    whichever way a line is read, its name, specifier and text are packaging's."""
    from packaging.requirements import InvalidRequirement, Requirement

    from mplint.project.manifests import _parsed_requirement

    try:
        parsed = Requirement(line)
        expected = (parsed.name, parsed.specifier, str(parsed))
    except InvalidRequirement:
        expected = None
    read = _parsed_requirement(line)
    assert (None if read is None else (read.name, read.specifier, str(read))) == expected
