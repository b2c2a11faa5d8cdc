"""Numerics and pipeline rules on the fixture projects, through the real CLI."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import libcst as cst
import pytest

from mplint.analysis.dtype_flow import FLOAT32, Carrier, DtypeFlow
from mplint.testing import copy_tree, lint_code
from mplint.verify.warm import run_python

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"


def _mplint(folder: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "mplint", *args], cwd=folder, capture_output=True, text=True, timeout=120, check=False
    )


def _copy_fixture(name: str, tmp_path: Path) -> Path:
    """A copy of ``fixtures/<name>`` to lint and fix (outside the repository, whose config excludes fixtures/)."""
    copy_tree(FIXTURES / name, tmp_path / name)
    return tmp_path / name


def _run_probe(folder: Path, probe: str) -> str:
    """Run the Python code ``probe`` in ``folder`` on CPU with Keras' TensorFlow backend: its standard output."""
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": "", "TF_CPP_MIN_LOG_LEVEL": "3", "KERAS_BACKEND": "tensorflow"}
    done = run_python(["-c", probe], module="tensorflow", cwd=folder, env=env)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def _found(stdout: str) -> list[tuple[str, int, int]]:
    return [(d["rule"], d["start"]["line"], d["start"]["column"]) for d in json.loads(stdout)["diagnostics"]]


def test_pipeline_fixture_flags_float16_math_not_the_final_cast(tmp_path):
    folder = _copy_fixture("tfdata_pipeline", tmp_path)
    before = _mplint(folder, "--select", "MP401", "--format", "json", "pipeline.py")
    assert before.returncode == 1
    assert _found(before.stdout) == [("MP401", 18, 13), ("MP401", 30, 13)]
    assert _mplint(folder, "--select", "MP401", "--fix", "pipeline.py").returncode == 0
    fixed = (folder / "pipeline.py").read_text(encoding="utf-8")
    original = (FIXTURES / "tfdata_pipeline" / "pipeline.py").read_text(encoding="utf-8")
    assert fixed == original.replace(
        "convert_image_dtype(image, tf.float16)", "convert_image_dtype(image, tf.float32)"
    ).replace('images.astype("float16")', 'images.astype("float32")')
    assert "return tf.cast(image, tf.float16), label" in fixed  # the final cast stays


def test_fixed_pipeline_runs_in_float32(tmp_path):
    pytest.importorskip("tensorflow")
    folder = _copy_fixture("tfdata_pipeline", tmp_path)
    _mplint(folder, "--select", "MP401", "--fix", "pipeline.py")
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": "", "TF_CPP_MIN_LOG_LEVEL": "3"}
    run = run_python(["pipeline.py"], module="tensorflow", cwd=folder, env=env)
    assert run.returncode == 0, run.stderr
    lines = run.stdout.splitlines()
    assert lines[0].startswith("<dtype: 'float32'> (8, 32, 32, 3)")
    assert lines[1] == "<dtype: 'float16'> (8, 40, 40, 3)"  # the untouched final cast
    assert lines[2] == "float32"


def test_attention_fixture_only_flags_the_mask_constant(tmp_path):
    folder = _copy_fixture("attention_mask", tmp_path)
    result = _mplint(folder, "--select", "MP601,MP103,MP401", "--format", "json")
    assert result.returncode == 1
    assert _found(result.stdout) == [("MP601", 21, 42)]


def _returned(code: str, marker: str, ask):
    """``ask(DtypeFlow, expression)`` on the expression of ``return <marker>`` in ``code``."""
    from libcst.metadata import MetadataWrapper

    from mplint.engine.context import FileContext
    from mplint.project.facts import ProjectFacts

    wrapper = MetadataWrapper(cst.parse_module(code))
    context = FileContext("probe.py", wrapper, ProjectFacts(), "probe", False)
    returned = next(
        r for r in context.nodes(cst.Return) if context.module.code_for_node(r).strip() == f"return {marker}"
    )
    return ask(context.analysis(DtypeFlow), returned.value)


def _classify(code: str, marker: str):
    return _returned(code, marker, lambda flow, value: flow.classify(value))


