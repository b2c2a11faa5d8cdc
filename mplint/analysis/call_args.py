"""Reading and writing the arguments of a call, the same way in every rule."""

from __future__ import annotations

import libcst as cst


def keyword(call: cst.Call, name: str) -> cst.Arg | None:
    """The ``name=...`` argument of ``call``."""
    return next((a for a in call.args if a.keyword is not None and a.keyword.value == name), None)


def keyword_value(call: cst.Call, name: str) -> cst.BaseExpression | None:
    arg = keyword(call, name)
    return arg.value if arg is not None else None


def argument(call: cst.Call, position: int | None, name: str) -> cst.BaseExpression | None:
    """The value passed as ``name=`` or, failing that, as the ``position``-th positional argument."""
    value = keyword_value(call, name)
    if value is not None:
        return value
    positional = [a.value for a in call.args if a.keyword is None and not a.star]
    return positional[position] if position is not None and position < len(positional) else None


def keyword_arg(name: str, value: cst.BaseExpression) -> cst.Arg:
    """``name=value`` with no spaces around ``=``, as PEP 8 writes keyword arguments."""
    no_space = cst.SimpleWhitespace("")
    return cst.Arg(
        value=value,
        keyword=cst.Name(name),
        equal=cst.AssignEqual(whitespace_before=no_space, whitespace_after=no_space),
    )
