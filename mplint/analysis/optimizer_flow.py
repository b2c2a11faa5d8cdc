"""Which optimizer a ``tape.gradient`` result reaches, and what happens on the way.

For every ``<tape>.gradient(target, sources)`` of a ``with GradientTape() as
<tape>`` block the analysis records: the value the tape differentiates and
whether it is a scaled loss (``scale_loss``/``get_scaled_loss``, directly or
through a helper of the same module); the operations applied to the gradients
before they reach the optimizer (unscale, manual division by the loss scale,
clipping), in order; the ``apply_gradients``/``apply`` call that consumes them;
and where that optimizer comes from (a local, a module global, ``self.attr``
set in a method, a function parameter bound at the call sites,
``self.optimizer``/``model.optimizer`` set by ``compile()``) and whether it is
a ``LossScaleOptimizer``: explicitly, through compile()'s automatic wrap under
a global mixed_float16 policy, or not at all. ``optimizer.minimize(loss,
vars, tape=tape)`` has no ``tape.gradient`` call and scales by itself.

Paths. Loops that scale only on some paths are read path by path
(``GradientSite.paths``): the tests of the ``if`` statements and conditional
expressions around the gradient call, the loss's assignments, the operations
on the gradients, the apply call and the optimizer's assignments are atoms.
``isinstance(opt, LossScaleOptimizer)`` and ``hasattr(opt, "get_scaled_loss")``
are facts about the optimizer: a path that contradicts where it comes from
(the ``else`` of ``isinstance`` for an optimizer compile() wraps) never runs.

Versions. Each site runs on its own Keras range (``GradientSite.keras``): the
program's target narrowed by the version guards around it, read as MP501/MP502
read them (``keras_guards``). A version or feature test that range decides
(``hasattr(opt, "get_scaled_loss")`` where Keras 3 runs the site, an arm of
``hasattr(keras.optimizers, "LossScaleOptimizer")``) is a constant, not a flag;
the rules judge a site, and write its fix, for its range's newest generation.
Any other test (``if amp``, ``FLAGS.dtype == "fp16"``, ``self._use_float16``) is
a flag the program sets. A path on which a flag turns off every loss-scaling
step of the function (no scaling, no unscaling) is the program's float32 path:
nothing there needs scaling, except that a Keras 3 ``LossScaleOptimizer`` built
on that very path still divides the gradients. ``GradientPath.when`` names the
flags a finding depends on, for the message ("when `amp` is false, ...").
"""

from __future__ import annotations

import itertools
import re
from dataclasses import dataclass, field

import libcst as cst

from mplint.analysis.keras_guards import NO_FIX, NO_FIX_OUTSIDE, KerasRange, code_range, program_range, test_arms
from mplint.analysis.optimizer_summaries import LOSS_SCALING, OPTIMIZER
from mplint.diagnostics import FixSafety, ImportSpec, Related
from mplint.engine import matchers as m
from mplint.engine.code_summary import CodeSummary
from mplint.engine.context import FileContext
from mplint.engine.names import canonical, last_name, module_imports
from mplint.engine.walk import walk
from mplint.knowledge.api_versions import ERA_GENERATION
from mplint.knowledge.loss_scale_names import (
    LSO,
    LSO_ATTRS,
    SCALE_ATTRS,
    SCALE_METHOD,
    SCALE_METHODS,
    UNSCALE_METHOD,
    scale_method,
)
from mplint.knowledge.policies import FLOAT16_POLICIES, UNKNOWN_POLICY

CLIPS = frozenset({"clip_by_global_norm", "clip_by_norm", "clip_by_value"})
APPLY_METHODS = frozenset({"apply_gradients", "apply"})

Scope = cst.Module | cst.FunctionDef


def has_gradient_sites(code: CodeSummary) -> bool:
    """Pre-filter: gradient sites need ``with GradientTape() as t`` and ``t.gradient(...)``."""
    return "GradientTape" in code.calls and "gradient" in code.calls


def method_name(call: cst.CSTNode) -> str | None:
    """``x.scale_loss(...)`` -> ``scale_loss``."""
    if isinstance(call, cst.Call) and isinstance(call.func, cst.Attribute):
        return call.func.attr.value
    return None


def names_in(context: FileContext, node: cst.CSTNode) -> set[str]:
    return {n.value for n in context.nodes_within(node, cst.Name)}


def is_lso_call(node: cst.CSTNode) -> bool:
    return isinstance(node, cst.Call) and last_name(node.func) == LSO