@pytest.mark.parametrize(
    "code,expected",
    [
        ("import tensorflow as tf\ndef f(m, x):\n    y = tf.cast(m, x.dtype)\n    return y\n", Carrier),
        ("import tensorflow as tf\ndef f(m, x):\n    y = tf.cast(m, tf.float32)\n    return y\n", FLOAT32),
        (
            "import tensorflow as tf\ndef f(m):\n    y = tf.cast(m, tf.float16) * 2\n    y = tf.cast(y, 'float32')\n    return y\n",
            FLOAT32,
        ),
        (
            "import keras\nclass L(keras.layers.Layer):\n    def call(self, x, training=None):\n        return x\n",
            Carrier,
        ),
        (
            "import keras\nclass L(keras.layers.Layer):\n    def call(self, x, training=None):\n        return training\n",
            None,
        ),
        ("import keras\ndef call(x):\n    return x\n", None),
        (
            "import keras\nclass L(keras.layers.Layer):\n    def call(self, x):\n        x = x + 1\n        return x\n",
            Carrier,
        ),
        # a float32 operand makes the result float32 (TensorFlow does not mix float16 and float32)
        (
            "import tensorflow as tf\nclass L(tf.keras.layers.Layer):\n    def call(self, x, m):\n        y = x * tf.cast(m, tf.float32)\n        return y\n",
            FLOAT32,
        ),
        (
            "import tensorflow as tf\nclass L(tf.keras.layers.Layer):\n    def call(self, x, n):\n        y = x + tf.sequence_mask(n, dtype=tf.float32)\n        return y\n",
            FLOAT32,
        ),
        (
            "import tensorflow as tf\nclass L(tf.keras.layers.Layer):\n    def call(self, x, t):\n        y = tf.one_hot(t, 8, dtype=x.dtype)\n        return y\n",
            Carrier,
        ),
        # x * cast(m, x.dtype) has x's dtype: unknown when x is
        ("import tensorflow as tf\ndef f(x, m):\n    y = x * tf.cast(m, x.dtype)\n    return y\n", None),
        ("import tensorflow as tf\ndef f(x, m):\n    y = x\n    y *= tf.cast(m, y.dtype)\n    return y\n", None),
        ("import tensorflow as tf\ndef f(x, m, z):\n    y = z * tf.cast(m, x.dtype)\n    return y\n", Carrier),
        # a functional loss has the dtype of its predictions, whatever the labels
        (
            "import tensorflow as tf\nclass L(tf.keras.layers.Layer):\n    def call(self, ids, logits):\n        y = tf.keras.losses.sparse_categorical_crossentropy(ids, tf.cast(logits, tf.float32))\n        return y\n",
            FLOAT32,
        ),
        (
            "import tensorflow as tf\nclass L(tf.keras.layers.Layer):\n    def call(self, ids, logits):\n        y = tf.nn.sparse_softmax_cross_entropy_with_logits(labels=ids, logits=logits)\n        return y\n",
            Carrier,
        ),
        # casting helpers: map_structure of a cast, a helper named for it, a helper of the file
        (
            "import tensorflow as tf\nclass L(tf.keras.layers.Layer):\n    def call(self, x):\n        y = tf.nest.map_structure(lambda t: tf.cast(t, tf.float32), x)\n        return y\n",
            FLOAT32,
        ),
        (
            "import tensorflow as tf\nfrom u import tf_utils\nclass L(tf.keras.layers.Layer):\n    def call(self, x):\n        y = tf_utils.fp16_to_fp32_nested(x)\n        return y\n",
            FLOAT32,
        ),
        (
            "import tensorflow as tf\ndef up(t):\n    return tf.cast(t, 'float32')\nclass L(tf.keras.layers.Layer):\n    def call(self, x):\n        y = up(x)\n        return y\n",
            FLOAT32,
        ),
        (
            "import tensorflow as tf\ndef half(t):\n    return tf.cast(t, 'float16')\nclass L(tf.keras.layers.Layer):\n    def call(self, x):\n        y = half(x) + x\n        return y\n",
            Carrier,
        ),
        # ops that raise on float16 input: what follows them only runs in float32
        (
            "import tensorflow as tf\nclass L(tf.keras.layers.Layer):\n    def call(self, x):\n        y = tf.abs(tf.signal.stft(x, 8, 4))\n        return y\n",
            FLOAT32,
        ),
        # inputs of a layer that computes in float32
        (
            "import tensorflow as tf\nclass L(tf.keras.layers.Layer):\n    def __init__(self):\n        super().__init__(dtype='float32')\n    def call(self, x):\n        return x\n",
            FLOAT32,
        ),
        (
            "import tensorflow as tf\nhead = L(dtype=tf.float32)\nclass L(tf.keras.layers.Layer):\n    def call(self, x):\n        return x\n",
            FLOAT32,
        ),
        (
            "import tensorflow as tf\na = L(dtype=tf.float32)\nb = L()\nclass L(tf.keras.layers.Layer):\n    def call(self, x):\n        return x\n",
            Carrier,
        ),
    ],
)
def test_dtype_flow(code, expected):
    marker = code.rstrip().rsplit("return ", 1)[1]
    value = _classify(code, marker)
    assert isinstance(value, Carrier) if expected is Carrier else value is expected


