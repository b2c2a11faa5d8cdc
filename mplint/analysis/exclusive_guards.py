"""Statements that can never run in the same run, and statements that surely run in one run together.

``if FLAGS.fp16_implementation == "keras": <policy>`` and, later, ``if FLAGS.fp16_implementation ==
"graph_rewrite": <rewrite>`` are two modes of one flag: whatever the flag holds, at most one of them runs.
A guard is read from the ``if`` statements around a node (the ``and`` of its test in the body, the negation
of a single comparison in the ``else``): ``X == c``, ``X != c``, ``X in (c1, c2)``, ``X not in (...)``, with
``X`` a name or attribute chain and the ``c`` literals. Two nodes are exclusive when their guards allow no
common value of some ``X``, and ``X`` cannot change between them: the file binds it at most once, never in a
loop (``FLAGS.x`` is never assigned; ``mode = parse(args)`` once at the top of ``main``). A bare name must be
the same variable for both: the two nodes share their function.

Two nodes surely run together in some run (``together``) when the run-time conditions around one are all
conditions around the other too (the same test, the same arm: ``if dtype == tf.float16:`` around both, or none
around one), or when what is left are comparisons of one setting against literals that some value satisfies on
both sides (``FLAGS.mode in ("keras", "both")`` and ``FLAGS.mode != "keras"``: the mode ``both``). Tests of
different settings (``dtype == tf.float16`` and ``FLAGS.fp16_implementation == "graph_rewrite"``) may depend on
each other in ways the code does not show (``dtype`` computed from the implementation): not surely together.
``if __name__ == "__main__":`` holds in every run of an entry point and is no condition.
"""

from __future__ import annotations

from dataclasses import dataclass

import libcst as cst

from mplint.engine.context import FileContext
from mplint.engine.names import dotted

_LITERALS = {"True": True, "False": False, "None": None}


@dataclass(frozen=True)
class _Allowed:
    """The values a guarded setting may hold at a node: ``only`` (None: any), less ``never``."""

    only: frozenset | None = None
    never: frozenset = frozenset()

    def meet(self, other: _Allowed) -> _Allowed:
        only = self.only if other.only is None else other.only if self.only is None else self.only & other.only
        return _Allowed(only, self.never | other.never)

    def disjoint(self, other: _Allowed) -> bool:
        mine = None if self.only is None else self.only - self.never
        theirs = None if other.only is None else other.only - other.never
        if mine is not None and theirs is not None and not mine & theirs:
            return True
        return (mine is not None and mine <= other.never) or (theirs is not None and theirs <= self.never)


def _literal(node: cst.BaseExpression):
    """(True, value) for a string, number or True/False/None literal; (False, None) otherwise."""
    if isinstance(node, cst.SimpleString):
        return True, node.evaluated_value
    if isinstance(node, (cst.Integer, cst.Float)):
        return True, node.evaluated_value
    if isinstance(node, cst.Name) and node.value in _LITERALS:
        return True, _LITERALS[node.value]
    return False, None


def _literals(node: cst.BaseExpression) -> frozenset | None:
    """``("a", "b")`` / ``["a"]`` / ``{"a"}`` of literals; None otherwise."""
    if not isinstance(node, (cst.Tuple, cst.List, cst.Set)):
        return None
    values = []
    for element in node.elements:
        if not isinstance(element, cst.Element):
            return None
        known, value = _literal(element.value)
        if not known:
            return None
        values.append(value)
    return frozenset(values)


def _comparison(test: cst.BaseExpression, negated: bool) -> tuple[str, _Allowed] | None:
    """``X == c`` and its kin as (X, what X may be where the test is true, or false with ``negated``)."""
    if not isinstance(test, cst.Comparison) or len(test.comparisons) != 1:
        return None
    target = test.comparisons[0]
    operator, left, right = target.operator, test.left, target.comparator
    if isinstance(operator, (cst.Equal, cst.NotEqual, cst.Is, cst.IsNot)):
        known, value = _literal(right)
        if not known:
            known, value = _literal(left)
            left = right
        if not known or dotted(left) is None:
            return None
        values = frozenset([value])
        equal = isinstance(operator, (cst.Equal, cst.Is))
    elif isinstance(operator, (cst.In, cst.NotIn)):
        values = _literals(right)
        if values is None or dotted(left) is None:
            return None
        equal = isinstance(operator, cst.In)
    else:
        return None
    equal = equal != negated
    return dotted(left), _Allowed(only=values) if equal else _Allowed(never=values)