def lso_inner(call: cst.Call) -> cst.BaseExpression | None:
    for arg in call.args:
        if arg.keyword is None or arg.keyword.value in ("inner_optimizer", "optimizer"):
            return arg.value
    return None


@dataclass
class OptimizerOrigin:
    """Where the optimizer an apply call uses comes from."""

    wrap: str  # explicit | auto | none | maybe (a call handed float16 options made it) | unknown
    construction: cst.BaseExpression | None = None  # the (inner) optimizer's constructor call or string
    compile_call: cst.Call | None = None  # when the optimizer is the one compile() was given
    made_by: str = ""  # a project function of another module that returns it: "`build_optimizer` at trainer/optim.py:6"
    made_at: Related | None = None  # that function, as a related location

    @property
    def related(self) -> tuple[Related, ...]:
        return (self.made_at,) if self.made_at is not None else ()


@dataclass
class GradOp:
    kind: str  # unscale | manual_unscale | clip
    node: cst.CSTNode  # the expression doing it
    stmt: cst.SimpleStatementLine | None
    targets: tuple[str, ...]  # names it binds
    inputs: frozenset[str]  # gradient names it reads


@dataclass
class GradientPath:
    """One way through a gradient site: the flags that select it, and what happens on it."""

    when: dict[str, bool]  # flag test (as written) -> its value on this path
    scaled_by: cst.Call | None
    ops: list[GradOp]
    origin: OptimizerOrigin | None
    float32: bool  # a flag turns loss scaling off on this path: the program's float32 path
    tests: dict[str, bool] = field(default_factory=dict)  # optimizer tests (isinstance/hasattr) on this path

    @property
    def unscaled(self) -> bool:
        return any(op.kind == "unscale" for op in self.ops)


def describe_when(paths: list[GradientPath], chosen: list[GradientPath]) -> str:
    """``"when `amp` is true, "`` for a finding that holds on ``chosen`` out of ``paths``; empty
    when it holds on every path (or the flags cannot tell the paths apart)."""
    if not chosen or len(chosen) == len(paths):
        return ""
    common = {k: v for k, v in chosen[0].when.items() if all(p.when.get(k) == v for p in chosen)}
    others = [p for p in paths if p not in chosen]
    relevant = {k: v for k, v in common.items() if any(p.when.get(k) != v for p in others)}
    if not relevant:
        return ""
    parts = [f"`{k}` is {'true' if v else 'false'}" for k, v in relevant.items()]
    return "when " + " and ".join(parts) + ", "


@dataclass
class GradientSite:
    scope: Scope
    tape: cst.With | None
    call: cst.Call  # tape.gradient(...)
    stmt: cst.SimpleStatementLine | None  # grads = tape.gradient(...)
    grad_names: tuple[str, ...]
    target: cst.BaseExpression
    loss_stmt: cst.SimpleStatementLine | None = None  # loss = ..., directly in the tape's (or backward()'s) block
    scaled_by: cst.Call | None = None
    ops: list[GradOp] = field(default_factory=list)
    apply_call: cst.Call | None = None
    origin: OptimizerOrigin | None = None
    paths: list[GradientPath] = field(default_factory=list)
    conditional: bool = False  # flags or optimizer tests split the site into paths (no fix is offered then)
    # the Keras versions the site runs on (the program's, narrowed by version guards); None: its arm never runs there
    keras: KerasRange | None = None
    # the Keras 3 backend whose loop it is: tensorflow (a tape), jax (jax.value_and_grad), torch (loss.backward())
    backend: str = "tensorflow"

    @property
    def optimizer_expr(self) -> cst.BaseExpression | None:
        return self.apply_call.func.value if self.apply_call is not None else None  # type: ignore[union-attr]

    @property
    def unscaled(self) -> bool:
        return any(op.kind == "unscale" for op in self.ops)


