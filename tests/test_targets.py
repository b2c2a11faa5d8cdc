"""The target TensorFlow/Keras per program: real pin parsers, container images, TF1 programs, --target."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from conftest import write_files

from mplint.cli import main
from mplint.project.pins import PinFinder, generation_from_pins
from mplint.project.build import project_facts
from mplint.testing import copy_tree

REPO = Path(__file__).resolve().parent.parent


def _lint(capsys, *args: str) -> list[tuple]:
    main(["--format", "json", "--no-cache", *args])
    doc = json.loads(capsys.readouterr().out)
    return [(d["path"], d["rule"], d["severity"], d["start"]["line"], d["start"]["column"]) for d in doc["diagnostics"]]


@pytest.mark.parametrize("image,value,tf", [
    ("nvcr.io/nvidia/tensorflow:22.12-tf1-py3", 0, "TF 1.15"),
    ("tensorflow/tensorflow:2.8.0-gpu", 2, "TF 2.8"),
    ("tensorflow/tensorflow:2.3.1-gpu-jupyter", 1, "TF 2.3"),
    ("tensorflow/tensorflow:2.16.1", 3, "TF 2.16"),
    ("gcr.io/deeplearning-platform-release/tf2-gpu.2-8", 2, "TF 2.8"),
])
def test_container_images_name_their_tensorflow(tmp_path, image, value, tf):
    (tmp_path / "Dockerfile").write_text(f"FROM python:3.10 AS build\nRUN pip wheel .\nFROM {image}\nCOPY . /app\n")
    found = generation_from_pins(tmp_path)
    assert (found.value, found.low, found.source) == (value, value, f"{image} in Dockerfile: {tf}")


@pytest.mark.parametrize("files,expected", [
    ({"requirements.txt": "-r base.txt\n", "base.txt": "tensorflow==2.8.0 --hash=sha256:abc\n"}, (2, "requirements.txt pins tensorflow==2.8.0")),
    ({"requirements.txt": "tensorflow\n-c constraints.txt\n", "constraints.txt": "tensorflow<2.9\n"}, (2, "requirements.txt pins tensorflow<2.9")),
    ({"setup.py": "from setuptools import setup\nTF = '>=2.6,<2.14'\nsetup(install_requires=['tensorflow' + TF])\n"},
     (2, "setup.py pins tensorflow<2.14,>=2.6")),
    ({"setup.py": "import logging\nlogging.getLogger('tensorflow')\nREQS = ['tensorflow']\n"}, None),
    ({"setup.cfg": "[options]\ninstall_requires =\n    numpy\n    tensorflow>=2.4,<2.9\n"}, (2, "setup.cfg pins tensorflow<2.9,>=2.4")),
    ({"environment.yml": "name: x\ndependencies:\n  - python=3.8\n  - tensorflow-gpu=2.3\n"}, (1, "environment.yml pins tensorflow-gpu==2.3.*")),
    ({"environment.yml": "dependencies:\n  - pip:\n    - tensorflow==2.15.1\n"}, (2, "environment.yml pins tensorflow==2.15.1")),
    ({"Pipfile": "[packages]\ntensorflow = \"==2.5.0\"\n"}, (2, "Pipfile pins tensorflow==2.5.0")),
    ({"pyproject.toml": "[tool.poetry.group.train.dependencies]\ntensorflow = '~2.13'\n"}, (2, "pyproject.toml pins tensorflow<2.14,>=2.13")),
])
def test_pin_sources(tmp_path, files, expected):
    found = generation_from_pins(write_files(tmp_path, files))
    assert ((found.value, found.source) if found else None) == expected


def test_the_nearest_pins_above_a_program_win(tmp_path):
    write_files(tmp_path, {
        "requirements.txt": "tensorflow>=2.16\n",
        "legacy/requirements.txt": "tensorflow==2.3.0\n",
        "legacy/train.py": "import tensorflow as tf\ntf.keras.Sequential().fit()\n",
        "train.py": "import tensorflow as tf\ntf.keras.Sequential().fit()\n",
        ".mplint.yaml": "{}\n",
    })
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
    # An NGC TensorFlow 2 tag has no verified version: any TF 2, which includes TF >= 2.9
    (tmp_path / "p" / "Dockerfile").write_text("FROM nvcr.io/nvidia/tensorflow:22.03-tf2-py3\n")
    assert _lint(capsys, ".") == [("train.py", "MP501", "error", 4, 1)]


def test_a_computed_pin_and_a_helper_named_setup_py(tmp_path, monkeypatch, capsys):
    copy_tree(REPO / "fixtures" / "computed_pin", tmp_path / "p")
    monkeypatch.chdir(tmp_path / "p")
    assert _lint(capsys, "--select", "MP502", ".") == []  # Keras 2 API on the Keras 2 that setup.py pins
    assert project_facts(tmp_path / "p")["trainer/task.py"].generation.source == "setup.py pins tensorflow<2.14,>=2.6"
    assert [r[:2] for r in _lint(capsys, "--select", "MP502", "--target", "keras3", ".")] == [
        ("trainer/task.py", "MP502"), ("trainer/task.py", "MP502")]


def test_a_compatibility_import_is_not_a_choice_of_keras(tmp_path):
    facts = project_facts(write_files(tmp_path, {
        ".mplint.yaml": "{}\n",
        "train.py": (
            "try:\n    import keras.src as keras_src\nexcept ImportError:\n    keras_src = None\n"
            "import tf_keras\ntf_keras.Sequential().fit()\n"
        ),
    }))
    assert facts["train.py"].generation.value == 2 and facts["train.py"].keras_namespaces == {"tf_keras"}


def test_target_in_config(tmp_path, monkeypatch, capsys):
    write_files(tmp_path, {".mplint.yaml": "target: tf2.3\n", "train.py": "import tensorflow as tf\ntf.keras.Sequential().fit()\n"})
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
    write_files(tmp_path, {
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
    })
    monkeypatch.chdir(tmp_path)
    assert [r[1:4:2] for r in _lint(capsys, "--select", "MP501,MP502", ".")] == [("MP501", 17)]


def test_library_code_that_imports_tf_keras_is_keras_2_whatever_tensorflow_is_pinned(tmp_path, monkeypatch, capsys):
    """A TensorFlow pin says what ``tf.keras`` is; tf_keras is Keras 2 on every TensorFlow (the tf-keras
    repository pins tf-nightly, and its own Keras 2 code must not get Keras 3 rewrites)."""
    write_files(tmp_path, {
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
    })
    facts = project_facts(tmp_path)
    assert (facts["legacy_lib/train.py"].generation.value, facts["legacy_lib/train.py"].generation.source) == (
        2, "module legacy_lib/train.py imports tf_keras / sets TF_USE_LEGACY_KERAS=1")
    assert facts["legacy_lib/new.py"].generation.value == 3  # tf.keras on a TF nightly is Keras 3
    monkeypatch.chdir(tmp_path)
    assert _lint(capsys, "--select", "MP502", ".") == []
