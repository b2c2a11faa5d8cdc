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
"""

from __future__ import annotations

from dataclasses import dataclass, field

import libcst as cst
from mplint.engine import matchers as m
from mplint.engine.code_summary import CodeSummary

from mplint.engine.context import FileContext
from mplint.diagnostics import ImportSpec
from mplint.project.facts import FLOAT16_POLICIES, UNKNOWN_POLICY
from mplint.engine.names import canonical, dotted
from mplint.engine.rule import Rule
from mplint.engine.walk import walk

SCALE_METHODS = frozenset({"scale_loss", "get_scaled_loss"})
UNSCALE_METHOD = "get_unscaled_gradients"
SCALE_ATTRS = frozenset({"dynamic_scale", "loss_scale"})
CLIPS = frozenset({"clip_by_global_norm", "clip_by_norm", "clip_by_value"})
APPLY_METHODS = frozenset({"apply_gradients", "apply"})
LSO = "LossScaleOptimizer"

Scope = cst.Module | cst.FunctionDef


def has_gradient_sites(code: CodeSummary) -> bool:
    """Pre-filter: gradient sites need ``with GradientTape() as t`` and ``t.gradient(...)``."""
    return "GradientTape" in code.calls and "gradient" in code.calls


class GradientSiteRule(Rule):
    """What the rules on a custom loop's gradient sites under mixed_float16 (MP201-MP203) share: where
    they can fire (a file that takes a ``GradientTape``'s gradient) and when (under float16 policies)."""

    triggers = (b"GradientTape",)

    @classmethod
    def candidate(cls, code) -> bool:
        return has_gradient_sites(code)

    @classmethod
    def active_for(cls, facts) -> bool:
        return facts.float16


def last_name(node: cst.CSTNode) -> str | None:
    if isinstance(node, cst.Name):
        return node.value
    if isinstance(node, cst.Attribute):
        return node.attr.value
    return None


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

    wrap: str  # explicit | auto | none | unknown
    construction: cst.BaseExpression | None = None  # the (inner) optimizer's constructor call or string
    compile_call: cst.Call | None = None  # when the optimizer is the one compile() was given


@dataclass
class GradOp:
    kind: str  # unscale | manual_unscale | clip
    node: cst.CSTNode  # the expression doing it
    stmt: cst.SimpleStatementLine | None
    targets: tuple[str, ...]  # names it binds
    inputs: frozenset[str]  # gradient names it reads


@dataclass
class GradientSite:
    scope: Scope
    tape: cst.With | None
    call: cst.Call  # tape.gradient(...)
    stmt: cst.SimpleStatementLine | None  # grads = tape.gradient(...)
    grad_names: tuple[str, ...]
    target: cst.BaseExpression
    loss_stmt: cst.SimpleStatementLine | None = None  # loss = ..., directly in the tape's block
    scaled_by: cst.Call | None = None
    ops: list[GradOp] = field(default_factory=list)
    apply_call: cst.Call | None = None
    origin: OptimizerOrigin | None = None

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
        self.self_attrs: dict[int, dict[str, list[cst.BaseExpression]]] = {}  # id(class) -> attr -> values
        self.calls: list[cst.Call] = []
        self.tapes: dict[int, dict[str, cst.With]] = {}  # id(scope) -> tape name -> with
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
                    self.tapes[id(self.scope)][item.asname.name.value] = node

    def leave_With(self, node: cst.With) -> None:
        self.with_stack.pop()

    def visit_SimpleStatementLine(self, node: cst.SimpleStatementLine) -> None:
        self.lines[id(self.scope)].append(node)
        self.scope_of[id(node)] = self.scope
        if self.with_stack:
            self.with_of[id(node)] = self.with_stack[-1]

    def visit_Assign(self, node: cst.Assign) -> None:
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
        """compile() adds a LossScaleOptimizer: the model's (global) policy is mixed_float16."""
        return bool(self.facts.global_policy_names & (FLOAT16_POLICIES | {UNKNOWN_POLICY}))

    # --- sites ---------------------------------------------------------------------------

    def _sites_in(self, scope_id: int, tapes: dict[str, cst.With]) -> None:
        lines = self.c.lines[scope_id]
        scope = self.c.scope_of[id(lines[0])] if lines else None
        for index, line in enumerate(lines):
            for call in m.findall(line, m.Call(func=m.Attribute(attr=m.Name("gradient")))):
                receiver = call.func.value  # type: ignore[union-attr]
                if not (isinstance(receiver, cst.Name) and receiver.value in tapes) or not call.args:
                    continue
                site = self._site(scope, tapes[receiver.value], call, line, lines, index)
                if site is not None:
                    self.sites.append(site)

    def _site(self, scope, tape, call, line, lines, index) -> GradientSite | None:
        target = call.args[0].value
        # grads = tape.gradient(...), or wrapped: grads = unscale(tape.gradient(...))
        stmt = line if _single_assign(line) and self.context.contains(_assign_value(line), call) else None
        grad_names = _target_names(line) if stmt is not None else ()
        site = GradientSite(scope, tape, call, stmt, grad_names, target)
        if stmt is not None and _assign_value(line) is not call:
            kind, node = self.grad_op(_assign_value(line))
            if kind:
                site.ops.append(GradOp(kind, node, stmt, grad_names, frozenset(grad_names)))
        self._find_target(site, lines[:index])
        self._follow_gradients(site, line, lines[index + 1:])
        if site.apply_call is not None:
            site.origin = self.origin(site.optimizer_expr, line)
        return site

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
            if not reads:
                continue
            targets = _target_names(stmt)
            kind, node = self.grad_op(value)
            if kind:
                site.ops.append(GradOp(kind, node, stmt, targets, frozenset(reads)))
            flow |= set(targets)

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

    def is_scaling(self, call: cst.Call) -> bool:
        if method_name(call) in SCALE_METHODS:
            return True
        fn = self.helper(call)
        return fn is not None and any(method_name(c) in SCALE_METHODS for c in self.context.nodes_within(fn, cst.Call))

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
        if isinstance(expr, (cst.Call, cst.SimpleString)):
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
                if (arg.keyword and arg.keyword.value == name) or (arg.keyword is None and not arg.star and i == position):
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
    for stmt in context.module.body:
        if not isinstance(stmt, cst.SimpleStatementLine):
            continue
        for small in stmt.body:
            for bound, qualified in _bindings(small):
                k = canonical(qualified, context.facts.reexports)
                if k is None:
                    continue
                key = _SPELLING_KEYS.get(k.path)
                if key is None and k.path == "":
                    key = "tf" if k.ns == "tf" else "keras" if k.is_keras else None
                if key and key not in found:
                    found[key] = bound
    return found


_SPELLING_KEYS = {"optimizers.LossScaleOptimizer": "lso", "mixed_precision": "mixed_precision", "optimizers": "optimizers"}


def _bindings(small: cst.BaseSmallStatement):
    """(bound name, qualified target) of an import statement."""
    if isinstance(small, cst.Import):
        for alias in small.names:
            full = alias.evaluated_name
            yield (alias.evaluated_alias, full) if alias.asname else (full.split(".")[0], full.split(".")[0])
    elif isinstance(small, cst.ImportFrom) and not small.relative and not isinstance(small.names, cst.ImportStar):
        module = dotted(small.module) if small.module else None
        for alias in small.names if module else ():
            yield alias.evaluated_alias or alias.evaluated_name, f"{module}.{alias.evaluated_name}"


def lso_spelling(context: FileContext) -> tuple[str, list[ImportSpec]]:
    """How this file writes ``LossScaleOptimizer``, and the import it needs for that."""
    s = keras_spellings(context)
    g3 = context.generation == 3
    if "lso" in s:
        return s["lso"], []
    if "mixed_precision" in s:
        return f"{s['mixed_precision']}.LossScaleOptimizer", []
    if "keras" in s:
        sub = "optimizers" if g3 else "mixed_precision"
        return f"{s['keras']}.{sub}.LossScaleOptimizer", []
    if "optimizers" in s and g3:
        return f"{s['optimizers']}.LossScaleOptimizer", []
    if "tf" in s:
        return f"{s['tf']}.keras.mixed_precision.LossScaleOptimizer", []
    if g3:
        return "keras.optimizers.LossScaleOptimizer", [ImportSpec("keras")]
    return "mixed_precision.LossScaleOptimizer", [ImportSpec("tensorflow.keras", "mixed_precision")]


def optimizers_get_spelling(context: FileContext) -> str | None:
    s = keras_spellings(context)
    if "keras" in s:
        return f"{s['keras']}.optimizers.get"
    if "optimizers" in s:
        return f"{s['optimizers']}.get"
    if "tf" in s:
        return f"{s['tf']}.keras.optimizers.get"
    return None


def wrap_construction(context: FileContext, construction: cst.BaseExpression) -> tuple[cst.BaseExpression, list[ImportSpec]] | None:
    """``Adam(1e-3)`` -> ``LossScaleOptimizer(Adam(1e-3))``; ``"adam"`` -> ``LossScaleOptimizer(...get("adam"))``."""
    spelling, imports = lso_spelling(context)
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


def scaling_insertion(context: FileContext, site: GradientSite, scale: bool, unscale: bool) -> dict | None:
    """Replacements that scale the loss inside the tape and/or unscale the gradients after it.

    G3: ``scaled_loss = opt.scale_loss(loss)``; G1/G2: ``get_scaled_loss`` and
    ``grads = opt.get_unscaled_gradients(grads)``. None when the code's shape
    does not allow it (the loss is not a name assigned in the tape's block).
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
        method = "scale_loss" if context.generation == 3 else "get_scaled_loss"
        added = cst.parse_statement(f"{scaled} = {code(opt)}.{method}({loss})")
        out[site.loss_stmt] = cst.FlattenSentinel([site.loss_stmt, added])
        new_call = site.call.with_changes(args=[site.call.args[0].with_changes(value=cst.Name(scaled)), *site.call.args[1:]])
        if grad_stmt is None:
            out[site.call] = new_call
        else:
            new_grad_stmt = grad_stmt.deep_replace(site.call, new_call)
    if unscale:
        if grad_stmt is None or len(site.grad_names) != 1:
            return None
        grads = site.grad_names[0]
        added = cst.parse_statement(f"{grads} = {code(opt)}.get_unscaled_gradients({grads})")
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


def statement_of(context: FileContext, node: cst.CSTNode) -> cst.SimpleStatementLine | None:
    for parent in context.ancestors(node):
        if isinstance(parent, cst.SimpleStatementLine):
            return parent
        if isinstance(parent, cst.BaseCompoundStatement):
            return None
    return None