def test_policy_in_an_imported_file_enables_the_rewrite_fix():
    code = "import tensorflow as tf\nimport policy\nopt = tf.keras.optimizers.Adam()\nopt = tf.train.experimental.enable_mixed_precision_graph_rewrite(opt)\n"
    files = {"policy.py": 'import keras\nkeras.mixed_precision.set_global_policy("mixed_float16")\n'}
    without = lint_code(code.replace("import policy\n", "import os\n"), select=["MP503"], fix=True, files=files)
    assert not without.written and without.diagnostics == []  # policy.py is another program: no policy here
    fixed = lint_code(code, select=["MP503"], fix=True, files=files)
    assert fixed.fixed_code == "import tensorflow as tf\nimport policy\nopt = tf.keras.optimizers.Adam()\n"


def _mask(code: str, marker: str) -> bool:
    return _returned(code, marker, lambda flow, value: flow.is_mask(value))


@pytest.mark.parametrize(
    "body,expected",
    [
        ("m = tf.cast(tf.not_equal(ids, 0), x.dtype)\n    return m", True),
        ("m = tf.cast(ids > 0, x.dtype)\n    return 1.0 - m[:, None]", True),
        ("return tf.sequence_mask(n, 16, dtype=x.dtype)", True),
        ("return tf.expand_dims(tf.one_hot(ids, 8), -1) * target_mask", True),
        ("return target_mask", True),
        ("return x * target_mask", False),
        ("return tf.cast(x, tf.float32)", False),
        ("m = x\n    return m", False),
    ],
)
def test_masks_are_recognised(body, expected):
    code = f"import tensorflow as tf\ndef f(x, ids, n, target_mask):\n    {body}\n"
    marker = body.rsplit("return ", 1)[1]
    assert _mask(code, marker) is expected


def test_constants_that_travel_are_reported_where_they_meet_the_tensor(tmp_path):
    """A constructor default kept in ``self.mask_value`` and a module constant, each used in another
    place than its literal: reported at the use, the message names the literal's line."""
    folder = _copy_fixture("attention_library", tmp_path)
    result = _mplint(folder, "--format", "json", "--no-cache")
    assert result.returncode == 1, result.stderr
    diagnostics = json.loads(result.stdout)["diagnostics"]
    assert [(d["path"], *found) for d, found in zip(diagnostics, _found(result.stdout))] == [
        ("textattn/layers.py", "MP601", 19, 54),
        ("textattn/layers.py", "MP601", 26, 41),
    ]
    assert diagnostics[0]["message"].startswith(
        "`self.mask_value` (the default of `mask_value` at line 10: `-1e9`) is outside float16's range"
    )
    assert diagnostics[1]["message"].startswith("`NORM_EPSILON` (set at line 6: `1e-12`) flushes to 0 in float16")
    assert _mplint(folder, "--fix", "--no-cache").returncode == 0
    fixed = (folder / "textattn" / "layers.py").read_text(encoding="utf-8")
    original = (FIXTURES / "attention_library" / "textattn" / "layers.py").read_text(encoding="utf-8")
    assert fixed == original.replace(
        "logits, self.mask_value)",
        "logits, (max(self.mask_value, -3e4) if keras.backend.standardize_dtype(logits.dtype) == "
        '"float16" else self.mask_value))',
    ).replace(
        "variance + NORM_EPSILON)",
        "variance + (max(NORM_EPSILON, 6.104e-05) if keras.backend.standardize_dtype(variance.dtype) == "
        '"float16" else NORM_EPSILON))',
    )


