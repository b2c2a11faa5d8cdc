"""MP303: mixed_float16 set on a path that runs under a TPU strategy (TPUs compute in bfloat16)."""

from __future__ import annotations

import libcst as cst

from mplint.analysis.policy_calls import policy_setter, policy_values, sets_policy
from mplint.diagnostics import Fix, FixSafety
from mplint.engine.context import FileContext
from mplint.engine.rule import Rule
from mplint.engine.walk import walk
from mplint.knowledge.loss_scale_names import LSO_PATHS
from mplint.knowledge.policies import BFLOAT16_POLICIES, FLOAT16_POLICIES

_TPU_NAMES = frozenset({"TPUStrategy", "TPUStrategyV2", "TPUClusterResolver", "initialize_tpu_system"})
_TPU_STRATEGIES = frozenset({"TPUStrategy", "TPUStrategyV2"})
TPU, OTHER, SHARED = "tpu", "other", "shared"


def _words(node: cst.CSTNode):
    """Identifiers and string contents of an expression, lower-cased."""
    if isinstance(node, cst.Name):
        yield node.value.lower()
    elif isinstance(node, cst.Attribute):
        yield node.attr.value.lower()
    elif isinstance(node, cst.SimpleString):
        yield str(node.evaluated_value).lower()
    for child in node.children:
        yield from _words(child)


def test_kinds(test: cst.BaseExpression) -> tuple[str, str]:
    """Where the body and the else-branch of ``if test`` run: TPU only, OTHER hardware only, or SHARED."""
    negated = False
    if isinstance(test, cst.UnaryOperation) and isinstance(test.operator, cst.Not):
        test, negated = test.expression, True
    if isinstance(test, cst.Comparison) and len(test.comparisons) == 1:
        negated ^= isinstance(test.comparisons[0].operator, (cst.NotEqual, cst.IsNot, cst.NotIn))
    words = list(_words(test))
    if any("tpu" in w for w in words):
        kinds = (TPU, OTHER)
    elif any("gpu" in w or "cuda" in w for w in words):
        kinds = (OTHER, SHARED)
    else:
        kinds = (SHARED, SHARED)
    return kinds[::-1] if negated else kinds


def _mentions_tpu(node: cst.CSTNode) -> bool:
    if isinstance(node, cst.Name) and node.value in _TPU_NAMES:
        return True
    if isinstance(node, cst.Attribute) and node.attr.value in _TPU_NAMES:
        return True
    return any(_mentions_tpu(child) for child in node.children)


def path_kind(context: FileContext, node: cst.CSTNode) -> tuple[str, cst.CSTNode | None]:
    """Whether ``node`` runs only on TPUs, only elsewhere, or on both; and the TPU-only block it sits in."""
    child = node
    for ancestor in context.ancestors(node):
        kind = None
        if isinstance(ancestor, cst.If):
            body, orelse = test_kinds(ancestor.test)
            kind = body if child is ancestor.body else orelse if child is ancestor.orelse else SHARED
        elif isinstance(ancestor, cst.Try) and _mentions_tpu(ancestor.body):
            if any(child is handler for handler in ancestor.handlers):
                kind = OTHER
            elif child is ancestor.body or child is ancestor.orelse:
                kind = TPU
        elif isinstance(ancestor, cst.FunctionDef):
            name = ancestor.name.value.lower()
            kind = TPU if "tpu" in name else OTHER if "gpu" in name or "cuda" in name else SHARED
        if kind in (TPU, OTHER):
            block = child.body if isinstance(child, cst.Else) else child
            block = block if kind == TPU and isinstance(block, cst.BaseSuite) else None
            return kind, block
        child = ancestor
    return SHARED, None


def _tpu_arm(expr: cst.BaseExpression) -> cst.BaseExpression | None:
    """The arm of ``a if tpu_test else b`` that runs on TPUs."""
    if isinstance(expr, cst.IfExp):
        body, orelse = test_kinds(expr.test)
        return expr.body if body == TPU else expr.orelse if orelse == TPU else None
    return None


class _Sites(cst.CSTVisitor):
    def __init__(self, context: FileContext) -> None:
        self.context = context
        self.setters: list[cst.Call] = []
        self.strategies: list[tuple[cst.Name, cst.Call]] = []  # `strategy = TPUStrategy(...)`
        self.mentions_tpu = False

    def visit_Call(self, node: cst.Call) -> None:
        if policy_setter(self.context, node):
            self.setters.append(node)

    def visit_Assign(self, node: cst.Assign) -> None:
        value = node.value
        if len(node.targets) == 1 and isinstance(node.targets[0].target, cst.Name) and isinstance(value, cst.Call):
            api = self.context.names.kname(value.func)  # resolved: `from ... import TPUStrategy as S`
            if api is not None and api.ns == "tf" and api.last in _TPU_STRATEGIES:
                self.strategies.append((node.targets[0].target, value))

    def visit_Name(self, node: cst.Name) -> None:
        self.mentions_tpu |= node.value in _TPU_NAMES


