"""Evaluating simple constant expressions without running the code.

Handles literals, arithmetic of them (``NUM_UNITS * 2``), the builtins ``int``,
``round``, ``max`` and ``min`` of such values (``int(in_channels * expand_ratio)``),
names bound exactly once to such an expression (module constants, function
locals) and parameters with defaults of the enclosing function. Anything else
(imports, attributes, other calls, loop variables, names assigned twice) is
unknown: rules stay silent on values they cannot be sure of.
"""

from __future__ import annotations

import ast
import operator
from collections.abc import Callable
from dataclasses import dataclass

import libcst as cst
from libcst.metadata import BuiltinAssignment

from mplint.analysis.bindings import binding_nodes, scope_referents
from mplint.engine.context import FileContext
from mplint.engine.names import assigned_name, dotted
from mplint.knowledge.float16_range import FLOAT32_MAX

# Bindings looked up per name (analysis/bindings.py), the ScopeProvider only where that is unsure.
FAST_BINDINGS = True
_MAX_DEPTH = 10  # guards against long or cyclic chains of constants
_BINARY = {
    cst.Add: operator.add,
    cst.Subtract: operator.sub,
    cst.Multiply: operator.mul,
    cst.FloorDivide: operator.floordiv,
    cst.Divide: operator.truediv,
    cst.Modulo: operator.mod,
    cst.Power: operator.pow,
}
_NUMERIC_BUILTINS: dict[str, Callable[..., int | float]] = {"int": int, "round": round, "max": max, "min": min}


@dataclass(frozen=True)
class Constant:
    """A value known statically.

    ``literal`` is the one integer literal that alone decides the value (the
    expression itself, or the right-hand side of the single assignment of a
    constant); ``binding`` is that constant's name node when it came through one.
    Both are None when the value is computed or comes from a parameter default. ``from_default``: the value
    depends on a parameter's default, which callers may override.
    """

    value: object
    literal: cst.Integer | None = None
    binding: cst.Name | None = None
    from_default: bool = False


def evaluate(context: FileContext, expr: cst.BaseExpression, depth: int = 0) -> Constant | None:
    if depth > _MAX_DEPTH:
        return None
    if isinstance(expr, cst.Integer):
        return Constant(number_value(expr), expr)
    if isinstance(expr, cst.Float):
        return Constant(number_value(expr))
    if isinstance(expr, cst.SimpleString):
        return Constant(expr.evaluated_value)
    if isinstance(expr, cst.Name):
        if expr.value in ("True", "False", "None"):
            return Constant({"True": True, "False": False, "None": None}[expr.value])
        return _name(context, expr, depth)
    if isinstance(expr, cst.UnaryOperation) and isinstance(expr.operator, (cst.Minus, cst.Plus)):
        inner = evaluate(context, expr.expression, depth + 1)
        if inner is None or not _is_number(inner.value):
            return None
        return Constant(
            -inner.value if isinstance(expr.operator, cst.Minus) else inner.value, from_default=inner.from_default
        )
    if isinstance(expr, cst.BinaryOperation) and type(expr.operator) in _BINARY:
        left = evaluate(context, expr.left, depth + 1)
        right = evaluate(context, expr.right, depth + 1)
        if left is None or right is None or not (_is_number(left.value) and _is_number(right.value)):
            return None
        if isinstance(expr.operator, cst.Power) and abs(right.value) > 64:
            return None  # not a size anyone writes, and costly to compute
        try:
            value = _BINARY[type(expr.operator)](left.value, right.value)
        except (ArithmeticError, ValueError):
            return None
        return Constant(value, from_default=left.from_default or right.from_default)
    if isinstance(expr, cst.Call) and isinstance(expr.func, cst.Name) and expr.func.value in _NUMERIC_BUILTINS:
        return _builtin_call(context, expr, depth)
    return None


