"""Which expressions carry compute-dtype (possibly float16) values.

A value is compute-dtype when it is cast to a tensor's dtype (``x.dtype``),
to ``self.compute_dtype`` or to float16, when it is an input of a Layer's
``call()`` (Keras autocasts floating inputs to the compute dtype), the output
of a sublayer called inside a Layer, or arithmetic on any of these. A value
cast to float32 (or float64) first is not, nor is arithmetic with such a value
(TensorFlow refuses to mix float16 and float32 operands; Keras 3 promotes the
result to float32), a TF/Keras call given ``dtype=float32``, the result of a
helper of the same file whose every return is float32 or of a helper named for
it (``fp16_to_fp32_nested``), ``tf.nest.map_structure`` of a casting function,
a Keras loss function on float32 predictions (its result has the dtype of
``y_pred``, not of the labels), or an input of a Layer whose instances all
compute in float32 (``super().__init__(dtype="float32")``, or every
construction in the file passes ``dtype="float32"``). Names are followed back
to their latest binding in the same function, in source order.

``is_mask`` answers a different question: is a value a 0/1 mask (a cast
comparison, ``one_hot``, ``sequence_mask``, ``ones_like``, a name that says
mask or weight), whose sum is a count and cannot overflow like a sum of losses?

``classify`` answers with a ``Carrier`` (compute-dtype; ``dtype`` is an
expression naming that dtype at the use site, or None when only
``self.compute_dtype`` can), ``FLOAT32`` or None (unknown).
"""

from __future__ import annotations

import ast
import re
from collections.abc import Callable
from dataclasses import dataclass

import libcst as cst

from mplint.analysis.call_args import argument, keyword_value
from mplint.engine.context import FileContext
from mplint.engine.names import dotted
from mplint.engine.summaries import walk as walk_python
from mplint.engine.walk import walk
from mplint.knowledge.dtypes import FLOAT16_NAMES, FLOAT16_SPELLINGS, WIDE_SPELLINGS

