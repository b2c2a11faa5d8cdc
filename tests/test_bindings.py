"""The per-name binding lookup agrees with libcst's ScopeProvider, on real and on tricky code."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import libcst as cst
import pytest
from libcst.metadata import MetadataWrapper

from mplint.analysis import constants
from mplint.analysis.bindings import binding_nodes
from mplint.catalog import load_catalog
from mplint.engine.context import FileContext
from mplint.project.facts import ProjectFacts

REPO = Path(__file__).resolve().parent.parent

TRICKY = """
import numpy as np
from keras import layers as L

UNITS = 30
SIZE = UNITS * 2
twice = 1
twice = 2

def build(units=12, *rest, scale: int = 3, **extra):
    width = units + 1
    inner = width
    for step in range(3):
        pass
    with open("f") as handle:
        pass
    try:
        pass
    except ValueError as error:
        pass
    import os
    def nested(k=width):
        return k + units + UNITS
    class Local:
        attr = 5
        def method(self):
            return attr
    total = 0
    total += 1
    count = 0
    while count < 10:
        count += 1
    a, b = 1, 2
    squares = [v * v for v in range(UNITS)]
    return L.Dense(units), L.Dense(SIZE), L.Dense(twice), L.Dense(inner), step, handle, error, os, total, a, b, squares

def shadow(UNITS=64):
    return UNITS

def unsure():
    if (n := 5) > 3:
        return n

def lambdas():
    f = lambda UNITS=9: UNITS
    return f, [UNITS for UNITS in range(3)]

class Config:
    DEPTH = 4
    WIDTH = DEPTH * 2

def uses_annotation():
    declared: int
    declared = 7
    return declared

counter = 0

def bump():
    global counter
    counter = 5

def read_counter():
    return counter

def deleted():
    gone = 3
    del gone
