"""Which expressions carry compute-dtype (possibly float16) values.

A value is compute-dtype when it is cast to a tensor's dtype (``x.dtype``),
to ``self.compute_dtype`` or to float16, when it is an input of a Layer's
``call()`` (Keras autocasts floating inputs to the compute dtype), the output
of a sublayer called inside a Layer, or arithmetic on any of these. A value
cast to float32 (or float64) first is not. Names are followed back to their
latest binding in the same function, in source order.

``classify`` answers with a ``Carrier`` (compute-dtype; ``dtype`` is an
expression naming that dtype at the use site, or None when only
``self.compute_dtype`` can), ``FLOAT32`` or None (unknown).
"""

from __future__ import annotations

import ast
from dataclasses import dataclass

import libcst as cst

from mplint.analysis.call_args import argument
from mplint.engine.code_summary import walk_ast
from mplint.engine.context import FileContext
from mplint.engine.names import dotted
from mplint.engine.walk import walk

FLOAT16_SPELLINGS = frozenset({"float16", "half", "f2"})
WIDE_SPELLINGS = frozenset({"float32", "float64", "double", "single", "f4", "f8"})
_NON_FLOAT_SPELLINGS = frozenset(
    {"int8", "int16", "int32", "int64", "uint8", "uint16", "bool", "string", "bfloat16"}
)
_CAST_PATHS = frozenset({"cast", "dtypes.cast", "ops.cast", "backend.cast", "image.convert_image_dtype"})
_CONVERT_PATHS = frozenset({"convert_to_tensor", "constant", "ops.convert_to_tensor", "array", "asarray"})
_NON_FLOAT_RESULTS = frozenset({"shape", "rank", "size", "argmax", "argmin", "ops.shape", "ops.argmax", "ops.argmin"})
_INPUT_EXEMPT = frozenset({"self", "training"})


class Float32:
    """The value is float32 or wider on every policy."""

    def __repr__(self) -> str:
        return "FLOAT32"


FLOAT32 = Float32()


@dataclass(frozen=True)
class Carrier:
    """A compute-dtype value. ``always_float16``: cast to float16 explicitly."""

    dtype: cst.BaseExpression | None = None
    always_float16: bool = False


