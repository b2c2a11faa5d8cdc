"""Notebook cells read as IPython reads them: compared with IPython's own transformer.

For every cell of tests/data/ipython_cells.py, mplint's Python view must parse exactly
when IPython's transformed cell parses, and mean the same once IPython's calls
(``get_ipython().system(...)``...) are read as the placeholders mplint writes
(``pass``, ``x = None``). Every line that is not IPython syntax keeps its place and
gives back its source text with the prefix IPython removed.
"""

from __future__ import annotations

import ast
import json
import random
import sys
from pathlib import Path

import pytest

from mplint.engine import ipython_syntax
from mplint.engine.ipython_syntax import IPYTHON_LINE_MAGICS, LINE_MAGICS, PYTHON_CELL_MAGICS, read_cell, source_lines
from mplint.engine.notebooks import Notebook, load

sys.path.insert(0, str(Path(__file__).parent / "data"))
from ipython_cells import CELLS  # noqa: E402

IPython = pytest.importorskip("IPython")


CORE_LINE_MAGICS: set[str] = set()


@pytest.fixture(scope="module")
def shell():
    from IPython.core.interactiveshell import InteractiveShell

    shell = InteractiveShell.instance()
    CORE_LINE_MAGICS.update(shell.magics_manager.magics["line"])
    for name in LINE_MAGICS - set(shell.magics_manager.magics["line"]):  # ipykernel's and Colab's
        shell.register_magic_function(lambda line: None, "line", name)
    return shell


def ours(text: str, shadowed: frozenset[str] = frozenset()) -> str | None:
    code = read_cell(text)
    if code is None:
        return None
    ipython_syntax.mask_automagic(code, set(shadowed))
    return "".join(line.code + "\n" for line in code.lines)


def _is_ipython_call(node) -> bool:
    """``get_ipython().anything(...)``"""
    return (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and isinstance(node.func.value, ast.Call)
        and isinstance(node.func.value.func, ast.Name)
        and node.func.value.func.id == "get_ipython"
    )


class _AsPlaceholders(ast.NodeTransformer):
    """IPython's output with each call it wrote read as mplint's placeholder for it."""

    def __init__(self, shell):
        self.shell = shell

    def visit_Expr(self, node):
        if not _is_ipython_call(node.value):
            return self.generic_visit(node)
        call = node.value
        if call.func.attr == "run_cell_magic" and call.args[0].value in PYTHON_CELL_MAGICS:
            body = ast.parse(self.shell.transform_cell(call.args[2].value))  # what %%time itself runs
            return [ast.Pass(), *self.visit(body).body]
        return ast.Pass()

    def visit_Assign(self, node):
        if _is_ipython_call(node.value):
            node.value = ast.Constant(None)
        return self.generic_visit(node)


def _parses(code: str) -> ast.Module | None:
    try:
        return ast.parse(code)
    except SyntaxError:
        return None


def ipython_view(shell, text: str) -> ast.Module | None:
    """IPython's reading of a cell with its calls as placeholders; None when IPython would not run it as
    Python (including a %%time cell whose body is not Python: %%time raises on it)."""
    try:
        tree = _parses(shell.transform_cell(text))  # IPython's tokenizer raises on a bad dedent
        return None if tree is None else _AsPlaceholders(shell).visit(tree)
    except SyntaxError:
        return None


def _cell_magic_not_python(ipython: str) -> bool:
    tree = _parses(ipython)
    return (
        tree is not None
        and len(tree.body) == 1
        and isinstance(tree.body[0], ast.Expr)
        and _is_ipython_call(tree.body[0].value)
        and tree.body[0].value.func.attr == "run_cell_magic"
        and tree.body[0].value.args[0].value not in PYTHON_CELL_MAGICS
    )


@pytest.mark.parametrize("text", CELLS)
def test_cell_reads_as_ipython_reads_it(shell, text):
    ipython = shell.transform_cell(text)
    mine = ours(text)
    if mine is None:
        assert _cell_magic_not_python(ipython)
        return
    theirs = ipython_view(shell, text)
    assert (_parses(mine) is not None) == (theirs is not None), (mine, ipython)
    if theirs is not None:
        assert ast.dump(ast.parse(mine)) == ast.dump(theirs), (mine, ipython)


# Lines that combine into cells IPython reads in surprising ways (brackets left open, help lines
# ending a bracketed expression, strings opened by one line and closed by another, prompts).
LINE_POOL = [
    "!ls",
    "!pip install \\",
    "    keras",
    "%time f()",
    "x = !ls",
    "y = %timeit -o f()",
    "obj?",
    "a.b??",
    "?x",
    "if x:",
    "    pass",
    "    !echo hi",
    "  x = 1",
    "x = (1,",
    "   2)",
    "% (a)",
    '"""',
    "s = '''",
    "'''",
    "x = 1  # ?",
    "print('%d' \\",
    "  % 3)",
    "ls",
    "cd ..",
    ">>> x = 1",
    "... y",
    "%%time",
    "  %%time",
    "",
    "   ",
    "x = 'unterminated",
    "a[0]?",
    "z = y != 1",
    "w = x%y",
    "#!comment",
    "! ls",
    "x = % time f",
    "x = \\",
    "  %time f()",
    "def f():",
    "    return 1",
    "\tx = 2",
    "for i in r:",
    "    %cd /tmp",
    "    y?",
    "In [3]: x = 1",
    "   ...: y = 2",
    "pip install x",
    "x = [",
    "!cmd {x} \\",
    "]",
    "  >>> x = 1",
    ">>>",
    "... ",
    "    ... z = 3",
    'doc = """',
    '>>> s = """',
    'r"""',
    "uv pip install x",
    "mamba list",
]