def _conjuncts(test: cst.BaseExpression):
    if isinstance(test, cst.BooleanOperation) and isinstance(test.operator, cst.And):
        yield from _conjuncts(test.left)
        yield from _conjuncts(test.right)
    else:
        yield test


def guards(context: FileContext, node: cst.CSTNode) -> dict[str, _Allowed]:
    """What each guarded setting may hold where ``node`` runs, from the ``if`` statements around it."""
    found: dict[str, _Allowed] = {}

    def add(key: str, allowed: _Allowed) -> None:
        found[key] = found[key].meet(allowed) if key in found else allowed

    child = node
    for ancestor in context.ancestors(node):
        if isinstance(ancestor, cst.If):
            if child is ancestor.body:
                for conjunct in _conjuncts(ancestor.test):
                    read = _comparison(conjunct, negated=False)
                    if read is not None:
                        add(*read)
            elif child is ancestor.orelse:
                read = _comparison(ancestor.test, negated=True)
                if read is not None:
                    add(*read)
        elif isinstance(ancestor, (cst.FunctionDef, cst.Lambda, cst.ClassDef)):
            break  # the guards of a definition are not those of its calls
        child = ancestor
    return found


def _bindings(context: FileContext) -> dict[str, list[bool]]:
    """Each binding of the file by the dotted text it binds: whether it is a loop's (memoised)."""
    return context.analysis(_collect_bindings)


def _collect_bindings(context: FileContext) -> dict[str, list[bool]]:
    out: dict[str, list[bool]] = {}

    def bind(target: cst.BaseExpression, in_loop: bool) -> None:
        if isinstance(target, (cst.Tuple, cst.List)):
            for element in target.elements:
                bind(element.value, in_loop)
            return
        if isinstance(target, cst.StarredElement):
            target = target.value
        name = dotted(target)
        if name is not None:
            out.setdefault(name, []).append(in_loop)

    for node in context.nodes(
        cst.Assign,
        cst.AugAssign,
        cst.AnnAssign,
        cst.For,
        cst.CompFor,
        cst.AsName,
        cst.NamedExpr,
        cst.Global,
        cst.Nonlocal,
    ):
        if isinstance(node, (cst.For, cst.CompFor)):
            bind(node.target, True)  # bound once per turn
        elif isinstance(node, (cst.Global, cst.Nonlocal)):
            for item in node.names:  # bound in another scope, unseen here
                out.setdefault(item.name.value, []).append(True)
        else:
            in_loop = context.enclosing(node, (cst.For, cst.While, cst.CompFor)) is not None
            if isinstance(node, cst.Assign):
                for target in node.targets:
                    bind(target.target, in_loop)
            elif isinstance(node, cst.AsName):
                bind(node.name, in_loop)
            else:
                bind(node.target, in_loop)
    return out


def _fixed(context: FileContext, key: str) -> bool:
    """``key`` holds one value for a whole run: bound at most once in the file, outside any loop."""
    bound = _bindings(context).get(key, [])
    return len(bound) <= 1 and not any(bound)


def exclusive(context: FileContext, first: cst.CSTNode, second: cst.CSTNode) -> bool:
    """``first`` and ``second`` never both run: some setting that cannot change between them is guarded to
    values that exclude each other."""
    a, b = guards(context, first), guards(context, second)
    same_function = context.enclosing(first, cst.FunctionDef) is context.enclosing(second, cst.FunctionDef)
    for key in a.keys() & b.keys():
        if "." not in key and not same_function:
            continue  # two functions' locals of one name are two variables
        if a[key].disjoint(b[key]) and _fixed(context, key):
            return True
    return False


@dataclass(frozen=True)
class _Condition:
    """A run-time condition a node runs under: a test's text and the value it must have, with what it allows
    of a setting where it compares one against literals."""

    text: str
    holds: bool
    setting: tuple[str, _Allowed] | None
    local: bool  # reads a bare name (a variable of its function), not only attribute chains


