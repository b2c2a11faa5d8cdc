"""What a rule may know about the file it checks and the project around it."""

from __future__ import annotations

from typing import Callable, TypeVar

import libcst as cst
from libcst.metadata import MetadataWrapper, PositionProvider

from mplint.facts import ProjectFacts
from mplint.names import NameResolver
from mplint.walk import descendants

T = TypeVar("T")
N = TypeVar("N", bound=cst.CSTNode)


class FileContext:
    """One file under check. Metadata is resolved lazily, once, on first use."""

    def __init__(self, path: str, wrapper: MetadataWrapper, facts: ProjectFacts, module_name: str, is_package: bool,
                 source: bytes | None = None):
        self.path = path
        self.wrapper = wrapper
        self.module: cst.Module = wrapper.module
        self.facts = facts
        self.module_name = module_name
        self.source = source
        self.names = NameResolver(wrapper, module_name, is_package, facts.reexports, source)
        self._analyses: dict[Callable, object] = {}
        self._parents = None
        self._positions = None

    @property
    def generation(self) -> int:
        return self.facts.generation.value

    def analysis(self, factory: Callable[["FileContext"], T]) -> T:
        """A per-file analysis shared by several rules, computed once (e.g. model outputs)."""
        if factory not in self._analyses:
            self._analyses[factory] = factory(self)
        return self._analyses[factory]  # type: ignore[return-value]

    def _index(self) -> None:
        """One fast walk for parents and nodes by type (instead of libcst's ParentNodeProvider, ~10x dearer)."""
        self._parents, self._by_type = {}, {}
        for node, parent in descendants(self.module):
            self._by_type.setdefault(type(node), []).append(node)
            if parent is not None:
                self._parents[id(node)] = parent

    def nodes(self, node_type: type[N]) -> list[N]:
        """Every node of exactly this type, in source order (whitespace and punctuation are not indexed)."""
        if self._parents is None:
            self._index()
        return self._by_type.get(node_type, [])

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

    def position(self, node: cst.CSTNode):
        if self._positions is None:
            self._positions = self.wrapper.resolve(PositionProvider)
        return self._positions[node]
