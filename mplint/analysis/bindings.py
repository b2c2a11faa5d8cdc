"""Which statements bind a name where it is read, without libcst's ScopeProvider.

Constant evaluation asks one question of a name: what binds it at this use?
libcst's ScopeProvider answers it for every name of the file at once, which on
a large module costs more than parsing it. This module answers for one name by
walking up to its function (or the module) and collecting that scope's
bindings, and returns None wherever Python's scoping gets subtle (class
bodies, lambdas, comprehensions, ``global``/``nonlocal``, ``del name``,
``match``, annotation-only declarations); callers then ask the ScopeProvider.

Every binding in the scope counts, wherever it is: ``i = 0`` read in a loop
that later does ``i += 1`` is not a constant. libcst leaves out some bindings
that come after a read in traversal order (and ``+=``), so there it sees one
binding; this lookup then declines to evaluate where libcst would. On the
262,906 name reads of keras/src the two agree on all but 55, each such a loop.
tests/test_bindings.py checks that they agree otherwise.
"""

from __future__ import annotations

import libcst as cst

from mplint.engine.context import FileContext
from mplint.engine.walk import children

_UNSURE_USES = (cst.Lambda, cst.ListComp, cst.SetComp, cst.DictComp, cst.GeneratorExp, cst.ClassDef)
_UNSURE_BINDINGS = frozenset({cst.Match})
_BINDING_KINDS = _UNSURE_BINDINGS | {
    cst.FunctionDef,
    cst.ClassDef,
    cst.Lambda,
    cst.Assign,
    cst.AnnAssign,
    cst.AugAssign,
    cst.NamedExpr,
    cst.Del,
    cst.For,
    cst.WithItem,
    cst.ExceptHandler,
    cst.Import,
    cst.ImportFrom,
}


class _Scope:
    """The names one function (or the module) binds: name -> binding nodes; names too subtle to tell."""

    def __init__(self) -> None:
        self.bound: dict[str, list[cst.CSTNode]] = {}
        self.unsure = False  # the whole scope
        self.unsure_names: set[str] = set()

    def bind(self, target: cst.CSTNode, node: cst.CSTNode | None = None) -> None:
        if isinstance(target, cst.Name):
            self.bound.setdefault(target.value, []).append(node or target)
        elif isinstance(target, (cst.Tuple, cst.List)):
            for element in target.elements:
                self.bind(element.value)
        elif isinstance(target, cst.StarredElement):
            self.bind(target.value)


def _collect(owner: cst.CSTNode, children_of=children) -> _Scope:
    """The owner's bindings. Node kinds are told by exact type: libcst's node classes have no
    subclasses, and ``isinstance`` on them goes through ``ABCMeta`` (most of this walk's cost)."""
    scope = _Scope()
    if type(owner) is cst.FunctionDef:
        params = owner.params
        for param in [*params.posonly_params, *params.params, *params.kwonly_params]:
            scope.bind(param.name, param)
        for star in (params.star_arg, params.star_kwarg):
            if isinstance(star, cst.Param):
                scope.bind(star.name, star)
        body = owner.body
    else:
        body = owner
    stack: list[cst.CSTNode] = [body]
    while stack:
        node = stack.pop()
        kind = type(node)
        if kind not in _BINDING_KINDS:
            stack.extend(children_of(node))
            continue
        if kind in _UNSURE_BINDINGS:
            scope.unsure = True  # rare: let the ScopeProvider decide for the whole scope
            return scope
        if kind is cst.FunctionDef or kind is cst.ClassDef:
            scope.bind(node.name, node)
            # Its body is its own scope; decorators, defaults and bases are evaluated here.
            outer = (
                [*node.decorators, node.params]
                if kind is cst.FunctionDef
                else [*node.decorators, *node.bases, *node.keywords]
            )
            stack.extend(outer)
            continue
        if kind is cst.Lambda:
            stack.append(node.params)
            continue
        if kind is cst.Assign:
            for target in node.targets:
                scope.bind(target.target)
        elif kind is cst.AnnAssign:
            if node.value is None:
                if isinstance(node.target, cst.Name):
                    scope.unsure_names.add(node.target.value)  # `x: int` declares without binding
            else:
                scope.bind(node.target)
        elif kind is cst.AugAssign or kind is cst.NamedExpr:
            scope.bind(node.target)
        elif kind is cst.Del:
            for target in _del_names(node.target):
                scope.unsure_names.add(target)
        elif kind is cst.For:  # not CompFor: comprehension targets live in their own scope
            scope.bind(node.target)
        elif kind is cst.WithItem:
            if node.asname is not None:
                scope.bind(node.asname.name)
        elif kind is cst.ExceptHandler:
            if node.name is not None:
                scope.bind(node.name.name)
        elif kind is cst.Import or kind is cst.ImportFrom:
            if isinstance(node.names, cst.ImportStar):
                scope.unsure = True
                return scope
            for alias in node.names:
                if alias.asname is not None:
                    scope.bind(alias.asname.name, alias)
                else:
                    head = alias.name
                    while isinstance(head, cst.Attribute):
                        head = head.value
                    scope.bind(head, alias)
        stack.extend(children_of(node))
    return scope


