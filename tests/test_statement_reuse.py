"""The language server's parse from the trees of unchanged statements equals libcst's parse of the whole file."""

from __future__ import annotations

from pathlib import Path

import libcst as cst
import pytest

from mplint.engine.statement_reuse import StatementReuse

REPO = Path(__file__).resolve().parent.parent
FIXTURES = sorted((REPO / "fixtures").rglob("*.py"))


def test_every_fixture_is_put_together_as_libcst_parses_it():
    reuse = StatementReuse()
    assembled = 0
    for path in FIXTURES:
        source = path.read_bytes()
        try:
            whole = cst.parse_module(source)
        except cst.ParserSyntaxError:
            continue
        module = reuse.parse(source)
        if module is not None:
            assembled += 1
            assert module.deep_equals(whole), path
            assert module.code == whole.code, path
    assert assembled >= 0.9 * len(FIXTURES)  # nearly every fixture takes the fast path


def test_an_edit_parses_only_the_statement_it_changed():
    reuse = StatementReuse()
    before = "import keras\n\n\ndef f(x):\n    return keras.layers.Dense(8)(x)\n\n\ny = 1  # note\n"
    first = reuse.parse(before.encode())
    after = before.replace("y = 1", "y = 2")
    second = reuse.parse(after.encode())
    assert second.deep_equals(cst.parse_module(after)) and second.code == after
    assert second.body[0] is first.body[0]  # the import, unchanged, is the same tree
    assert second.body[1].body is first.body[1].body  # the function's body too (its leading lines are its own)
    assert second.body[2] is not first.body[2]
    inserted = after.replace("import keras\n", "import keras\nimport os\n")
    third = reuse.parse(inserted.encode())
    assert third.deep_equals(cst.parse_module(inserted)) and third.body[2].body is first.body[1].body


def test_the_same_statement_twice_gets_two_trees():
    module = StatementReuse().parse(b"x = 1\nx = 1\n")
    assert module.deep_equals(cst.parse_module(b"x = 1\nx = 1\n"))
    assert module.body[0] is not module.body[1]  # positions and parents are looked up by node


@pytest.mark.parametrize(
    "source",
    [
        b"",  # no statement
        b"# only a comment\n",
        b"def f():\n    x = 1\n    # indented, after the block: libcst gives it to the block\n\ny = 2\n",
        b"x = 1\r\ny = 2\r\n",  # \r\n breaks
        b"# -*- coding: latin-1 -*-\nx = '\xe9'\n",
        b"\xef\xbb\xbfx = 1\n",  # a byte order mark
        b"def f():\n  return 1\n\n\ndef g():\n    return 2\n",  # indentation that differs from the file's first
    ],
)
def test_what_could_be_cut_differently_is_left_to_the_whole_files_parse(source):
    assert StatementReuse().parse(source) is None