_NON_FLOAT_SPELLINGS = frozenset({"int8", "int16", "int32", "int64", "uint8", "uint16", "bool", "string", "bfloat16"})
_CAST_PATHS = frozenset({"cast", "dtypes.cast", "ops.cast", "backend.cast", "image.convert_image_dtype"})
_CONVERT_PATHS = frozenset({"convert_to_tensor", "constant", "ops.convert_to_tensor", "array", "asarray"})
_NON_FLOAT_RESULTS = frozenset({"shape", "rank", "size", "argmax", "argmin", "ops.shape", "ops.argmax", "ops.argmin"})
_INPUT_EXEMPT = frozenset({"self", "training"})
# Keras' functional losses compute in the dtype of y_pred (the labels are cast to it).
_LOSS_PREDICTION = (1, "y_pred")
# TF losses on logits: the result has the logits' dtype.
_LOGITS_LOSSES = frozenset(
    {
        "nn.softmax_cross_entropy_with_logits",
        "nn.sparse_softmax_cross_entropy_with_logits",
        "nn.sigmoid_cross_entropy_with_logits",
        "nn.weighted_cross_entropy_with_logits",
    }
)
_MAP_STRUCTURE = frozenset({"nest.map_structure", "tree.map_structure"})
# TF ops that accept only float32/float64 (or complex) input: RFFT raises on float16, so code after them never
# sees a float16 value (a float16 audio pipeline fails there, before any epsilon meets it).
_WIDE_ONLY = frozenset(
    {
        "signal.stft",
        "signal.rfft",
        "signal.rfft2d",
        "signal.rfft3d",
        "signal.fft",
        "signal.fft2d",
        "signal.fft3d",
        "signal.linear_to_mel_weight_matrix",
    }
)
# A helper named for what it does: fp16_to_fp32_nested, to_float32, cast_to_fp32, as_float32.
_FLOAT32_HELPER = re.compile(r"(?:^|_)(?:to|as)_?(?:fp32|float32)(?:_|$)")
# 0/1 masks: their sums are counts.
_MASK_MAKERS = frozenset({"one_hot", "sequence_mask", "ones_like", "ops.one_hot", "ops.ones_like", "nn.one_hot"})
_BOOLEAN_OPS = frozenset(
    {
        "equal",
        "not_equal",
        "greater",
        "greater_equal",
        "less",
        "less_equal",
        "logical_and",
        "logical_or",
        "logical_not",
        "logical_xor",
        "math.equal",
        "math.not_equal",
        "math.greater",
        "math.greater_equal",
        "math.less",
        "math.less_equal",
        "math.logical_and",
        "math.logical_or",
        "math.logical_not",
        "is_nan",
        "math.is_nan",
        "is_finite",
        "math.is_finite",
        "ops.equal",
        "ops.not_equal",
        "ops.greater",
        "ops.greater_equal",
        "ops.less",
        "ops.less_equal",
        "ops.logical_and",
        "ops.logical_or",
        "ops.logical_not",
    }
)
_SHAPE_ONLY = frozenset(
    {
        "expand_dims",
        "reshape",
        "squeeze",
        "transpose",
        "tile",
        "broadcast_to",
        "gather",
        "stop_gradient",
        "ops.expand_dims",
        "ops.reshape",
        "ops.squeeze",
        "ops.transpose",
        "ops.tile",
        "ops.broadcast_to",
    }
)


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
        self._float32_classes: dict[int, bool] = {}
        self._helpers: dict[int, object] = {}
        self._module_functions: dict[str, list[cst.FunctionDef]] | None = None
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
        knames = self.context.names.knames(base)
        if any(k.is_keras and k.path.startswith("optimizers.") for k in knames):
            return False  # an optimizer computes in its variables' dtype (float32 under a mixed policy)
        if any(k.is_keras for k in knames):
            return True
        name = dotted(base) or ""
        last = name.rsplit(".", 1)[-1]
        if last.endswith(("Layer", "Model")):
            return True
        for stmt in self.context.module.body:  # a layer base class defined in this file
            if isinstance(stmt, cst.ClassDef) and stmt.name.value == name:
                return self.is_layer_class(stmt)
        return False

    def in_keras3_loss(self, node: cst.CSTNode) -> bool:
        """Inside a ``keras.losses.Loss`` subclass on Keras 3, whose ``__call__`` converts the predictions to the
        loss's own dtype (floatx, float32, under any mixed policy) unless the class passes another ``dtype``."""
        cls = self.enclosing_class(node)
        if cls is None or self.context.generation != 3:
            return False
        if not any(
            k.is_keras and k.path == "losses.Loss" for arg in cls.bases for k in self.context.names.knames(arg.value)
        ):
            return False
        return not any(
            keyword_value(call, "dtype") is not None
            for call in self.context.nodes_within(cls, cst.Call)
            if isinstance(call.func, cst.Attribute) and call.func.attr.value == "__init__"
        )

    def in_layer_class(self, node: cst.CSTNode) -> bool:
        cls = self.enclosing_class(node)
        return cls is not None and self.is_layer_class(cls)

    def is_float32_layer(self, cls: cst.ClassDef) -> bool:
        """A Layer class that computes in float32 whatever the policy: its ``__init__`` passes
        ``dtype="float32"`` to the base class, or every construction of it in this file does."""
        key = id(cls)
        if key not in self._float32_classes:
            self._float32_classes[key] = self.is_layer_class(cls) and (
                self._forces_float32(cls) or self._built_in_float32(cls)
            )
        return self._float32_classes[key]

    def _forces_float32(self, cls: cst.ClassDef) -> bool:
        body = cls.body.body if isinstance(cls.body, cst.IndentedBlock) else ()
        for init in (s for s in body if isinstance(s, cst.FunctionDef) and s.name.value == "__init__"):
            for call in self.context.nodes_within(init.body, cst.Call):
                func = call.func
                if (
                    isinstance(func, cst.Attribute)
                    and func.attr.value == "__init__"
                    and isinstance(func.value, cst.Call)
                ):
                    dtype = keyword_value(call, "dtype")
                    if dtype is not None and dtype_spelling(self.context, dtype) in WIDE_SPELLINGS:
                        return True
        return False

    def _built_in_float32(self, cls: cst.ClassDef) -> bool:
        built = [
            c for c in self.context.nodes(cst.Call) if isinstance(c.func, cst.Name) and c.func.value == cls.name.value
        ]
        return bool(built) and all(
            (dtype := keyword_value(c, "dtype")) is not None and dtype_spelling(self.context, dtype) in WIDE_SPELLINGS
            for c in built
        )

    def is_mask(self, expr: cst.BaseExpression, depth: int = 0) -> bool:
        """Whether ``expr`` is a 0/1 mask (its sum is a count): a cast comparison or boolean op,
        ``one_hot``/``sequence_mask``/``ones_like``, ``1 - mask``, a product of masks, a reshaped or
        indexed mask, or a name bound to one of these (a parameter: a name that says mask or weight,
        such as label or sample weights, whose sum is a count of weighted tokens)."""
        if depth > 8:
            return False
        if isinstance(expr, cst.Comparison):
            return True
        if isinstance(expr, cst.Name):
            function = self.enclosing_function(expr)
            binding = self._latest_binding(function, expr) if function is not None else None
            if binding is None:
                return any(word in expr.value.lower() for word in ("mask", "weight"))
            kind, node = binding
            return kind == "assign" and self.is_mask(node, depth + 1)
        if isinstance(expr, cst.Subscript):
            return self.is_mask(expr.value, depth + 1)
        if isinstance(expr, cst.BinaryOperation):
            if isinstance(expr.operator, cst.Multiply):
                return self.is_mask(expr.left, depth + 1) and self.is_mask(expr.right, depth + 1)
            if isinstance(expr.operator, cst.Subtract) and _is_one(expr.left):
                return self.is_mask(expr.right, depth + 1)
            return False
        if isinstance(expr, cst.Call):
            func = expr.func
            if isinstance(func, cst.Attribute) and func.attr.value == "astype":
                return bool(expr.args) and self.is_mask(func.value, depth + 1)
            kname = self.context.names.kname(func)
            if kname is None or not (kname.ns in ("tf", "np") or kname.is_keras):
                return False
            path = kname.path
            if path in _MASK_MAKERS or path in _BOOLEAN_OPS:
                return True
            if path in _CAST_PATHS or path in _SHAPE_ONLY:
                return bool(expr.args) and self.is_mask(expr.args[0].value, depth + 1)
        return False

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
            return self._operands([expr.left, expr.right])
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
        """Either of ``parts`` (``a if c else b``): compute-dtype if one may be."""
        found = [self.classify(p) for p in parts]
        for f in found:
            if isinstance(f, Carrier):
                return f
        return FLOAT32 if any(f is FLOAT32 for f in found) else None

    def _operands(self, parts):
        """Operands of one operation: a float32 operand makes the result float32 (TensorFlow
        rejects a float16 partner, Keras 3 promotes it), except against an explicit float16 cast."""
        found = [self.classify(p) for p in parts]
        if any(f is FLOAT32 for f in found) and not any(isinstance(f, Carrier) and f.always_float16 for f in found):
            return FLOAT32
        # `x * tf.cast(m, x.dtype)` has the dtype of x, whatever it is: an x of unknown dtype
        # leaves the result unknown.
        unknown = {p.value for p, f in zip(parts, found) if isinstance(p, cst.Name) and f is None}
        return next((f for f in found if isinstance(f, Carrier) and _dtype_owner(f) not in unknown), None)

    def _classify_call(self, call: cst.Call):
        names = self.context.names
        func = call.func
        is_astype = isinstance(func, cst.Attribute) and func.attr.value == "astype"
        target_dtype = None
        kname = None if is_astype else names.kname(func)
        path = kname.path if kname else ""
        if is_astype:
            target_dtype = argument(call, 0, "dtype")
        else:
            if path in _CAST_PATHS:
                target_dtype = argument(call, 1, "dtype")
            elif path in _CONVERT_PATHS:
                target_dtype = argument(call, None, "dtype")
                if target_dtype is None:
                    return self.classify(call.args[0].value) if call.args else None
            elif path in _NON_FLOAT_RESULTS:
                return None
            elif path in FLOAT16_NAMES and kname.ns in ("np", "tf"):
                return Carrier(always_float16=True)
            elif kname is not None and (kname.ns == "tf" or kname.is_keras):
                special = self._tf_call(call, kname)
                if special is not _UNKNOWN:
                    return special
        if target_dtype is not None:
            return self.dtype_target(target_dtype)
        helper = self._helper_result(call)
        if helper is not _UNKNOWN:
            return helper
        if isinstance(func, cst.Attribute) and _is_self(func.value) and self.in_layer_class(call):
            return None if self._sublayer_is_float32(call, func.attr.value) else Carrier()
        positional = [a.value for a in call.args if a.keyword is None and a.star == ""]
        if not positional:
            return None
        if kname is None or kname.ns == "np":
            return None
        return self._operands(positional)

    def _tf_call(self, call: cst.Call, kname):
        """What a TF/Keras call gives when it is not a plain elementwise op (``_UNKNOWN`` otherwise)."""
        path = kname.path
        if kname.is_keras and path.startswith("losses.") and path.count(".") == 1 and path[7:].islower():
            predictions = argument(call, *_LOSS_PREDICTION)
            return self.classify(predictions) if predictions is not None else None
        if path in _LOGITS_LOSSES or path.startswith("nn.") and path.endswith("_with_logits"):
            logits = argument(call, 1, "logits")
            return self.classify(logits) if logits is not None else None
        if kname.ns == "tf" and path in _WIDE_ONLY:
            return FLOAT32  # raises on float16 input: whatever follows runs only when the value is float32
        if path in _MAP_STRUCTURE:
            function = argument(call, 0, "func")
            return FLOAT32 if function is not None and self._casts_to_float32(function) else None
        dtype = keyword_value(call, "dtype")
        if dtype is not None and not kname.path.startswith("layers."):
            return self.dtype_target(dtype)
        return _UNKNOWN

    def _casts_to_float32(self, function: cst.BaseExpression) -> bool:
        """A lambda or helper whose result is float32 (``lambda t: tf.cast(t, tf.float32)``)."""
        if isinstance(function, cst.Lambda):
            return self.classify(function.body) is FLOAT32
        name = dotted(function) or ""
        if _FLOAT32_HELPER.search(name.rsplit(".", 1)[-1]):
            return True
        definition = self._definition(function)
        return definition is not None and self._returns_float32(definition)

    def _helper_result(self, call: cst.Call):
        """A helper named for a float32 conversion; a function or method of this file: what its
        returns are (float32 when all are, compute-dtype when one is, else unknown). A method is not
        a sublayer: ``self._norm(grads)`` is no Keras call."""
        name = dotted(call.func) or ""
        if name and _FLOAT32_HELPER.search(name.rsplit(".", 1)[-1]):
            return FLOAT32
        definition = self._definition(call.func)
        if definition is None:
            return _UNKNOWN
        if self._returns_float32(definition):
            return FLOAT32
        return self._returns_carrier(definition)

    def _returns_carrier(self, function: cst.FunctionDef):
        key = ("carrier", id(function))
        if key not in self._helpers:
            self._helpers[key] = None  # guards against recursion
            returns = [
                r
                for r in self.context.nodes_within(function.body, cst.Return)
                if self.enclosing_function(r) is function and r.value is not None
            ]
            found = next((c for c in map(self.classify, (r.value for r in returns)) if isinstance(c, Carrier)), None)
            self._helpers[key] = (
                Carrier(
                    found.dtype if isinstance(found.dtype, cst.Attribute) and _is_self(found.dtype.value) else None,
                    found.always_float16,
                )
                if found is not None
                else None
            )
        return self._helpers[key]

    def _definition(self, func: cst.BaseExpression) -> cst.FunctionDef | None:
        """The function of this file a call invokes: a module-level ``def`` or ``self.method``."""
        if isinstance(func, cst.Name):
            if self._module_functions is None:
                self._module_functions = {}
                for stmt in self.context.module.body:
                    if isinstance(stmt, cst.FunctionDef):
                        self._module_functions.setdefault(stmt.name.value, []).append(stmt)
            found = self._module_functions.get(func.value, ())
            return found[0] if len(found) == 1 else None
        if isinstance(func, cst.Attribute) and _is_self(func.value):
            cls = self.enclosing_class(func)
            body = cls.body.body if cls is not None and isinstance(cls.body, cst.IndentedBlock) else ()
            found = [s for s in body if isinstance(s, cst.FunctionDef) and s.name.value == func.attr.value]
            return found[0] if len(found) == 1 else None
        return None

    def _returns_float32(self, function: cst.FunctionDef) -> bool:
        key = id(function)
        if key not in self._helpers:
            self._helpers[key] = False  # guards against recursion
            returns = [
                r
                for r in self.context.nodes_within(function.body, cst.Return)
                if self.enclosing_function(r) is function
            ]
            self._helpers[key] = bool(returns) and all(
                r.value is not None and self.classify(r.value) is FLOAT32 for r in returns
            )
        return bool(self._helpers[key])

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
            cls = self.enclosing_class(dtype) if _is_self(dtype.value) else None
            if cls is not None and self.is_float32_layer(cls):
                return FLOAT32
            return Carrier(dtype)
        if isinstance(dtype, cst.Attribute) and dtype.attr.value in ("variable_dtype", "_variable_dtype"):
            return None
        if isinstance(dtype, cst.Name):
            if self._wide_default_parameter(dtype):
                return None  # float32 unless a caller passes another dtype: no policy makes it float16
            return Carrier(dtype)  # a dtype parameter or variable: the caller picks
        return None

    def _wide_default_parameter(self, name: cst.Name) -> bool:
        """``name`` is a parameter of a plain function (no Layer's method), not rebound before this use, whose
        default is float32 or float64 (``compute_dtype="float32"``): a policy never changes a default argument."""
        function = self.enclosing_function(name)
        if function is None or self._latest_binding(function, name) is not None or self.in_layer_class(function):
            return False
        params = function.params
        for param in (*params.posonly_params, *params.params, *params.kwonly_params):
            if param.name.value == name.value:
                return param.default is not None and dtype_spelling(self.context, param.default) in WIDE_SPELLINGS
        return False

    def _classify_name(self, name: cst.Name):
        function = self.enclosing_function(name)
        if function is None or self._comprehension_variable(name, function):
            return None
        binding = self._latest_binding(function, name)
        if binding is None:
            if self._is_layer_input(function, name.value):
                cls = self.enclosing_class(function)
                return FLOAT32 if cls is not None and self.is_float32_layer(cls) else Carrier(_dtype_of(name))
            return None
        kind, node = binding
        if kind == "assign":
            found = self.classify(node)
        elif kind == "augassign":
            found = self._operands([node.target, node.value])
        else:
            return None
        if isinstance(found, Carrier) and not found.always_float16:
            return Carrier(_dtype_of(name))
        return found

    def _comprehension_variable(self, name: cst.Name, function: cst.FunctionDef) -> bool:
        """``loss`` in ``[tf.reduce_sum(loss) for loss in self.losses]``: not the function's ``loss``."""
        for ancestor in self.context.ancestors(name):
            if ancestor is function:
                return False
            if isinstance(ancestor, (cst.ListComp, cst.SetComp, cst.GeneratorExp, cst.DictComp)):
                loop = ancestor.for_in
                while loop is not None:
                    if any(n.value == name.value for n in self.context.nodes_within(loop.target, cst.Name)):
                        return True
                    loop = loop.inner_for_in
        return False

    def assigned_value(self, name: cst.Name) -> cst.BaseExpression | None:
        """The value of the assignment that last binds ``name`` before this use in its function."""
        function = self.enclosing_function(name)
        binding = self._latest_binding(function, name) if function is not None else None
        return binding[1] if binding is not None and binding[0] == "assign" else None

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


