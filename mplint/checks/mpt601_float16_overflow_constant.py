"""MPT601: constants float16 cannot hold, applied to tensors that are float16 under autocast or ``.half()``."""

from __future__ import annotations

import math
import re

import libcst as cst

from mplint.analysis.constants import literal_number, number_literal, signed, wide_dtype_limit
from mplint.analysis.torch_amp import FLOAT16, TorchAmp, float32_cast, half_names, is_half_cast
from mplint.checks._torch_rule import TorchRule
from mplint.diagnostics import Fix, FixSafety, ImportSpec
from mplint.engine.names import dotted
from mplint.knowledge.dtypes import TORCH_WIDE_NAMES
from mplint.knowledge.float16_range import (
    FLOAT16_MAX,
    FLOAT16_TINY,
    FLUSHES_IN_FLOAT16,
    LARGE_INTEGER,
    LARGE_OR_TINY_EXPONENT,
    OUTSIDE_FLOAT16,
)

_MASK_METHODS = ("masked_fill", "masked_fill_")
_MODULE_BASES = re.compile(r"Module$|Layer$|Attention$|Block$")
# What CUDA autocast runs in float16 (its lower-precision list): their results are float16 whatever the inputs.
_AUTOCAST_FLOAT16_OPS = frozenset(
    {
        "matmul",
        "mm",
        "bmm",
        "baddbmm",
        "addmm",
        "addbmm",
        "einsum",
        "nn.functional.linear",
        *(f"nn.functional.conv{n}d" for n in (1, 2, 3)),
        *(f"nn.functional.conv_transpose{n}d" for n in (1, 2, 3)),
    }
)
_AUTOCAST_FLOAT16_MODULES = frozenset(
    {"nn.Linear", "nn.Bilinear", *(f"nn.{conv}{n}d" for conv in ("Conv", "ConvTranspose") for n in (1, 2, 3))}
)
# Functions and methods that keep a float16 input float16 under CUDA autocast (in no autocast list).
_KEEPING_FUNCTIONS = frozenset(
    {
        "sigmoid",
        "tanh",
        "relu",
        "abs",
        "clamp",
        "sqrt",
        *(f"nn.functional.{f}" for f in ("sigmoid", "tanh", "relu", "gelu", "silu", "elu", "leaky_relu", "hardtanh")),
    }
)
_KEEPING_METHODS = frozenset({"sigmoid", "tanh", "relu", "abs", "clamp", "sqrt", "mean"})
# Where a flushed epsilon does its harm: a log, a root or a division of the sum.
_LOG_OR_DIVISION = frozenset({"log", "log2", "log10", "sqrt", "rsqrt", "reciprocal"})
_DIVISIONS = frozenset({"div", "true_divide"})
_MAX_DEPTH = 8