def test_random_cells_read_as_ipython_reads_them(shell):
    rng = random.Random(17)
    for _ in range(1500):
        text = "\n".join(rng.choice(LINE_POOL) for _ in range(rng.randint(1, 5))) + rng.choice(["", "\n"])
        mine, theirs = ours(text), ipython_view(shell, text)
        if mine is None:
            continue  # a non-Python cell magic: what %%bash holds is never checked
        assert (_parses(mine) is not None) == (theirs is not None), text
        if theirs is not None:
            assert ast.dump(ast.parse(mine)) == ast.dump(theirs), text


@pytest.mark.parametrize("text", CELLS)
def test_every_python_line_keeps_its_place_and_text(text):
    code = read_cell(text)
    if code is None:
        return
    source = source_lines(text)
    assert len(code.lines) == len(source)
    for line, original in zip(code.lines, source):
        if not line.special:
            assert line.prefix + line.code == original


def test_a_name_of_the_notebook_shadows_an_automagic_command(shell):
    shell.user_ns["cat"] = "a variable"
    try:
        assert _parses(shell.transform_cell("cat requirements.txt")) is None
    finally:
        del shell.user_ns["cat"]
    assert ours("cat requirements.txt") == "pass\n"
    assert ours("cat requirements.txt", frozenset({"cat"})) == "cat requirements.txt\n"


def test_core_magics_are_ipythons(shell):
    """mplint's copy of IPython's line magics equals the installed IPython's: a bump of the pinned
    IPython shows here exactly which magics it added or removed."""
    assert {
        "added": sorted(CORE_LINE_MAGICS - IPYTHON_LINE_MAGICS),
        "removed": sorted(IPYTHON_LINE_MAGICS - CORE_LINE_MAGICS),
    } == {"added": [], "removed": []}


def test_ipython_is_the_pinned_version():
    """The magics above and the clean-up rules are IPython 9.18's; the test extra pins it."""
    pyproject = (Path(__file__).parents[1] / "pyproject.toml").read_text()
    assert f'"ipython=={IPython.__version__}"' in pyproject


@pytest.mark.parametrize(
    "cell",
    [
        "uv pip install tensorflow",
        "mamba install -y cudnn",
        "micromamba install cudnn",
        "!uv pip install \\\n  keras",
    ],
)
def test_package_manager_lines_are_commands(cell):
    nb = notebook(cell, "import tensorflow as tf")
    assert nb.errors == []
    assert nb.virtual.splitlines()[1].startswith("pass")


# -- notebooks: what the rules see, and where it maps back ---------------------------------------


def notebook(*cells: str) -> Notebook:
    nb = load(json.dumps({"cells": [{"cell_type": "code", "source": c} for c in cells]}).encode())
    assert isinstance(nb, Notebook)
    return nb


def test_notebook_names_shadow_commands_in_other_cells():
    nb = notebook("cat = load_categories()", "cat requirements.txt", "ls ./data/train/")
    assert [e.index for e in nb.errors] == [2]  # IPython runs `cat requirements.txt` as Python too
    assert (
        nb.virtual == "# __mplint_cell_1__\ncat = load_categories()\n# __mplint_cell_3__\npass  # __ipython_magic_0__\n"
    )


def test_loaded_extension_adds_its_command():
    nb = notebook("%load_ext tensorboard", "tensorboard --logdir logs")
    assert nb.errors == []
    without = notebook("tensorboard --logdir logs")
    assert [(e.index, e.message) for e in without.errors] == [(1, "syntax error: invalid syntax")]


def test_continued_command_lines_are_masked_at_the_command_indent():
    nb = notebook("if True:\n    !pip install \\\n        tensorflow \\\n        keras\n    import os")
    assert nb.virtual == (
        "# __mplint_cell_1__\nif True:\n    pass  # __ipython_magic_0__\n# __ipython_magic_1__\n"
        "# __ipython_magic_2__\n    import os\n"
    )
    assert nb.magics == ["    !pip install \\", "        tensorflow \\", "        keras"]


def test_indented_cell_maps_columns_back():
    nb = notebook("x = 1", "    y = 2\n    z = 3")
    cell = nb.cell(2)
    assert nb.virtual.splitlines()[3:] == ["y = 2", "z = 3"]
    assert [(nb.locate(line), cell.shift(nb.locate(line)[1])) for line in (4, 5)] == [((2, 1), 4), ((2, 2), 4)]


def test_fix_in_an_indented_cell_keeps_its_indentation():
    nb = notebook("    a = f(1)\n    !ls\n    b = 2\n")
    fixed = nb.virtual.replace("a = f(1)", "a = f(1, dtype='float32')").replace("b = 2", "b = 2\nc = 3")
    assert nb.cell_texts(fixed) == {1: "    a = f(1, dtype='float32')\n    !ls\n    b = 2\n    c = 3\n"}


def test_lines_added_on_top_of_an_indented_cell_take_its_indentation():
    nb = notebook("    a = f(1)\n    b = 2")
    fixed = nb.virtual.replace("# __mplint_cell_1__\n", "# __mplint_cell_1__\nimport keras\n")
    assert nb.cell_texts(fixed) == {1: "    import keras\n    a = f(1)\n    b = 2"}


def test_a_broken_cell_is_reported_alone_and_the_others_are_kept():
    nb = notebook("import keras", "    def f(:\n        pass", "x = 1")
    assert [(e.index, e.line, e.column, e.message) for e in nb.errors] == [(2, 1, 11, "syntax error: invalid syntax")]
    assert [c.index for c in nb.cells] == [1, 3]