class _Collector(cst.CSTVisitor):
    """Module-wide facts: functions, classes, assignments per scope, calls, tapes."""

    def __init__(self) -> None:
        self.functions: dict[str, list[cst.FunctionDef]] = {}
        self.classes: dict[str, cst.ClassDef] = {}
        self.scope_stack: list[Scope] = []
        self.class_stack: list[cst.ClassDef] = []
        self.scope_of: dict[int, Scope] = {}  # id(stmt line) -> scope
        self.class_of: dict[int, cst.ClassDef | None] = {}  # id(function) -> class
        self.lines: dict[int, list[cst.SimpleStatementLine]] = {}  # id(scope) -> statement lines in order
        self.assigns: dict[int, dict[str, list[cst.BaseExpression]]] = {}  # id(scope) -> name -> values
        self.assign_nodes: dict[int, cst.Assign] = {}  # id(value) -> its assignment
        self.self_attrs: dict[int, dict[str, list[cst.BaseExpression]]] = {}  # id(class) -> attr -> values
        self.calls: list[cst.Call] = []
        self.tapes: dict[int, dict[str, list[cst.With]]] = {}  # id(scope) -> tape name -> its withs, in order
        self.with_of: dict[int, cst.With] = {}  # id(stmt line) -> innermost enclosing with
        self.with_stack: list[cst.With] = []

    @property
    def scope(self) -> Scope:
        return self.scope_stack[-1]

    def visit_Module(self, node: cst.Module) -> None:
        self._enter(node)

    def visit_ClassDef(self, node: cst.ClassDef) -> None:
        self.classes[node.name.value] = node
        self.class_stack.append(node)

    def leave_ClassDef(self, node: cst.ClassDef) -> None:
        self.class_stack.pop()

    def visit_FunctionDef(self, node: cst.FunctionDef) -> None:
        self.functions.setdefault(node.name.value, []).append(node)
        owner = self.class_stack[-1] if self.class_stack and node in _body(self.class_stack[-1]) else None
        self.class_of[id(node)] = owner
        self._enter(node)

    def leave_FunctionDef(self, node: cst.FunctionDef) -> None:
        self.scope_stack.pop()

    def _enter(self, scope: Scope) -> None:
        self.scope_stack.append(scope)
        self.lines[id(scope)] = []
        self.assigns[id(scope)] = {}
        self.tapes[id(scope)] = {}

    def visit_With(self, node: cst.With) -> None:
        self.with_stack.append(node)
        for item in node.items:
            if isinstance(item.item, cst.Call) and last_name(item.item.func) == "GradientTape" and item.asname:
                if isinstance(item.asname.name, cst.Name):
                    self.tapes[id(self.scope)].setdefault(item.asname.name.value, []).append(node)

    def leave_With(self, node: cst.With) -> None:
        self.with_stack.pop()

    def visit_SimpleStatementLine(self, node: cst.SimpleStatementLine) -> None:
        self.lines[id(self.scope)].append(node)
        self.scope_of[id(node)] = self.scope
        if self.with_stack:
            self.with_of[id(node)] = self.with_stack[-1]

    def visit_Assign(self, node: cst.Assign) -> None:
        self.assign_nodes[id(node.value)] = node
        for target in node.targets:
            t = target.target
            if isinstance(t, cst.Name):
                self.assigns[id(self.scope)].setdefault(t.value, []).append(node.value)
            elif m.matches(t, m.Attribute(value=m.Name("self"))) and self.class_stack:
                attrs = self.self_attrs.setdefault(id(self.class_stack[-1]), {})
                attrs.setdefault(t.attr.value, []).append(node.value)  # type: ignore[union-attr]

    def visit_Call(self, node: cst.Call) -> None:
        self.calls.append(node)


def _body(cls: cst.ClassDef):
    return cls.body.body if isinstance(cls.body, cst.IndentedBlock) else ()


class OptimizerFlow:
    """``context.analysis(OptimizerFlow)``: every gradient site of the file."""

    def __init__(self, context: FileContext):
        self.context = context
        self.facts = context.facts
        c = _Collector()
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
        stmt = line if _single_assign(line) and self.context.contains(_assign_value(line), call) else None
        grad_names = _target_names(line) if stmt is not None else ()
        site = GradientSite(scope, tape, call, stmt, grad_names, target, keras=code_range(self.context, call))
        if stmt is not None and _assign_value(line) is not call:
            kind, node = self.grad_op(_assign_value(line))
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
        site.paths = _Paths(self, site, before).paths()

    def _find_target(self, site: GradientSite, before: list[cst.SimpleStatementLine]) -> None:
        if isinstance(site.target, cst.Call) and self.is_scaling(site.target):
            site.scaled_by = site.target
            return
        if not isinstance(site.target, cst.Name):
            return
        for line in reversed(before):
            if _single_assign(line) and _target_names(line) == (site.target.value,):
                value = _assign_value(line)
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
            if not _single_assign(stmt):
                continue
            value = _assign_value(stmt)
            reads = names_in(self.context, value) & flow
            targets = _target_names(stmt)
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
            if isinstance(fn, cst.FunctionDef) and name in _params(fn):
                return self._param_origin(fn, name, depth)
            fn = self.context.enclosing(fn, cst.FunctionDef)
        values = self.c.assigns[id(self.context.module)].get(name)
        return self._values_origin(values, at, depth) if values else OptimizerOrigin("unknown")

    def _param_origin(self, fn: cst.FunctionDef, name: str, depth: int) -> OptimizerOrigin:
        """A parameter: the arguments its call sites in this module pass."""
        params = _params(fn)
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


