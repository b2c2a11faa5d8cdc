"""Early exits: ``if <test>: return`` (or ``raise``, ``continue``, ``break``) before a statement means the
statement runs only where ``<test>`` is false, as if it were that ``if``'s ``else`` arm."""

from __future__ import annotations

from typing import NamedTuple

import libcst as cst

_EXITS = {cst.Return: "return", cst.Raise: "raise", cst.Continue: "continue", cst.Break: "break"}


class EarlyExit(NamedTuple):
    guard: cst.If  # the statement code after it is past only where its test is false
    keyword: str  # return, raise, continue or break


def exits_before(block: cst.CSTNode, child: cst.CSTNode) -> list[EarlyExit]:
    """The early exits among the statements before ``child`` in ``block`` (a module or an indented block), nearest
    first. In ``if a: return`` / ``elif b: return`` each arm that exits counts, up to the first that does not."""
    body = block.body if isinstance(block, (cst.Module, cst.IndentedBlock)) else ()
    index = next((i for i, statement in enumerate(body) if statement is child), None)
    if index is None:
        return []
    found: list[EarlyExit] = []
    for statement in reversed(body[:index]):
        chain: list[EarlyExit] = []
        arm = statement
        while isinstance(arm, cst.If):
            keyword = _exit_keyword(arm.body)
            if keyword is None:
                break
            chain.append(EarlyExit(arm, keyword))
            arm = arm.orelse
        found += reversed(chain)
    return found


def _exit_keyword(body: cst.BaseSuite) -> str | None:
    """How a suite always leaves: its last statement is a return, raise, continue or break."""
    last = body.body[-1] if body.body else None
    if isinstance(last, cst.SimpleStatementLine):
        last = last.body[-1] if last.body else None
    return next((word for kind, word in _EXITS.items() if isinstance(last, kind)), None)