def _builtin_call(context: FileContext, call: cst.Call, depth: int) -> Constant | None:
    """``int(x)``, ``round(x)``, ``max(a, b)``, ``min(a, b)`` of known numbers, as Python computes them (``round``
    rounds half to even), where nothing in the file rebinds the builtin's name. Not of a parameter's default: a
    width computed from a ratio of ``channels=40`` is the width of whatever channels callers pass."""
    if any(a.keyword is not None or a.star for a in call.args) or not call.args:
        return None
    name = call.func.value
    if (len(call.args) != 1) if name in ("int", "round") else len(call.args) < 2:
        return None  # ``round(x, 2)`` is a float; ``max(sizes)`` iterates
    if not _builtin(context, call.func):
        return None  # rebound or imported: not the builtin
    values = []
    for arg in call.args:
        found = evaluate(context, arg.value, depth + 1)
        if found is None or not _is_number(found.value) or found.from_default:
            return None
        values.append(found.value)
    try:
        return Constant(_NUMERIC_BUILTINS[name](*values))
    except (ArithmeticError, ValueError):
        return None  # int(inf), int(nan)


def _builtin(context: FileContext, name: cst.Name) -> bool:
    """Nothing in the file binds ``name`` where it is read: it is Python's builtin."""
    nodes = binding_nodes(context, name) if FAST_BINDINGS else None
    if nodes is not None:
        return not nodes
    scope = context.names.scopes.get(name)
    if scope is None:
        return False
    referents = {r for access in scope.accesses[name] for r in access.referents}
    return bool(referents) and all(isinstance(r, BuiltinAssignment) for r in referents)


def number_value(node: cst.Integer | cst.Float) -> int | float:
    """The value of a number literal (``evaluated_value`` runs ``ast.literal_eval``, whose closures
    leave garbage for the cyclic collector on every call)."""
    text = node.value.replace("_", "")
    return int(text, 0) if isinstance(node, cst.Integer) else float(text)


def signed(expr: cst.BaseExpression, atom: Callable[[cst.BaseExpression], float | None]) -> float | None:
    """``atom``'s value of ``expr`` under any unary signs (``-1e9``, ``-tf.float32.max``)."""
    sign = 1.0
    while isinstance(expr, cst.UnaryOperation) and isinstance(expr.operator, (cst.Minus, cst.Plus)):
        sign = -sign if isinstance(expr.operator, cst.Minus) else sign
        expr = expr.expression
    value = atom(expr)
    return None if value is None else sign * value


_FOLDED: dict[type, Callable[[float, float], float]] = {
    cst.Add: operator.add,
    cst.Subtract: operator.sub,
    cst.Multiply: operator.mul,
    cst.Divide: operator.truediv,
    cst.Power: operator.pow,
}
_AST_FOLDED: dict[type, Callable[[float, float], float]] = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
    ast.Pow: operator.pow,
}


def folded(expr: cst.BinaryOperation, value: Callable[[cst.BaseExpression], float | None]) -> float | None:
    """Arithmetic of numbers that ``value`` reads (``-2 ** 32 + 1``, ``-10000.0 * 1e5``), in floats; None for
    anything else (and exponents beyond 64, which nobody writes for a constant)."""
    apply = _FOLDED.get(type(expr.operator))
    left = value(expr.left) if apply is not None else None
    right = value(expr.right) if left is not None else None
    return _apply(apply, left, right)


def ast_folded(node: ast.AST, depth: int = 0) -> float | None:
    """``folded`` of literals on CPython's tree (signed literals, and arithmetic of them)."""
    sign = 1.0
    while type(node) is ast.UnaryOp and type(node.op) in (ast.USub, ast.UAdd):
        sign = -sign if type(node.op) is ast.USub else sign
        node = node.operand
    if type(node) is ast.Constant:
        return sign * node.value if type(node.value) in (int, float) else None
    if type(node) is not ast.BinOp or depth > _MAX_DEPTH:
        return None
    apply = _AST_FOLDED.get(type(node.op))
    left = ast_folded(node.left, depth + 1) if apply is not None else None
    right = ast_folded(node.right, depth + 1) if left is not None else None
    result = _apply(apply, left, right)
    return None if result is None else sign * result


def _apply(apply, left: float | None, right: float | None) -> float | None:
    if apply is None or left is None or right is None or (apply is operator.pow and abs(right) > 64):
        return None
    try:
        result = apply(float(left), float(right))
    except (ArithmeticError, ValueError):
        return None
    return result if isinstance(result, float) else None  # a negative number to a fractional power is complex


