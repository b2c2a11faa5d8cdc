"""Facts in force for a module: policies of the programs that reach it, the Keras generation, TPU use, re-exports."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from mplint.engine.names import KName, canonical, resolve_relative
from mplint.knowledge.policies import UNKNOWN_POLICY
from mplint.project.build import project_facts
from mplint.project.extract import extract_file_facts
from mplint.project.pins import generation_from_pins
from mplint.runner import RunOptions, run


def facts_of(files: dict[str, str], root: Path, keras=None, policy=None, of: str | None = None):
    """The facts of module ``of`` (default: the first file) in a project made of ``files``."""
    for name, code in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(code)
    return project_facts(root, keras, policy)[of or next(iter(files))]


def test_policies_are_collected_with_place_and_kind(tmp_path):
    facts = facts_of(
        {
            "train.py": "from tensorflow.keras import mixed_precision\nmixed_precision.set_global_policy('mixed_float16')\nimport layers\n",
            "layers.py": "import keras\nd = keras.layers.Dense(4, dtype='mixed_bfloat16')\n",
        },
        tmp_path,
    )
    assert [(p.policy, p.path, p.line, p.how) for p in facts.policies] == [
        ("mixed_float16", "train.py", 2, "global"),
        ("mixed_bfloat16", "layers.py", 2, "layer"),
    ]
    assert facts.float16 and facts.reduced_precision and not facts.bfloat16_only
    assert facts.describe_policy() == "mixed_float16 set at train.py:2"


def test_policy_values_through_constants_conditionals_and_policy_objects(tmp_path):
    code = (
        "import keras\nPOLICY = 'mixed_bfloat16'\n"
        "keras.mixed_precision.set_global_policy(POLICY)\n"
        "keras.mixed_precision.set_global_policy('mixed_float16' if gpu else 'float32')\n"
        "keras.mixed_precision.set_global_policy(keras.mixed_precision.Policy('mixed_float16'))\n"
        "keras.mixed_precision.set_global_policy(args.policy)\n"
    )
    facts = facts_of({"t.py": code}, tmp_path)
    assert [p.policy for p in facts.policies if p.how == "global"] == [
        "mixed_bfloat16",
        "mixed_float16",
        "float32",
        "mixed_float16",
        UNKNOWN_POLICY,
    ]


def test_config_policy_overrides_the_code(tmp_path):
    facts = facts_of(
        {"t.py": "from keras.mixed_precision import set_global_policy\nset_global_policy('mixed_float16')\n"},
        tmp_path,
        policy="mixed_bfloat16",
    )
    assert facts.bfloat16_only and not facts.float16
    assert facts.describe_policy() == "policy mixed_bfloat16 from the mplint config"


def test_no_policy_means_no_reduced_precision(tmp_path):
    facts = facts_of({"t.py": "import keras\nm = keras.Sequential()\n"}, tmp_path)
    assert not facts.reduced_precision and facts.describe_policy() == "no mixed policy"


@pytest.mark.parametrize(
    "files,expected",
    [
        ({"requirements.txt": "tensorflow<2.16\nnumpy\n"}, 2),
        ({"requirements.txt": "tensorflow==2.15.1\n"}, 2),
        ({"requirements.txt": "tensorflow>=2.16\n"}, 3),
        ({"requirements.txt": "tensorflow>=2.10\n"}, 3),
        ({"requirements.txt": "tensorflow\n"}, 3),
        ({"requirements.txt": "tensorflow==2.3.0\n"}, 1),
        ({"requirements-gpu.txt": "tensorflow[and-cuda]~=2.14.0\n"}, 2),
        ({"requirements.txt": "tensorflow>=2.16\ntf-keras\n"}, 2),
        ({"requirements.txt": "keras>=3.0\n"}, 3),
        ({"requirements.txt": "keras<3\n"}, 2),
        ({"pyproject.toml": "[project]\nname='x'\ndependencies=['tensorflow>=2.12,<2.16']\n"}, 2),
        ({"pyproject.toml": "[project]\nname='x'\n[project.optional-dependencies]\ngpu=['tensorflow>=2.16']\n"}, 3),
        ({"pyproject.toml": "[tool.poetry.dependencies]\ntensorflow = '^2.13'\n"}, 3),
        ({"pyproject.toml": "[tool.poetry.dependencies]\ntensorflow = '~2.13'\n"}, 2),
        ({"setup.py": "setup(install_requires=['tensorflow>=2.4,<2.16'])\n"}, 2),
        ({"requirements.txt": "numpy\n"}, None),
    ],
)
def test_generation_from_pins(tmp_path, files, expected):
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    found = generation_from_pins(tmp_path)
    assert (found.value if found else None) == expected


def test_generation_priority_config_then_pins_then_imports(tmp_path):
    (tmp_path / "requirements.txt").write_text("tensorflow==2.15.0\n")
    legacy = {"t.py": "import tf_keras as keras\n"}
    assert facts_of(legacy, tmp_path, keras=3).generation.value == 3
    assert facts_of({"t.py": "import keras\n"}, tmp_path).generation.value == 2
    (tmp_path / "requirements.txt").unlink()
    assert facts_of(legacy, tmp_path).generation.value == 2
    env = {"t.py": "import os\nos.environ['TF_USE_LEGACY_KERAS'] = '1'\nimport tensorflow as tf\n"}
    assert facts_of(env, tmp_path).generation.value == 2
    assert (
        facts_of({"t.py": "import keras\n"}, tmp_path).generation.source
        == "module t.py imports Keras 3 (`import keras`)"
    )
    assert facts_of({"t.py": "import tensorflow as tf\n"}, tmp_path).generation.value == 3


def test_tpu_sites(tmp_path):
    code = "import tensorflow as tf\nr = tf.distribute.cluster_resolver.TPUClusterResolver()\ns = tf.distribute.TPUStrategy(r)\n"
    assert facts_of({"t.py": code}, tmp_path).tpu_sites == (("t.py", 2), ("t.py", 3))


def test_reexports_make_aliases_resolve(tmp_path):
    facts = facts_of(
        {"pkg/backend.py": "from tensorflow import keras\nimport tensorflow as tf\n", "pkg/__init__.py": ""}, tmp_path
    )
    assert facts.reexports == {"pkg.backend.keras": "tensorflow.keras", "pkg.backend.tf": "tensorflow"}
    assert canonical("pkg.backend.keras.layers.Dense", facts.reexports) == KName("tf.keras", "layers.Dense")


@pytest.mark.parametrize(
    "qualified,expected",
    [
        ("tensorflow.keras.layers.Dense", KName("tf.keras", "layers.Dense")),
        ("tensorflow.compat.v2.keras.layers.Dense", KName("tf.keras", "layers.Dense")),
        ("keras.layers.Dense", KName("keras", "layers.Dense")),
        ("keras.src.layers.core.dense.Dense", KName("keras", "layers.Dense")),
        ("tf_keras.layers.Dense", KName("tf_keras", "layers.Dense")),
        ("tensorflow.keras.models.Sequential", KName("tf.keras", "Sequential")),
        ("keras.mixed_precision.LossScaleOptimizer", KName("keras", "optimizers.LossScaleOptimizer")),
        ("tensorflow.nn.softmax", KName("tf", "nn.softmax")),
        ("tensorflow.keras", KName("tf.keras", "")),
        ("tensorflow.python.keras.layers.Dense", KName("tf.keras", "layers.Dense")),
        ("numpy.float16", KName("np", "float16")),
        ("torch.nn.Linear", None),
        ("kerasx.layers.Dense", None),
    ],
)
def test_canonical_names(qualified, expected):
    assert canonical(qualified) == expected


def test_relative_imports_resolve():
    assert resolve_relative(".backend.keras", "pkg.models", False) == "pkg.backend.keras"
    assert resolve_relative("..backend.keras", "pkg.sub.models", False) == "pkg.backend.keras"
    assert resolve_relative(".backend", "pkg", True) == "pkg.backend"


def test_files_without_policy_tokens_are_read_by_regex_like_the_parser(tmp_path):
    code = (
        "import tensorflow as tf\nfrom tensorflow import keras\nfrom tf_keras import (\n    layers,\n    models as m,\n)\n"
        "def f():\n    import keras as k3\n"
    )
    facts = facts_of({"pkg/backend.py": code, "pkg/__init__.py": ""}, tmp_path)
    assert facts.keras_namespaces == {"tf.keras", "tf_keras", "keras"}
    assert facts.reexports == {
        "pkg.backend.tf": "tensorflow",
        "pkg.backend.keras": "tensorflow.keras",
        "pkg.backend.layers": "tf_keras.layers",
        "pkg.backend.m": "tf_keras.models",
    }
    assert facts.generation.value == 2


def test_generation_says_where_it_came_from(tmp_path):
    assert facts_of({"t.py": "x = 1\n"}, tmp_path, keras=2).generation.origin == "config"
    assert facts_of({"t.py": "import keras\n"}, tmp_path).generation.origin == "imports"
    assert facts_of({"t.py": "x = 1\n"}, tmp_path).generation.origin == "default"
    (tmp_path / "requirements.txt").write_text("tensorflow<2.16\n")
    assert facts_of({"t.py": "x = 1\n"}, tmp_path).generation.origin == "pin-tensorflow"
    (tmp_path / "requirements.txt").write_text("keras<3\n")
    assert facts_of({"t.py": "x = 1\n"}, tmp_path).generation.origin == "pin-keras"
    (tmp_path / "requirements.txt").write_text("tf-keras\n")
    assert facts_of({"t.py": "x = 1\n"}, tmp_path).generation.origin == "pin-tf-keras"


def test_file_facts_survive_the_cache_unchanged(tmp_path):
    from mplint.project.cache import _facts_from_json, _facts_to_json
    from mplint.project.extract import extract_file_facts

    code = (
        "import sys, os\nsys.path.insert(0, os.path.join(os.path.dirname(__file__), '..'))\n"
        "from .models import Net as N\nimport tensorflow.keras as k\n"
        "def setup(policy):\n    k.mixed_precision.set_global_policy(policy)\n"
        "if __name__ == '__main__':\n    setup('mixed_float16')\n"
    )
    facts = extract_file_facts(code.encode(), "pkg/train.py", "pkg.train")
    assert facts.sys_paths == ["<here>/.."] and facts.main_guard and facts.policies[0].function == "setup"
    assert _facts_from_json(json.loads(json.dumps(_facts_to_json(facts)))) == facts


def test_output_dtype_summaries():
    """A softmax layer whose dtype is a parameter used for nothing else; its default as written."""
    import ast

    from mplint.checks.mp101_float16_softmax_output import OUTPUT_DTYPE
    from mplint.engine.summaries import Summary

    code = (
        "import keras\nfrom keras import layers\n"
        "def build_model(n, dtype=None):\n"
        "    return keras.Sequential([layers.Dense(16), layers.Dense(n, activation='softmax', dtype=dtype)])\n"
        "def everywhere(n, dtype=None):\n"
        "    return keras.Sequential([layers.Dense(16, dtype=dtype), layers.Dense(n, activation='softmax', dtype=dtype)])\n"
        "class Head(keras.Model):\n"
        "    def __init__(self, n, head_dtype='float32'):\n"
        "        super().__init__()\n"
        "        self.out = layers.Activation('softmax', dtype=head_dtype)\n"
        "def required(n, dtype):\n    return layers.Softmax(dtype=dtype)\n"
        "def relu(n, dtype=None):\n    return layers.Dense(n, activation='relu', dtype=dtype)\n"
    )
    assert OUTPUT_DTYPE.summarize(ast.parse(code).body, code.encode()) == {
        "build_model": Summary("dtype", 1, None, 4, 48),
        "Head": Summary("head_dtype", 1, "float32", 10, 20),
        "required": Summary("dtype", 1, "<required>", 12, 12),
    }


def test_models_trained_through_a_callable_argument():
    """``run(model_fn=_get_model)`` where ``run`` fits what ``model_fn()`` returns (as in tf-models' BERT
    run_classifier.py): ``_get_model`` is trained, and so is what it returns."""
    source = (
        "import tensorflow as tf\nfrom models import build_classifier\n\n"
        "def run(epochs, model_fn):\n"
        "    model, core = model_fn()\n"
        "    model.compile(optimizer='adam', loss='sparse_categorical_crossentropy')\n"
        "    model.fit(tf.zeros((8, 4)), tf.zeros((8,)), epochs=epochs)\n\n"
        "def main():\n"
        "    def _get_model():\n"
        "        classifier, core = build_classifier(10)\n"
        "        return classifier, core\n"
        "    run(3, model_fn=_get_model)\n"
        "    run(3, lambda: None)\n"
    )
    facts = extract_file_facts(source.encode(), "train.py", "train")
    assert facts.trains == ["model_fn", "_get_model", "build_classifier"]


@pytest.mark.parametrize("trained", [True, False])
def test_a_model_trained_through_a_callable_argument_gets_its_output_checked(tmp_path, trained):
    files = {
        "models.py": (
            "import tensorflow as tf\n\n"
            "def build_classifier(n):\n"
            "    inputs = tf.keras.Input((4,))\n"
            "    outputs = tf.keras.layers.Dense(n)(inputs)\n"
            "    model = tf.keras.Model(inputs, outputs)\n"
            "    return model, model\n"
        ),
        "train.py": (
            "import tensorflow as tf\nfrom models import build_classifier\n\n"
            "tf.keras.mixed_precision.set_global_policy('mixed_float16')\n\n"
            "def run(model_fn):\n"
            "    model, _ = model_fn()\n"
            "    model.compile(optimizer='adam', loss='mse')\n\n"
            "if __name__ == '__main__':\n"
            "    run(model_fn=lambda: build_classifier(10))\n"
            "    def _get():\n        return build_classifier(10)\n"
            "    run(model_fn=_get)\n"
        ),
    }
    if not trained:  # built for inference only: its output is nobody's loss
        files["train.py"] = files["train.py"].replace("run(model_fn=_get)", "_get().predict(tf.zeros((1, 4)))")
        files["train.py"] = files["train.py"].replace("run(model_fn=lambda: build_classifier(10))", "pass")
    for name, text in files.items():
        (tmp_path / name).write_text(text, encoding="utf-8")
    report = run(RunOptions(paths=[tmp_path], cache=False, select=["MP102"]))
    found = [(Path(d.path).name, d.rule_id, d.line) for d in report.remaining]
    assert found == ([("models.py", "MP102", 5)] if trained else [])
    if trained:
        assert Path(report.remaining[0].context["program"]).name == "train.py"
        assert report.remaining[0].context["set_at"]["line"] == 4


@pytest.mark.parametrize(
    "statement",
    [
        "import tensorflow.python.keras",
        "from tensorflow.python.keras import layers",
        "import tensorflow._api.v2.keras",
    ],
)
def test_keras_imports_name_the_namespace_canonical_names(statement):
    """The project facts' Keras flavour and ``canonical`` read one table: TF 2.4-2.5's ``tensorflow.python.keras``
    is tf.keras to both."""
    assert extract_file_facts(f"{statement}\n".encode(), "m.py", "m").keras_imports == {"tf.keras"}
    assert canonical(statement.split()[1]).ns == "tf.keras"


@pytest.mark.parametrize("source,parses", [(b"x = 1\n", True), (b"def f(:\n", False), (b"x = 1\x00\n", False)])
def test_facts_say_whether_cpython_parsed_the_file(source, parses):
    assert extract_file_facts(source, "m.py", "m").parses is parses


def test_facts_read_without_the_rules_summary_kinds_fail_loudly():
    """The kinds of function summaries are declared by the rules that read them: facts read before any rule is
    loaded would lack every summary (and the rules reading them would stay silent), so they fail instead; an
    entry point that says how the rules load (``load_with``) gets every kind."""
    import subprocess
    import sys

    code = (
        "from mplint.project.extract import extract_file_facts\n"
        "source = b'def focal(p):\\n    return p + 1e-8\\n'\n"
        "try:\n    extract_file_facts(source, 'm.py', 'm')\nexcept RuntimeError as exc:\n    print(exc)\n"
        "from mplint.checks import all_rules\nfrom mplint.engine.summaries import load_with\n"
        "load_with(all_rules)\nprint(extract_file_facts(source, 'm.py', 'm').summaries)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.splitlines() == [
        "no function summary kind is declared: load the rules first (mplint.checks.all_rules)",
        "{'focal': {'range_constant': Summary(value='p', position=0, default='+ 1e-8', line=2, column=12)}}",
    ]