# --- paths ----------------------------------------------------------------------------------------

MAX_ATOMS = 6  # flags and optimizer tests one site is split on (2**6 paths); beyond, the site is read as one path


class _Paths:
    """Splits one gradient site into the paths its flags and optimizer tests select."""

    def __init__(self, flow: OptimizerFlow, site: GradientSite, before: list[cst.SimpleStatementLine]):
        self.flow = flow
        self.context = flow.context
        self.site = site
        self.before = before
        self.optimizer = _text(self.context, site.optimizer_expr) if site.optimizer_expr is not None else ""
        self.kinds: dict[str, str] = {}  # atom -> flag | type | other | const
        self.seen_at: dict[str, int] = {}  # atom -> where its first test starts (atoms are listed in source order)
        self.constants: dict[str, bool] = {}
        self._conds: dict[int, list[tuple[str, bool]]] = {}

    # --- atoms and conditions ------------------------------------------------------------------

    def atom(self, test: cst.BaseExpression) -> tuple[str, bool]:
        """The atom a test reads and the value of the atom that makes the test true."""
        polarity = True
        while isinstance(test, cst.UnaryOperation) and isinstance(test.operator, cst.Not):
            test, polarity = test.expression, not polarity
        func = last_name(test.func) if isinstance(test, cst.Call) else None
        if func in ("isinstance", "hasattr") and len(test.args) >= 2:
            subject = _text(self.context, test.args[0].value)
            what = test.args[1].value
            attr = what.evaluated_value if func == "hasattr" and isinstance(what, cst.SimpleString) else None
            if attr == SCALE_METHOD[3] and self.site.keras is not None and self.site.keras.newest == 3:
                key = f"hasattr({subject}, 'scale_loss')"
                self.kinds[key], self.constants[key] = "const", True  # every Keras 3 optimizer has it
                return key, polarity
        constant = self._decided(test)
        if constant is not None:
            return constant, polarity
        if func in ("isinstance", "hasattr") and len(test.args) >= 2:
            if func == "isinstance":
                is_lso = any(n.value == LSO for n in self.context.nodes_within(what, cst.Name))
            else:
                is_lso = attr in LSO_ATTRS or attr == SCALE_METHOD[3]
            if is_lso:
                key = f"isinstance({subject}, LossScaleOptimizer)"
                self.kinds.setdefault(key, "type" if subject == self.optimizer else "other")
                return key, polarity
        key = _text(self.context, test)
        self.kinds.setdefault(key, "flag")
        at = self.context.source_order(test)
        self.seen_at[key] = min(at, self.seen_at.get(key, at))
        return key, polarity

    def _decided(self, test: cst.BaseExpression) -> str | None:
        """A version or feature test whose value the site's own Keras range fixes, as a constant atom; else None.
        The rules read a site as its range's newest generation runs it, so the test is read there too:
        ``hasattr(opt, "get_scaled_loss")`` is false wherever Keras 3 runs the site."""
        arms = test_arms(self.context, test) if self.site.keras is not None else None
        if arms is None:
            return None
        keras = self.site.keras
        eras = frozenset(e for e in keras.eras if ERA_GENERATION[e] == keras.newest)
        value = False if not eras & arms[0] else True if not eras & arms[1] else None
        if value is None:
            return None
        key = _text(self.context, test)
        self.kinds[key], self.constants[key] = "const", value
        return key

    def conds(self, node: cst.CSTNode) -> list[tuple[str, bool]]:
        """The (atom, value) pairs that must hold for ``node`` to run, within its function."""
        key = id(node)
        if key in self._conds:
            return self._conds[key]
        out: list[tuple[str, bool]] = []
        child = node
        for ancestor in self.context.ancestors(node):
            if isinstance(ancestor, (cst.FunctionDef, cst.ClassDef, cst.Lambda, cst.Module)):
                break
            if isinstance(ancestor, (cst.If, cst.IfExp)) and (child is ancestor.body or child is ancestor.orelse):
                atom, polarity = self.atom(ancestor.test)
                out.append((atom, polarity if child is ancestor.body else not polarity))
            child = ancestor
        self._conds[key] = out
        return out

    def holds(self, conds: list[tuple[str, bool]], path: dict[str, bool]) -> bool:
        for atom, value in conds:
            actual = self.constants.get(atom, path.get(atom))
            if actual is not None and actual != value:
                return False
        return True

    def choose(self, expr: cst.BaseExpression, path: dict[str, bool]) -> cst.BaseExpression:
        """``a if test else b`` on this path."""
        while isinstance(expr, cst.IfExp):
            atom, polarity = self.atom(expr.test)
            actual = self.constants.get(atom, path.get(atom))
            if actual is None:
                return expr
            expr = expr.body if actual == polarity else expr.orelse
        return expr

    # --- what the site does on a path ------------------------------------------------------------

    def _bindings(self, name: str, lines: list[cst.SimpleStatementLine]):
        for i in range(len(lines) - 1, -1, -1):
            line = lines[i]
            if _single_assign(line) and _target_names(line) == (name,):
                yield i, line

    def scaled_on(self, path, target, lines, depth: int = 0) -> cst.Call | None:
        target = self.choose(target, path)
        if isinstance(target, cst.Call):
            return target if self.flow.is_scaling(target) else None
        if not isinstance(target, cst.Name) or depth > 4:
            return None
        for i, line in self._bindings(target.value, lines):
            if self.holds(self.conds(line), path):
                return self.scaled_on(path, _assign_value(line), lines[:i], depth + 1)
        return None

    def _target_nodes(self) -> list[cst.CSTNode]:
        """The target and the assignments it may come from (followed through plain names)."""
        found: list[cst.CSTNode] = [self.site.target]
        names = {n.value for n in self._plain_names(self.site.target)}
        lines = self.before
        for _ in range(4):
            new: set[str] = set()
            for name in names:
                for _, line in self._bindings(name, lines):
                    found.append(line)
                    new |= {n.value for n in self._plain_names(_assign_value(line))}
            if not new - names:
                break
            names |= new
        return found

    def _plain_names(self, expr: cst.BaseExpression) -> list[cst.Name]:
        """The names an expression may be (``x``, ``a if c else b``), not those it computes with."""
        if isinstance(expr, cst.Name):
            return [expr]
        if isinstance(expr, cst.IfExp):
            return self._plain_names(expr.body) + self._plain_names(expr.orelse)
        return []

    def _origin_values(self) -> list[cst.BaseExpression]:
        """The values assigned to the optimizer's name in the apply call's function (or the module)."""
        expr = self.site.optimizer_expr
        if not isinstance(expr, cst.Name):
            return []
        c = self.flow.c
        fn = self.context.enclosing(self.site.apply_call, cst.FunctionDef)
        while fn is not None:
            values = c.assigns.get(id(fn), {}).get(expr.value)
            if values:
                return values
            if expr.value in _params(fn):
                return []
            fn = self.context.enclosing(fn, cst.FunctionDef)
        return c.assigns[id(self.context.module)].get(expr.value, [])

    def origin_on(self, path, values) -> tuple[OptimizerOrigin | None, bool]:
        """The optimizer's origin on this path, and whether its wrap is known to happen on it."""
        conditional = any(
            self.conds(self.flow.c.assign_nodes.get(id(v), v)) or isinstance(v, cst.IfExp) for v in values
        )
        if not conditional:
            origin = self.site.origin
            return origin, origin is not None and origin.wrap == "explicit" and bool(values)
        for value in reversed(values):
            assign = self.flow.c.assign_nodes.get(id(value), value)
            if self.holds(self.conds(assign), path):
                chosen = self.choose(value, path)
                origin = self.flow.origin(chosen, self.site.apply_call, 1)
                return origin, origin.wrap == "explicit"
        return OptimizerOrigin("unknown"), False

    def _scaling_steps(self) -> list[cst.Call]:
        """The calls of the site's function that scale or unscale, or build a LossScaleOptimizer."""
        scope = self.site.scope
        return [
            call
            for call in self.context.nodes_within(scope, cst.Call)
            if method_name(call) in SCALE_METHODS
            or method_name(call) == UNSCALE_METHOD
            or is_lso_call(call)
            or self.flow.project_steps(call)
        ]

    # --- the paths -------------------------------------------------------------------------------

    def paths(self) -> list[GradientPath]:
        site = self.site
        single = [GradientPath({}, site.scaled_by, list(site.ops), site.origin, False)]
        values = self._origin_values()
        steps = self._scaling_steps()
        nodes: list[cst.CSTNode] = [
            site.call,
            site.apply_call,
            *self._target_nodes(),
            *(op.node for op in site.ops),
            *steps,
        ]
        nodes.extend(self.flow.c.assign_nodes.get(id(v), v) for v in values)
        for node in nodes:
            self.conds(node)
            for ifexp in self.context.nodes_within(node, cst.IfExp):
                self.atom(ifexp.test)
        atoms = sorted((a for a, kind in self.kinds.items() if kind != "const"), key=lambda a: self.seen_at.get(a, 0))
        site.conditional = any(kind != "const" for kind in self.kinds.values())
        if not self.kinds or len(atoms) > MAX_ATOMS:
            return single  # nothing to split on (tests the site's range decides still pick assignments below)
        found: list[GradientPath] = []
        for combination in itertools.product((True, False), repeat=len(atoms)):
            path = dict(zip(atoms, combination))
            if not (self.holds(self.conds(site.call), path) and self.holds(self.conds(site.apply_call), path)):
                continue
            origin, wrapped_here = self.origin_on(path, values)
            if not self._feasible(path, origin):
                continue
            scaled_by = self.scaled_on(path, site.target, self.before)
            ops = [op for op in site.ops if self.holds(self.conds(op.node), path)]
            float32 = (
                scaled_by is None
                and not any(op.kind in ("unscale", "manual_unscale") for op in ops)
                and any(self._turned_off(step, path) for step in steps)
                and not (
                    site.keras is not None
                    and site.keras.newest == 3
                    and origin is not None
                    and origin.wrap == "explicit"
                    and wrapped_here
                )
            )
            when = {a: path[a] for a in atoms if self.kinds[a] in ("flag", "other")}
            tests = {a: path[a] for a in atoms if self.kinds[a] == "type"}
            found.append(GradientPath(when, scaled_by, ops, origin, float32, tests))
        if not atoms and found:
            site.origin = found[0].origin  # the one assignment the site's range lets run (an arm of a version guard)
        return found

    def _feasible(self, path: dict[str, bool], origin: OptimizerOrigin | None) -> bool:
        wrap = origin.wrap if origin is not None else "unknown"
        for atom, kind in self.kinds.items():
            if kind != "type" or atom not in path:
                continue
            if wrap in ("explicit", "auto") and not path[atom] or wrap == "none" and path[atom]:
                return False
        return True

    def _turned_off(self, step: cst.Call, path: dict[str, bool]) -> bool:
        """A flag of this path keeps a loss-scaling step from running."""
        return any(
            self.kinds.get(atom) == "flag" and path.get(atom) is not None and path[atom] != value
            for atom, value in self.conds(step)
        )


