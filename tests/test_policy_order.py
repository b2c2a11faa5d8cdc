"""A policy set by a script's or notebook's top-level code governs only what runs after it (MP101, MP701)."""

from __future__ import annotations

import json

from mplint.testing import lint_code

BUILDER = """\
from tensorflow import keras
from tensorflow.keras import layers


def build_model(hp):
    model = keras.Sequential([layers.Dense(64, activation="relu"), layers.Dense(10, activation="softmax")])
    model.compile(optimizer="adam", loss="sparse_categorical_crossentropy")
    return model


"""
SETTER = 'keras.mixed_precision.set_global_policy("mixed_float16")\n'
SOFTMAX = (
    "softmax output layer computes in reduced precision (mixed_float16 set at {where}): float16 probabilities round "
    'to 0 or 1, and the loss saturates or becomes inf/NaN; give this layer dtype="float32"'
)
STALE = (
    "the policy is set after `build_model(...)` at line {line} created layers: layers that already exist keep their "
    "float32 policy, so that model silently trains without mixed precision; set the policy before building or "
    "loading any model"
)


def _found(outcome) -> list[tuple]:
    return [(d.rule_id, d.cell, d.line, d.column, d.message) for d in outcome.diagnostics]


def _notebook(*cells: str) -> str:
    return json.dumps(
        {
            "cells": [{"cell_type": "code", "metadata": {}, "outputs": [], "source": c} for c in cells],
            "metadata": {},
            "nbformat": 4,
            "nbformat_minor": 5,
        }
    )


def test_builder_called_before_a_closing_setter_is_not_governed():
    code = BUILDER + "model = build_model(None)\nmodel.fit(x, y)\n" + SETTER
    assert _found(lint_code(code, path="train.py", select=["MP101", "MP701"])) == []


def test_builder_called_after_the_setter_is_governed():
    code = BUILDER + SETTER + "model = build_model(None)\nmodel.fit(x, y)\n"
    assert _found(lint_code(code, path="train.py", select=["MP101", "MP701"])) == [
        ("MP101", None, 6, 68, SOFTMAX.format(where="train.py:11"))
    ]


def test_builder_handed_to_an_object_used_after_the_setter_is_governed():
    code = BUILDER + "tuner = Tuner(build_model)\n" + SETTER + "tuner.search(x, y)\n"
    assert _found(lint_code(code, path="train.py", select=["MP101"])) == [
        ("MP101", None, 6, 68, SOFTMAX.format(where="train.py:12"))
    ]


def test_builder_handed_to_an_object_used_only_before_the_setter_is_not_governed():
    code = BUILDER + "tuner = Tuner(build_model)\ntuner.search(x, y)\n" + SETTER
    assert _found(lint_code(code, path="train.py", select=["MP101"])) == []


def test_builder_stored_where_no_name_tells_its_calls_is_governed():
    code = BUILDER + "registry.append(build_model)\n" + SETTER
    assert _found(lint_code(code, path="train.py", select=["MP101"])) == [
        ("MP101", None, 6, 68, SOFTMAX.format(where="train.py:12"))
    ]


def test_setter_in_a_function_called_from_unknown_places_governs_everything():
    code = BUILDER + "def setup():\n    " + SETTER + "\n\nmodel = build_model(None)\n"
    assert _found(lint_code(code, path="train.py", select=["MP101"])) == [
        ("MP101", None, 6, 68, SOFTMAX.format(where="train.py:12"))
    ]


def test_setter_in_a_function_called_after_the_builder_is_not_governing():
    code = BUILDER + "def setup():\n    " + SETTER + "\n\nmodel = build_model(None)\nsetup()\n"
    assert _found(lint_code(code, path="train.py", select=["MP101"])) == []


def test_notebook_demo_setter_in_the_last_cell():
    cells = (BUILDER, "model = build_model(None)\nmodel.fit(x, y)\n", "from tensorflow import keras\n" + SETTER)
    outcome = lint_code(_notebook(*cells), path="guide.ipynb", select=["MP101", "MP701"])
    assert _found(outcome) == []


def test_notebook_setter_in_an_early_cell_governs_later_cells():
    cells = (BUILDER, SETTER, "model = build_model(None)\nmodel.fit(x, y)\n")
    outcome = lint_code(_notebook(*cells), path="guide.ipynb", select=["MP101", "MP701"])
    assert _found(outcome) == [("MP101", 1, 6, 68, SOFTMAX.format(where="guide.ipynb:cell 2:1"))]


