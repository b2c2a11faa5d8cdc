"""``OptimizerFlow``, the loss-scaling rules' analysis: every gradient site of a file, the operations on its
gradients, the apply call that consumes them, and where the optimizer comes from (``sites.py`` says what a site
holds, ``paths.py`` splits it into its paths)."""

from __future__ import annotations

import re

import libcst as cst

from mplint.analysis.keras_guards import code_range
from mplint.checks.loss_scaling.optimizer_summaries import LOSS_SCALING, OPTIMIZER
from mplint.checks.loss_scaling.paths import SitePaths
from mplint.checks.loss_scaling.sites import (
    APPLY_METHODS,
    CLIPS,
    Collector,
    GradientSite,
    GradOp,
    OptimizerOrigin,
    assign_value,
    is_lso_call,
    lso_inner,
    method_name,
    names_in,
    parameter_names,
    single_assign,
    target_names,
)
from mplint.diagnostics import Related
from mplint.engine import matchers as m
from mplint.engine.context import FileContext
from mplint.engine.names import last_name
from mplint.engine.walk import walk
from mplint.knowledge.loss_scale_names import SCALE_ATTRS, SCALE_METHODS, UNSCALE_METHOD
from mplint.knowledge.policies import FLOAT16_POLICIES, UNKNOWN_POLICY