def _text(context: FileContext, node: cst.CSTNode) -> str:
    return " ".join(context.module.code_for_node(node).split())


# A call that is handed float16 or loss-scale options may return a LossScaleOptimizer.
_MAY_WRAP = re.compile(r"fp16|float16|loss_scale|mixed|precision|\bamp\b|LossScale", re.I)


def compile_optimizer(call: cst.Call) -> cst.Arg | None:
    for i, arg in enumerate(call.args):
        if (arg.keyword and arg.keyword.value == "optimizer") or (arg.keyword is None and i == 0):
            return arg
    return None


def _params(fn: cst.FunctionDef) -> list[str]:
    p = fn.params
    return [x.name.value for x in (*p.posonly_params, *p.params, *p.kwonly_params)]


def _divides_by_scale(context: FileContext, node: cst.CSTNode) -> bool:
    for op in context.findall(node, m.BinaryOperation(operator=m.Divide()), (cst.BinaryOperation,)):
        right = op.right  # type: ignore[union-attr]
        if any(a.attr.value in SCALE_ATTRS for a in context.nodes_within(right, cst.Attribute)) or (
            isinstance(right, cst.Attribute) and right.attr.value in SCALE_ATTRS
        ):
            return True
    return False


def _single_assign(line: cst.SimpleStatementLine) -> bool:
    return len(line.body) == 1 and isinstance(line.body[0], cst.Assign) and len(line.body[0].targets) == 1