class DtypeFlow:
    """Per-file dtype-flow analysis; use ``context.analysis(DtypeFlow)``."""

    def __init__(self, context: FileContext):
        self.context = context
        self._bindings: dict[int, dict[str, list]] = {}
        self._layer_classes: dict[int, bool] = {}
        self._active: set[int] = set()

    # --- structure -------------------------------------------------------------------------

    def enclosing_function(self, node: cst.CSTNode) -> cst.FunctionDef | None:
        for parent in self.context.ancestors(node):
            if isinstance(parent, (cst.FunctionDef, cst.Lambda)):
                return parent if isinstance(parent, cst.FunctionDef) else None
        return None

    def enclosing_class(self, node: cst.CSTNode) -> cst.ClassDef | None:
        return self.context.enclosing(node, cst.ClassDef)

    def is_layer_class(self, cls: cst.ClassDef) -> bool:
        key = id(cls)
        if key not in self._layer_classes:
            self._layer_classes[key] = False  # guards against cycles
            self._layer_classes[key] = any(self._is_layer_base(arg.value) for arg in cls.bases)
        return self._layer_classes[key]

    def _is_layer_base(self, base: cst.BaseExpression) -> bool:
        if any(k.is_keras for k in self.context.names.knames(base)):
            return True
        name = dotted(base) or ""
        last = name.rsplit(".", 1)[-1]
        if last.endswith(("Layer", "Model")):
            return True
        for stmt in self.context.module.body:  # a layer base class defined in this file
            if isinstance(stmt, cst.ClassDef) and stmt.name.value == name:
                return self.is_layer_class(stmt)
        return False

    def in_layer_class(self, node: cst.CSTNode) -> bool:
        cls = self.enclosing_class(node)
        return cls is not None and self.is_layer_class(cls)

    # --- classification --------------------------------------------------------------------

    def classify(self, expr: cst.BaseExpression):
        key = id(expr)
        if key in self._active:
            return None
        self._active.add(key)
        try:
            return self._classify(expr)
        finally:
            self._active.discard(key)

    def is_compute(self, expr: cst.BaseExpression) -> bool:
        return isinstance(self.classify(expr), Carrier)

    def _classify(self, expr: cst.BaseExpression):
        if isinstance(expr, cst.Name):
            return self._classify_name(expr)
        if isinstance(expr, cst.BinaryOperation):
            return self._combine([expr.left, expr.right])
        if isinstance(expr, cst.UnaryOperation):
            return self.classify(expr.expression)
        if isinstance(expr, cst.Subscript):
            found = self.classify(expr.value)
            if isinstance(found, Carrier) and isinstance(expr.value, cst.Name):
                return Carrier(_dtype_of(expr.value), found.always_float16)
            return found
        if isinstance(expr, cst.IfExp):
            return self._combine([expr.body, expr.orelse])
        if isinstance(expr, cst.Call):
            return self._classify_call(expr)
        return None

    def _combine(self, parts):
        found = [self.classify(p) for p in parts]
        for f in found:
            if isinstance(f, Carrier):
                return f
        return FLOAT32 if any(f is FLOAT32 for f in found) else None

    def _classify_call(self, call: cst.Call):
        names = self.context.names
        func = call.func
        is_astype = isinstance(func, cst.Attribute) and func.attr.value == "astype"
        target_dtype = None
        if is_astype:
            target_dtype = argument(call, 0, "dtype")
        else:
            kname = names.kname(func)
            path = kname.path if kname else ""
            if path in _CAST_PATHS:
                target_dtype = argument(call, 1, "dtype")
            elif path in _CONVERT_PATHS:
                target_dtype = argument(call, None, "dtype")
                if target_dtype is None:
                    return self.classify(call.args[0].value) if call.args else None
            elif path in _NON_FLOAT_RESULTS:
                return None
            elif path in {"float16", "half"} and kname.ns in ("np", "tf"):
                return Carrier(always_float16=True)
        if target_dtype is not None:
            return self.dtype_target(target_dtype)
        if isinstance(func, cst.Attribute) and _is_self(func.value) and self.in_layer_class(call):
            return None if self._sublayer_is_float32(call, func.attr.value) else Carrier()
        positional = [a.value for a in call.args if a.keyword is None and a.star == ""]
        if not positional:
            return None
        kname = names.kname(func)
        if kname is None or kname.ns == "np":
            return None
        return self._combine(positional)

    def dtype_target(self, dtype: cst.BaseExpression):
        """What casting to ``dtype`` produces."""
        spelled = dtype_spelling(self.context, dtype)
        if spelled in FLOAT16_SPELLINGS:
            return Carrier(always_float16=True)
        if spelled in WIDE_SPELLINGS or spelled in _NON_FLOAT_SPELLINGS:
            return FLOAT32 if spelled in WIDE_SPELLINGS else None
        if isinstance(dtype, cst.Attribute) and dtype.attr.value == "dtype":
            source = self.classify(dtype.value)
            if source is FLOAT32:
                return FLOAT32
            if isinstance(source, Carrier) and source.always_float16:
                return source
            return Carrier(dtype)
        if isinstance(dtype, cst.Attribute) and dtype.attr.value in ("compute_dtype", "_compute_dtype"):
            return Carrier(dtype)
        if isinstance(dtype, cst.Attribute) and dtype.attr.value in ("variable_dtype", "_variable_dtype"):
            return None
        if isinstance(dtype, cst.Name):
            return Carrier(dtype)  # a dtype parameter: the caller picks
        return None

    def _classify_name(self, name: cst.Name):
        function = self.enclosing_function(name)
        if function is None:
            return None
        binding = self._latest_binding(function, name)
        if binding is None:
            if self._is_layer_input(function, name.value):
                return Carrier(_dtype_of(name))
            return None
        kind, node = binding
        if kind == "assign":
            found = self.classify(node)
        elif kind == "augassign":
            found = self._combine([node.target, node.value])
        else:
            return None
        if isinstance(found, Carrier) and not found.always_float16:
            return Carrier(_dtype_of(name))
        return found

    def _latest_binding(self, function: cst.FunctionDef, name: cst.Name):
        at = self.context.source_order(name)
        latest = None
        for end, kind, node in self._function_bindings(function).get(name.value, ()):
            if end < at:
                latest = (kind, node)
        return latest

    def _function_bindings(self, function: cst.FunctionDef) -> dict[str, list]:
        key = id(function)
        if key not in self._bindings:
            collector = _BindingCollector(self.context)
            walk(function.body, collector, self.context.children)
            self._bindings[key] = collector.bindings
        return self._bindings[key]

    def _is_layer_input(self, function: cst.FunctionDef, name: str) -> bool:
        if function.name.value != "call" or name in _INPUT_EXEMPT:
            return False
        params = function.params
        every = [*params.posonly_params, *params.params, *params.kwonly_params]
        if not any(p.name.value == name for p in every):
            return False
        cls = self.enclosing_class(function)
        return cls is not None and self.is_layer_class(cls)

    def _sublayer_is_float32(self, call: cst.Call, attr: str) -> bool:
        """``self.head(...)`` where ``self.head = Dense(..., dtype="float32")``."""
        cls = self.enclosing_class(call)
        if cls is None:
            return False
        for node in _self_assignments(self.context, cls, attr):
            if isinstance(node, cst.Call):
                dtype = argument(node, None, "dtype")
                if dtype is not None and dtype_spelling(self.context, dtype) in WIDE_SPELLINGS:
                    return True
        return False


