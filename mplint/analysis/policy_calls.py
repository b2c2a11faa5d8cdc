"""Calls that set a global mixed-precision policy, and the policy names they may set."""

from __future__ import annotations

import libcst as cst

from mplint.analysis.constants import evaluate
from mplint.engine.code_summary import CodeSummary
from mplint.engine.context import FileContext
from mplint.project.facts import BFLOAT16_POLICIES, FLOAT16_POLICIES

REDUCED_POLICIES = FLOAT16_POLICIES | BFLOAT16_POLICIES
_SETTERS = frozenset({"set_global_policy", "set_policy", "set_dtype_policy"})
_POLICY_CLASSES = frozenset({"Policy", "DTypePolicy"})


def sets_policy(code: CodeSummary, policies: frozenset[str]) -> bool:
    """Pre-filter: a call of a policy setter, and one of ``policies`` spelled in the file."""
    return not code.calls.isdisjoint(_SETTERS) and code.mentions(*policies)


def policy_setter(context: FileContext, call: cst.Call) -> bool:
    k = context.names.kname(call.func)
    return k is not None and k.is_keras and k.last in _SETTERS and bool(call.args)


def policy_values(context: FileContext, expr: cst.BaseExpression) -> set[str]:
    """The policy names ``expr`` may hold: a string, a constant, ``Policy("...")``, or both arms of ``a if c else b``."""
    if isinstance(expr, cst.IfExp):
        return policy_values(context, expr.body) | policy_values(context, expr.orelse)
    if isinstance(expr, cst.Call) and expr.args:
        k = context.names.kname(expr.func)
        if k is not None and k.last in _POLICY_CLASSES:
            return policy_values(context, expr.args[0].value)
        return set()
    found = evaluate(context, expr)
    return {found.value} if found is not None and isinstance(found.value, str) else set()