def test_a_travelling_epsilon_turns_padding_into_nan_until_fixed(tmp_path):
    """Executed on CPU under mixed_float16: RMSNorm of an all-zero (padding) vector is NaN with the
    module's 1e-12 epsilon (it flushes to 0: 0 * rsqrt(0) = 0 * inf) and finite after the fix."""
    pytest.importorskip("tensorflow")
    folder = _copy_fixture("attention_library", tmp_path)
    probe = (
        "import keras, numpy as np\n"
        "keras.mixed_precision.set_global_policy('mixed_float16')\n"
        "from textattn import RMSNorm\n"
        "out = np.asarray(RMSNorm()(np.zeros((1, 4), 'float32')))\n"
        "print(out.dtype, bool(np.isnan(out).any()))\n"
    )
    assert _run_probe(folder, probe) == "float16 True"
    assert _mplint(folder, "--fix", "--no-cache", "--select", "MP601").returncode == 0
    assert _run_probe(folder, probe) == "float16 False"


def test_float16_passed_to_a_project_function_that_converts_then_normalises(tmp_path):
    """The data loader passes ``tf.float16 if amp else tf.float32`` to ``ImageProcessor.normalize_image`` of
    another module, which converts to it and then normalises, flips and resizes: reported at the float16 passed."""
    folder = _copy_fixture("input_processor", tmp_path)
    result = _mplint(folder, "--format", "json", "--no-cache")
    assert result.returncode == 1, result.stderr
    [diagnostic] = json.loads(result.stdout)["diagnostics"]
    assert (diagnostic["path"], *_found(result.stdout)[0]) == ("vision/dataloader.py", "MP401", 16, 26)
    assert diagnostic["message"].startswith(
        "`normalize_image` converts its data to this dtype at vision/processor.py:14 and then computes with it"
    )
    assert _mplint(folder, "--fix", "--no-cache").returncode == 0
    fixed = (folder / "vision" / "dataloader.py").read_text(encoding="utf-8")
    original = (FIXTURES / "input_processor" / "vision" / "dataloader.py").read_text(encoding="utf-8")
    assert fixed == original.replace(
        'image, dtype=tf.float16 if self._params["mixed_precision"] else tf.float32)', "image, dtype=tf.float32)"
    )
    assert _mplint(folder, "--no-cache").returncode == 0  # a fixed point: nothing left


def test_conversion_dtype_summaries_are_per_function_and_method():
    import ast

    from mplint.checks.mp401_float16_preprocessing import CONVERSION_DTYPE
    from mplint.engine.summaries import Summary

    code = (
        "import tensorflow as tf\n"
        "def cast_only(x, dtype):\n    return tf.cast(x, dtype)\n"
        "def scaled(x, dtype=tf.float32):\n    y = tf.cast(x, dtype)\n    return y / 255.0\n"
        "class P:\n"
        "    def norm(self, image, *, dtype):\n        image = tf.image.convert_image_dtype(image, dtype)\n"
        "        return tf.image.resize(image, (8, 8))\n"
        "    @staticmethod\n    def s(x, dtype):\n        return tf.cast(x, dtype) * 2\n"
    )
    assert CONVERSION_DTYPE.summarize(ast.parse(code).body, code.encode()) == {
        "scaled": Summary("dtype", 1, None, 5, 9),
        "P.norm": Summary("dtype", -1, None, 9, 17),
    }


