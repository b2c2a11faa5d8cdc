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
            self._check(node.args[1].value, func.value, library=True)
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

    def _check(self, constant: cst.BaseExpression, tensor: cst.BaseExpression, library: bool) -> None:
        value = self._value(constant)
        if value is None or not (abs(value) > FLOAT16_MAX or 0 < abs(value) < FLOAT16_TINY):
            return
        why = self._float16(tensor, library, library and abs(value) > FLOAT16_MAX)
        if why is None:
            return
        shown = self.code(constant)
        if abs(value) > FLOAT16_MAX:
            message = (
                f"`{shown}` {OUTSIDE_FLOAT16} and `{self.code(tensor)}` is float16 "
                f"{why}: masked_fill raises 'value cannot be converted to type at::Half without overflow', arithmetic "
                "gives inf and NaN; bound it by the tensor's dtype (`torch.finfo(x.dtype).min`)"
            )
        else:
            message = (
                f"`{shown}` {FLUSHES_IN_FLOAT16} and `{self.code(tensor)}` is float16 "
                f"{why}: the epsilon vanishes and log/division give inf or NaN"
            )
        self.report(constant, message, self._fix(constant, value, tensor))

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