_UNKNOWN = object()


def _dtype_owner(carrier: Carrier) -> str | None:
    """``x`` for a carrier cast to ``x.dtype``."""
    dtype = carrier.dtype
    if isinstance(dtype, cst.Attribute) and dtype.attr.value == "dtype" and isinstance(dtype.value, cst.Name):
        return dtype.value.value
    return None


def _is_one(node: cst.BaseExpression) -> bool:
    return isinstance(node, (cst.Integer, cst.Float)) and float(node.value) == 1.0


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


def carrying_unit(code, holds: Callable[[list[ast.AST]], bool]) -> bool:
    """Pre-filter: whether some unit of ``code.flow_units`` where ``holds`` can also carry a compute-dtype value."""
    return any(holds(unit) and may_carry(code, unit) for unit in code.flow_units)


def may_carry(code, unit: list[ast.AST]) -> bool:
    """Pre-filter: can ``classify`` find a compute-dtype value in this unit of ``CodeSummary.flow_units``?
    Only a cast or conversion, ``np.float16(...)``, a sublayer call ``self.x(...)``, the inputs of
    a ``call()`` method, a call given a ``dtype=`` that is not a fixed wide or integer dtype
    (``one_hot(t, n, dtype=x.dtype)``), or a call of a function of the file that may return one
    start one; everything else only passes one on."""
    helpers = _carrying_functions(code)
    for node in unit:
        kind = type(node)
        if kind is ast.Call:
            func = node.func
            if type(func) is ast.Attribute and type(func.value) is ast.Name and func.value.id == "self":
                return True
            if not code.names_of(node).isdisjoint(_CARRYING_CALLS):
                return True
            if any(k.arg == "dtype" and _dtype_may_carry(k.value) for k in node.keywords):
                return True
            if type(func) is ast.Name and func.id in helpers:
                return True
        elif kind in (ast.FunctionDef, ast.AsyncFunctionDef) and node.name == "call":
            return True
    return False


def _dtype_may_carry(value: ast.AST) -> bool:
    """A ``dtype=`` argument ``dtype_target`` may read as a compute dtype: not a fixed wide or integer one."""
    if type(value) is ast.Constant:
        return value.value in FLOAT16_SPELLINGS
    if type(value) is ast.Attribute:
        return value.attr not in WIDE_SPELLINGS and value.attr not in _NON_FLOAT_SPELLINGS
    return True


_last_helpers: tuple[ast.AST | None, frozenset[str]] = (None, frozenset())


def _carrying_functions(code) -> frozenset[str]:
    """Module-level functions of the file whose own code may produce a compute-dtype value (their
    callers then may too), computed once per file."""
    global _last_helpers
    tree = code.tree
    if _last_helpers[0] is tree:
        return _last_helpers[1]
    _last_helpers = (tree, frozenset())  # a helper's own unit is read without helpers
    found = frozenset(
        node.name
        for node in tree.body
        if type(node) in (ast.FunctionDef, ast.AsyncFunctionDef) and may_carry(code, walk_python(node))
    )
    _last_helpers = (tree, found)
    return found