def test_an_epsilon_in_a_loss_of_another_module_meets_the_float16_probabilities_of_a_layer(tmp_path):
    """``ObjectnessHead.call`` passes its float16 sigmoid to ``focal_loss`` of detection/losses.py, which adds
    ``1e-8``: reported at the argument, with the constant's line as a related location (JSON and SARIF)."""
    folder = _copy_fixture("loss_library", tmp_path)
    result = _mplint(folder, "--format", "json", "--no-cache", "--select", "MP601")
    assert result.returncode == 1, result.stderr
    [diagnostic] = json.loads(result.stdout)["diagnostics"]
    assert (diagnostic["path"], *_found(result.stdout)[0]) == ("detection/heads.py", "MP601", 17, 38)
    assert diagnostic["message"].startswith(
        "`focal_loss` computes `probs + 1e-8` (detection/losses.py:7) on this compute-dtype value, float16 under a "
        "float16 policy: `1e-8` flushes to 0 in float16"
    )
    assert diagnostic["fix"] is None  # casting the argument would change the dtype the loss returns
    assert diagnostic["related"] == [
        {"path": "detection/losses.py", "cell": None, "line": 7, "message": "`probs + 1e-8`"}
    ]
    sarif = json.loads(_mplint(folder, "--format", "sarif", "--no-cache", "--select", "MP601").stdout)
    [result] = sarif["runs"][0]["results"]
    assert [
        (r["physicalLocation"]["artifactLocation"]["uri"], r["physicalLocation"]["region"]["startLine"])
        for r in result["relatedLocations"]
    ] == [("train.py", 8), ("detection/losses.py", 7)]


# A loss of another module that meets 1e-8, and the start of a layer that calls it.
_FOCAL_LOSS = {
    "losses.py": "from keras import ops\n\ndef focal_loss(probs, labels):\n"
    "    return -ops.mean(labels * ops.log(probs + 1e-8))\n"
}
_HEAD = "import keras\nfrom keras import ops\nfrom losses import focal_loss\n\nclass Head(keras.layers.Layer):\n"


@pytest.mark.parametrize(
    "call,expected",
    [
        ("focal_loss(probs, labels)", [("MP601", 9, 34)]),
        ("focal_loss(ops.cast(probs, 'float32'), labels)", []),  # cast first, as the message says
        ("focal_loss(labels, probs)", []),  # the parameter that meets 1e-8 gets the labels
        ("focal_loss(labels=labels, probs=probs)", [("MP601", 9, 55)]),
    ],
)
def test_a_function_of_another_module_meets_a_layers_float16_value(call, expected):
    code = (
        _HEAD + "    def call(self, x, labels):\n"
        "        probs = ops.sigmoid(x)\n"
        "        labels = ops.cast(labels, 'float32')\n"
        f"        self.add_loss({call})\n"
        "        return probs\n"
    )
    found = lint_code(code, path="head.py", files=_FOCAL_LOSS, policy="mixed_float16", select=["MP601"]).diagnostics
    assert [(d.rule_id, d.line, d.column) for d in found] == expected


@pytest.mark.parametrize(
    "imported,called",
    [
        ("from tools.lib.pkg.losses import focal_loss", "focal_loss"),
        ("from tools.lib.pkg import losses", "losses.focal_loss"),
        ("import tools.lib.pkg.losses as losses", "losses.focal_loss"),
    ],
)
def test_a_function_is_found_by_the_path_its_import_writes_through_folders_without_init(imported, called):
    """``tools/`` and ``tools/lib/`` have no ``__init__.py``: the module is ``pkg.losses`` by its package folders,
    ``tools.lib.pkg.losses`` as the import writes it (a namespace package), and both name the same function."""
    files = {
        "tools/lib/pkg/__init__.py": "",
        "tools/lib/pkg/losses.py": _FOCAL_LOSS["losses.py"],
        # the same layout under another name elsewhere does not make the path ambiguous
        "other/pkg/__init__.py": "",
        "other/pkg/losses.py": "def focal_loss(probs, labels):\n    return probs\n",
    }
    code = _HEAD.replace("from losses import focal_loss", imported) + (
        "    def call(self, x, labels):\n"
        "        probs = ops.sigmoid(x)\n"
        f"        self.add_loss({called}(probs, labels))\n"
        "        return probs\n"
    )
    found = lint_code(code, path="head.py", files=files, policy="mixed_float16", select=["MP601"]).diagnostics
    assert [(d.rule_id, d.line, d.column) for d in found] == [("MP601", 8, 24 + len(called))]