def _assign_value(line: cst.SimpleStatementLine) -> cst.BaseExpression:
    return line.body[0].value  # type: ignore[union-attr]


def _target_names(line: cst.SimpleStatementLine) -> tuple[str, ...]:
    target = line.body[0].targets[0].target  # type: ignore[union-attr]
    if isinstance(target, cst.Name):
        return (target.value,)
    if isinstance(target, (cst.Tuple, cst.List)):
        return tuple(e.value.value for e in target.elements if isinstance(e.value, cst.Name))
    return ()


def _with_body(node: cst.With):
    return node.body.body if isinstance(node.body, cst.IndentedBlock) else ()


# --- spelling LossScaleOptimizer in the file's own import style -----------------------------------


def keras_spellings(context: FileContext) -> dict[str, str]:
    """Module-level bound names: lso (the class), mixed_precision, optimizers, keras, tf."""
    found: dict[str, str] = {}
    for bound, qualified in module_imports(context.module):
        k = canonical(qualified, context.facts.reexports)
        if k is None:
            continue
        key = _SPELLING_KEYS.get(k.path)
        if key is None and k.path == "":
            key = "tf" if k.ns == "tf" else "keras" if k.is_keras else None
        if key and key not in found:
            found[key] = bound
    return found


_SPELLING_KEYS = {
    "optimizers.LossScaleOptimizer": "lso",
    "mixed_precision": "mixed_precision",
    "optimizers": "optimizers",
}