class _BindingCollector(cst.CSTVisitor):
    """Bindings of plain names in one function body (nested scopes skipped)."""

    def __init__(self, context: FileContext):
        self.context = context
        self.bindings: dict[str, list] = {}

    def _add(self, target: cst.BaseExpression, kind: str, node, anchor: cst.CSTNode) -> None:
        """``anchor``: the binding holds for names after its end (``x = x + 1`` reads the old ``x``)."""
        if isinstance(target, cst.Name):
            self.bindings.setdefault(target.value, []).append((self.context.end_order(anchor), kind, node))
        elif isinstance(target, (cst.Tuple, cst.List)):
            for element in target.elements:
                self._add(element.value, kind, node, anchor)

    def visit_FunctionDef(self, node) -> bool:
        return False

    def visit_ClassDef(self, node) -> bool:
        return False

    def visit_Lambda(self, node) -> bool:
        return False

    def visit_Assign(self, node: cst.Assign) -> None:
        for target in node.targets:
            self._add(target.target, "assign", node.value, node)

    def visit_AnnAssign(self, node: cst.AnnAssign) -> None:
        if node.value is not None:
            self._add(node.target, "assign", node.value, node)

    def visit_AugAssign(self, node: cst.AugAssign) -> None:
        self._add(node.target, "augassign", node, node)

    def visit_For(self, node: cst.For) -> None:
        self._add(node.target, "other", node, node.iter)

    def visit_WithItem(self, node: cst.WithItem) -> None:
        if node.asname is not None:
            self._add(node.asname.name, "other", node, node)

    def visit_NamedExpr(self, node: cst.NamedExpr) -> None:
        self._add(node.target, "assign", node.value, node)


def _self_assignments(context: FileContext, cls: cst.ClassDef, attr: str):
    """Values assigned to ``self.<attr>`` anywhere in the class."""
    found = []
    for node in context.nodes_within(cls.body, cst.Assign):
        for target in node.targets:
            t = target.target
            if isinstance(t, cst.Attribute) and _is_self(t.value) and t.attr.value == attr:
                found.append(node.value)
    return found


def _is_self(node: cst.BaseExpression) -> bool:
    return isinstance(node, cst.Name) and node.value == "self"


def _dtype_of(name: cst.Name) -> cst.Attribute:
    return cst.Attribute(value=cst.Name(name.value), attr=cst.Name("dtype"))


def dtype_spelling(context: FileContext, dtype: cst.BaseExpression) -> str | None:
    """``"float16"`` for ``tf.float16``, ``np.float16``, ``"float16"``, ``keras.mixed_precision...``; else None."""
    if isinstance(dtype, cst.SimpleString):
        return dtype.evaluated_value if isinstance(dtype.evaluated_value, str) else None
    if isinstance(dtype, (cst.Attribute, cst.Name)):
        for kname in context.names.knames(dtype):
            if kname.ns in ("tf", "np") or kname.is_keras:
                last = kname.last
                if last in FLOAT16_SPELLINGS | WIDE_SPELLINGS | _NON_FLOAT_SPELLINGS:
                    return last
    return None


# --- pre-filter tests on CPython's tree ---------------------------------------------------------

_CARRYING_CALLS = frozenset(
    path.rsplit(".", 1)[-1] for path in (*_CAST_PATHS, *_CONVERT_PATHS, "astype", "float16", "half")
)


def flow_units(tree: ast.Module) -> list[list[ast.AST]]:
    """The file's code in the parts ``classify`` follows names within: each outermost function
    (methods included, nested functions and lambdas with it), and the code outside functions."""
    outside: list[ast.AST] = []
    functions: list[ast.AST] = []
    stack = list(ast.iter_child_nodes(tree))
    while stack:
        node = stack.pop()
        if type(node) in (ast.FunctionDef, ast.AsyncFunctionDef):
            functions.append(node)
            continue
        outside.append(node)
        stack.extend(ast.iter_child_nodes(node))
    return [outside, *(list(walk_ast(f)) for f in functions)]


def may_carry(code, unit: list[ast.AST]) -> bool:
    """Pre-filter: can ``classify`` find a compute-dtype value in this unit of ``flow_units``?
    Only a cast or conversion, ``np.float16(...)``, a sublayer call ``self.x(...)`` or the inputs of
    a ``call()`` method start one; everything else only passes one on."""
    for node in unit:
        kind = type(node)
        if kind is ast.Call:
            func = node.func
            if type(func) is ast.Attribute and type(func.value) is ast.Name and func.value.id == "self":
                return True
            if not code.names_of(node).isdisjoint(_CARRYING_CALLS):
                return True
        elif kind in (ast.FunctionDef, ast.AsyncFunctionDef) and node.name == "call":
            return True
    return False