def number_literal(expr: cst.BaseExpression) -> float | None:
    return float(number_value(expr)) if isinstance(expr, (cst.Integer, cst.Float)) else None


def wide_dtype_limit(
    expr: cst.BaseExpression,
    finfo_dtype: Callable[[cst.Call], cst.BaseExpression | None],
    is_wide: Callable[[cst.BaseExpression], bool],
    bare: bool = True,
) -> float | None:
    """A float32/float64 limit, as float32's: ``finfo(<dtype>).min``/``.max`` where ``finfo_dtype`` reads the
    dtype of a framework's ``finfo`` call (None for any other call), and, where ``bare``, ``<dtype>.min``/``.max``
    (``tf.float32.min``); ``is_wide`` says which dtypes count. None for anything else."""
    if not isinstance(expr, cst.Attribute) or expr.attr.value not in ("min", "max"):
        return None
    base = expr.value
    dtype = finfo_dtype(base) if isinstance(base, cst.Call) else None
    if dtype is None and not bare:
        return None
    return (-1.0 if expr.attr.value == "min" else 1.0) * FLOAT32_MAX if is_wide(dtype or base) else None


def literal_number(expr: cst.BaseExpression) -> float | None:
    """A number written as a literal, signed or not (``-1e9``, ``+3``, ``1e-8``); None for anything else."""
    return signed(expr, number_literal)


def evaluate_int(context: FileContext, expr: cst.BaseExpression) -> Constant | None:
    found = evaluate(context, expr)
    return found if found is not None and type(found.value) is int else None


def only_used_where(context: FileContext, binding: cst.Name, wanted: Callable[[cst.Name], bool]) -> bool:
    """Whether every read of the constant bound at ``binding`` satisfies ``wanted``."""
    assignment = _assignment_at(context, binding)
    return assignment is not None and all(
        isinstance(ref.node, cst.Name) and wanted(ref.node) for ref in assignment.references
    )


def _is_number(value: object) -> bool:
    return type(value) in (int, float)


def _name(context: FileContext, name: cst.Name, depth: int) -> Constant | None:
    nodes = binding_nodes(context, name) if FAST_BINDINGS else None
    if nodes is None:
        nodes = scope_referents(context, name)
    if nodes is None or len(nodes) != 1:
        return None  # unbound, or bound more than once: the value depends on the path taken
    node = nodes[0]
    if isinstance(node, cst.Param):
        return _parameter_default(context, node, depth)
    if not isinstance(node, cst.Name):
        return None  # imports, function and class names
    value = _assigned_value(context, node)
    if value is None:
        return None
    found = evaluate(context, value, depth + 1)
    if found is None:
        return None
    literal = value if isinstance(value, cst.Integer) else found.literal
    binding = node if isinstance(value, cst.Integer) else found.binding
    return Constant(found.value, literal, binding, found.from_default)


def _parameter_default(context: FileContext, param: cst.Param, depth: int) -> Constant | None:
    if param.default is None:
        return None
    found = evaluate(context, param.default, depth + 1)
    return Constant(found.value, from_default=True) if found is not None else None  # callers may pass anything: no edit


@dataclass(frozen=True)
class Origin:
    """The one expression a name or a ``self`` attribute holds, and where the reader finds it."""

    value: cst.BaseExpression
    binding: cst.CSTNode  # the parameter or assignment target that holds it
    parameter: str = ""  # the parameter's name when the value is its default

    def where(self, context: FileContext) -> str:
        """ "the default of `mask_value` at line 8", "set at line 4" (positions are computed only when asked:
        they cost a pass over the file)."""
        line = context.position(self.binding).start.line
        return f"the default of `{self.parameter}` at line {line}" if self.parameter else f"set at line {line}"


def reaching_assignment(context: FileContext, target: str, use: cst.CSTNode) -> cst.Assign | None:
    """The last assignment to ``target`` (``x``, ``self.x``, as written) that surely runs before ``use``: in its
    function, in ``use``'s own block or an enclosing one (not a sibling branch). None: no such assignment."""
    scope = context.enclosing(use, cst.FunctionDef) or context.module
    reaching = None
    for assign in context.nodes_within(scope, cst.Assign):
        if not any(dotted(t.target) == target for t in assign.targets) or not context.ends_before(assign, use):
            continue
        if context.contains(context.parent(context.parent(assign)), use):
            reaching = assign
    return reaching


