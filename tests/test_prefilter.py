"""The rules' pre-filter (Rule.candidate on CPython's tree) never hides a finding.

Each corpus is checked twice, with the pre-filter on and off; the diagnostics must be identical.
The fuzz tests (tests/test_fuzz.py) check the same on every generated input.
"""

from __future__ import annotations

import ast
import importlib.util
from pathlib import Path

import pytest

from mplint.catalog import load_catalog
from mplint.checks import all_rules
from mplint.engine.check import check_source
from mplint.engine.check_options import CheckOptions
from mplint.engine.code_summary import summarize
from mplint.knowledge.policies import UNKNOWN_POLICY
from mplint.project.extract import PolicySite, extract_file_facts
from mplint.project.facts import ProjectFacts
from mplint.project.generation import Generation
from mplint.runner import RunOptions, run
from mplint.testing import copy_tree

REPO = Path(__file__).resolve().parent.parent


def _keys(diagnostics):
    return sorted((d.path, d.rule_id, d.line, d.column, d.message) for d in diagnostics)


def test_fixtures_find_the_same_with_and_without_the_prefilter(tmp_path):
    copy_tree(REPO / "fixtures", tmp_path / "fixtures")
    every_rule = sorted(load_catalog())
    on = run(RunOptions([tmp_path / "fixtures"], cache=False, jobs=1, select=every_rule))
    off = run(RunOptions([tmp_path / "fixtures"], cache=False, jobs=1, select=every_rule, prefilter=False))
    assert _keys(on.diagnostics) == _keys(off.diagnostics)
    assert len({d.rule_id for d in on.diagnostics}) >= 13  # the fixtures exercise most rules


def _every_rule_active() -> CheckOptions:
    """A project where every rule can fire: a float16 policy nobody can evaluate, TPUs, Keras 3."""
    facts = ProjectFacts(
        policies=(PolicySite(UNKNOWN_POLICY, "train.py", 1, "global"), PolicySite("mixed_float16", "m.py", 1, "layer")),
        generation=Generation(3, "test"),
        tpu_sites=(("tpu.py", 1),),
        keras_namespaces=frozenset({"keras", "tf.keras"}),
    )
    return CheckOptions(tuple(all_rules().values()), facts)


def _keras_sample() -> list[Path]:
    spec = importlib.util.find_spec("keras")
    if spec is None or not spec.submodule_search_locations:
        return []
    src = Path(list(spec.submodule_search_locations)[0]) / "src"
    return sorted(p for p in src.rglob("*.py") if not p.name.endswith("_test.py"))[::12]


@pytest.mark.parametrize("path", _keras_sample(), ids=lambda p: "/".join(p.parts[-2:]))
def test_a_large_library_finds_the_same_with_and_without_the_prefilter(path):
    options = _every_rule_active()
    source = path.read_bytes()
    on = check_source(str(path), source, options)
    off = check_source(str(path), source, CheckOptions(options.rules, options.facts, prefilter=False))
    assert _keys(on.diagnostics) == _keys(off.diagnostics)


def test_every_flagged_example_is_a_candidate_for_its_rule():
    rules = all_rules()
    for meta in load_catalog().values():
        rule = rules.get(meta.id)
        if rule is None:
            continue  # engine codes
        for example in meta.flagged:
            source = example.code.encode()
            summarized: dict[str, set[str]] = {}  # the function summaries of the example's project
            files = {"example.py": source, **{p: t.encode() for p, t in example.settings.get("files", {}).items()}}
            for path, text in files.items():
                for name, kinds in extract_file_facts(text, path, path[:-3].replace("/", ".")).summaries.items():
                    for kind in kinds:
                        summarized.setdefault(kind, set()).add(name.rsplit(".", 1)[-1])
            code = summarize(
                ast.parse(example.code), source, summarized={k: frozenset(v) for k, v in summarized.items()}
            )
            assert rule.candidate(code), f"{meta.id}: a flagged example is not a candidate:\n{example.code}"


