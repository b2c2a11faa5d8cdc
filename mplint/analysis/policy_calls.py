"""Calls that set a global mixed-precision policy, and the policy names they may set."""

from __future__ import annotations

import libcst as cst

from mplint.analysis.constants import evaluate
from mplint.engine.code_summary import CodeSummary
from mplint.engine.context import FileContext
from mplint.knowledge.policies import REDUCED_POLICIES, SETTER_NAMES, is_policy_class, is_policy_setter  # noqa: F401


def sets_policy(code: CodeSummary, policies: frozenset[str]) -> bool:
    """Pre-filter: a call of a policy setter, and one of ``policies`` spelled in the file."""
    return not code.calls.isdisjoint(SETTER_NAMES) and code.mentions(*policies)


def policy_setter(context: FileContext, call: cst.Call) -> bool:
    return is_policy_setter(context.names.kname(call.func)) and bool(call.args)


def policy_values(context: FileContext, expr: cst.BaseExpression) -> set[str]:
    """The policy names ``expr`` may hold: a string, a constant, ``Policy("...")``, or both arms of ``a if c else b``."""
    if isinstance(expr, cst.IfExp):
        return policy_values(context, expr.body) | policy_values(context, expr.orelse)
    if isinstance(expr, cst.Call) and expr.args:
        if is_policy_class(context.names.kname(expr.func)):
            return policy_values(context, expr.args[0].value)
        return set()
    found = evaluate(context, expr)
    return {found.value} if found is not None and isinstance(found.value, str) else set()