def origin_of(context: FileContext, expr: cst.BaseExpression, depth: int = 0) -> Origin | None:
    """Follow a name bound once, a parameter's default or a ``self`` attribute assigned once in its
    class (``self.mask_value = mask_value``) to the expression it holds; None where the value depends
    on the path taken or on a caller (a parameter without default)."""
    if depth > _MAX_DEPTH:
        return None
    found: Origin | None = None
    if isinstance(expr, cst.Name):
        nodes = binding_nodes(context, expr)
        if not nodes or len(nodes) != 1:
            return None
        node = nodes[0]
        if isinstance(node, cst.Param) and node.default is not None:
            found = Origin(node.default, node, expr.value)
        elif isinstance(node, cst.Name) and (value := _assigned_value(context, node)) is not None:
            found = Origin(value, node)
    elif isinstance(expr, cst.Attribute) and isinstance(expr.value, cst.Name) and expr.value.value == "self":
        found = _self_attribute(context, expr)
    if found is None:
        return None
    deeper = origin_of(context, found.value, depth + 1) if isinstance(found.value, (cst.Name, cst.Attribute)) else None
    return deeper or found


def _self_attribute(context: FileContext, attribute: cst.Attribute) -> Origin | None:
    """``self.x`` read in a method: its one assignment in the class (``self.x = ...`` in any method, else
    ``x = ...`` in the class body). Any other write (``+=``, tuple targets, two assignments) makes it unknown."""
    owner = context.enclosing(attribute, cst.ClassDef)
    if owner is None:
        return None
    name = attribute.attr.value
    writes: list[tuple[cst.CSTNode, cst.BaseExpression | None]] = []
    for node in context.nodes_within(owner, cst.Assign, cst.AnnAssign, cst.AugAssign):
        targets = [t.target for t in node.targets] if isinstance(node, cst.Assign) else [node.target]
        for target in targets:
            for element in _target_elements(target):
                if (
                    isinstance(element, cst.Attribute)
                    and element.attr.value == name
                    and isinstance(element.value, cst.Name)
                    and element.value.value == "self"
                ):
                    single = isinstance(node, (cst.Assign, cst.AnnAssign)) and len(targets) == 1 and element is target
                    writes.append((element, node.value if single else None))
    if not writes:
        for statement in owner.body.body:  # a class attribute read through self
            if isinstance(statement, cst.SimpleStatementLine):
                for small in statement.body:
                    if assigned_name(small) == name:
                        writes.append((small.targets[0].target, small.value))
    if len(writes) != 1 or writes[0][1] is None:
        return None
    target, value = writes[0]
    return Origin(value, target)


def _target_elements(target: cst.BaseExpression):
    if isinstance(target, (cst.Tuple, cst.List)):
        for element in target.elements:
            yield from _target_elements(element.value)
    elif isinstance(target, cst.StarredElement):
        yield from _target_elements(target.value)
    else:
        yield target


def _assigned_value(context: FileContext, target: cst.Name) -> cst.BaseExpression | None:
    parent = context.parent(target)
    if isinstance(parent, cst.AnnAssign) and parent.value is not None:
        return parent.value
    if isinstance(parent, cst.AssignTarget):
        assign = context.parent(parent)
        if isinstance(assign, cst.Assign) and len(assign.targets) == 1:
            return assign.value
    return None


def _assignment_at(context: FileContext, binding: cst.Name):
    scope = context.names.scopes.get(binding)
    if scope is None:
        return None
    return next((a for a in scope.assignments[binding.value] if a.node is binding), None)


# --- the same evaluation over CPython's tree, for the rules' pre-filters ------------------------------

ALIGNED, UNALIGNED = "aligned", "unaligned"
_NONE: frozenset[str] = frozenset()
_ALIGNED = frozenset({ALIGNED})
_EITHER = frozenset({ALIGNED, UNALIGNED})


