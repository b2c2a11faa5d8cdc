"""Whether a layer size is a product that a reshape splits again (for the alignment rules, MP301 and MPT301).

``Dense(k**4 * heads)`` followed by ``Reshape((n, heads, k**4))`` (or ``x.view(b, n, heads, k**4)`` in
``forward``) is one dimension only in name: the reshape splits it into its factors, so rounding the product up
leaves a size no reshape accepts. A size computed as arithmetic of names, written at the layer or bound to a name
that holds it, is such a product when a reshape of the same class, function or module names one of its factors.
"""

from __future__ import annotations

import libcst as cst

from mplint.analysis.constants import origin_of
from mplint.engine.context import FileContext
from mplint.engine.names import last_name

# Calls that split or regroup a dimension into factors (Keras, TensorFlow, NumPy, torch, einops).
RESHAPES = frozenset({"reshape", "Reshape", "view", "unflatten", "Unflatten", "rearrange", "Rearrange", "split"})


def split_by_a_reshape(context: FileContext, size: cst.BaseExpression) -> bool:
    """``size`` (a layer's dimension argument) is computed from names that a reshape near it splits it into."""
    factors = _factors(context, size)
    if not factors:
        return False
    scope = context.enclosing(size, cst.ClassDef) or context.enclosing(size, cst.FunctionDef) or context.module
    for call in context.nodes_within(scope, cst.Call):
        if last_name(call.func) in RESHAPES and any(factors & _identifiers(context, arg.value) for arg in call.args):
            return True
    return False


def _factors(context: FileContext, size: cst.BaseExpression) -> set[str]:
    """The names a computed size multiplies or adds (``{"k", "heads"}`` for ``k**4 * heads``), through a name or
    ``self`` attribute that holds the computation; empty for a literal or a name bound to one."""
    expr: cst.BaseExpression | None = size
    if isinstance(size, (cst.Name, cst.Attribute)):
        origin = origin_of(context, size)
        expr = origin.value if origin is not None else None
    if not isinstance(expr, cst.BinaryOperation):
        return set()
    return _identifiers(context, expr)


def _identifiers(context: FileContext, expr: cst.BaseExpression) -> set[str]:
    """The names an expression reads, an attribute by its last name (``self.config.heads`` reads ``heads``)."""
    found = set()
    for name in context.nodes_within(expr, cst.Name):
        parent = context.parent(name)
        if isinstance(parent, cst.Attribute):
            outer = context.parent(parent)
            if parent.value is name or isinstance(outer, cst.Attribute) and outer.value is parent:
                continue  # an owner (`self`, `config` of `self.config.heads`), not what is read
        found.add(name.value)
    return found