@pytest.mark.parametrize(
    "core",
    [
        "from tools.lib.flags import _impl\n\nfocal_loss = _impl.focal_loss\n",
        "from . import _impl\n\nfocal_loss = _impl.focal_loss\n",
        "from tools.lib.flags._impl import focal_loss as _focal\n\nfocal_loss = _focal\n",
    ],
)
def test_a_function_re_exported_by_assignment_keeps_its_summary(core):
    """``core.py`` passes its helper's function on by an assignment (mlcommons' ``get_loss_scale =
    _performance.get_loss_scale``), in a package under folders without ``__init__.py``."""
    files = {
        "tools/lib/flags/__init__.py": "",
        "tools/lib/flags/_impl.py": _FOCAL_LOSS["losses.py"],
        "tools/lib/flags/core.py": core,
    }
    code = _HEAD.replace("from losses import focal_loss", "from tools.lib.flags import core") + (
        "    def call(self, x, labels):\n"
        "        probs = ops.sigmoid(x)\n"
        "        self.add_loss(core.focal_loss(probs, labels))\n"
        "        return probs\n"
    )
    found = lint_code(code, path="head.py", files=files, policy="mixed_float16", select=["MP601"]).diagnostics
    assert [(d.rule_id, d.line, d.column) for d in found] == [("MP601", 8, 39)]


def test_an_alias_rebound_later_is_no_re_export():
    files = {
        "lib/__init__.py": "",
        "lib/_impl.py": _FOCAL_LOSS["losses.py"],
        "lib/core.py": "from lib import _impl\n\nfocal_loss = _impl.focal_loss\nfocal_loss = None\n",
    }
    code = _HEAD.replace("from losses import focal_loss", "from lib import core") + (
        "    def call(self, x, labels):\n"
        "        self.add_loss(core.focal_loss(ops.sigmoid(x), labels))\n"
        "        return x\n"
    )
    assert lint_code(code, path="head.py", files=files, policy="mixed_float16", select=["MP601"]).diagnostics == []


def test_a_path_two_modules_are_imported_by_names_neither():
    """Two sub-projects with the same layout, each importing its own ``lib.losses`` (a folder without
    ``__init__.py``): the path names two functions, one of them harmless, so it gives no summary."""
    files = {
        "a/lib/losses.py": _FOCAL_LOSS["losses.py"],
        "a/train.py": "from lib.losses import focal_loss\n",
        "b/lib/losses.py": "def focal_loss(probs, labels):\n    return probs\n",
        "b/train.py": "from lib.losses import focal_loss\n",
    }
    code = _HEAD.replace("from losses import focal_loss", "from lib.losses import focal_loss") + (
        "    def call(self, x, labels):\n        self.add_loss(focal_loss(ops.sigmoid(x), labels))\n        return x\n"
    )
    found = lint_code(code, path="c/head.py", files=files, policy="mixed_float16", select=["MP601"]).diagnostics
    assert found == []


def test_a_library_layer_passing_its_compute_dtype_value_is_reported_as_library_code():
    code = (
        _HEAD + "    def call(self, x, labels):\n"
        "        self.add_loss(focal_loss(ops.sigmoid(x), labels))\n"
        "        return x\n"
    )
    [found] = lint_code(code, path="head.py", files=_FOCAL_LOSS, select=["MP601"]).diagnostics
    assert (found.line, found.column) == (7, 34)
    assert (
        "on this compute-dtype value, library code: float16 under a mixed_float16 policy its users set: "
        "`1e-8` flushes to 0" in found.message
    )


def test_a_plain_function_passing_values_of_unknown_dtype_is_not_reported():
    code = "from losses import focal_loss\n\ndef evaluate(probs, labels):\n    return focal_loss(probs, labels)\n"
    assert (
        lint_code(code, path="evaluate.py", files=_FOCAL_LOSS, policy="mixed_float16", select=["MP601"]).diagnostics
        == []
    )