class TorchFloat16OverflowConstant(TorchRule):
    id = "MPT601"
    triggers = (
        LARGE_OR_TINY_EXPONENT,
        LARGE_INTEGER,
        b"finfo",  # torch.finfo(torch.float32).min, however torch is imported
    )

    @classmethod
    def candidate(cls, code) -> bool:
        wide_limit = b"finfo" in code.source
        beyond = any(_beyond(n) for n in code.argument_numbers | code.operand_numbers)
        return code.imports_torch and (wide_limit or beyond)

    def visit_Call(self, node: cst.Call) -> None:
        func = node.func
        if isinstance(func, cst.Attribute) and func.attr.value in _MASK_METHODS and len(node.args) >= 2:
            # ``mask.masked_fill(mask.to(torch.bool), -1e8)`` builds an additive mask from itself: it may be bool,
            # and whatever it is, its sum with float16 scores overflows at float16's own limit
            receiver = dotted(func.value)
            builds_mask = receiver is not None and any(
                dotted(n) == receiver for n in self.context.nodes_within(node.args[0].value, cst.Name, cst.Attribute)
            )
            self._check(node.args[1].value, func.value, library=True, builds_mask=builds_mask)
        elif self.context.names.torch_api(func, {"masked_fill", "where"}) is not None:
            name = self.context.names.torch_api(func, {"masked_fill", "where"}).path
            if name == "masked_fill" and len(node.args) >= 3:
                self._check(node.args[2].value, node.args[0].value, library=True)
            elif name == "where" and len(node.args) == 3:
                self._check(node.args[2].value, node.args[1].value, library=True)
                self._check(node.args[1].value, node.args[2].value, library=True)

    def visit_BinaryOperation(self, node: cst.BinaryOperation) -> None:
        if isinstance(node.operator, (cst.Add, cst.Subtract, cst.Multiply)):
            self._check(node.right, node.left, library=False)
            self._check(node.left, node.right, library=False)

    def _check(
        self, constant: cst.BaseExpression, tensor: cst.BaseExpression, library: bool, builds_mask: bool = False
    ) -> None:
        value = self._value(constant)
        if value is None or not (abs(value) > FLOAT16_MAX or 0 < abs(value) < FLOAT16_TINY):
            return
        why = self._float16(tensor, library, library and abs(value) > FLOAT16_MAX)
        if why is None and not library and 0 < value < FLOAT16_TINY:
            why = self._epsilon_under_autocast(constant, tensor)
        if why is None:
            return
        shown = self.code(constant)
        if abs(value) > FLOAT16_MAX:
            message = (
                f"`{shown}` {OUTSIDE_FLOAT16} and `{self.code(tensor)}` is float16 "
                f"{why}: masked_fill raises 'value cannot be converted to type at::Half without overflow', arithmetic "
                "gives inf and NaN; "
                + (
                    "this builds an additive mask from itself, which may be bool and whose float16 limit added to "
                    "float16 scores is -inf: bound it by the scores' dtype (-1e4 in float16); no automatic fix"
                    if builds_mask
                    else "bound it by the tensor's dtype (`torch.finfo(x.dtype).min`)"
                )
            )
        else:
            message = (
                f"`{shown}` {FLUSHES_IN_FLOAT16} and `{self.code(tensor)}` is float16 "
                f"{why}: the epsilon vanishes and log/division give inf or NaN"
            )
        self.report(constant, message, None if builds_mask else self._fix(constant, value, tensor))

    def _value(self, node: cst.BaseExpression) -> float | None:
        return signed(node, self._atom)

    def _atom(self, node: cst.BaseExpression) -> float | None:
        """A number literal, a product of them (``-10000.0 * 1e5``), or a float32/float64 limit (``torch.finfo(torch.float32).min``)."""
        number = number_literal(node)
        if number is not None:
            return number
        if isinstance(node, cst.BinaryOperation):
            return _literal_value(node)
        return wide_dtype_limit(node, self._finfo_dtype, self._wide, bare=False)

    def _finfo_dtype(self, call: cst.Call) -> cst.BaseExpression | None:
        return (
            call.args[0].value if call.args and self.context.names.torch_api(call.func, {"finfo"}) is not None else None
        )

    def _wide(self, dtype: cst.BaseExpression) -> bool:
        return any(k.ns == "torch" and k.path in TORCH_WIDE_NAMES for k in self.context.names.torch_names(dtype))

    def _float16(self, tensor: cst.BaseExpression, masked: bool, masked_large: bool) -> str | None:
        """Why ``tensor`` can be float16 here, or None. Arithmetic counts only on tensors cast to float16 (a
        number under autocast may be a Python float); masks also under autocast, and large mask values in
        any module method (library code runs under whatever precision its users pick)."""
        if float32_cast(tensor) or isinstance(tensor, cst.SimpleString) or _literal_value(tensor) is not None:
            return None
        amp = self.context.analysis(TorchAmp.of)
        scope = self.context.enclosing(tensor, cst.FunctionDef) or self.context.module
        halves = half_names(self.context, amp, scope)
        if is_half_cast(self.context, amp, tensor) or dotted(tensor) in halves:
            return "(cast with `.half()`/`.to(torch.float16)`)"
        if not masked:
            return None
        regions = [r for r in amp.enclosing_regions(tensor) if r.enabled is not False]
        if regions and regions[-1].dtype in (FLOAT16, None) and not self._float32_name(tensor, scope):
            return "under autocast"
        if masked_large and self._in_module_method(tensor) and not self._float32_name(tensor, scope):
            return "whenever the module runs under float16 autocast or `.half()`"
        return None

    def _epsilon_under_autocast(self, constant: cst.BaseExpression, tensor: cst.BaseExpression) -> str | None:
        """``torch.log(torch.sigmoid(self.fc(x)) + 1e-8)``, ``x / (h.mean() + 1e-8)``: an epsilon added to the
        result of an op that float16 autocast runs in float16 (a Linear or conv module of the class, matmul,
        ``@``, F.linear), through functions that keep its dtype, where the sum is then logged, rooted or divided
        by; inside a float16 autocast region, or in a module's method (run under whatever precision its users
        choose). Why the tensor is float16, or None."""
        total = self.context.parent(constant)
        if not (
            isinstance(total, cst.BinaryOperation) and isinstance(total.operator, cst.Add) and self._harmful_use(total)
        ):
            return None
        scope = self.context.enclosing(tensor, cst.FunctionDef)
        if scope is None or self._float32_name(tensor, scope) or not self._autocast_float16(tensor, scope, 0):
            return None
        regions = [r for r in self.context.analysis(TorchAmp.of).enclosing_regions(tensor) if r.enabled is not False]
        if regions:
            return (
                "under autocast (the result of an op float16 autocast runs in float16)" if regions[-1].float16 else None
            )
        if self._in_module_method(tensor):
            return "whenever the module runs under float16 autocast (the result of an op autocast runs in float16)"
        return None

    def _autocast_float16(self, expr: cst.BaseExpression, scope: cst.FunctionDef, depth: int) -> bool:
        """``expr`` is float16 under float16 autocast: see ``_epsilon_under_autocast``."""
        if depth > _MAX_DEPTH:
            return False
        if isinstance(expr, cst.Name):
            value = self._bound_before(expr, scope)
            return value is not None and self._autocast_float16(value, scope, depth + 1)
        if isinstance(expr, cst.Subscript):
            return self._autocast_float16(expr.value, scope, depth + 1)
        if isinstance(expr, cst.BinaryOperation):
            if isinstance(expr.operator, cst.MatrixMultiply):
                return True
            if not isinstance(expr.operator, (cst.Add, cst.Subtract, cst.Multiply)):
                return False
            sides = [
                _literal_value(side) is not None or self._autocast_float16(side, scope, depth + 1)
                for side in (expr.left, expr.right)
            ]
            return all(sides) and not (_literal_value(expr.left) is not None and _literal_value(expr.right) is not None)
        if not isinstance(expr, cst.Call):
            return False
        func = expr.func
        names = self.context.names
        if names.torch_api(func, _AUTOCAST_FLOAT16_OPS) is not None:
            return True
        if isinstance(func, cst.Attribute) and isinstance(func.value, cst.Name) and func.value.value == "self":
            return self._float16_module(func.attr.value, expr)
        if names.torch_api(func, _KEEPING_FUNCTIONS) is not None:
            return bool(expr.args) and self._autocast_float16(expr.args[0].value, scope, depth + 1)
        if isinstance(func, cst.Attribute) and func.attr.value in _KEEPING_METHODS:
            return self._autocast_float16(func.value, scope, depth + 1)
        return False

    def _float16_module(self, attribute: str, call: cst.Call) -> bool:
        """``self.<attribute>`` is assigned once in the class, a Linear or convolution module."""
        owner = self.context.enclosing(call, cst.ClassDef)
        if owner is None:
            return False
        values = [
            a.value
            for a in self.context.nodes_within(owner, cst.Assign)
            for t in a.targets
            if dotted(t.target) == f"self.{attribute}"
        ]
        return (
            len(values) == 1
            and isinstance(values[0], cst.Call)
            and self.context.names.torch_api(values[0].func, _AUTOCAST_FLOAT16_MODULES) is not None
        )

    def _bound_before(self, name: cst.Name, scope: cst.FunctionDef) -> cst.BaseExpression | None:
        """The value of the one assignment to ``name`` in ``scope``, when it comes before the use."""
        found = [
            a
            for a in self.context.nodes_within(scope, cst.Assign, cst.AugAssign, cst.AnnAssign, cst.For, cst.With)
            if any(
                isinstance(n, cst.Name) and n.value == name.value
                for t in _targets(a)
                for n in self.context.nodes_within(t, cst.Name)
            )
        ]
        if len(found) != 1 or not isinstance(found[0], cst.Assign) or len(found[0].targets) != 1:
            return None
        assign = found[0]
        if not isinstance(assign.targets[0].target, cst.Name) or not self.context.ends_before(assign, name):
            return None
        return assign.value

    def _harmful_use(self, total: cst.BaseExpression, hop: bool = True) -> bool:
        """The sum is logged, rooted or divided by (``torch.log(p + eps)``, ``(p + eps).log()``, ``x / (n + eps)``),
        directly or through the one name it is assigned to."""
        parent = self.context.parent(total)
        if isinstance(parent, cst.BinaryOperation):
            return isinstance(parent.operator, cst.Divide) and parent.right is total
        if isinstance(parent, cst.AugAssign):
            return isinstance(parent.operator, cst.DivideAssign) and parent.value is total
        if isinstance(parent, cst.Attribute):
            return parent.attr.value in _LOG_OR_DIVISION and isinstance(self.context.parent(parent), cst.Call)
        if isinstance(parent, cst.Arg):
            call = self.context.parent(parent)
            if not isinstance(call, cst.Call):
                return False
            found = self.context.names.torch_api(call.func, _LOG_OR_DIVISION | _DIVISIONS)
            if found is None:
                return False
            return found.path not in _DIVISIONS or (len(call.args) > 1 and call.args[1] is parent)
        if hop and isinstance(parent, cst.Assign) and len(parent.targets) == 1:
            target = parent.targets[0].target
            scope = self.context.enclosing(parent, cst.FunctionDef)
            if not isinstance(target, cst.Name) or scope is None:
                return False
            for use in self.context.nodes_within(scope, cst.Name):
                if use.value == target.value and use is not target and self.context.ends_before(parent, use):
                    if self._bound_before(use, scope) is total and self._harmful_use(use, hop=False):
                        return True
        return False

    def _float32_name(self, tensor: cst.BaseExpression, scope) -> bool:
        text = dotted(tensor)
        return text is not None and any(
            float32_cast(a.value)
            for a in self.context.nodes_within(scope, cst.Assign)
            if any(dotted(t.target) == text for t in a.targets)
        )

    def _in_module_method(self, node: cst.CSTNode) -> bool:
        owner = self.context.enclosing(node, cst.ClassDef)
        return owner is not None and any(_MODULE_BASES.search(dotted(b.value) or "") for b in owner.bases)

    def _fix(self, constant: cst.BaseExpression, value: float, tensor: cst.BaseExpression) -> Fix | None:
        if dotted(tensor) is None:
            return None
        dtype = f"{dotted(tensor)}.dtype"
        if abs(value) > FLOAT16_MAX:
            parent = self.context.parent(constant)
            if isinstance(parent, cst.BinaryOperation):
                return None  # ``(1 - mask) * -1e9``: the replacement would change float32 sums of masks
            limit = f"torch.finfo({dtype}).{'min' if value < 0 else 'max'}"
            if _literal_value(constant) is None:
                new = limit  # the code meant the dtype's own limit: float32's limit on float32, float16's on float16
            else:
                # The code's own value wherever the dtype holds it (float32, bfloat16: bit-identical results, and
                # no finfo(float32).min the code may have avoided on purpose), float16's limit where it does not.
                new = f"{'max' if value < 0 else 'min'}({self.code(constant)}, {limit})"
        else:
            if (
                not isinstance(self.context.parent(constant), cst.BinaryOperation)
                or value < 0
                or math.isclose(value, 0.0)
            ):
                return None
            new = f"(6.104e-05 if {dtype} == torch.float16 else {self.code(constant)})"
        return Fix({constant: cst.parse_expression(new)}, FixSafety.SAFE, imports=[ImportSpec("torch")])


def _targets(node: cst.CSTNode) -> list[cst.CSTNode]:
    """What a binding statement binds (the names within them)."""
    if isinstance(node, cst.Assign):
        return [t.target for t in node.targets]
    if isinstance(node, (cst.AugAssign, cst.AnnAssign, cst.For)):
        return [node.target]
    if isinstance(node, cst.With):
        return [item.asname.name for item in node.items if item.asname is not None]
    return []


def _literal_value(node: cst.BaseExpression) -> float | None:
    """A number literal under unary signs, or a sum or product of such (``-10000.0 * 1e5``)."""
    if isinstance(node, cst.BinaryOperation) and isinstance(node.operator, (cst.Add, cst.Subtract, cst.Multiply)):
        left, right = _literal_value(node.left), _literal_value(node.right)
        if left is None or right is None:
            return None
        return {cst.Add: left + right, cst.Subtract: left - right, cst.Multiply: left * right}[type(node.operator)]
    return literal_number(node)


def _beyond(value: float) -> bool:
    return value > FLOAT16_MAX or 0 < value < FLOAT16_TINY
