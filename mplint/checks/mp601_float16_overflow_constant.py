"""MP601: constants float16 cannot hold, combined with compute-dtype tensors."""

from __future__ import annotations

import ast
import math
import re
from dataclasses import dataclass

import libcst as cst

from mplint.analysis.call_args import argument
from mplint.analysis.constants import (
    Origin,
    ast_folded,
    folded,
    literal_number,
    number_literal,
    origin_of,
    signed,
    wide_dtype_limit,
)
from mplint.analysis.dtype_flow import (
    Carrier,
    DtypeFlow,
    carrying_unit,
    dtype_spelling,
)
from mplint.analysis.output_dtype import module_bindings
from mplint.diagnostics import Fix, FixSafety, ImportSpec, Related
from mplint.engine.code_summary import calls_in
from mplint.engine.code_summary import literal_number as ast_literal_number
from mplint.engine.imports import callee_name
from mplint.engine.names import dotted
from mplint.engine.rule import Rule
from mplint.engine.summaries import Summary, SummaryKind, declare, first_line_text, parameters, summary_at
from mplint.engine.summaries import walk as walk_python
from mplint.knowledge.apinames import canonical
from mplint.knowledge.dtypes import FLOAT16_NAMES, WIDE_SPELLINGS
from mplint.knowledge.float16_range import (
    FLOAT16_MAX,
    FLOAT16_TINY,
    FLUSHES_IN_FLOAT16,
    LARGE_INTEGER,
    LARGE_OR_TINY_EXPONENT,
    OUT_OF_RANGE_LITERAL,
    OUTSIDE_FLOAT16,
)

# What a fixed constant becomes in float16: Keras' own large negative for float16
# (keras.activations.softmax masks with -3e4), and float16's smallest normal number.
FLOAT16_LARGE = "3e4"
FLOAT16_EPSILON = "6.104e-05"

_FIXABLE_LARGE = (cst.Add, cst.Subtract, cst.Multiply, cst.AddAssign, cst.SubtractAssign, cst.MultiplyAssign)
_FIXABLE_TINY = (cst.Add, cst.Subtract, cst.AddAssign, cst.SubtractAssign)
_CHECKED_OPS = (*_FIXABLE_LARGE, cst.Divide, cst.DivideAssign)
# The same operators on CPython's tree, as the summary writes them
_CHECKED_AST_OPS = {ast.Add: "+", ast.Sub: "-", ast.Mult: "*", ast.Div: "/"}
_BOUNDING_CALLS = frozenset(
    {
        "where",
        "maximum",
        "minimum",
        "clip_by_value",
        "math.maximum",
        "math.minimum",
        "ops.where",
        "ops.maximum",
        "ops.minimum",
        "ops.clip",
    }
)


_BOUNDING_NAMES = frozenset(path.rsplit(".", 1)[-1] for path in _BOUNDING_CALLS)
# The operators as functions: `ops.add(probs, 1e-8)` is `probs + 1e-8`.
_ARITHMETIC_CALLS: dict[str, type[cst.BaseBinaryOp]] = {
    **{f"{prefix}add": cst.Add for prefix in ("", "math.", "ops.")},
    **{f"{prefix}subtract": cst.Subtract for prefix in ("", "math.", "ops.")},
    **{f"{prefix}multiply": cst.Multiply for prefix in ("", "math.", "ops.")},
    **{f"{prefix}divide": cst.Divide for prefix in ("", "math.", "ops.")},
    "truediv": cst.Divide,
    "math.truediv": cst.Divide,
    "ops.true_divide": cst.Divide,
}
# Calls that make a tensor of a given dtype from a value: (position, keyword) of the value. Given a constant and the
# compute dtype (`ops.cast(tf.float32.min, scores.dtype)`, `ops.full_like(scores, -1e9)`), float16 cannot hold it.
_MATERIALISING_CALLS = {
    **{path: (0, "x") for path in ("cast", "dtypes.cast", "ops.cast", "backend.cast")},
    "constant": (0, "value"),
    "convert_to_tensor": (0, "value"),
    "ops.convert_to_tensor": (0, "x"),
    "ops.full": (1, "fill_value"),
    "ops.full_like": (1, "fill_value"),
}
_CALL_NAMES = _BOUNDING_NAMES | {path.rsplit(".", 1)[-1] for path in (*_ARITHMETIC_CALLS, *_MATERIALISING_CALLS)}
_LITERAL_POWER = re.compile(rb"\d\s*\*\*\s*\d")  # `-2 ** 32 + 1`: a constant that only its value shows
# Keras' epsilon (``keras.config.epsilon()``, ``backend.epsilon()``) unless a program sets another.
BACKEND_EPSILON = 1e-7
_BACKEND_EPSILON_PATHS = frozenset({"config.epsilon", "backend.epsilon"})


# --- functions of another file whose parameter meets such a constant (CPython's tree) -------------------------