class OptimizerFlow:
    """``context.analysis(OptimizerFlow)``: every gradient site of the file."""

    def __init__(self, context: FileContext):
        self.context = context
        self.facts = context.facts
        c = Collector()
        walk(context.module, c, context.children)
        self.c = c
        self.sites: list[GradientSite] = []
        for scope_id, tapes in c.tapes.items():
            if tapes:
                self._sites_in(scope_id, tapes)
        self.sites.sort(key=lambda s: self.context.source_order(s.call))

    # --- policy --------------------------------------------------------------------------

    @property
    def compile_wraps(self) -> bool:
        """compile() adds a LossScaleOptimizer: the model's (global) policy is mixed_float16, or, in library
        code of TF 2 (compile() wraps on every generation from TF 2.1), may be for any user."""
        if self.facts.global_policy_names & (FLOAT16_POLICIES | {UNKNOWN_POLICY}):
            return True
        return self.facts.library_context and self.context.generation >= 1

    # --- sites ---------------------------------------------------------------------------

    def _sites_in(self, scope_id: int, tapes: dict[str, list[cst.With]]) -> None:
        lines = self.c.lines[scope_id]
        scope = self.c.scope_of[id(lines[0])] if lines else None
        for index, line in enumerate(lines):
            for call in m.findall(line, m.Call(func=m.Attribute(attr=m.Name("gradient")))):
                receiver = call.func.value  # type: ignore[union-attr]
                if not (isinstance(receiver, cst.Name) and receiver.value in tapes) or not call.args:
                    continue
                site = self._site(scope, self._tape_of(tapes[receiver.value], call), call, line, lines, index)
                if site is not None:
                    self.sites.append(site)

    def _tape_of(self, withs: list[cst.With], call: cst.Call) -> cst.With:
        """The block that recorded what ``call`` differentiates: the last ``with ... as <name>`` before it (a
        function may reuse the name for each of its tapes)."""
        at = self.context.source_order(call)
        before = [w for w in withs if self.context.source_order(w) < at]
        return before[-1] if before else withs[0]

    def _site(self, scope, tape, call, line, lines, index) -> GradientSite | None:
        target = call.args[0].value
        # grads = tape.gradient(...), or wrapped: grads = unscale(tape.gradient(...))
        stmt = line if single_assign(line) and self.context.contains(assign_value(line), call) else None
        grad_names = target_names(line) if stmt is not None else ()
        site = GradientSite(scope, tape, call, stmt, grad_names, target, keras=code_range(self.context, call))
        if stmt is not None and assign_value(line) is not call:
            kind, node = self.grad_op(assign_value(line))
            if kind:
                site.ops.append(GradOp(kind, node, stmt, grad_names, frozenset(grad_names)))
        self._find_target(site, lines[:index])
        self._follow_gradients(site, line, lines[index + 1 :])
        if site.apply_call is not None:
            self.resolve(site, line, lines[:index])
        return site

    def resolve(self, site: GradientSite, at: cst.CSTNode, before: list[cst.SimpleStatementLine]) -> None:
        """Where the optimizer of a site with an apply call comes from, and the site's paths (``before``: the
        statement lines that precede the value it differentiates, in its function)."""
        site.origin = self.origin(site.optimizer_expr, at)
        site.paths = SitePaths(self, site, before).paths()

    def _find_target(self, site: GradientSite, before: list[cst.SimpleStatementLine]) -> None:
        if isinstance(site.target, cst.Call) and self.is_scaling(site.target):
            site.scaled_by = site.target
            return
        if not isinstance(site.target, cst.Name):
            return
        for line in reversed(before):
            if single_assign(line) and target_names(line) == (site.target.value,):
                value = assign_value(line)
                if isinstance(value, cst.Call) and self.is_scaling(value):
                    site.scaled_by = value
                if self.c.with_of.get(id(line)) is site.tape and line in _with_body(site.tape):
                    site.loss_stmt = line
                return

    def _follow_gradients(self, site: GradientSite, line, after: list[cst.SimpleStatementLine]) -> None:
        flow = set(site.grad_names)
        if not flow:  # opt.apply_gradients(zip(tape.gradient(...), vars)) on one line
            site.apply_call = self._apply_in(line, None)
            return
        for stmt in after:
            apply = self._apply_in(stmt, flow)
            if apply is not None:
                site.apply_call = apply
                return
            if not single_assign(stmt):
                continue
            value = assign_value(stmt)
            reads = names_in(self.context, value) & flow
            targets = target_names(stmt)
            if not reads:
                if self._is_gradient_call(value):  # another tape's gradients take over the name
                    flow -= set(targets)
                continue
            kind, node = self.grad_op(value)
            if kind:
                site.ops.append(GradOp(kind, node, stmt, targets, frozenset(reads)))
            flow |= set(targets)

    def _is_gradient_call(self, value: cst.BaseExpression) -> bool:
        return isinstance(value, cst.Call) and method_name(value) == "gradient"

    def _apply_in(self, stmt: cst.CSTNode, flow: set[str] | None) -> cst.Call | None:
        for call in self.context.findall(stmt, m.Call(func=m.Attribute()), (cst.Call,)):
            if method_name(call) in APPLY_METHODS and call.args:
                if flow is None or names_in(self.context, call.args[0].value) & flow:
                    return call
        return None

    # --- what a value is ------------------------------------------------------------------

    def helper(self, call: cst.Call) -> cst.FunctionDef | None:
        """The same module's function (or ``self.method``) a call invokes."""
        func = call.func
        if isinstance(func, cst.Name) or m.matches(func, m.Attribute(value=m.Name("self"))):
            defs = self.c.functions.get(last_name(func) or "", [])
            return defs[0] if len(defs) == 1 else None
        return None

    def project_steps(self, call: cst.Call) -> frozenset[str]:
        """What a helper of another module of the project does to a loss or gradients ("scale", "unscale",
        "manual_unscale"; the ``LOSS_SCALING`` summaries), read once for the whole project."""
        found = self.context.summary(call.func, LOSS_SCALING)
        return frozenset(found.value.split("+")) if found is not None else frozenset()

    def is_scaling(self, call: cst.Call) -> bool:
        if method_name(call) in SCALE_METHODS:
            return True
        fn = self.helper(call)
        if fn is None:
            return "scale" in self.project_steps(call)
        return any(method_name(c) in SCALE_METHODS for c in self.context.nodes_within(fn, cst.Call))

    def grad_op(self, value: cst.BaseExpression) -> tuple[str | None, cst.CSTNode | None]:
        for call in self.context.nodes_within(value, cst.Call):
            if method_name(call) == UNSCALE_METHOD:
                return "unscale", call
            if last_name(call.func) in CLIPS:
                return "clip", call
            fn = self.helper(call)
            if fn is not None:
                if any(method_name(c) == UNSCALE_METHOD for c in self.context.nodes_within(fn, cst.Call)):
                    return "unscale", call
                if _divides_by_scale(self.context, fn):
                    return "manual_unscale", call
            else:
                steps = self.project_steps(call)
                for kind in ("unscale", "manual_unscale"):
                    if kind in steps:
                        return kind, call
        if _divides_by_scale(self.context, value):
            return "manual_unscale", value
        return None, None

    # --- optimizer origin -----------------------------------------------------------------

    def origin(self, expr: cst.BaseExpression | None, at: cst.CSTNode, depth: int = 0) -> OptimizerOrigin:
        if expr is None or depth > 4:
            return OptimizerOrigin("unknown")
        if is_lso_call(expr):
            inner = lso_inner(expr)  # type: ignore[arg-type]
            found = self.origin(inner, at, depth + 1) if inner is not None else None
            return OptimizerOrigin("explicit", found.construction if found else None)
        if isinstance(expr, cst.Call):
            return self._call_origin(expr, at, depth)
        if isinstance(expr, cst.SimpleString):
            return OptimizerOrigin("none", expr)
        if isinstance(expr, cst.Name):
            return self._name_origin(expr.value, at, depth)
        if isinstance(expr, cst.Attribute):
            if m.matches(expr.value, m.Name("self")):
                cls = self.context.enclosing(at, cst.ClassDef)
                values = self.c.self_attrs.get(id(cls), {}).get(expr.attr.value) if cls else None
                if values:
                    return self._values_origin(values, at, depth)
            if expr.attr.value == "optimizer":
                return self._compile_origin(depth)
        return OptimizerOrigin("unknown")

    def _call_origin(self, call: cst.Call, at: cst.CSTNode, depth: int) -> OptimizerOrigin:
        """A call: a helper of this file is followed to what it returns; a call that is handed
        float16 or loss-scale options may wrap (``configure_optimizer(opt, use_float16=...)``);
        anything else makes a plain optimizer."""
        fn = self.helper(call)
        if fn is not None:
            returns = [
                r.value
                for r in self.context.nodes_within(fn, cst.Return)
                if r.value is not None and self.context.enclosing(r, cst.FunctionDef) is fn
            ]
            if returns:
                return self._values_origin(returns, returns[0], depth + 1)
            return OptimizerOrigin("unknown")
        factory = self.context.summary(call.func, OPTIMIZER)
        if factory is not None:  # a function of another module of the project, read once for the whole project
            wrap, _, _, path, line = factory
            name = last_name(call.func)
            made_at = Related(path, line, f"`{name}` returns the optimizer")
            return OptimizerOrigin(
                wrap, call if wrap in ("none", "maybe") else None, made_by=f"`{name}` at {path}:{line}", made_at=made_at
            )
        text = self.context.module.code_for_node(call)
        if _MAY_WRAP.search(text):
            return OptimizerOrigin("maybe", call)
        return OptimizerOrigin("none", call)

    def _values_origin(self, values, at, depth) -> OptimizerOrigin:
        found = [self.origin(v, v, depth + 1) for v in values]
        for o in found:
            if o.wrap in ("explicit", "auto"):
                return o
        return found[-1]

    def _name_origin(self, name: str, at: cst.CSTNode, depth: int) -> OptimizerOrigin:
        fn = self.context.enclosing(at, cst.FunctionDef)
        while fn is not None:
            values = self.c.assigns.get(id(fn), {}).get(name)
            if values:
                return self._values_origin(values, at, depth)
            if isinstance(fn, cst.FunctionDef) and name in parameter_names(fn):
                return self._param_origin(fn, name, depth)
            fn = self.context.enclosing(fn, cst.FunctionDef)
        values = self.c.assigns[id(self.context.module)].get(name)
        return self._values_origin(values, at, depth) if values else OptimizerOrigin("unknown")

    def _param_origin(self, fn: cst.FunctionDef, name: str, depth: int) -> OptimizerOrigin:
        """A parameter: the arguments its call sites in this module pass."""
        params = parameter_names(fn)
        cls = self.c.class_of.get(id(fn))
        callee = cls.name.value if cls is not None and fn.name.value == "__init__" else fn.name.value
        offset = 1 if cls is not None else 0
        position = params.index(name) - offset
        values = []
        for call in self.c.calls:
            if last_name(call.func) != callee:
                continue
            for i, arg in enumerate(call.args):
                if (arg.keyword and arg.keyword.value == name) or (
                    arg.keyword is None and not arg.star and i == position
                ):
                    values.append(arg.value)
        if not values:
            return OptimizerOrigin("unknown")
        return self._values_origin(values, fn, depth)

    def _compile_origin(self, depth: int) -> OptimizerOrigin:
        auto = "auto" if self.compile_wraps else "none"
        calls = [c for c in self.c.calls if method_name(c) == "compile"]
        for call in calls:
            arg = compile_optimizer(call)
            if arg is not None:
                found = self.origin(arg.value, call, depth + 1)
                if found.wrap == "explicit":
                    return OptimizerOrigin("explicit", found.construction, call)
                return OptimizerOrigin(auto, found.construction, call)
        return OptimizerOrigin(auto)

    # --- helpers for fixes ----------------------------------------------------------------

    def defines_train_step(self) -> bool:
        return any(self.c.class_of.get(id(f)) is not None for f in self.c.functions.get("train_step", []))


# A call that is handed float16 or loss-scale options may return a LossScaleOptimizer.
_MAY_WRAP = re.compile(r"fp16|float16|loss_scale|mixed|precision|\bamp\b|LossScale", re.I)


def compile_optimizer(call: cst.Call) -> cst.Arg | None:
    for i, arg in enumerate(call.args):
        if (arg.keyword and arg.keyword.value == "optimizer") or (arg.keyword is None and i == 0):
            return arg
    return None


def _divides_by_scale(context: FileContext, node: cst.CSTNode) -> bool:
    for op in context.findall(node, m.BinaryOperation(operator=m.Divide()), (cst.BinaryOperation,)):
        right = op.right  # type: ignore[union-attr]
        if any(a.attr.value in SCALE_ATTRS for a in context.nodes_within(right, cst.Attribute)) or (
            isinstance(right, cst.Attribute) and right.attr.value in SCALE_ATTRS
        ):
            return True
    return False


def _with_body(node: cst.With):
    return node.body.body if isinstance(node.body, cst.IndentedBlock) else ()
