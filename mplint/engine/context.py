"""What a rule may know about the file it checks and the project around it."""

from __future__ import annotations

import bisect
from collections.abc import Callable
from typing import TypeVar

import libcst as cst
from libcst.metadata import MetadataWrapper

from mplint.engine import statement_reuse
from mplint.engine.facts import Facts
from mplint.engine.lazy_positions import LazyPositions, Starts, whole_module
from mplint.engine.names import NameResolver
from mplint.engine.summaries import FunctionSummary, SummaryKind
from mplint.engine.walk import children

T = TypeVar("T")
N = TypeVar("N", bound=cst.CSTNode)


class FileContext:
    """One file under check. Metadata is resolved lazily, once, on first use."""

    def __init__(
        self,
        path: str,
        wrapper: MetadataWrapper,
        facts: Facts,
        module_name: str,
        is_package: bool,
        source: bytes | None = None,
        active_rules: frozenset[str] = frozenset(),
        starts: Starts | None = None,
    ):
        self.path = path
        # The rules of this run: a fix may build on another rule's fix that the same --fix applies.
        self.active_rules = active_rules
        self.wrapper = wrapper
        self.module: cst.Module = wrapper.module
        self.facts = facts
        self.module_name = module_name
        self.source = source
        self.names = NameResolver(wrapper, module_name, is_package, facts.reexports, source)
        self._analyses: dict[Callable, object] = {}
        self._parents = None
        self._positions = None
        self._starts = starts  # CPython's top-level statement lines: positions per statement (``LazyPositions``)
        self._text: str | None = None
        self._summarized: dict | None = None

    @property
    def generation(self) -> int:
        return self.facts.generation.value

    def facts_at(self, node: cst.CSTNode) -> Facts:
        """The facts in force where ``node`` runs (``Facts.at``): in a top-level function, or at top level in its
        statement, named by its first line. Code of classes, lambdas and nested functions may run anywhere."""
        chain = [node, *self.ancestors(node)][:-1]  # up to the module's statement, the module left out
        if not chain or not self.facts.orders_policies:
            return self.facts
        scopes = [n for n in chain if isinstance(n, (cst.FunctionDef, cst.ClassDef, cst.Lambda))]
        top = chain[-1]
        if not scopes:
            return self.facts.at("", self.position(top).start.line)
        if scopes == [top] and isinstance(top, cst.FunctionDef):
            return self.facts.at(top.name.value, None)
        return self.facts

    def summary(self, func: cst.BaseExpression, kind: SummaryKind) -> FunctionSummary | None:
        """The project's summary of ``kind`` (``ProjectFacts.summaries_of``) of the function ``func`` names, through
        this file's imports, or None. Names no such function can have are
        rejected by their text first (``NameResolver.could_be``)."""
        if self._summarized is None:  # read once per file: rules ask for every call
            self._summarized = self.facts.summarized_names
        names = self._summarized.get(kind.name)
        if not names or not self.names.could_be(func, names):
            return None
        table = self.facts.summaries_of(kind)
        return next((table[q] for q in self.names.project_paths(func) if q in table), None)

    def analysis(self, factory: Callable[[FileContext], T]) -> T:
        """A per-file analysis shared by several rules, computed once (e.g. model outputs)."""
        if factory not in self._analyses:
            self._analyses[factory] = factory(self)
        return self._analyses[factory]  # type: ignore[return-value]

    def release(self) -> None:
        """Drop the analyses once the rules are done: they refer back to this context, and a file's
        tree kept alive by that cycle would wait for the cyclic collector (tens of ms per file)."""
        self._analyses.clear()

    def _index(self) -> None:
        """One fast walk for parents and nodes by type (instead of libcst's ParentNodeProvider, ~10x dearer)."""
        self._parents, self._by_type, self._preorder, self._children = {}, {}, {}, {}
        self._nodes: list[cst.CSTNode] = []
        for number, (node, parent, below) in enumerate(statement_reuse.descendants(self.module)):
            self._nodes.append(node)
            self._by_type.setdefault(type(node), []).append(node)
            key = id(node)
            self._preorder[key] = number
            self._children[key] = below
            if parent is not None:
                self._parents[key] = parent

    def preorder(self) -> list[cst.CSTNode]:
        """Every node of the file in source order, parents before children (trivia left out)."""
        if self._parents is None:
            self._index()
        return self._nodes

    def children(self, node: cst.CSTNode) -> list[cst.CSTNode]:
        """The node's children in source order, without trivia (see ``mplint.engine.walk``), from the index."""
        if self._parents is None:
            self._index()
        found = self._children.get(id(node))
        return found if found is not None else children(node)

    def ends_before(self, first: cst.CSTNode, second: cst.CSTNode) -> bool:
        """Whether all of ``first`` comes before ``second`` starts (``x = x + 1``: the read is not after)."""
        return self.end_order(first) < self.source_order(second)

    def end_order(self, node: cst.CSTNode) -> int:
        """The ``source_order`` of the last node under ``node`` (``node`` itself when it has none)."""
        while True:
            below = self.children(node)
            if not below:
                return self.source_order(node)
            node = below[-1]

    def source_order(self, node: cst.CSTNode) -> int:
        """A number that orders the file's nodes as they start in the source (parents before children)."""
        if self._parents is None:
            self._index()
        return self._preorder[id(node)]

    def nodes(self, *node_types: type[N]) -> list[N]:
        """Every node of exactly these types, in source order (whitespace and punctuation are not indexed)."""
        if self._parents is None:
            self._index()
        if len(node_types) == 1:
            return self._by_type.get(node_types[0], [])
        return sorted((n for t in node_types for n in self._by_type.get(t, ())), key=self.source_order)

    def nodes_within(self, node: cst.CSTNode, *node_types: type[N]) -> list[N]:
        """Every node of exactly these types under ``node`` (``node`` included), in source order."""
        found = self.nodes(*node_types)
        first, last = self.source_order(node), self.end_order(node)
        start = bisect.bisect_left(found, first, key=self.source_order)
        return found[start : bisect.bisect_right(found, last, lo=start, key=self.source_order)]

    def findall(self, root: cst.CSTNode, matcher, node_types: tuple[type, ...]) -> list:
        """``libcst.matchers.findall(root, matcher)`` for a matcher of nodes of ``node_types``, from
        the index: only those nodes are tested, where libcst's findall rebuilds every node under
        ``root`` on its way. Nodes outside the file's tree (parts of a fix) go to libcst's."""
        from mplint.engine import matchers as m

        if self._parents is None:
            self._index()
        if id(root) not in self._preorder:
            return list(m.findall(root, matcher))
        return [node for node in self.nodes_within(root, *node_types) if m.matches(node, matcher)]

    def contains(self, outer: cst.CSTNode, node: cst.CSTNode) -> bool:
        """Whether ``node`` is ``outer`` or lies under it."""
        return self.source_order(outer) <= self.source_order(node) <= self.end_order(outer)

    def parent(self, node: cst.CSTNode) -> cst.CSTNode | None:
        if self._parents is None:
            self._index()
        return self._parents.get(id(node))

    def enclosing(self, node: cst.CSTNode, node_type: type[N] | tuple[type, ...]) -> N | None:
        """The nearest ancestor of ``node`` of the given type(s)."""
        return next((a for a in self.ancestors(node) if isinstance(a, node_type)), None)

    def ancestors(self, node: cst.CSTNode):
        parent = self.parent(node)
        while parent is not None:
            yield parent
            parent = self.parent(parent)

    @property
    def text(self) -> str:
        """The file's source text (decoded once; ``module.code`` would regenerate it from the tree)."""
        if self._text is None:
            if self.source is None:
                self._text = self.module.code
            else:
                self._text = self.source.decode(self.module.encoding, errors="replace").lstrip("\ufeff")
        return self._text

    def position(self, node: cst.CSTNode):
        if self._positions is None:
            if self._starts is None:
                self._positions = whole_module(self.wrapper)
            else:
                self._positions = LazyPositions(self.wrapper, lambda: self.text, self._starts, self.parent)
        return self._positions[node]