def _range_constant_params(statements: list[ast.stmt], source: bytes) -> dict[str, Summary]:
    """Module functions whose parameter meets, as it came, a literal float16 cannot hold
    (``def focal_loss(probs, labels): ... log(probs + 1e-8)``): a caller that passes a float16 value
    gets 0 (or inf) there. Parameters the function rebinds (``probs = tf.cast(probs, tf.float32)``),
    sums that are only compared (tolerances) and functions that test a dtype are left out."""
    found: dict[str, Summary] = {}
    for function in statements:
        if not isinstance(function, ast.FunctionDef):
            continue
        positional, params, own, rebound = parameters(function)
        compared = set()
        for node in own:
            if isinstance(node, ast.Compare):
                operands = [node.left, *node.comparators]
                if any(isinstance(a, ast.Attribute) and a.attr == "dtype" for o in operands for a in walk_python(o)):
                    break  # dtype-aware code
                compared.update(id(b) for o in operands for b in walk_python(o) if isinstance(b, ast.BinOp))
        else:
            for node in own:
                if not (isinstance(node, ast.BinOp) and type(node.op) in _CHECKED_AST_OPS) or id(node) in compared:
                    continue
                for param, constant in ((node.left, node.right), (node.right, node.left)):
                    if isinstance(param, ast.Name) and param.id in params - rebound and _out_of_range(constant):
                        text = first_line_text(source, constant)  # one line (``_out_of_range``)
                        index = positional.index(param.id) if param.id in positional else -1
                        found[function.name] = summary_at(
                            node, param.id, index, f"{_CHECKED_AST_OPS[type(node.op)]} {text}"
                        )
                        break
                if function.name in found:
                    break
    return found


def _out_of_range(node: ast.AST) -> bool:
    value = ast_literal_number(node)
    if value is None or node.lineno != node.end_lineno:
        return False
    return _beyond_float16(abs(value))


RANGE_CONSTANT = declare(SummaryKind("range_constant", (OUT_OF_RANGE_LITERAL,), True, _range_constant_params))


@dataclass(frozen=True)
class Normalization:
    """A framework L2 normalization that applies its epsilon in its input's dtype: ``position`` of the epsilon
    argument, its ``default``, and whether it clamps the squared norm (epsilon squared) for L2."""

    position: int
    default: float
    squared: bool


# Keras 3: ``_normalize`` clamps ``sum(square(x))`` with ``epsilon * epsilon`` (order 2), default backend.epsilon();
# TensorFlow: ``l2_normalize`` clamps ``reduce_sum(square(x))`` with ``epsilon`` (default 1e-12). In float16 either
# clamp flushes to 0, and rsqrt(0) makes a zero vector NaN and a vector whose squares underflow inf.
_NORMALIZATIONS = {
    ("keras", "ops.normalize"): Normalization(3, BACKEND_EPSILON, True),
    ("keras", "ops.nn.normalize"): Normalization(3, BACKEND_EPSILON, True),
    ("tf", "math.l2_normalize"): Normalization(2, 1e-12, False),
    ("tf", "nn.l2_normalize"): Normalization(2, 1e-12, False),
    ("tf", "linalg.l2_normalize"): Normalization(2, 1e-12, False),
}
_NORMALIZATION_NAMES = frozenset(path.rsplit(".", 1)[-1] for _, path in _NORMALIZATIONS)
_DTYPE_LIMIT = re.compile(rb"(?:float32|float64|double|single)\)?\.m(?:in|ax)\b|finfo")