def test_the_prefilter_stops_files_that_only_talk_about_an_api():
    """A docstring and a comment name softmax, a model and float16; the code does neither."""
    source = b'"""Builds a Sequential Model with a softmax output in float16."""\n# keras.Model, softmax\nx = 1\n'
    code = summarize(ast.parse(source), source)
    rules = all_rules()
    assert not rules["MP101"].candidate(code)
    assert not rules["MP102"].candidate(code)
    assert not rules["MP602"].candidate(code)
    aliased = b"from keras.layers import Dense as D, Softmax as S\nfrom keras import Sequential as Seq\nm = Seq([D(3), S()])\n"
    assert rules["MP101"].candidate(summarize(ast.parse(aliased), aliased))


def test_valid_python_only_libcst_rejects_is_not_reported_when_no_rule_could_match():
    """Found by the fuzz tests: CPython accepts a backslash-CRLF at the end of a file, libcst does not.
    Such a file reaches libcst (and gets an MP000) only when some rule could match it."""
    source = b"# softmax Sequential\nx = 1\n\\\r\n"
    compile(source, "example.py", "exec")
    assert check_source("example.py", source, _every_rule_active()).diagnostics == []
    unfiltered = _every_rule_active()
    unfiltered = CheckOptions(unfiltered.rules, unfiltered.facts, prefilter=False)
    assert [d.rule_id for d in check_source("example.py", source, unfiltered).diagnostics] == ["MP000"]


# Findings that reach the rule only through what the pre-filter must follow: aliases, constants
# bound elsewhere in the file, parameter defaults, arithmetic, loss modules imported under other names.
_FOLLOWED = {
    "MP301": [
        "from keras.layers import Dense as D\nWIDTH = 100\n\ndef block(x):\n    return D(WIDTH)(x)\n",
        "from keras import layers\n\ndef block(x, filters=36):\n    return layers.Conv2D(filters, 3)(x)\n",
        "from keras import layers\nBASE = 16\nh = layers.Dense(BASE * 6 + 4)\n",
        "from keras import layers\nh = layers.Dense(units=2 ** 7 - 28)\n",
        "from keras import layers\nHEADS = 3\natt = layers.MultiHeadAttention(num_heads=HEADS, key_dim=20)\n",
        "import keras\nclass Block:\n    size: int = 100\n    proj = keras.layers.Embedding(output_dim=size, input_dim=64)\n",
    ],
    "MP302": [
        "BATCH = 30\n\ndef train(ds):\n    return ds.batch(BATCH)\n",
        "def make(ds, *, batch_size=30):\n    return ds.batch(batch_size)\n",
        "def fit(model, x, y):\n    model.fit(x, y, batch_size=100 // 3)\n",
        "n = -30\n\ndef pad(ds):\n    return ds.padded_batch(-n)\n",
        "def outer(size=12):\n    def inner(ds):\n        return ds.batch(size)\n    return inner\n",
    ],
    "MP401": [
        "from numpy import asarray as arr, float16 as f16\n\ndef load(data):\n    x = arr(data, dtype=f16)\n    return x / 255.0\n",
        "import tensorflow as tf\n\ndef prep(image):\n    image = tf.image.convert_image_dtype(image, 'float16')\n"
        "    return image * 2.0\n",
    ],
    "MP601": [
        "import keras\nfrom keras import ops as K\n\nclass Masked(keras.layers.Layer):\n    def call(self, scores, mask):\n"
        "        return K.where(mask, scores, -1e9)\n",
        # a dtype= argument of the scores' dtype, and a helper of the file that casts to it
        "import tensorflow as tf\n\ndef mask_logits(logits, n):\n    pad = tf.sequence_mask(n, 16, dtype=logits.dtype)\n"
        "    return logits + (1.0 - pad) * -1e9\n",
        "import tensorflow as tf\n\ndef _like(mask, x):\n    return tf.cast(mask, x.dtype)\n\n"
        "def masked(scores, mask):\n    m = _like(mask, scores)\n    return scores + (1.0 - m) * -1e9\n",
    ],
    "MP103": [
        "import keras\nfrom tensorflow.keras import losses as L\n\ndef distill(t, s, h):\n"
        "    student = keras.ops.cast(s, h.dtype)\n    return L.mean_squared_error(t, student)\n",
        "import keras\nfrom keras.losses import mean_squared_error as mse_fn\n\ndef distill(t, s, h):\n"
        "    student = keras.ops.cast(s, h.dtype)\n    return mse_fn(t, student)\n",
        "import tensorflow as tf\n\nclass Penalty(tf.keras.layers.Layer):\n    def call(self, x):\n"
        "        penalty = tf.reduce_sum(x)\n        self.add_loss(penalty)\n        return x\n",
        "import tensorflow as tf\n\nclass Penalty(tf.keras.layers.Layer):\n    def call(self, x):\n"
        "        self.stats['l2_LOSS'] = tf.reduce_mean(x ** 2)\n        return x\n",
    ],
}


