"""The language server's parse from the trees of unchanged statements equals libcst's parse of the whole file."""

from __future__ import annotations

from pathlib import Path

import libcst as cst
import pytest

from mplint.engine.statement_reuse import StatementReuse
from mplint.engine.walk import SharedSubtrees, descendants

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


def _walked(entries) -> list[tuple]:
    """Descendants as comparable rows: each node, its parent and its children, by identity."""
    return [(id(node), id(parent), [id(c) for c in below]) for node, parent, below in entries]


def test_the_walk_of_an_edited_module_reuses_unchanged_subtrees_and_equals_a_fresh_walk():
    """Every fixture, then each with a line added at the top, a statement changed and a statement removed:
    the walk that reuses the last module's subtrees gives each node, its parent and its children exactly as
    walking the whole tree does, and takes the unchanged subtrees' walks from the last module."""
    reuse, shared = StatementReuse(), SharedSubtrees()
    compared = reused = 0
    for path in FIXTURES:
        text = path.read_text(encoding="utf-8")
        lines = text.splitlines(keepends=True)
        versions = [text, "import os\n" + text]
        if len(lines) > 4:
            versions += ["".join(lines[:3] + lines[4:]), "".join(lines[:2] + ["x = 1\n"] + lines[2:])]
        for version in versions:
            module = reuse.parse(version.encode())
            if module is None:
                continue
            kept_before = dict(shared.kept)
            walked = list(shared.descendants(module))
            assert _walked(walked) == _walked(descendants(module)), path
            compared += 1
            reused += sum(1 for k, v in shared.kept.items() if kept_before.get(k) is v)
    assert compared >= 2 * len(FIXTURES)
    assert reused > 100  # unchanged statements' subtrees were taken from the last walk


def test_the_walk_reuses_nothing_of_a_module_it_has_not_seen():
    shared = SharedSubtrees()
    first = cst.parse_module("x = f(1)\ny = g(2)\n")
    list(shared.descendants(first))
    other = cst.parse_module("x = f(1)\ny = g(2)\n")  # equal text, other nodes
    assert _walked(shared.descendants(other)) == _walked(descendants(other))
    assert {id(root) for root, _ in shared.kept.values()}.isdisjoint(id(node) for node, _, _ in descendants(first))