class Float16OverflowConstant(Rule):
    id = "MP601"
    governed_by_policy = True
    _bound_beyond: frozenset[str] | None = None
    # Literals beyond float16's range or below its smallest subnormal, and float32/float64 limits.
    triggers = (
        # (three patterns: each starts with a character class the regex engine can skip ahead to)
        LARGE_OR_TINY_EXPONENT,
        LARGE_INTEGER,
        re.compile(rb"\.0{7}"),  # 0.00000001
        _DTYPE_LIMIT,
        re.compile(rb"normalize\("),  # a framework normalization's own epsilon (``_NORMALIZATIONS``)
        _LITERAL_POWER,
    )
    summary_triggers = (RANGE_CONSTANT,)  # `focal_loss(probs, labels)` of a function that adds 1e-8

    @classmethod
    def candidate(cls, code) -> bool:
        """Arithmetic or a bounding call with a literal float16 cannot hold, or a float32/float64 limit,
        in code where a compute-dtype value can come from (see ``may_carry``)."""
        limits = _DTYPE_LIMIT.search(code.source) is not None
        direct = (
            any(_beyond_float16(n) for n in code.operand_numbers)
            or code.calls_any(*_CALL_NAMES)
            and any(_beyond_float16(n) for n in code.argument_numbers)
            or limits
            or "Pow" in code.operators
            and _LITERAL_POWER.search(code.source) is not None
        )
        bound, bound_large = _names_bound_beyond(code, limits)
        passes = code.calls_summarized(RANGE_CONSTANT)
        normalizes = code.calls_api(*_NORMALIZATION_NAMES)
        if not (direct or bound or passes or normalizes):
            return False
        return carrying_unit(
            code,
            lambda unit: (
                _has_constant(unit, code, limits, bound, bound_large)
                or passes
                and calls_in(unit, passes)
                or normalizes
                and _normalizes(unit, code)
            ),
        )

    @classmethod
    def active_for(cls, facts):
        # float16 programs, and library code that any user may run under mixed_float16.
        return facts.float16_capable

    def visit_BinaryOperation(self, node: cst.BinaryOperation) -> None:
        if not isinstance(node.operator, _CHECKED_OPS):
            return
        for constant, other in ((node.left, node.right), (node.right, node.left)):
            self._check(constant, [other], node.operator)

    def visit_AugAssign(self, node: cst.AugAssign) -> None:
        if isinstance(node.operator, _CHECKED_OPS):
            self._check(node.value, [node.target], node.operator)

    def visit_Call(self, node: cst.Call) -> None:
        self._passed(node)
        if self.context.names.could_be(node.func, _NORMALIZATION_NAMES):
            self._normalization(node)
        if not self.context.names.could_be(node.func, _CALL_NAMES):
            return  # textual reject before name resolution
        kname = self.context.names.kname(node.func)
        if kname is None or kname.ns == "np" or not (kname.ns == "tf" or kname.is_keras):
            return
        if kname.path in _ARITHMETIC_CALLS:
            operands = [a.value for a in node.args if a.keyword is None and a.star == ""]
            if len(operands) == 2 and len(node.args) == 2:
                operator = _ARITHMETIC_CALLS[kname.path]()
                self._check(operands[1], [operands[0]], operator)
                self._check(operands[0], [operands[1]], operator)
            return
        if kname.path in _MATERIALISING_CALLS:
            value = argument(node, *_MATERIALISING_CALLS[kname.path])
            if value is not None and self._known_compute_dtype(node, kname.path):
                self._check(value, [node], None, made=node)
            return
        if kname.path not in _BOUNDING_CALLS:
            return
        positional = [a.value for a in node.args if a.keyword is None and a.star == ""]
        for i, constant in enumerate(positional):
            others = positional[:i] + positional[i + 1 :]
            if kname.last == "where":
                others = others[1:] if i else others  # the condition is boolean
            self._check(constant, others, None, clamp=kname.last != "where")

    def _passed(self, call: cst.Call) -> None:
        """``focal_loss(probs, labels)`` where the project's ``focal_loss`` computes ``probs + 1e-8`` and ``probs``
        is float16 here: the constant and the tensor meet in another function (``range_constant`` summaries).
        Reported where the float16 value is known, like constants that travel: in Layer/Model code or next to
        an explicit float16 cast. No fix: casting the argument changes the dtype the function returns."""
        found = self.context.summary(call.func, RANGE_CONSTANT)
        if found is None:
            return
        param, index, operation, path, line = found
        passed = argument(call, index if index >= 0 else None, param)
        if passed is None:
            return
        flow = self.context.analysis(DtypeFlow)
        carrier = flow.classify(passed)
        if not isinstance(carrier, Carrier) or self._not_float16_branch(call):
            return
        if not (carrier.always_float16 or flow.in_layer_class(call)):
            return
        name = dotted(call.func) or "the function"
        constant = operation.split(" ", 1)[1]
        large = abs(literal_number(cst.parse_expression(constant)) or 0.0) > FLOAT16_MAX  # the summary read a literal
        effect = (
            f"{OUTSIDE_FLOAT16}, so the result is infinite"
            if large
            else f"{FLUSHES_IN_FLOAT16}, so the epsilon vanishes and a log or division by it gives inf or NaN"
        )
        facts = self.context.facts
        when = (
            "float16 under a float16 policy"
            if facts.float16
            else "library code: float16 under a mixed_float16 policy its users set"
        )
        message = (
            f"`{name}` computes `{param} {operation}` ({path}:{line}) on this compute-dtype value, {when}: "
            f"`{constant}` {effect}; cast the value to float32 before the call, or make the constant "
            f"dtype-aware in `{name.rsplit('.', 1)[-1]}`{facts.library_note() if facts.distribution else ''}"
        )
        self.report(passed, message, related=(Related(path, line, f"`{param} {operation}`"),))

    def _normalization(self, call: cst.Call) -> None:
        """``ops.normalize(inputs, epsilon=1e-12)`` (or its default, Keras' epsilon 1e-7) on a compute-dtype value:
        the norm's clamp (epsilon squared for Keras' L2, epsilon for TensorFlow's ``l2_normalize``) is applied in
        the input's dtype and flushes to 0 in float16."""
        kname = self.context.names.kname(call.func)
        known = _NORMALIZATIONS.get((kname.ns if kname.ns in ("tf", "keras") else "", kname.path)) if kname else None
        if kname is not None and kname.is_keras and kname.ns != "keras":
            known = None  # tf.keras / tf_keras have no ops.normalize
        values = argument(call, 0, "x")
        if known is None or values is None:
            return
        order = argument(call, 2, "order") if known.squared else None
        if order is not None and literal_number(order) is None:
            return
        squared = known.squared and (order is None or literal_number(order) == 2)  # other orders clamp the norm
        given = argument(call, known.position, "epsilon")
        epsilon, spelled = known.default, None
        if given is not None:
            epsilon, spelled = self._epsilon_value(given), self._code(given)
            if epsilon is None:
                return
        clamp = epsilon * epsilon if squared else epsilon
        if not 0 < clamp < FLOAT16_TINY:
            return
        carrier = self.context.analysis(DtypeFlow).classify(values)
        if (
            not isinstance(carrier, Carrier)
            or self._not_float16_branch(call)
            or self.context.analysis(DtypeFlow).in_keras3_loss(call)
        ):
            return
        name = dotted(call.func) or kname.path
        if spelled is None:
            what = f"the default epsilon {epsilon:g}" + (", `keras.config.epsilon()`" if known.squared else "")
        else:
            what = f"`epsilon={spelled}`"
        where = f"({what}) in the dtype of `{self._code(values)}`, the compute dtype: under a float16 policy"
        if squared:  # Keras 3 bounds the L2 norm either way: a floor on the squared norm, or (newer) a cap on rsqrt
            capped = (
                f", and the cap 1 / epsilon = {1 / epsilon:g} that other Keras releases put on rsqrt overflows to inf"
                if 1 / epsilon > FLOAT16_MAX
                else ""
            )
            head = (
                f"`{name}` bounds the L2 norm by epsilon {where} the bound is lost (the floor epsilon * epsilon = "
                f"{clamp:g} on the squared norm flushes to 0, smallest subnormal 6e-8{capped})"
            )
        else:
            how = f"the squared norm with {clamp:g}" if not known.squared else f"the norm with {clamp:g}"
            head = f"`{name}` clamps {how} {where} it flushes to 0 (smallest subnormal 6e-8)"
        self.report(
            given if given is not None else call,
            head
            + ", so "
            + (
                "rsqrt(0) turns a zero vector into NaN and a vector whose squares underflow into inf"
                if squared or not known.squared
                else "dividing by the norm turns a zero vector into NaN"
            )
            + "; normalize in float32"
            + self.context.facts.library_note(),
            self._normalization_fix(call, kname, values),
        )

    def _normalization_fix(self, call: cst.Call, kname, values: cst.BaseExpression) -> Fix | None:
        """Normalize 16-bit floats in float32 and leave every other input to the call as written:
        ``(ops.cast(ops.normalize(ops.cast(x, "float32"), ...), x.dtype) if backend.standardize_dtype(x.dtype) in
        ("float16", "bfloat16") else ops.normalize(x, ...))`` (TensorFlow: ``x.dtype in (tf.float16, tf.bfloat16)``).
        float32, float64 and integer inputs run the original call, so their results are unchanged; only a name or
        attribute, which the fix may repeat, and only one call evaluates."""
        spelled = dotted(call.func) or ""
        parts = spelled.split(".")
        if not isinstance(values, (cst.Name, cst.Attribute)) or call.args[0].keyword is not None or len(parts) < 2:
            return None
        text = self.context.module.code_for_node(values)
        imports = ()
        if kname.ns == "tf":
            cast, wide = f"{parts[0]}.cast", f"{parts[0]}.float32"
            narrow = f"{text}.dtype in ({parts[0]}.float16, {parts[0]}.bfloat16)"
        elif "ops" in parts[:-1]:
            cast, wide = ".".join(parts[: parts.index("ops") + 1]) + ".cast", '"float32"'
            backend, imports = self._keras_backend(call.func)
            if backend is None:
                return None
            narrow = f'{backend}.standardize_dtype({text}.dtype) in ("float16", "bfloat16")'
        else:
            return None
        inner = call.with_changes(
            args=[call.args[0].with_changes(value=cst.parse_expression(f"{cast}({text}, {wide})")), *call.args[1:]]
        )
        widened = cst.parse_expression(f"{cast}(__normalized__, {text}.dtype)")
        widened = widened.with_changes(args=[widened.args[0].with_changes(value=inner), widened.args[1]])
        replacement = cst.IfExp(test=cst.parse_expression(narrow), body=widened, orelse=call)
        if not isinstance(self.context.parent(call), (cst.Return, cst.Assign, cst.AnnAssign, cst.Arg, cst.Expr)):
            replacement = replacement.with_changes(lpar=[cst.LeftParen()], rpar=[cst.RightParen()])
        return Fix(
            {call: replacement},
            FixSafety.SAFE,
            "Normalize float16 and bfloat16 inputs in float32 and cast the result back; every other input runs "
            "the call as written.",
            imports=imports,
        )

    def _keras_backend(self, func: cst.BaseExpression) -> tuple[str | None, tuple]:
        """How to spell Keras 3's ``backend`` module (for ``standardize_dtype``) beside the ``ops`` of ``func``:
        ``keras.backend`` (adding ``import keras`` where needed), or ``backend`` from ``keras.src`` inside Keras'
        own sources, which import ``ops`` from there."""
        qualified = sorted(self.context.names.qualified(func))
        if any(q.startswith("keras.src.") for q in qualified):
            scope = self.context.names.scopes.get(func)
            for assignment in scope["backend"] if scope is not None and "backend" in scope else ():
                statement = getattr(assignment, "node", None)
                if not (
                    isinstance(statement, cst.ImportFrom)
                    and statement.module is not None
                    and dotted(statement.module) == "keras.src"
                ):
                    return None, ()  # another ``backend`` is bound here
            return "backend", (ImportSpec("keras.src", "backend"),)
        if any(q.startswith("keras.") for q in qualified):
            return "keras.backend", (ImportSpec("keras"),)
        return None, ()

    def _epsilon_value(self, node: cst.BaseExpression) -> float | None:
        """A literal, or Keras' epsilon (``keras.config.epsilon()``, ``backend.epsilon()``) at its default."""
        value = self._value(node)
        if value is not None:
            return value
        if isinstance(node, cst.Call) and not node.args:
            kname = self.context.names.kname(node.func)
            if kname is not None and kname.is_keras and kname.path in _BACKEND_EPSILON_PATHS:
                return BACKEND_EPSILON
        return None

    def _check(
        self, constant: cst.BaseExpression, others, operator, clamp: bool = False, made: cst.Call | None = None
    ) -> None:
        """``clamp``: the constant bounds a clip/maximum/minimum; ``made``: the call that makes a tensor of the
        constant (``others`` is that call)."""
        value, origin = self._value(constant), None
        if value is None and _bound_name(constant) in self._names_bound_beyond():
            # a constant that travels: `NEG_INF = -1e9`, `self.mask_value` set from a parameter's default
            origin = origin_of(self.context, constant)
            value = self._value(origin.value) if origin is not None else None
        if value is None or value == 0 or math.isinf(value) or math.isnan(value):
            return
        large = abs(value) > FLOAT16_MAX
        if not large and (abs(value) >= FLOAT16_TINY or self._tolerance(constant)):
            return
        if large and clamp:
            # `clip(x, -1e9, limit)`: a bound of ±inf clamps no finite float16 value, as ±1e9 clamps no real float32
            # one; the two differ only on an input that already overflowed, which is where the defect is
            return
        flow = self.context.analysis(DtypeFlow)
        carrier = next((c for c in map(flow.classify, others) if isinstance(c, Carrier)), None)
        if carrier is None or self._not_float16_branch(constant) or flow.in_keras3_loss(constant):
            return
        if origin is not None and not (carrier.always_float16 or flow.in_layer_class(constant)):
            # a constant from elsewhere next to a plain function's tensor cast to some input's dtype: whether that
            # input is ever float16 is the callers' business (a loss whose task casts outputs to float32 first)
            return
        other = others[0] if len(others) == 1 else None
        message = self._message(constant, value, large, other, operator, origin, made)
        related = (
            (Related("", self.context.position(origin.binding).start.line, "the constant's value"),) if origin else ()
        )
        self.report(constant, message, self._fix(constant, value, large, carrier, operator, origin), related=related)

    def _tolerance(self, constant: cst.CSTNode) -> bool:
        """A tiny constant in a sum that is only compared (``abs(a - b) <= atol + rtol * abs(b)``): flushed to 0
        it tightens a tolerance, and no division, root or log ever sees the 0."""
        for ancestor in self.context.ancestors(constant):
            if not isinstance(ancestor, cst.BinaryOperation):
                return isinstance(ancestor, cst.ComparisonTarget | cst.Comparison)
        return False

    def _names_bound_beyond(self) -> frozenset[str]:
        """Names (and ``self`` attribute names) the file binds, directly or through other such names, to a
        constant float16 cannot hold: the only ones worth following with ``origin_of``."""
        if self._bound_beyond is None:
            found: set[str] = set()
            refers: dict[str, set[str]] = {}
            for node in self.context.nodes(cst.Assign, cst.AnnAssign, cst.Param):
                if isinstance(node, cst.Param):
                    pairs = [(node.name, node.default)] if node.default is not None else []
                elif isinstance(node, cst.Assign):
                    pairs = [(t.target, node.value) for t in node.targets]
                else:
                    pairs = [(node.target, node.value)] if node.value is not None else []
                for target, value in pairs:
                    name = _bound_name(target)
                    if name is None:
                        continue
                    other = _bound_name(value)
                    if other is not None:  # chains of names: NEG = -1e9; MASK = NEG
                        refers.setdefault(other, set()).add(name)
                    elif (x := self._value(value)) is not None and _beyond_float16(abs(x)):
                        found.add(name)
            self._bound_beyond = _closure(found, refers)
        return self._bound_beyond

    def _not_float16_branch(self, node: cst.CSTNode) -> bool:
        """Inside the branch of a dtype test that excludes float16: the ``else`` of
        ``if scores.dtype is tf.float16:`` (which handles float16 with 65504), the body of
        ``if x.dtype == tf.float32:`` or ``if x.dtype != "float16":``."""
        child = node
        for ancestor in self.context.ancestors(node):
            if isinstance(ancestor, (cst.FunctionDef, cst.ClassDef, cst.Module)):
                return False
            if isinstance(ancestor, (cst.If, cst.IfExp)) and (child is ancestor.body or child is ancestor.orelse):
                is_float16 = self._dtype_test(ancestor.test)
                if is_float16 is not None and is_float16 == (child is ancestor.orelse):
                    return True
            child = ancestor
        return False

    def _dtype_test(self, test: cst.BaseExpression) -> bool | None:
        """For ``x.dtype == D`` style tests (also ``backend.standardize_dtype(x.dtype) == D`` and ``... in (D1,
        D2)``): whether the test being true means float16 (None: no dtype test)."""
        if not (isinstance(test, cst.Comparison) and len(test.comparisons) == 1):
            return None
        target = test.comparisons[0]
        left = test.left
        if (
            isinstance(left, cst.Call)
            and len(left.args) == 1
            and self.context.names.matches(left.func, ["backend.standardize_dtype"], ["keras"])
        ):
            left = left.args[0].value
        if isinstance(target.operator, (cst.In, cst.NotIn)):
            if not (
                isinstance(left, cst.Attribute)
                and left.attr.value in ("dtype", "compute_dtype")
                and isinstance(target.comparator, (cst.Tuple, cst.List, cst.Set))
            ):
                return None
            spelled = [dtype_spelling(self.context, e.value) for e in target.comparator.elements]
            if None in spelled:
                return None
            means_float16 = any(x in FLOAT16_NAMES for x in spelled)
            return means_float16 if isinstance(target.operator, cst.In) else not means_float16
        sides = (left, target.comparator)
        if not any(isinstance(side, cst.Attribute) and side.attr.value in ("dtype", "compute_dtype") for side in sides):
            return None
        spelled = [dtype_spelling(self.context, side) for side in sides]
        spelled = next((x for x in spelled if x is not None), None)
        if spelled is None:
            return None
        means_float16 = spelled in FLOAT16_NAMES
        if isinstance(target.operator, (cst.Equal, cst.Is)):
            return means_float16
        if isinstance(target.operator, (cst.NotEqual, cst.IsNot)):
            return not means_float16
        return None

    def _value(self, node: cst.BaseExpression) -> float | None:
        return signed(node, self._atom)

    def _atom(self, node: cst.BaseExpression) -> float | None:
        """A number literal, a float32/float64 limit (``tf.float32.min``, ``np.finfo(np.float32).max``), or
        arithmetic of these (``-2 ** 32 + 1``)."""
        number = number_literal(node)
        if number is not None:
            return number
        if isinstance(node, cst.BinaryOperation):
            return folded(node, self._value)
        return wide_dtype_limit(node, self._finfo_dtype, lambda d: dtype_spelling(self.context, d) in WIDE_SPELLINGS)

    def _finfo_dtype(self, call: cst.Call) -> cst.BaseExpression | None:
        return call.args[0].value if call.args and self.context.names.matches(call.func, ["finfo"], ["np"]) else None

    def _code(self, node: cst.CSTNode) -> str:
        text = self.context.module.code_for_node(node).strip()
        return text if len(text) <= 40 else text[:37] + "..."

    def _message(self, constant, value, large, other, operator, origin: Origin | None, made=None) -> str:
        shown = f"`{self._code(constant)}`"
        if origin is not None:
            shown += f" ({origin.where(self.context)}: `{self._code(origin.value)}`)"
        with_what = f"the compute-dtype tensor `{self._code(other)}`" if other is not None else "a compute-dtype tensor"
        if made is not None:
            with_what = f"`{self._code(made)}`, which makes it a tensor of the compute dtype,"
        if large:
            becomes = "-inf" if value < 0 else "inf"
            effect = (
                "a padding of -inf is no finite minimum: a softmax over a fully padded row, or the difference of two "
                "paddings, is NaN"
                if isinstance(operator, (cst.Multiply, cst.MultiplyAssign)) and self._all_ones(other)
                else "0 * inf is NaN, so an additive mask turns every unmasked score into NaN"
                if isinstance(operator, (cst.Multiply, cst.MultiplyAssign))
                else "the result is infinite"
            )
            if made is not None:
                return (
                    f"{shown} {OUTSIDE_FLOAT16}: given to {with_what} it becomes {becomes} under a float16 policy, "
                    f"and {effect}{self.context.facts.library_note()}"
                )
            return (
                f"{shown} {OUTSIDE_FLOAT16}: combined with {with_what} "
                f"it becomes {becomes} under a float16 policy, and {effect}{self.context.facts.library_note()}"
            )
        if made is not None:
            return (
                f"{shown} {FLUSHES_IN_FLOAT16}: given to {with_what} it is 0 under a float16 policy, so a log or "
                f"division by it gives inf or NaN{self.context.facts.library_note()}"
            )
        return (
            f"{shown} {FLUSHES_IN_FLOAT16}: combined with {with_what} under a "
            f"float16 policy the epsilon vanishes and a log or division by it gives inf or NaN{self.context.facts.library_note()}"
        )

    def _known_compute_dtype(self, call: cst.Call, path: str) -> bool:
        """The tensor ``call`` makes has a dtype known to be the compute dtype: float16, ``self.compute_dtype``, the
        dtype of a compute-dtype tensor (``ops.cast(c, scores.dtype)``, ``ops.full_like(scores, c)``), not the
        dtype of a parameter nothing says more about (``ops.cast(1e-8, scale.dtype)`` in a plain function)."""
        flow = self.context.analysis(DtypeFlow)
        if path.endswith("full_like") and argument(call, 3, "dtype") is None:
            like = argument(call, 0, "x")
            return like is not None and isinstance(flow.classify(like), Carrier)
        carrier = flow.classify(call)
        if not isinstance(carrier, Carrier):
            return False
        if carrier.always_float16:
            return True
        dtype = carrier.dtype
        if isinstance(dtype, cst.Attribute) and dtype.attr.value in ("compute_dtype", "_compute_dtype"):
            return True
        source = dtype.value if isinstance(dtype, cst.Attribute) and dtype.attr.value == "dtype" else None
        return source is not None and isinstance(flow.classify(source), Carrier)

    def _all_ones(self, node: cst.BaseExpression | None) -> bool:
        """``tf.ones_like(x)``, ``ops.ones_like(x)``: never 0, so a product with it is no 0 * inf."""
        if not isinstance(node, cst.Call):
            return False
        kname = self.context.names.kname(node.func)
        return (
            kname is not None and (kname.ns == "tf" or kname.is_keras) and kname.path in ("ones_like", "ops.ones_like")
        )

    def _fix(self, constant, value, large, carrier: Carrier, operator, origin: Origin | None) -> Fix | None:
        fixable = _FIXABLE_LARGE if large else _FIXABLE_TINY
        if operator is not None and not isinstance(operator, fixable):
            return None
        if operator is None and not large and value < 0:
            return None
        sign = "-" if value < 0 else ""
        half_value = f"{sign}{FLOAT16_LARGE if large else FLOAT16_EPSILON}"
        original = self.context.module.code_for_node(constant)
        if origin is not None:
            # a name or attribute may hold other values (a caller's mask_value=-100): clamp into float16's
            # range rather than replace, so values that fit are kept
            clamp = "max" if (value < 0) == large else "min"
            half_value = f"{clamp}({original}, {half_value})"
        if carrier.always_float16:
            return Fix({constant: cst.parse_expression(half_value)}, FixSafety.SAFE)
        dtype = carrier.dtype
        if dtype is None:
            if not self.context.analysis(DtypeFlow).in_layer_class(constant):
                return None
            dtype = cst.parse_expression("self.compute_dtype")
        test, imports = self._is_float16(dtype)
        replacement = cst.parse_expression(f"({half_value} if {test} else {original})")
        return Fix({constant: replacement}, FixSafety.SAFE, imports=imports)

    def _is_float16(self, dtype: cst.BaseExpression) -> tuple[str, tuple]:
        """``<dtype> == "float16"``, true on every backend the code may run on. In Keras 3 code a tensor's dtype is
        the backend's (``torch.float16`` equals no string, so the test would be always False on torch):
        ``keras.backend.standardize_dtype(x.dtype) == "float16"``. A layer's ``compute_dtype`` is a string on every
        backend, and TensorFlow's and Keras 2's dtypes equal their names."""
        text = self.context.module.code_for_node(dtype)
        if isinstance(dtype, cst.Attribute) and dtype.attr.value in ("compute_dtype", "_compute_dtype"):
            return f'{text} == "float16"', ()
        backend, imports = self._keras3_backend()
        if backend is None:
            return f'{text} == "float16"', ()
        return f'{backend}.standardize_dtype({text}) == "float16"', imports

    def _keras3_backend(self) -> tuple[str | None, tuple]:
        """How this module spells Keras 3's ``backend`` (for ``standardize_dtype``), where it is Keras 3 code: it
        imports the ``keras`` package, and only Keras 3 runs it (its target, or ``keras.ops``, which only Keras 3
        has). ``keras.backend`` (adding ``import keras``), the module's own binding of it, or ``backend`` from
        ``keras.src`` in Keras's own sources; None elsewhere."""
        bindings = module_bindings(self.context)
        found = {bound: canonical(full, self.context.facts.reexports) for bound, full in bindings.items()}
        keras3 = [(bound, k) for bound, k in found.items() if k is not None and k.ns == "keras"]
        if not keras3:
            return None, ()
        if self.context.facts.generation.low < 3 and not any(k.path.split(".")[0] == "ops" for _, k in keras3):
            return None, ()
        for bound, k in keras3:
            if k.path == "backend":
                return bound, ()
        if any(bindings[bound].startswith("keras.src") for bound, _ in keras3):
            return (None, ()) if "backend" in bindings else ("backend", (ImportSpec("keras.src", "backend"),))
        root = next((bound for bound, k in keras3 if k.path == "" and "." not in bindings[bound]), None)
        return (f"{root}.backend", ()) if root else ("keras.backend", (ImportSpec("keras"),))