def test_mp701_fires_when_the_early_model_is_used_after_the_setter():
    code = BUILDER + "model = build_model(None)\n" + SETTER + "model.fit(x, y)\n"
    assert _found(lint_code(code, path="train.py", select=["MP701"])) == [("MP701", None, 12, 1, STALE.format(line=11))]


def test_mp701_silent_when_the_early_model_is_not_used_after_the_setter():
    code = BUILDER + "model = build_model(None)\nmodel.fit(x, y)\n" + SETTER
    assert _found(lint_code(code, path="train.py", select=["MP701"])) == []


def test_mp701_notebook_use_in_a_later_cell():
    cells = (BUILDER, "model = build_model(None)\n", "from tensorflow import keras\n" + SETTER, "model.fit(x, y)\n")
    outcome = lint_code(_notebook(*cells), path="guide.ipynb", select=["MP701"])
    assert _found(outcome) == [("MP701", 3, 2, 1, STALE.format(line=13))]  # the line of the joined cells


def test_helper_module_called_before_the_setter_is_not_governed():
    script = (
        "from tensorflow import keras\nfrom models import build_model\n\nmodel = build_model(None)\nmodel.fit(x, y)\n"
    )
    outcome = lint_code(script + SETTER, path="train.py", files={"models.py": BUILDER}, select=["MP101", "MP701"])
    assert _found(outcome) == []
    report = lint_code(BUILDER, path="models.py", files={"train.py": script + SETTER}, select=["MP101"])
    assert _found(report) == []  # the helper's own findings: its builder runs before the setter


def test_helper_module_called_after_the_setter_is_governed():
    script = "from tensorflow import keras\nfrom models import build_model\n\n" + SETTER + "model = build_model(None)\n"
    outcome = lint_code(BUILDER, path="models.py", files={"train.py": script}, select=["MP101"])
    assert _found(outcome) == [("MP101", None, 6, 68, SOFTMAX.format(where="train.py:4, which imports this module"))]


def test_helper_module_imported_in_a_function_keeps_every_site():
    script = (
        "from tensorflow import keras\n\n\ndef run():\n    from models import build_model\n\n"
        "    return build_model(None)\n\n\nrun()\n" + SETTER
    )
    outcome = lint_code(BUILDER, path="models.py", files={"train.py": script}, select=["MP101"])
    assert _found(outcome) == [("MP101", None, 6, 68, SOFTMAX.format(where="train.py:11, which imports this module"))]


def _run_lines(code: bytes) -> tuple[dict, dict]:
    from mplint.engine.python_tree import parse_python
    from mplint.project.run_order import run_lines

    return run_lines(parse_python(code))


def test_run_lines_follow_calls_and_the_objects_a_function_is_handed_to():
    code = b"""\
import helpers


def build():
    return helpers.layer()


def train():
    return build()


tuner = Tuner(build)
train()
tuner.search()
unused = 1
"""
    last, first = _run_lines(code)
    assert last == {"helpers": 14, "build": 14, "train": 13}
    assert first == {"helpers": 12, "build": 12, "train": 13}


def test_run_lines_leave_out_what_may_run_anywhere():
    code = b"""\
def build():
    return 1


def in_generator():
    yield build()


def in_class():
    return 2


def stored():
    return 3


class Holder:
    def make(self):
        return in_class()


callbacks.append(stored)
"""
    # build: called by a generator; in_class: by a class; stored: kept where no name says when it runs
    assert _run_lines(code) == ({}, {})


def test_another_notebook_naming_the_builder_changes_nothing():
    cells = (BUILDER, "model = build_model(None)\nmodel.fit(x, y)\n", "from tensorflow import keras\n" + SETTER)
    other = _notebook(BUILDER, "build_model(None)\n")
    outcome = lint_code(_notebook(*cells), path="guide.ipynb", files={"other.ipynb": other}, select=["MP101"])
    assert _found(outcome) == []


def test_a_module_that_imports_the_script_may_call_its_builder_at_any_time():
    script = BUILDER + "model = build_model(None)\nmodel.fit(x, y)\n" + SETTER
    importer = "from train import build_model\n\nbuild_model(None)\n"
    outcome = lint_code(script, path="train.py", files={"tune.py": importer}, select=["MP101"])
    where = "train.py:13 in the program of tune.py, which imports this module"
    assert _found(outcome) == [("MP101", None, 6, 68, SOFTMAX.format(where=where))]


def test_run_lines_follow_calls_through_a_module_attribute():
    last, first = _run_lines(b"import pkg\n\npkg.layers.Dense()\nunused = 1\n")
    assert (last, first) == ({"pkg": 3}, {"pkg": 3})