@pytest.mark.parametrize("rule_id, source", [(r, s) for r, sources in _FOLLOWED.items() for s in sources])
def test_the_prefilter_follows_what_the_rule_follows(rule_id, source):
    options = _every_rule_active()
    on = check_source("example.py", source.encode(), options)
    off = check_source("example.py", source.encode(), CheckOptions(options.rules, options.facts, prefilter=False))
    assert rule_id in {d.rule_id for d in on.diagnostics}
    assert _keys(on.diagnostics) == _keys(off.diagnostics)


def test_the_prefilter_resolves_calls_through_the_projects_re_exports():
    """``from mypkg import Net`` where mypkg re-exports ``keras.Sequential``: the rule resolves it, so
    the pre-filter must too; ``ov.Model`` of openvino is no Keras model."""
    facts = _every_rule_active().facts
    facts = ProjectFacts(
        facts.policies, facts.generation, facts.tpu_sites, {"mypkg.Net": "keras.Sequential"}, facts.keras_namespaces
    )
    options = CheckOptions(_every_rule_active().rules, facts)
    source = b"from mypkg import Net\nfrom keras import layers\n\nmodel = Net([layers.Dense(64), layers.Dense(10, activation='softmax')])\n"
    on = check_source("train.py", source, options)
    off = check_source("train.py", source, CheckOptions(options.rules, facts, prefilter=False))
    assert "MP101" in {d.rule_id for d in on.diagnostics}
    assert _keys(on.diagnostics) == _keys(off.diagnostics)
    code = summarize(ast.parse(source), source, facts.reexported_names, "train", False, facts.reexports)
    assert all_rules()["MP101"].candidate(code)
    openvino = b"import openvino as ov\nmodel = ov.Model(results=[softmax], parameters=[])\n"
    assert not all_rules()["MP102"].candidate(summarize(ast.parse(openvino), openvino))


@pytest.mark.parametrize(
    "rule_id, source",
    [
        ("MP401", "import torch\nx = torch.ones(3).half() * 2\ny = cast(x, 'float16') + 1\n"),
        ("MP601", "seed = int(s[0]) & 0x7FFFFFFF\nx = tf.cast(x, tf.float16)\n"),
        ("MP601", "import tensorflow as tf\nSCALE = 1e9\n\ndef f(x):\n    return x * 1e-9\n"),
        (
            "MP602",
            "import keras\nlayer = keras.layers.Dense(8, dtype='mixed_float16')\nname = 'float16'\nmodel.fit(x)\n",
        ),
        ("MP302", "def windows(ds, size):\n    return ds.batch(size)\n"),
        (
            "MP301",
            "from keras import layers\nWIDTH = 64\nh = [layers.Dense(WIDTH * 3), layers.Dense(WIDTH + 32), layers.Conv2D(width, 3)]\n",
        ),
        (
            "MP302",
            "BATCH = 32\n\ndef fit(model, ds, args):\n    model.fit(ds.batch(BATCH * 4), batch_size=args.batch_size)\n",
        ),
        ("MP103", "from keras import losses\nloss_fn = losses.MeanSquaredError()\nlosses = []\n"),
        ("MP103", "from keras import ops\n\ndef pool(x):\n    scores = ops.sum(x ** 2, axis=-1)\n    return scores\n"),
    ],
)
def test_the_prefilter_stops_files_whose_values_cannot_be_reported(rule_id, source):
    assert not all_rules()[rule_id].candidate(summarize(ast.parse(source), source.encode()))