def test_the_loss_of_another_module_is_inf_on_float16_probabilities(tmp_path):
    """Executed on CPU: a confident wrong float16 prediction (sigmoid(-30) is 0 in float16) makes
    ``focal_loss`` inf, since 1e-8 is 0 there too; cast to float32 first, as the message says, it is finite."""
    pytest.importorskip("tensorflow")
    folder = _copy_fixture("loss_library", tmp_path)
    probe = (
        "import numpy as np\nfrom keras import ops\nfrom detection import focal_loss\n"
        "probs = ops.sigmoid(ops.convert_to_tensor([[-30.0]], 'float16'))\n"
        "labels = ops.ones_like(probs)\n"
        "print(np.isfinite(float(focal_loss(probs, labels))),"
        " np.isfinite(float(focal_loss(ops.cast(probs, 'float32'), ops.cast(labels, 'float32')))))\n"
    )
    assert _run_probe(folder, probe).split() == ["False", "True"]


def test_range_constant_summaries():
    import ast

    from mplint.checks.mp601_float16_overflow_constant import RANGE_CONSTANT
    from mplint.engine.summaries import Summary

    code = (
        "import tensorflow as tf\n"
        "def focal(probs, labels, gamma=2.0):\n    return -tf.reduce_mean(labels * tf.math.log(probs + 1e-8))\n"
        "def masked(scores, mask):\n    return scores * -1e9\n"
        "def rebound(p):\n    p = tf.cast(p, tf.float32)\n    return p + 1e-8\n"
        "def aware(p):\n    if p.dtype == tf.float16:\n        return p + 1e-4\n    return p + 1e-8\n"
        "def tolerance(a, b):\n    return abs(a - b) <= 1e-9 + b\n"
        "def keyword_only(*, p):\n    return p + 1e-10\n"
        "def fits(p):\n    return p + 1e-4\n"
    )
    assert RANGE_CONSTANT.summarize(ast.parse(code).body, code.encode()) == {
        "focal": Summary("probs", 0, "+ 1e-8", 3, 49),
        "masked": Summary("scores", 0, "* -1e9", 5, 12),
        "keyword_only": Summary("p", -1, "+ 1e-10", 16, 12),
    }


def test_loss_reduction_summaries():
    import ast

    from mplint.checks.mp103_loss_in_float16 import LOSS_REDUCTION
    from mplint.engine.summaries import Summary

    code = (
        "import tensorflow as tf\nfrom keras import ops\n"
        "def reconstruction_loss(x, x_hat):\n    return tf.reduce_sum(tf.square(x - x_hat))\n"
        "def kl_loss(mean, log_var):\n    return -0.5 * ops.mean(1 + log_var - ops.square(mean) - ops.exp(log_var))\n"
        "def cast_loss(x, y):\n    return tf.reduce_mean(tf.square(tf.cast(x, tf.float32) - y))\n"
        "def rebound_loss(x, y):\n    x = tf.cast(x, tf.float32)\n    return tf.reduce_mean((x - y) ** 2)\n"
        "def distance(x, y):\n    return tf.reduce_mean(tf.square(x - y))\n"
        "def abs_loss(x, y):\n    return tf.reduce_mean(tf.abs(x - y))\n"
    )
    assert LOSS_REDUCTION.summarize(ast.parse(code).body, code.encode()) == {
        "reconstruction_loss": Summary("x@0,x_hat@1", -1, "tf.reduce_sum(tf.square(x - x_hat))", 4, 12),
        "kl_loss": Summary(
            "mean@0,log_var@1", -1, "ops.mean(1 + log_var - ops.square(mean) - ops.exp(log_var))", 6, 19
        ),
    }