def _bound_name(node: cst.CSTNode) -> str | None:
    """``x`` for a name ``x`` and for ``self.x``."""
    if isinstance(node, cst.Name):
        return node.value
    if isinstance(node, cst.Attribute) and isinstance(node.value, cst.Name) and node.value.value == "self":
        return node.attr.value
    return None


def _beyond_float16(value: float) -> bool:
    return value > FLOAT16_MAX or 0 < value < FLOAT16_TINY


def _has_constant(unit: list[ast.AST], code, limits: bool, bound: frozenset[str], bound_large: frozenset[str]) -> bool:
    """Whether the unit has arithmetic or a bounding call with a constant ``_check`` would report (tiny
    constants not in sums that are only compared: ``_tolerance``)."""
    compared: set[int] = set()
    for node in unit:
        if type(node) is ast.Compare:
            stack = [node.left, *node.comparators]
            while stack:
                inner = stack.pop()
                if type(inner) is ast.BinOp:
                    compared.add(id(inner))
                    stack += (inner.left, inner.right)
    for node in unit:
        kind = type(node)
        if kind is ast.BinOp and id(node) in compared:
            if type(node.op) in _CHECKED_AST_OPS and any(
                _beyond(operand, code, limits, bound_large, large_only=True) for operand in (node.left, node.right)
            ):
                return True
            continue
        if kind is ast.BinOp:
            operands = (node.left, node.right) if type(node.op) in _CHECKED_AST_OPS else ()
        elif kind is ast.AugAssign:
            operands = (node.value,) if type(node.op) in _CHECKED_AST_OPS else ()
        elif kind is ast.Call and not code.names_of(node).isdisjoint(_CALL_NAMES):
            operands = [*node.args, *(k.value for k in node.keywords)]
        else:
            continue
        if any(_beyond(operand, code, limits, bound) for operand in operands):
            return True
    return False