def _disjuncts(test: cst.BaseExpression):
    if isinstance(test, cst.BooleanOperation) and isinstance(test.operator, cst.Or):
        yield from _disjuncts(test.left)
        yield from _disjuncts(test.right)
    else:
        yield test


def _main_guard(test: cst.BaseExpression) -> bool:
    if not isinstance(test, cst.Comparison) or len(test.comparisons) != 1:
        return False
    sides = {dotted(test.left), dotted(test.comparisons[0].comparator)}
    literal = next((n for n in (test.left, test.comparisons[0].comparator) if isinstance(n, cst.SimpleString)), None)
    return "__name__" in sides and literal is not None and literal.evaluated_value == "__main__"


def conditions(context: FileContext, node: cst.CSTNode) -> list[_Condition]:
    """The run-time conditions ``node`` runs under inside its function: the tests of the ``if`` statements and
    conditional expressions around it (each conjunct of an ``and`` in the body, each negated disjunct of an ``or``
    in the ``else``), the left side of a short-circuit ``and``/``or``, the body or a handler of a ``try``."""

    def condition(test: cst.BaseExpression, holds: bool) -> _Condition:
        names = context.nodes_within(test, cst.Name)
        chained = {id(a.value) for a in context.nodes_within(test, cst.Attribute)}
        local = any(
            id(n) not in chained and not isinstance(context.parent(n), cst.Attribute) and n.value not in _LITERALS
            for n in names
        )
        text = " ".join(context.module.code_for_node(test).split())
        return _Condition(text, holds, _comparison(test, negated=not holds), local)

    found: list[_Condition] = []
    child = node
    for ancestor in context.ancestors(node):
        if isinstance(ancestor, (cst.FunctionDef, cst.Lambda, cst.ClassDef)):
            break
        if isinstance(ancestor, (cst.If, cst.IfExp)) and not _main_guard(ancestor.test):
            if child is ancestor.body:
                found += [condition(c, True) for c in _conjuncts(ancestor.test)]
            elif child is ancestor.orelse:
                disjuncts = list(_disjuncts(ancestor.test))
                parts = disjuncts if len(disjuncts) > 1 else [ancestor.test]
                found += [condition(d, False) for d in parts]
        elif isinstance(ancestor, cst.BooleanOperation) and child is ancestor.right:
            found.append(condition(ancestor.left, isinstance(ancestor.operator, cst.And)))
        elif isinstance(ancestor, cst.Try) and child is ancestor.body and ancestor.handlers:
            found.append(_Condition(f"no exception in the try at {context.source_order(ancestor)}", True, None, False))
        elif isinstance(ancestor, cst.ExceptHandler):
            try_at = context.source_order(context.parent(ancestor))
            found.append(_Condition(f"an exception in the try at {try_at}", True, None, False))
        child = ancestor
    return found


def together(context: FileContext, first: cst.CSTNode, second: cst.CSTNode) -> bool:
    """``first`` and ``second`` surely run together in some run (their functions run, whatever calls them)."""
    same_function = context.enclosing(first, cst.FunctionDef) is context.enclosing(second, cst.FunctionDef)

    def key(c: _Condition) -> tuple[str, bool] | None:
        return (c.text, c.holds) if same_function or not c.local else None

    mine, theirs = conditions(context, first), conditions(context, second)
    shared = {key(c) for c in mine} & {key(c) for c in theirs} - {None}
    mine = [c for c in mine if key(c) not in shared]
    theirs = [c for c in theirs if key(c) not in shared]
    if not mine or not theirs:
        return True  # whenever the more guarded one runs, the other does
    settings: dict[str, list[_Allowed]] = {}
    sides: dict[str, set[int]] = {}
    for side, conds in enumerate((mine, theirs)):
        for c in conds:
            if c.setting is None or c.local and not same_function:
                return False
            settings.setdefault(c.setting[0], []).append(c.setting[1])
            sides.setdefault(c.setting[0], set()).add(side)
    for name, allowed in settings.items():
        if sides[name] != {0, 1} or not _fixed(context, name):
            return False  # a setting only one side tests: its link to the other side's settings is unknown
        met = allowed[0]
        for more in allowed[1:]:
            met = met.meet(more)
        if met.only is not None and not met.only - met.never:
            return False  # no value of the setting passes every test
    return True
