"""libcst's ``PositionProvider`` positions, computed only for the top-level statements asked about.

``PositionProvider`` generates the code of the whole module to place every node (two thirds of a
warm check of a 300-line file), while a check asks for the positions of a handful of nodes. A
top-level statement always starts a line, and CPython's syntax tree (parsed first anyway) says on
which line its first token is; less the statement's own leading lines, that is the line its code
starts on. Generating only that statement's code from that line gives the very positions the
whole module's would. The statement's code is compared with the source text at that line before
it is trusted; where anything does not line up, the whole module's positions are computed, as before.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Callable

import libcst as cst
from libcst.metadata import MetadataWrapper, PositionProvider
from libcst.metadata.position_provider import PositionProvidingCodegenState

_NEWLINE = re.compile(r"\r\n?|\n")  # libcst's and CPython's line breaks (not str.splitlines')
# Between a decorator's "@" and its expression's first token, on the same line (ast starts it there).
_DECORATOR_PREFIX = re.compile(rb"@[ \t\f(]*")

Starts = tuple[tuple[int, int, tuple[int, int] | None], ...]


def statement_starts(tree: ast.Module) -> Starts:
    """Each top-level statement's (line, column, first decorator's (line, column) or None), from CPython's tree."""
    out = []
    for stmt in tree.body:
        decorators = getattr(stmt, "decorator_list", None)
        first = (decorators[0].lineno, decorators[0].col_offset) if decorators else None
        out.append((stmt.lineno, stmt.col_offset, first))
    return tuple(out)


def whole_module(wrapper: MetadataWrapper):
    """``wrapper.resolve(PositionProvider)`` at half the cost: ``resolve`` also runs a batched visit
    of the whole tree for the batchable providers asked for, even when there are none, and this
    provider is not batchable (its one pass is a code generation)."""
    return PositionProvider()._gen(wrapper)


class LazyPositions:
    """A mapping node -> ``CodeRange`` equal to ``whole_module(wrapper)``, filled per top-level statement."""

    def __init__(
        self,
        wrapper: MetadataWrapper,
        text: Callable[[], str],
        starts: Starts,
        parent: Callable[[cst.CSTNode], cst.CSTNode | None],
    ):
        self._wrapper = wrapper
        self._module = wrapper.module
        self._text = text
        self._starts = starts
        self._parent = parent
        self._provider = PositionProvider()
        self._done: set[int] = set()
        self._lines: dict[int, int] | None = None  # top-level statement id -> line its code starts on
        self._offsets: list[int] | None = None  # line number - 1 -> offset of the line in the text
        self._whole = None

    def __getitem__(self, node: cst.CSTNode):
        if self._whole is not None:
            return self._whole[node]
        computed = self._provider._computed
        found = computed.get(node)
        if found is not None:
            return found
        stmt = self._top_level(node)
        if stmt is None or id(stmt) in self._done or not self._generate(stmt):
            self._whole = whole_module(self._wrapper)
            return self._whole[node]
        return computed[node]

    def _top_level(self, node: cst.CSTNode) -> cst.CSTNode | None:
        parent = self._parent(node)
        while parent is not None and parent is not self._module:
            node, parent = parent, self._parent(parent)
        return node if parent is self._module else None

    def _generate(self, stmt: cst.CSTNode) -> bool:
        """Place the statement's nodes; False where its starting line cannot be trusted."""
        if self._lines is None:
            self._lines = self._statement_lines()
        line = self._lines.get(id(stmt))
        if line is None:
            return False
        module = self._module
        state = PositionProvidingCodegenState(
            default_indent=module.default_indent,
            default_newline=module.default_newline,
            provider=self._provider,
            line=line,
            column=0,
        )
        stmt._codegen(state)
        if not self._matches_source(stmt, line, state.tokens):
            self._provider._computed.clear()
            return False
        self._done.add(id(stmt))
        return True

    def _statement_lines(self) -> dict[int, int]:
        """Top-level statement id -> its first line (leading blank and comment lines included)."""
        lines: dict[int, int] = {}
        body, starts = self._module.body, self._starts
        index = 0
        for stmt in body:
            if index >= len(starts):
                return {}
            line, column, decorator = starts[index]
            index += len(stmt.body) if isinstance(stmt, cst.SimpleStatementLine) else 1
            leading = list(stmt.leading_lines)
            decorators = getattr(stmt, "decorators", ())
            if decorators:
                if decorator is None or not self._decorator_starts(*decorator):
                    continue
                line = decorator[0]
                leading += decorators[0].leading_lines
            elif column != 0 or decorator is not None:
                continue
            if any("\\" in empty.whitespace.value for empty in leading):
                continue  # a continued "empty" line would span two lines
            lines[id(stmt)] = line - len(leading)
        return lines if index == len(starts) else {}

    def _decorator_starts(self, line: int, column: int) -> bool:
        """The decorator's expression starts on its "@" line (not after a parenthesis on a line of its own)."""
        if self._offsets is None:
            self._offsets = self._line_offsets()
        if line > len(self._offsets):
            return False
        source_line = self._text()[self._offsets[line - 1] :].split("\n", 1)[0].encode("utf-8")
        return _DECORATOR_PREFIX.fullmatch(source_line[:column]) is not None

    def _matches_source(self, stmt: cst.CSTNode, line: int, tokens: list[str]) -> bool:
        if self._offsets is None:
            self._offsets = self._line_offsets()
        if line < 1 or line > len(self._offsets):
            return False
        text = self._text()
        start = self._offsets[line - 1]
        code = "".join(tokens)
        if text.startswith(code, start):
            return True
        module = self._module
        # the module's last statement, in a file without a final newline: the module drops that token
        last = stmt is module.body[-1] and not module.footer and not module.has_trailing_newline and tokens
        return bool(last) and text[start:] == "".join(tokens[:-1])

    def _line_offsets(self) -> list[int]:
        return [0] + [m.end() for m in _NEWLINE.finditer(self._text())]
