"""Whether what a layer call produces is thrown away: never read before its name is bound again.

A notebook often keeps a deliberately wrong demo (``outputs = Dense(10, activation="softmax")(x)``) and
builds the model from a later cell that binds ``outputs`` again; the discarded layer reaches no model.
Straight-line code only: a statement inside a loop, or a name read from another function, counts as used.
"""

from __future__ import annotations

import libcst as cst

from mplint.engine.context import FileContext
from mplint.engine.names import assigned_name

_SCOPES = (cst.FunctionDef, cst.Lambda, cst.ClassDef)


def discarded(context: FileContext, call: cst.Call) -> bool:
    """Whether the value ``call`` builds (the layer, or its output where the layer is applied at once) is an
    expression statement, or bound to a name that no code reads before the same block binds it again (or, in a
    function, at all)."""
    value: cst.CSTNode = call
    applied = context.parent(call)
    if isinstance(applied, cst.Call) and applied.func is call:
        value = applied
    statement = context.parent(value)
    if isinstance(statement, cst.Expr):
        return True
    name = assigned_name(statement)
    if name is None:
        return False
    scope = context.enclosing(statement, _SCOPES) or context.module
    if isinstance(scope, cst.ClassDef) or any(
        isinstance(a, (cst.For, cst.While)) for a in _ancestors_within(context, statement, scope)
    ):
        return False
    rebinding = _next_binding(context, statement, name)
    if rebinding is None and scope is context.module:
        return False  # a module's name may be imported by another module
    until = context.end_order(rebinding) if rebinding is not None else None
    candidates = context.nodes(cst.Name) if scope is context.module else context.nodes_within(scope, cst.Name)
    for read in candidates:
        if read.value != name or not _is_read(context, read) or read is statement.targets[0].target:
            continue
        if rebinding is not None and read is rebinding.targets[0].target:
            continue
        if (context.enclosing(read, _SCOPES) or context.module) is not scope:
            return False  # read from a nested or another function: its order says nothing
        order = context.source_order(read)
        if order > context.end_order(statement) and (until is None or order <= until):
            return False
    return True


def _is_read(context: FileContext, name: cst.Name) -> bool:
    """A variable, not an attribute's or a keyword's name (``model.outputs``, ``Dense(units=8)``)."""
    parent = context.parent(name)
    return not (
        isinstance(parent, cst.Attribute)
        and parent.attr is name
        or isinstance(parent, cst.Arg)
        and parent.keyword is name
    )


def _ancestors_within(context: FileContext, node: cst.CSTNode, scope: cst.CSTNode):
    for ancestor in context.ancestors(node):
        if ancestor is scope:
            return
        yield ancestor


def _next_binding(context: FileContext, statement: cst.Assign, name: str) -> cst.Assign | None:
    """The next statement of the same block that binds ``name`` unconditionally (``name = ...``)."""
    line = context.parent(statement)
    block = context.parent(line)
    body = getattr(block, "body", None)
    if not isinstance(line, cst.SimpleStatementLine) or not isinstance(body, (list, tuple)):
        return None
    for later in body[body.index(line) + 1 :]:
        if isinstance(later, cst.SimpleStatementLine):
            for small in later.body:
                if assigned_name(small) == name:
                    return small
    return None
