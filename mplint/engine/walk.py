"""A read-only traversal of libcst trees, several times faster than ``CSTNode.visit``.

libcst's ``visit`` rebuilds every node it passes (the machinery transformers need);
checks only read the tree, so this walker follows the dataclass fields directly.
Children come in source order (fields are, except where ``_ORDER`` says otherwise);
whitespace, comments and punctuation are not visited.
It drives any object with ``on_visit(node) -> bool`` and ``on_leave(node)``, such as a
``libcst.CSTVisitor``, and it is iterative, so deep trees cannot overflow the stack.
"""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Iterator

import libcst as cst

# Node types whose field order differs from source order where it matters (decorators, header comments).
_ORDER: dict[type, tuple[str, ...]] = {
    cst.Module: ("header", "body", "footer"),
    cst.FunctionDef: ("leading_lines", "decorators", "lines_after_decorators", "name", "params", "returns", "body"),
    cst.ClassDef: ("leading_lines", "decorators", "lines_after_decorators", "name", "bases", "keywords", "body"),
    cst.IfExp: ("body", "test", "orelse"),
}
_FIELDS: dict[type, tuple[str, ...]] = {}
# Whitespace, comments and punctuation: no check reads them as nodes, and they are half of every tree.
_TRIVIA = frozenset(
    {
        cst.SimpleWhitespace,
        cst.ParenthesizedWhitespace,
        cst.TrailingWhitespace,
        cst.Newline,
        cst.EmptyLine,
        cst.Comment,
        cst.LeftParen,
        cst.RightParen,
        cst.LeftSquareBracket,
        cst.RightSquareBracket,
        cst.LeftCurlyBrace,
        cst.RightCurlyBrace,
        cst.Comma,
        cst.Dot,
        cst.Colon,
        cst.AssignEqual,
        cst.Semicolon,
    }
)
_VISITED: dict[type, bool] = {}  # per type: a node worth visiting (cached: isinstance on ABCs is slow)


def _visited(value_type: type) -> bool:
    known = _VISITED.get(value_type)
    if known is None:
        known = _VISITED[value_type] = issubclass(value_type, cst.CSTNode) and value_type not in _TRIVIA
    return known


def _fields(node_type: type) -> tuple[str, ...]:
    names = _FIELDS.get(node_type)
    if names is None:
        names = tuple(f.name for f in dataclasses.fields(node_type))
        first = _ORDER.get(node_type, ())
        names = first + tuple(n for n in names if n not in first)
        _FIELDS[node_type] = names
    return names


def children(node: cst.CSTNode) -> list[cst.CSTNode]:
    """The node's children in source order, trivia (whitespace, comments, punctuation) left out."""
    out: list[cst.CSTNode] = []
    for name in _fields(type(node)):
        value = getattr(node, name)
        value_type = type(value)
        if value_type is tuple or value_type is list:
            out.extend(v for v in value if _visited(type(v)))
        elif _visited(value_type):
            out.append(value)
    return out


def walk(root: cst.CSTNode, visitor, children_of=children) -> None:
    """Call ``visitor.on_visit`` before and ``visitor.on_leave`` after each node's children (which
    ``on_visit`` returning False skips, as with libcst's ``visit``).

    ``children_of`` may be a lookup in an index of the tree (``FileContext.children``)."""
    stack: list[tuple[cst.CSTNode, bool]] = [(root, False)]
    while stack:
        node, leaving = stack.pop()
        if leaving:
            visitor.on_leave(node)
            continue
        if visitor.on_visit(node) is False:
            visitor.on_leave(node)  # as libcst does: children skipped, the node still left
            continue
        stack.append((node, True))
        stack.extend((child, False) for child in reversed(children_of(node)))


def descendants(root: cst.CSTNode) -> Iterator[tuple[cst.CSTNode, cst.CSTNode | None, list[cst.CSTNode]]]:
    """Every node under ``root`` (included) in source order, with its parent and its children."""
    stack: list[tuple[cst.CSTNode, cst.CSTNode | None]] = [(root, None)]
    while stack:
        node, parent = stack.pop()
        below = children(node)
        yield node, parent, below
        stack.extend((child, node) for child in reversed(below))


class SharedSubtrees:
    """``descendants`` of a module, reusing the walk of each subtree under a top-level statement that the last
    module walked also held (the same node object): the language server's edited file, whose unchanged
    statements ``statement_reuse`` takes from the last parse. A reused statement is itself a new node (its
    leading lines are its own) over the same children, so subtrees are kept one level below it."""

    def __init__(self):
        self.kept: dict[int, tuple[cst.CSTNode, list]] = {}  # id -> (the subtree's root, its descendants)

    def descendants(self, module: cst.Module) -> Iterator[tuple[cst.CSTNode, cst.CSTNode | None, list[cst.CSTNode]]]:
        last = self.kept
        kept: dict[int, tuple[cst.CSTNode, list]] = {}
        self.kept = kept  # only this module's subtrees: what an edit can reuse next
        statements = children(module)
        yield module, None, statements
        for statement in statements:
            below = children(statement)
            yield statement, module, below
            for child in below:
                found = last.get(id(child))  # an id in ``last`` is its node's: ``last`` keeps that node alive
                if found is None:
                    found = (child, list(descendants(child)))
                kept[id(child)] = found
                walked = found[1]
                yield child, statement, walked[0][2]
                yield from itertools.islice(walked, 1, None)