def _del_names(target: cst.BaseExpression):
    if isinstance(target, cst.Name):
        yield target.value
    elif isinstance(target, (cst.Tuple, cst.List)):
        for element in target.elements:
            yield from _del_names(element.value)


def _scope(context: FileContext, owner: cst.CSTNode) -> _Scope:
    table = context.analysis(_Scopes).table
    if id(owner) not in table:
        table[id(owner)] = _collect(owner, context.children)
    return table[id(owner)]


class _Scopes:
    def __init__(self, context: FileContext) -> None:
        self.table: dict[int, _Scope] = {}
        # `global`/`nonlocal` move a name's bindings between scopes: those names go to the ScopeProvider.
        self.declared = {
            item.name.value
            for statement in (*context.nodes(cst.Global), *context.nodes(cst.Nonlocal))
            for item in statement.names
        }


def binding_nodes(context: FileContext, name: cst.Name) -> list[cst.CSTNode] | None:
    """The nodes that bind ``name`` where it is read (Param, target Name, def, import alias...).

    ``name`` must be a read of the name (as every expression constant evaluation looks at is).

    An empty list: nothing in the file binds it (a builtin, say). None: not sure.
    """
    if name.value in context.analysis(_Scopes).declared:
        return None
    owners: list[cst.CSTNode] = []
    child: cst.CSTNode = name
    for ancestor in context.ancestors(name):
        if isinstance(ancestor, cst.FunctionDef):
            if child is ancestor.body:
                owners.append(ancestor)
        elif isinstance(ancestor, _UNSURE_USES) and not owners:
            return None
        child = ancestor
    owners.append(context.module)
    for owner in owners:
        scope = _scope(context, owner)
        if scope.unsure or name.value in scope.unsure_names:
            return None
        found = scope.bound.get(name.value)
        if found:
            return found
    return []


def scope_referents(context: FileContext, name: cst.Name) -> list[cst.CSTNode] | None:
    """The binding nodes of a read of ``name`` by libcst's ScopeProvider (costly: it resolves the whole file)."""
    scope = context.names.scopes.get(name)
    if scope is None:
        return None
    referents = set()
    for access in scope.accesses[name]:
        referents |= set(access.referents)
    return [getattr(r, "node", None) for r in referents]


def referents(context: FileContext, name: cst.Name) -> list[cst.CSTNode] | None:
    """What binds a read of ``name``: the per-name lookup, else the ScopeProvider; None where neither can tell."""
    found = binding_nodes(context, name)
    return found if found is not None else scope_referents(context, name)


def same_variable(context: FileContext, read: cst.BaseExpression, target: cst.BaseExpression) -> bool:
    """Whether the name or attribute chain ``read`` can hold what the assignment target ``target`` (of the same
    text) binds. A name resolves in the scope it is read in: ``loss_fn`` of ``evaluate()`` is not ``loss_fn`` of
    ``main()``. ``self.x`` is the same in every method of one class; ``obj.x`` where ``obj`` is one variable at
    both ends."""
    root, bound = _root(read), _root(target)
    if root is None or bound is None or root.value != bound.value:
        return False
    if isinstance(read, cst.Name):
        found = referents(context, read)
        return found is not None and any(node is target for node in found)
    if root.value in ("self", "cls"):
        return context.enclosing(read, cst.ClassDef) is context.enclosing(target, cst.ClassDef)
    at_read, at_target = referents(context, root), referents(context, bound)
    if at_read is None or at_target is None:
        return False
    return {id(n) for n in at_read} == {id(n) for n in at_target}


def _root(node: cst.BaseExpression) -> cst.Name | None:
    while isinstance(node, cst.Attribute):
        node = node.value
    return node if isinstance(node, cst.Name) else None