class Float16PolicyOnTpu(Rule):
    id = "MP303"
    program_choice = True
    triggers = (b"olicy",)

    @classmethod
    def candidate(cls, code) -> bool:
        return sets_policy(code, FLOAT16_POLICIES)

    @classmethod
    def active_for(cls, facts) -> bool:
        # A program that uses TPUs and may run float16 (a policy set inside a test governs no program).
        return facts.uses_tpu and facts.float16

    def visit_Module(self, node: cst.Module) -> None:
        sites = _Sites(self.context)
        walk(node, sites, self.context.children)
        if not (sites.mentions_tpu or self._tpu_helper_elsewhere()):
            return
        for setter in sites.setters:
            self._check(setter, sites)

    def _tpu_helper_elsewhere(self) -> bool:
        """Another file of the project reaches a TPU strategy but sets no policy: it runs under this file's."""
        facts = self.context.facts
        with_policy = {p.path for p in facts.policies}
        return any(path != self.context.path and path not in with_policy for path, _ in facts.tpu_sites)

    def _check(self, setter: cst.Call, sites: _Sites) -> None:
        arg = setter.args[0].value
        kind, block = path_kind(self.context, setter)
        arm = _tpu_arm(arg)
        if arm is not None:
            if policy_values(self.context, arm) & FLOAT16_POLICIES:
                self.report(setter, self._message("the TPU arm of this policy choice is float16"), self._rename(arm))
            return
        if kind == OTHER or not policy_values(self.context, arg) & FLOAT16_POLICIES:
            return
        if kind == TPU:
            self.report(setter, self._message("this branch runs on TPUs"), self._rename(arg, block))
        elif not self._reset_for_tpu_later(setter, sites):
            self.report(
                setter,
                self._message("this policy also applies on the TPU path and is not switched to mixed_bfloat16 there"),
                self._choose_by_strategy(setter, arg, sites),
            )

    def _message(self, why: str) -> str:
        return (
            f"mixed_float16 reaches code that runs under a TPU strategy ({why}): TPUs compute in bfloat16, and "
            "float16 there is slow or unsupported and needs needless loss scaling; use mixed_bfloat16 on TPUs"
        )

    def _reset_for_tpu_later(self, setter: cst.Call, sites: _Sites) -> bool:
        start = self.context.source_order(setter)
        for other in sites.setters:
            if self.context.source_order(other) <= start:
                continue
            arg = other.args[0].value
            arm = _tpu_arm(arg)
            if arm is not None and policy_values(self.context, arm) & BFLOAT16_POLICIES:
                return True
            if path_kind(self.context, other)[0] == TPU and policy_values(self.context, arg) & BFLOAT16_POLICIES:
                return True
        return False

    def _rename(self, expr: cst.BaseExpression, block: cst.CSTNode | None = None) -> Fix | None:
        """Write mixed_bfloat16 where the literal says mixed_float16, and drop loss scaling in the TPU block."""
        literal = expr.args[0].value if isinstance(expr, cst.Call) and expr.args else expr
        if not isinstance(literal, cst.SimpleString) or literal.evaluated_value != "mixed_float16":
            return None
        replacements = {literal: literal.with_changes(value=f"{literal.quote}mixed_bfloat16{literal.quote}")}
        if block is not None:
            for call in _calls(block):
                if self.context.names.callee(call, LSO_PATHS) and call.args and not call.args[0].keyword:
                    replacements[call] = call.args[0].value
        return Fix(replacements, safety=FixSafety.SAFE)

    def _choose_by_strategy(self, setter: cst.Call, arg: cst.BaseExpression, sites: _Sites) -> Fix | None:
        """``"mixed_bfloat16" if isinstance(strategy, TPUStrategy) else <as before>``, when a strategy is in scope."""
        if not isinstance(arg, cst.SimpleString):
            return None
        scopes = self.context.names.scopes
        start = self.context.position(setter).start
        for name, call in sites.strategies:
            if scopes.get(name) is not scopes.get(setter) or self.context.position(name).start.line >= start.line:
                continue
            strategy_class = self.context.module.code_for_node(call.func)
            choice = cst.parse_expression(
                f"{arg.quote}mixed_bfloat16{arg.quote} if isinstance({name.value}, {strategy_class}) else {arg.value}"
            )
            return Fix({arg: choice}, safety=FixSafety.SAFE)
        return None


def _calls(node: cst.CSTNode):
    if isinstance(node, cst.Call):
        yield node
    for child in node.children:
        yield from _calls(child)