def lso_spelling(context: FileContext, keras: KerasRange | None = None) -> tuple[str, list[ImportSpec]]:
    """How this file writes ``LossScaleOptimizer``, and the import it needs for that.

    ``mixed_precision.LossScaleOptimizer`` is the spelling Keras 2 (TF >= 2.4, tf_keras) and Keras 3 share; the
    Keras 3 ``optimizers.LossScaleOptimizer`` is written only where the range (``keras``, else the program's) is
    Keras 3 alone."""
    s = keras_spellings(context)
    g3_only = (keras or program_range(context.facts.generation)).generations == {3}
    if "lso" in s:
        return s["lso"], []
    if "mixed_precision" in s:
        return f"{s['mixed_precision']}.LossScaleOptimizer", []
    if "keras" in s:
        sub = "optimizers" if g3_only else "mixed_precision"
        return f"{s['keras']}.{sub}.LossScaleOptimizer", []
    if "optimizers" in s and g3_only:
        return f"{s['optimizers']}.LossScaleOptimizer", []
    if "tf" in s:
        return f"{s['tf']}.keras.mixed_precision.LossScaleOptimizer", []
    if g3_only:
        return "keras.optimizers.LossScaleOptimizer", [ImportSpec("keras")]
    return "mixed_precision.LossScaleOptimizer", [ImportSpec("tensorflow.keras", "mixed_precision")]


def written_names(spelling: str) -> set[str]:
    """The table names (``mplint.knowledge.api_versions.KERAS``) a LossScaleOptimizer spelling relies on; the
    file's own imported name is whatever its environment has."""
    for name in ("mixed_precision.LossScaleOptimizer", "optimizers.LossScaleOptimizer"):
        if spelling == name or spelling.endswith("." + name):
            return {name}
    return set()


def range_note(context: FileContext, names: set[str], keras: KerasRange | None = None) -> str | None:
    """None when every name exists in every version the range (``keras``, else the program's target) admits; else
    what to say: the range, and the versions the fix holds on."""
    from mplint.knowledge.api_versions import keras_holds

    keras = keras or program_range(context.facts.generation)
    return generations_note(context, {g for g in keras.generations if keras_holds(names, [g], keras.tf_newest)}, keras)


def generations_note(context: FileContext, holds: set[int], keras: KerasRange | None = None) -> str | None:
    """None when a fix that is right on the generations ``holds`` is right on the whole range (``keras``, else the
    program's target); else the range and where the fix holds."""
    keras = keras or program_range(context.facts.generation)
    if keras.generations <= holds:
        return None
    if not keras.evidenced:
        return f"{keras.text}; {NO_FIX}"
    if not holds & keras.generations:  # TF 1 or TF 2.1-2.3 alone: the names the fix writes are not proven there
        return f"{keras.text}; {NO_FIX_OUTSIDE}"
    where = " or ".join(_GENERATION_NAMES[g] for g in sorted(holds))
    if keras.guarded:
        return f"{keras.text}; the fix holds on {where} only"
    return f"{keras.text}; the fix holds on {where} only: set the target or pin TensorFlow to make it safe"


def note_safety(note: str | None) -> FixSafety:
    """The safety of a fix whose range note (``range_note``, ``generations_note``) is ``note``: safe without one,
    none where nothing says which part of the range runs (``NO_FIX``), unsafe where evidence spans versions the fix
    does not hold on."""
    if note is None:
        return FixSafety.SAFE
    return FixSafety.NONE if note.endswith((NO_FIX, NO_FIX_OUTSIDE)) else FixSafety.UNSAFE


_GENERATION_NAMES = {0: "TF1", 1: "TF 2.1-2.3", 2: "Keras 2", 3: "Keras 3"}


def optimizers_get_spelling(context: FileContext) -> str | None:
    s = keras_spellings(context)
    if "keras" in s:
        return f"{s['keras']}.optimizers.get"
    if "optimizers" in s:
        return f"{s['optimizers']}.get"
    if "tf" in s:
        return f"{s['tf']}.keras.optimizers.get"
    return None