def test_the_prefilter_reads_targets_of_files_in_other_encodings():
    """CPython's column offsets count UTF-8 bytes; a latin-1 file's bytes differ before the target."""
    source = (
        "# -*- coding: latin-1 -*-\nimport tensorflow as tf\n\nclass Penalty(tf.keras.layers.Layer):\n"
        "    def call(self, x):\n        note = '"
        + "é" * 40
        + "'; self.stats['l2_LOSS'] = tf.reduce_mean(x ** 2)\n        return x\n"
    ).encode("latin-1")
    options = _every_rule_active()
    on = check_source("example.py", source, options)
    off = check_source("example.py", source, CheckOptions(options.rules, options.facts, prefilter=False))
    assert [(d.rule_id, d.line) for d in on.diagnostics if d.rule_id == "MP103"] == [("MP103", 6)]
    assert _keys(on.diagnostics) == _keys(off.diagnostics)


def test_a_keras_layer_re_exported_under_another_name_is_checked(tmp_path, monkeypatch):
    """``from keras.layers import Dense as Linear`` in a project module: files that build ``Linear(...)`` never
    mention Dense, yet MP301 resolves the name, so the byte triggers must admit them (and do, on and off)."""
    (tmp_path / ".mplint.yaml").write_text("{}\n")
    (tmp_path / "nn").mkdir()
    (tmp_path / "nn" / "__init__.py").write_text("from keras.layers import Dense as Linear\n")
    (tmp_path / "train.py").write_text(
        "import keras\nfrom nn import Linear\n\nkeras.mixed_precision.set_global_policy('mixed_float16')\n"
        "model = keras.Sequential([Linear(100), Linear(10, dtype='float32')])\nmodel.fit()\n"
    )
    monkeypatch.chdir(tmp_path)
    on = run(RunOptions([tmp_path], cache=False, jobs=1, select=["MP301"]))
    off = run(RunOptions([tmp_path], cache=False, jobs=1, select=["MP301"], prefilter=False))
    assert [(d.path, d.line, d.column) for d in on.diagnostics] == [("train.py", 5, 34)]
    assert _keys(on.diagnostics) == _keys(off.diagnostics)


def test_the_torch_rules_admit_only_files_that_name_torch_or_apex():
    """``amp`` and ``half`` are in many files ("example", "behalf"); a torch rule's finding needs an import of torch or
    apex, which a file names in its text, or by being a module of the apex package (``from . import amp`` there)."""
    from mplint.engine.check import admits

    rules = all_rules()
    mpt502 = rules["MPT502"]
    sample = b"def sample(example):\n    return example.amp\n"
    assert not admits(mpt502, sample)
    assert admits(mpt502, b"import torch\n" + sample)
    assert admits(mpt502, sample, module_name="apex.amp.handle")
    assert not admits(mpt502, sample, module_name="myapex.amp")
    assert not admits(rules["MPT103"], b"x = behalf.half()\n")
    relative = b"from . import amp\n\nwith amp.autocast():\n    loss = model(x)\n"
    code = summarize(ast.parse(relative), relative, module_name="apex.trainer")
    assert code.imports_torch  # the candidate holds: the byte filter must let it through
    assert admits(mpt502, relative, module_name="apex.trainer")
