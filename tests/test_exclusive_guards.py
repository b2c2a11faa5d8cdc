"""Statements guarded by different constant values of one setting never run together (``exclusive``); statements
whose run-time tests are shared, or met by one value of one setting, surely run together (``together``)."""

from __future__ import annotations

import libcst as cst
import pytest
from libcst.metadata import MetadataWrapper

from mplint.analysis.exclusive_guards import exclusive, together
from mplint.engine.context import FileContext
from mplint.project.facts import ProjectFacts


def _marked(code: str) -> tuple[FileContext, cst.Call, cst.Call]:
    """The context of ``code`` and its calls of ``first()`` and ``second()``."""
    wrapper = MetadataWrapper(cst.parse_module(code), unsafe_skip_copy=True)
    context = FileContext("m.py", wrapper, ProjectFacts(), "m", False, code.encode())
    calls = {c.func.value: c for c in context.nodes(cst.Call) if isinstance(c.func, cst.Name)}
    return context, calls["first"], calls["second"]


EXCLUSIVE = {
    "two values of a flag": """
if FLAGS.mode == "keras" and FLAGS.dtype == "fp16":
    first()
if FLAGS.mode == "graph_rewrite":
    second()
""",
    "if and else": """
def main(mode):
    if mode == "a":
        first()
    else:
        second()
""",
    "elif arms": """
if kind == "a":
    first()
elif kind == "b":
    second()
""",
    "in and not in": """
if FLAGS.mode in ("a", "b"):
    first()
if FLAGS.mode not in ["a", "b", "c"]:
    second()
""",
    "None against a value, nested": """
def main(scale):
    if scale is None:
        first()
    if True:
        if scale == "dynamic":
            second()
""",
    "bound once before both": """
def main():
    mode = parse()
    if mode == "a":
        first()
    if mode == "b":
        second()
""",
}

NOT_EXCLUSIVE = {
    "a value both allow": """
if FLAGS.mode in ("keras", "both"):
    first()
if FLAGS.mode != "keras":
    second()
""",
    "two settings": """
if FLAGS.mode == "a":
    first()
if FLAGS.other == "b":
    second()
""",
    "rebound between": """
def main():
    mode = "a"
    if mode == "a":
        first()
    mode = "b"
    if mode == "b":
        second()
""",
    "a loop variable": """
for mode in ("a", "b"):
    if mode == "a":
        first()
    else:
        second()
""",
    "bound in a loop": """
while True:
    mode = next_mode()
    if mode == "a":
        first()
    if mode == "b":
        second()
""",
    "a local of two functions": """
def one(mode):
    if mode == "a":
        first()


def two(mode):
    if mode == "b":
        second()
""",
    "the else of a conjunction": """
if FLAGS.mode == "a" and FLAGS.dtype == "fp16":
    first()
else:
    if FLAGS.mode == "a":
        second()
""",
    "a comparison with a name": """
if FLAGS.mode == A:
    first()
if FLAGS.mode == B:
    second()
""",
    "a global": """
def main():
    global mode
    if mode == "a":
        first()
    if mode == "b":
        second()
""",
}


@pytest.mark.parametrize("code", EXCLUSIVE.values(), ids=EXCLUSIVE.keys())
def test_exclusive(code):
    context, first, second = _marked(code)
    assert exclusive(context, first, second) and exclusive(context, second, first)


@pytest.mark.parametrize("code", NOT_EXCLUSIVE.values(), ids=NOT_EXCLUSIVE.keys())
def test_not_exclusive(code):
    context, first, second = _marked(code)
    assert not exclusive(context, first, second) and not exclusive(context, second, first)


TOGETHER = {
    "neither guarded": """
first()
second()
""",
    "the same arm": """
if FLAGS.fp16:
    first()
    second()
""",
    "the same test twice in one function": """
def main(flags):
    dtype = get_dtype(flags)
    if dtype == tf.float16:
        first()
    if dtype == tf.float16:
        second()
""",
    "one guarded, the other not": """
first()
if tf.test.is_gpu_available():
    second()
""",
    "a value both allow": NOT_EXCLUSIVE["a value both allow"],
    "an attribute test in two functions": """
def build(flags):
    if flags.use_amp:
        first()


def train(flags):
    if flags.use_amp:
        second()
""",
    "the main guard of an entry point": """
def main():
    second()


if __name__ == "__main__":
    first()
    main()
""",
}

NOT_TOGETHER = {
    "two settings one may compute from the other": """
def run(flags_obj):
    dtype = flags_core.get_tf_dtype(flags_obj)
    if dtype == tf.float16:
        first()
    if flags_obj.fp16_implementation == "graph_rewrite":
        second()
""",
    "two values of a flag": EXCLUSIVE["two values of a flag"],
    "if and else": EXCLUSIVE["if and else"],
    "a local test of two functions": """
def one(mode):
    if mode == "a":
        first()


def two(mode):
    if mode == "a":
        second()
""",
    "a setting rebound between": NOT_EXCLUSIVE["rebound between"],
    "a try and its handler": """
try:
    first()
except ImportError:
    second()
""",
}


@pytest.mark.parametrize("code", TOGETHER.values(), ids=TOGETHER.keys())
def test_together(code):
    context, first, second = _marked(code)
    assert together(context, first, second) and together(context, second, first)


@pytest.mark.parametrize("code", NOT_TOGETHER.values(), ids=NOT_TOGETHER.keys())
def test_not_together(code):
    context, first, second = _marked(code)
    assert not together(context, first, second) and not together(context, second, first)