def may_be_unaligned(code, expr: ast.expr, multiple: int, names: dict | None = None) -> bool:
    """Pre-filter: could ``evaluate_int`` find an int that is not a multiple of ``multiple`` in ``expr``?

    ``code`` is the file's ``CodeSummary``. A superset of ``evaluate``: every binding of a name in
    the file counts (``evaluate`` needs exactly one), and results of ``//``, ``%`` and ``**`` may be
    anything. Sums and differences of multiples are multiples, and so is a product with one. ``names``
    (a dict) may be shared by the calls of one file with one ``multiple``."""
    return UNALIGNED in _int_kinds(code, expr, multiple, 0, {} if names is None else names)


def _int_kinds(code, expr: ast.expr, multiple: int, depth: int, names: dict) -> frozenset[str]:
    """Which of ALIGNED/UNALIGNED an int value of ``expr`` can be; empty when it is never a known int.

    ``names`` memoises a name's kinds at a depth: a parameter bound in every function of a file
    (``units``) is read as often as it is bound."""
    if depth > _MAX_DEPTH:
        return _NONE
    kind = type(expr)
    if kind is ast.Constant:
        value = expr.value
        if type(value) not in (int, bool):
            return _NONE  # floats make the result a float, which no size check accepts
        return frozenset({UNALIGNED if value % multiple else ALIGNED})
    if kind is ast.Name:
        key = (expr.id, depth)
        found = names.get(key)
        if found is None:
            found = _NONE
            for value in code.simple_bindings.get(expr.id, ()):
                found |= _int_kinds(code, value, multiple, depth + 1, names)
            names[key] = found
        return found
    if kind is ast.UnaryOp and type(expr.op) in (ast.USub, ast.UAdd):
        return _int_kinds(code, expr.operand, multiple, depth + 1, names)
    if kind is ast.BinOp and type(expr.op) in (ast.Add, ast.Sub, ast.Mult, ast.FloorDiv, ast.Mod, ast.Pow):
        left = _int_kinds(code, expr.left, multiple, depth + 1, names)
        right = _int_kinds(code, expr.right, multiple, depth + 1, names)
        if not left or not right:
            return _NONE
        op = type(expr.op)
        if op is ast.Mult and (left == _ALIGNED or right == _ALIGNED):
            return _ALIGNED
        if op in (ast.Add, ast.Sub) and left == right == _ALIGNED:
            return _ALIGNED
        return _EITHER
    if kind is ast.Call and type(expr.func) is ast.Name and expr.func.id in _NUMERIC_BUILTINS and not expr.keywords:
        if expr.func.id in ("int", "round"):
            numeric = len(expr.args) == 1 and _may_be_number(code, expr.args[0], depth + 1, names)
            return _EITHER if numeric else _NONE
        kinds = [_int_kinds(code, arg, multiple, depth + 1, names) for arg in expr.args]
        return frozenset().union(*kinds) if len(kinds) > 1 and all(kinds) else _NONE
    return _NONE


def _may_be_number(code, expr: ast.expr, depth: int, names: dict) -> bool:
    """Could ``evaluate`` find a number (int or float) in ``expr``? (a superset, as ``_int_kinds``)"""
    if depth > _MAX_DEPTH:
        return False
    kind = type(expr)
    if kind is ast.Constant:
        return type(expr.value) in (int, float)
    if kind is ast.Name:
        key = ("number", expr.id, depth)
        found = names.get(key)
        if found is None:
            names[key] = False  # a name bound to itself (``x = x * 2``) is no number on that path
            found = names[key] = any(
                _may_be_number(code, value, depth + 1, names) for value in code.simple_bindings.get(expr.id, ())
            )
        return found
    if kind is ast.UnaryOp and type(expr.op) in (ast.USub, ast.UAdd):
        return _may_be_number(code, expr.operand, depth + 1, names)
    if kind is ast.BinOp and type(expr.op) in _AST_ARITHMETIC:
        return _may_be_number(code, expr.left, depth + 1, names) and _may_be_number(code, expr.right, depth + 1, names)
    if kind is ast.Call and type(expr.func) is ast.Name and expr.func.id in _NUMERIC_BUILTINS:
        return bool(expr.args) and all(_may_be_number(code, a, depth + 1, names) for a in expr.args)
    return False


_AST_ARITHMETIC = (ast.Add, ast.Sub, ast.Mult, ast.Div, ast.FloorDiv, ast.Mod, ast.Pow)
