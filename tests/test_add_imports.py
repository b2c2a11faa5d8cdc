"""Fixes add imports as libcst's ``AddImportsVisitor`` over the whole module would, visiting only the module's head."""

from __future__ import annotations

import ast
import json
from pathlib import Path

import libcst as cst
import pytest
from libcst.codemod import CodemodContext
from libcst.codemod.visitors import AddImportsVisitor

from mplint.diagnostics import ImportSpec
from mplint.engine.edits import add_imports

REPO = Path(__file__).resolve().parent.parent
FIXTURES = sorted((REPO / "fixtures").rglob("*.py"))
SPECS = [
    (ImportSpec("keras", "mixed_precision"),),
    (ImportSpec("tensorflow", None, "tf"), ImportSpec("os")),
    (ImportSpec("keras", "layers"), ImportSpec("__future__", "annotations")),
]


def made_at_top_level(source: str, spec: ImportSpec) -> bool:
    """Whether the module's body already has the import (CPython's reading, not the engine's)."""
    for node in ast.parse(source).body:
        if isinstance(node, ast.Import) and spec.obj is None:
            if any(a.name == spec.module and a.asname == spec.asname for a in node.names):
                return True
        if isinstance(node, ast.ImportFrom) and spec.obj is not None and not node.level and node.module == spec.module:
            if any(a.name == spec.obj and a.asname == spec.asname for a in node.names):
                return True
    return False


def whole_module(module: cst.Module, imports) -> str:
    """The visitor over the whole module, given the imports the module does not make already (which the visitor,
    reading only up to the first statement that is no import, would add twice)."""
    imports = [spec for spec in imports if not made_at_top_level(module.code, spec)]
    if not imports:
        return module.code
    context = CodemodContext()
    for spec in imports:
        AddImportsVisitor.add_needed_import(context, spec.module, spec.obj, spec.asname)
    return AddImportsVisitor(context).transform_module(module).code


def test_every_fixture_gets_the_imports_the_whole_module_visit_adds():
    compared = 0
    for path in FIXTURES[::6]:  # a sixth of them: the whole-module visit is slow
        try:
            module = cst.parse_module(path.read_bytes())
        except cst.ParserSyntaxError:
            continue
        for imports in SPECS:
            assert add_imports(module, imports).code == whole_module(module, imports), (path, imports)
            compared += 1
    assert compared >= 3 * 15


@pytest.mark.parametrize(
    "source",
    [
        "",
        "# a comment only\n",
        '"""Docstring."""\n',
        '"""Docstring."""\nimport os\n\nx = 1\n',
        "__strict__ = True\nfrom keras import layers\ny = layers\n",
        "from keras import layers  # merged into this one\nimport os\n\n\ndef f():\n    import keras\n    return keras\n",
        "import os; import sys\nx = 1\n",  # two imports on one line: not an import statement of its own
        "from keras import *\nx = 1\n",
        "import os\nimport keras\n",  # nothing after the imports
        "import os\n# a comment above the first statement\nclass A:\n    pass\n",
        "x = 1\nimport keras\n",  # an import after a statement is not looked at
    ],
)
def test_edge_cases_match_the_whole_module_visit(source: str):
    module = cst.parse_module(source)
    for imports in SPECS:
        assert add_imports(module, imports).code == whole_module(module, imports), imports


def test_a_diagnostic_carries_its_fixes_imports_through_the_results_cache():
    from conftest import UnsafeImportAdder

    from mplint.engine.check import CheckOptions, check_source
    from mplint.project.cache import _diagnostic_from_json, _diagnostic_to_json
    from mplint.project.facts import ProjectFacts

    result = check_source("m.py", b"x = rounded(2.5)\n", CheckOptions((UnsafeImportAdder,), ProjectFacts()))
    [d] = result.diagnostics
    assert (d.rule_id, d.imports, d.edits[0].text) == ("TEST5", (ImportSpec("math"),), "math.ceil(2.5)")
    assert _diagnostic_from_json(json.loads(json.dumps(_diagnostic_to_json(d)))) == d


def test_an_import_the_module_makes_below_its_head_is_not_added_again():
    # a license string and a docstring, then the imports: the visitor reads only the first string's head
    source = '"""License."""\n"""Docstring."""\nimport os\nimport torch\n\n\ndef f():\n    return torch.ones(1)\n'
    module = cst.parse_module(source)
    assert add_imports(module, [ImportSpec("torch")]).code == source
    assert add_imports(module, [ImportSpec("torch", None, "th")]).code == source.replace(
        '"""License."""\n', '"""License."""\nimport torch as th\n\n'
    )  # another binding is added
    kept = "import sys\nsys.path.insert(0, '.')\nfrom torch import amp\n"
    assert add_imports(cst.parse_module(kept), [ImportSpec("torch", "amp")]).code == kept