# A layer that adds a squared-error loss divided by a normalizer in the compute dtype: under mixed_float16 the
# sum overflows (errors of 300 square to 90000 > 65504); a fix that casts only the error makes a float32 sum
# divided by a float16 tensor, which TensorFlow refuses ("x and y must have the same dtype").
_NORMALIZED_LOSSES = {
    "tf_keras": (
        "import tensorflow as tf\nimport tf_keras as keras\n\n\n"
        "class SquaredError(keras.layers.Layer):\n"
        "    def call(self, predictions, targets):\n"
        "        normalizer = tf.cast(tf.shape(predictions)[0], predictions.dtype)\n"
        "        error = predictions - targets\n"
        "        loss = tf.reduce_sum(error ** 2) / normalizer\n"
        "        self.add_loss(loss)\n"
        "        return predictions\n",
        "tf.reduce_sum(error ** 2) / normalizer",
        "tf.reduce_sum(tf.cast(error, tf.float32) ** 2) / tf.cast(normalizer, tf.float32)",
        "tf.reduce_sum(tf.cast(error, tf.float32) ** 2) / normalizer",
    ),
    "keras": (
        "import keras\nfrom keras import ops\n\n\n"
        "class SquaredError(keras.layers.Layer):\n"
        "    def call(self, predictions, targets):\n"
        "        normalizer = ops.cast(ops.shape(predictions)[0], predictions.dtype)\n"
        "        error = predictions - targets\n"
        "        loss = ops.sum(error ** 2) / normalizer\n"
        "        self.add_loss(loss)\n"
        "        return predictions\n",
        "ops.sum(error ** 2) / normalizer",
        'ops.sum(ops.cast(error, "float32") ** 2) / ops.cast(normalizer, "float32")',
        'ops.sum(ops.cast(error, "float32") ** 2) / normalizer',
    ),
}


def _normalized_losses(folder: Path, keras_module: str, sources: dict[str, str]) -> dict[tuple[str, str], str]:
    """Each source's loss, as "dtype value" or "TypeError", under mixed_float16 and float32 (one process)."""
    for name, source in sources.items():
        (folder / f"{name}.py").write_text(source, encoding="utf-8")
    probe = (
        f"import importlib, numpy as np, {keras_module} as keras\n"
        "predictions = np.array([[300.0, 1.0], [2.0, 3.5]], 'float32')\n"
        f"for name in {list(sources)!r}:\n"
        "    for policy in ('mixed_float16', 'float32'):\n"
        "        keras.mixed_precision.set_global_policy(policy)\n"
        "        layer = importlib.import_module(name).SquaredError()\n"
        "        try:\n"
        "            layer(predictions, np.zeros((2, 2), 'float32'))\n"
        "            loss = layer.losses[0]\n"
        "            print(name, policy, getattr(loss.dtype, 'name', loss.dtype), repr(float(np.asarray(loss))))\n"
        "        except TypeError as error:\n"
        "            print(name, policy, 'TypeError', 'same dtype' in str(error))\n"
    )
    lines = _run_probe(folder, probe).splitlines()
    return {(name, policy): rest for name, policy, rest in (line.split(" ", 2) for line in lines)}


@pytest.mark.parametrize("keras_module", list(_NORMALIZED_LOSSES))
def test_mp103_fix_casts_the_operands_the_float32_loss_meets(tmp_path, keras_module):
    """Executed on CPU with Keras 2 (tf_keras) and Keras 3: the fixed loss is finite float32 under
    mixed_float16 and bit-identical under float32; casting the error alone raises TypeError."""
    pytest.importorskip("tensorflow")
    pytest.importorskip(keras_module)
    source, before, after, error_only = _NORMALIZED_LOSSES[keras_module]
    found = lint_code(source, select=["MP103"], policy="mixed_float16").diagnostics
    assert [(d.rule_id, d.line, d.column) for d in found] == [("MP103", 9, 16)]
    fixed = lint_code(source, select=["MP103"], policy="mixed_float16", fix=True).fixed_code
    assert fixed == source.replace(before, after)

    losses = _normalized_losses(
        tmp_path, keras_module, {"original": source, "error_only": source.replace(before, error_only), "fixed": fixed}
    )
    assert losses[("original", "mixed_float16")] == "float16 inf"
    assert losses[("error_only", "mixed_float16")] == "TypeError True"
    assert losses[("fixed", "mixed_float16")] == f"float32 {(300.0**2 + 1 + 4 + 3.5**2) / 2!r}"
    assert losses[("fixed", "float32")] == losses[("original", "float32")] == losses[("fixed", "mixed_float16")]