def _normalizes(unit: list[ast.AST], code) -> bool:
    """A call in the unit of one of ``_NORMALIZATIONS`` by its resolved name (the rule checks its epsilon)."""
    return any(
        type(node) is ast.Call and any((found.ns, found.path) in _NORMALIZATIONS for found in code.api_names(node))
        for node in unit
    )


def _beyond(node: ast.expr, code, limits: bool, bound: frozenset[str] = frozenset(), large_only: bool = False) -> bool:
    value = ast_folded(node)
    if value is not None:
        return abs(value) > FLOAT16_MAX if large_only else _beyond_float16(abs(value))
    while type(node) is ast.UnaryOp and type(node.op) in (ast.USub, ast.UAdd):
        node = node.operand
    kind = type(node)
    if kind is ast.Constant:
        return False  # a string, bytes or None
    if kind is ast.Name and node.id in bound:
        return True
    if kind is ast.Attribute and type(node.value) is ast.Name and node.value.id == "self" and node.attr in bound:
        return True
    if kind is ast.BinOp and type(node.op) in _FOLDED_AST_OPS:  # `np.finfo(np.float32).max / 100.0` (a superset)
        return limits and (
            _beyond(node.left, code, limits, large_only=large_only)
            or _beyond(node.right, code, limits, large_only=large_only)
        )
    return limits and _wide_limit(node, code)