"""


def _contexts():
    yield "tricky", TRICKY
    for path in sorted((REPO / "fixtures").rglob("*.py")):
        yield str(path.relative_to(REPO)), path.read_text(encoding="utf-8")
    for meta in load_catalog().values():
        for i, example in enumerate((*meta.flagged, *meta.clean)):
            yield f"{meta.id} example {i}", example.code
    spec = importlib.util.find_spec("keras")
    if spec is not None and spec.submodule_search_locations:
        src = Path(list(spec.submodule_search_locations)[0]) / "src"
        files = sorted(p for p in src.rglob("*.py") if not p.name.endswith("_test.py"))
        for path in files[::15]:  # a sample of a large real code base: every 15th file
            yield str(path.relative_to(src)), path.read_text(encoding="utf-8")


def _context(code: str) -> FileContext:
    wrapper = MetadataWrapper(cst.parse_module(code), unsafe_skip_copy=True)
    return FileContext("m.py", wrapper, ProjectFacts(), "m", False, code.encode())


@pytest.mark.parametrize("label, code", list(_contexts()), ids=lambda v: v if len(v) < 60 else "")
def test_constants_agree_with_scope_provider(label, code, monkeypatch):
    context = _context(code)
    scopes = context.names.scopes
    # Names that are read (constant evaluation only ever looks up reads): the ScopeProvider's accesses.
    names = [
        n
        for n in context.nodes(cst.Name)
        if scopes.get(n) is not None and any(a.node is n for a in scopes[n].accesses[n])
    ]
    fast = [constants.evaluate(context, name) for name in names]
    monkeypatch.setattr(constants, "FAST_BINDINGS", False)
    slow = [constants.evaluate(context, name) for name in names]
    # Equal, or the per-name lookup declines where libcst ignores a later rebinding in a loop.
    differing = [
        (context.position(n).start.line, n.value, f, s)
        for n, f, s in zip(names, fast, slow)
        if f != s and not (f is None and _rebound_later(context, n))
    ]
    assert differing == []


def _rebound_later(context: FileContext, name: cst.Name) -> bool:
    found = binding_nodes(context, name)
    return (
        found is not None
        and len(found) > 1
        or any(
            isinstance(node, cst.AugAssign) and node.target.value == name.value
            for node in context.nodes(cst.AugAssign)
            if isinstance(node.target, cst.Name)
        )
    )


def test_lookup_answers_and_declines():
    context = _context(TRICKY)
    by_line: dict[tuple[int, str], cst.Name] = {}
    for name in context.nodes(cst.Name):
        by_line.setdefault((context.position(name).start.line, name.value), name)
    lines = TRICKY.splitlines()

    def name_at(text: str, value: str) -> cst.Name:
        line = next(i for i, line in enumerate(lines, 1) if text in line)
        return by_line[(line, value)]

    dense_units = name_at("return L.Dense(units)", "units")
    assert [type(n) for n in binding_nodes(context, dense_units)] == [cst.Param]
    assert len(binding_nodes(context, name_at("return L.Dense(units)", "twice"))) == 2  # module: bound twice
    assert binding_nodes(context, name_at("return k + units + UNITS", "UNITS"))[0].value == "UNITS"
    assert binding_nodes(context, name_at("return attr", "attr")) == []  # class attributes are not in scope
    walrus = binding_nodes(context, name_at("return n", "n"))
    assert [type(context.parent(n)) for n in walrus] == [cst.NamedExpr]
    assert binding_nodes(context, name_at("del gone", "gone")) is None  # deleted: unsure
    assert binding_nodes(context, name_at("return counter", "counter")) is None  # declared global elsewhere
    assert binding_nodes(context, name_at("WIDTH = DEPTH * 2", "DEPTH")) is None  # class body: unsure
    assert binding_nodes(context, name_at("return declared", "declared")) is None  # annotation only: unsure
    assert constants.evaluate(context, dense_units) == constants.Constant(
        12, from_default=True
    )  # callers may pass others
    assert constants.evaluate(context, name_at("while count < 10", "count")) is None  # a loop counter
    assert constants.evaluate(context, name_at("return L.Dense(units), L.Dense(SIZE)", "SIZE")).value == 60


_IMPORTS = [
    ("import tensorflow as tf", {"tf": "tensorflow"}),
    ("import tensorflow.keras.layers", {"tensorflow": "tensorflow"}),
    ("import tensorflow.keras.layers as L", {"L": "tensorflow.keras.layers"}),
    ("from keras import layers, ops as K", {"layers": "keras.layers", "K": "keras.ops"}),
    ("from keras.mixed_precision import set_global_policy as sgp", {"sgp": "keras.mixed_precision.set_global_policy"}),
    ("from . import backend", {"backend": "pkg.backend"}),
    ("from .backend import keras", {"keras": "pkg.backend.keras"}),
    ("from ..compat import tf", {"tf": "compat.tf"}),
    ("from keras.layers import *", {}),
]


@pytest.mark.parametrize("statement, expected", _IMPORTS)
def test_every_reader_of_import_statements_binds_the_same_paths(statement, expected):
    """The pre-filter's summary and the facts read CPython's tree, the rules' resolver libcst's; all three take
    the bindings from ``import_bindings`` (the facts leave relative imports to the import graph)."""
    import ast

    import libcst as cst
    from libcst.metadata import MetadataWrapper

    from mplint.engine.code_summary import summarize
    from mplint.engine.names import NameResolver
    from mplint.project.extract import FileFacts, _Reader

    source = f"{statement}\n"
    tree = ast.parse(source)
    summary = summarize(tree, source.encode(), module_name="pkg.models", is_package=False)
    assert {local: set(paths) for local, paths in summary.origins.items()} == {k: {v} for k, v in expected.items()}
    wrapper = MetadataWrapper(cst.parse_module(source))
    resolver = NameResolver(wrapper, "pkg.models", False, {}, source.encode())
    for local, path in expected.items():
        assert resolver.project_paths(cst.parse_expression(local)) == {path}
    reader = _Reader(FileFacts())
    reader.visit(tree)
    assert reader.aliases == {k: v for k, v in expected.items() if not statement.startswith("from .")}