def wrap_construction(
    context: FileContext, construction: cst.BaseExpression, keras: KerasRange | None = None
) -> tuple[cst.BaseExpression, list[ImportSpec]] | None:
    """``Adam(1e-3)`` -> ``LossScaleOptimizer(Adam(1e-3))``; ``"adam"`` -> ``LossScaleOptimizer(...get("adam"))``,
    spelled for the range ``keras`` (else the program's)."""
    spelling, imports = lso_spelling(context, keras)
    inner = construction
    if isinstance(construction, cst.SimpleString):
        getter = optimizers_get_spelling(context)
        if getter is None:
            return None
        inner = cst.Call(cst.parse_expression(getter), [cst.Arg(construction)])
    elif not isinstance(construction, cst.Call):
        return None
    return cst.Call(cst.parse_expression(spelling), [cst.Arg(inner)]), imports


# --- inserting the generation's scaling calls -----------------------------------------------------


def scaling_insertion(
    context: FileContext, site: GradientSite, scale: bool, unscale: bool, guard: str | None = None
) -> dict | None:
    """Replacements that scale the loss inside the tape and/or unscale the gradients after it.

    G3: ``scaled_loss = opt.scale_loss(loss)``; G1/G2: ``get_scaled_loss`` and
    ``grads = opt.get_unscaled_gradients(grads)`` (the newest generation of the site's range).
    ``guard``: a test that the optimizer is a LossScaleOptimizer, for library code whose users may train without
    one (Keras 2's methods exist on the wrapper only); each call then runs under it, as TF 2.2-2.3's
    ``Model._minimize`` guarded them, and the loss goes to the tape unscaled otherwise.
    On the torch backend the scaled loss is the one whose ``backward()`` runs.
    None when the code's shape does not allow it (the loss is not a name assigned in the tape's block).
    """
    code = context.module.code_for_node
    opt = site.optimizer_expr
    if opt is None:
        return None
    out: dict = {}
    grad_stmt = site.stmt
    new_grad_stmt = grad_stmt
    if scale:
        if site.loss_stmt is None or not isinstance(site.target, cst.Name):
            return None
        loss = site.target.value
        scaled = _free_name(context, site.scope, "scaled_loss" if loss == "loss" else f"scaled_{loss}")
        newest = (site.keras or program_range(context.facts.generation)).newest
        method = scale_method(newest)
        added = cst.parse_statement(f"{scaled} = {code(opt)}.{method}({loss})")
        if guard is not None:
            added = cst.parse_statement(
                f"if {guard}:\n    {scaled} = {code(opt)}.{method}({loss})\nelse:\n    {scaled} = {loss}\n"
            )
        out[site.loss_stmt] = cst.FlattenSentinel([site.loss_stmt, added])
        if site.backend == "torch":  # loss.backward(): the scaled loss is the receiver
            new_call = site.call.with_changes(func=site.call.func.with_changes(value=cst.Name(scaled)))  # type: ignore[union-attr]
        else:
            new_call = site.call.with_changes(
                args=[site.call.args[0].with_changes(value=cst.Name(scaled)), *site.call.args[1:]]
            )
        if grad_stmt is None:
            out[site.call] = new_call
        else:
            new_grad_stmt = grad_stmt.deep_replace(site.call, new_call)
    if unscale:
        if grad_stmt is None or len(site.grad_names) != 1:
            return None
        grads = site.grad_names[0]
        added = cst.parse_statement(f"{grads} = {code(opt)}.get_unscaled_gradients({grads})")
        if guard is not None:
            added = cst.parse_statement(f"if {guard}:\n    {grads} = {code(opt)}.get_unscaled_gradients({grads})\n")
        out[grad_stmt] = cst.FlattenSentinel([new_grad_stmt, added])
    elif new_grad_stmt is not grad_stmt:
        out[grad_stmt] = new_grad_stmt
    return out


def _free_name(context: FileContext, scope: cst.CSTNode, wanted: str) -> str:
    used = names_in(context, scope)
    name, i = wanted, 2
    while name in used:
        name, i = f"{wanted}_{i}", i + 1
    return name


def simple_line_of(context: FileContext, node: cst.CSTNode) -> cst.SimpleStatementLine | None:
    """The simple statement line holding ``node``; None where a compound statement comes first (a lambda's
    body is still its line, an ``if``'s test is not)."""
    for parent in context.ancestors(node):
        if isinstance(parent, cst.SimpleStatementLine):
            return parent
        if isinstance(parent, cst.BaseCompoundStatement):
            return None
    return None
