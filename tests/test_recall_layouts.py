"""Recall of the headline rules where the code reaches the defect through another function, a name or a class:
small projects of the layouts real repositories use, with exact findings, messages, related locations and fixes.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from mplint.testing import lint_code
from mplint.verify.warm import run_python

_HARM = "float16 arithmetic is slow on CPUs, where input pipelines run, and rounds integers above 2048"


def _found(outcome) -> list[tuple]:
    return [
        (d.rule_id, d.line, d.column, d.message, tuple((Path(r.path).name, r.line, r.message) for r in d.related))
        for d in outcome.diagnostics
    ]


# --- MP401: a float16 conversion in a tf.data map function ---------------------------------------------------

TRAIN = """\
import tensorflow as tf

from data import make_dataset

tf.keras.mixed_precision.set_global_policy("mixed_float16")
model = tf.keras.Sequential([tf.keras.Input((8,)), tf.keras.layers.Dense(16), tf.keras.layers.Dense(1, dtype="float32")])
model.compile("adam", "mse")
model.fit(make_dataset(True))
"""

LOADER = """\
import tensorflow as tf


def _parse(x, use_fp16):
    dtype = tf.float16 if use_fp16 else tf.float32
    x = tf.cast(x, dtype)
    return (x - 127.5) / 64.0


def _parse_inline(x, use_fp16):
    x = tf.cast(x, tf.float16 if use_fp16 else tf.float32)
    return x / 255.0


def _unpacked(x, y):
    x, y = tf.cast(x, tf.float16), tf.cast(y, tf.float32)
    return x * 2.0, y


def _final(x, use_fp16):
    x = (tf.cast(x, tf.float32) - 127.5) / 64.0
    dtype = tf.float16 if use_fp16 else tf.float32
    return tf.cast(x, dtype)


def make_dataset(use_fp16):
    ds = tf.data.Dataset.from_tensor_slices(tf.zeros((64, 8), tf.uint8))
    ds = ds.map(lambda x: _parse(x, use_fp16)).map(lambda x: _parse_inline(x, use_fp16))
    ds = ds.map(lambda x: (x, x)).map(_unpacked).map(lambda x, y: _final(x, use_fp16))
    return ds.batch(32)
"""


def test_mp401_follows_the_dtype_and_the_unpacked_name_in_dataset_map_functions():
    outcome = lint_code(LOADER, path="data.py", files={"train.py": TRAIN}, select=["MP401"])
    conditional = "`tf.float16 if use_fp16 else tf.float32`"
    assert _found(outcome) == [
        (
            "MP401",
            6,
            9,
            f"data converted to `dtype` here ({conditional}, set at line 5) is then processed in a dataset map "
            f"function (`(x - 127.5)`): in the mixed-precision runs that is float16, and {_HARM}; convert to float32 "
            "(Keras casts model inputs to the compute dtype)",
            (("data.py", 5, "`dtype` is float16 here"),),
        ),
        (
            "MP401",
            11,
            9,
            f"data converted to {conditional} here is then processed in a dataset map function (`x / 255.0`): in the "
            f"mixed-precision runs that is float16, and {_HARM}; convert to float32 (Keras casts model inputs to the "
            "compute dtype)",
            (),
        ),
        (
            "MP401",
            16,
            12,
            f"data converted to float16 here is then processed (`x * 2.0`): {_HARM}; do the math in float32 (Keras "
            "casts model inputs to the compute dtype)",
            (),
        ),
    ]
    fixed = lint_code(LOADER, path="data.py", files={"train.py": TRAIN}, select=["MP401"], fix=True).fixed_code
    assert fixed == LOADER.replace(
        "tf.cast(x, tf.float16 if use_fp16 else tf.float32)", "tf.cast(x, tf.float32)"
    ).replace("x, y = tf.cast(x, tf.float16)", "x, y = tf.cast(x, tf.float32)")


def test_mp401_conditional_dtype_fix_keeps_float32_runs_and_makes_mixed_runs_float32(tmp_path):
    """Executed: the loader before and after mplint's fix, with use_fp16 off (float32 runs: identical values and
    dtype) and on (float16 before, float32 after)."""
    pytest.importorskip("tensorflow")
    fixed = lint_code(LOADER, path="data.py", files={"train.py": TRAIN}, select=["MP401"], fix=True).fixed_code
    probe = (
        "import sys\nimport numpy as np\nimport tensorflow as tf\nimport data\n"
        "x = tf.constant(np.arange(8, dtype=np.uint8) * 31)\n"
        "for fp16 in (False, True):\n"
        "    out = data._parse_inline(x, fp16)\n"
        "    print(out.dtype.name, ' '.join(repr(float(v)) for v in out.numpy()))\n"
    )
    outputs = []
    for name, text in (("original", LOADER), ("fixed", fixed)):
        folder = tmp_path / name
        folder.mkdir()
        (folder / "data.py").write_text(text, encoding="utf-8")
        env = {**os.environ, "CUDA_VISIBLE_DEVICES": "", "TF_CPP_MIN_LOG_LEVEL": "3"}
        done = run_python(["-c", probe], module="tensorflow", cwd=folder, env=env)
        assert done.returncode == 0, done.stderr[-3000:]
        outputs.append(done.stdout.splitlines())
    (original_f32, original_f16), (fixed_f32, fixed_f16) = outputs
    assert original_f32 == fixed_f32 and original_f32.startswith("float32 0.0 0.12156862765550613 ")
    assert original_f16.startswith("float16 ") and fixed_f16 == fixed_f32