_FOLDED_AST_OPS = (ast.Add, ast.Sub, ast.Mult, ast.Div, ast.Pow)


def _names_bound_beyond(code, limits: bool) -> tuple[frozenset[str], frozenset[str]]:
    """Names and ``self`` attribute names the file binds (file-wide, by name: a superset of what ``origin_of``
    follows) to a constant float16 cannot hold, directly or through other such names, as the rule's
    ``_names_bound_beyond``; and those bound to one beyond float16's range (not merely tiny)."""
    found: set[str] = set()
    found_large: set[str] = set()
    refers: dict[str, set[str]] = {}  # name -> names (or self attributes) one of its values is
    for table in (code.simple_bindings, code.self_attribute_bindings):
        for name, values in table.items():
            for value in values:
                while type(value) is ast.UnaryOp and type(value.op) in (ast.USub, ast.UAdd):
                    value = value.operand
                kind = type(value)
                if kind is ast.Name:
                    refers.setdefault(value.id, set()).add(name)
                elif kind is ast.Attribute and type(value.value) is ast.Name and value.value.id == "self":
                    refers.setdefault(value.attr, set()).add(name)
                elif _beyond(value, code, limits):
                    found.add(name)
                    if _beyond(value, code, limits, large_only=True):
                        found_large.add(name)
    return _closure(found, refers), _closure(found_large, refers)


def _closure(found: set[str], refers: dict[str, set[str]]) -> frozenset[str]:
    """``found`` and every name bound to a name in it, through a graph of names (not by recursion: a name
    bound many times would make recursion exponential)."""
    found = set(found)
    todo = list(found)
    while todo:
        for name in refers.get(todo.pop(), ()):
            if name not in found:
                found.add(name)
                todo.append(name)
    return frozenset(found)


def _wide_limit(node: ast.AST, code) -> bool:
    """``tf.float32.max``, ``np.finfo(np.float64).min`` (the values ``_value`` evaluates), on CPython's tree."""
    if type(node) is not ast.Attribute or node.attr not in ("min", "max"):
        return False
    base = node.value
    if type(base) is ast.Call and base.args:
        name = callee_name(base)
        if "finfo" in (name, code.aliases.get(name)):
            base = base.args[0]
    if type(base) is ast.Constant:
        spelled = base.value
    elif type(base) is ast.Attribute:
        spelled = base.attr
    elif type(base) is ast.Name:
        spelled = code.aliases.get(base.id, base.id)
    else:
        return False
    return spelled in WIDE_SPELLINGS
