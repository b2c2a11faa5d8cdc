"""What a gradient site is, and the module-wide facts its collection reads.

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

``GradientSite`` is one ``tape.gradient`` call with what was found about it, ``GradientPath`` one of its paths
(``paths.py``), ``OptimizerOrigin`` where its optimizer comes from; ``Collector`` gathers the file's functions,
classes, assignments and tapes in one walk.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import libcst as cst

from mplint.analysis.keras_guards import KerasRange
from mplint.diagnostics import Related
from mplint.engine import matchers as m
from mplint.engine.code_summary import CodeSummary
from mplint.engine.context import FileContext
from mplint.engine.names import last_name
from mplint.knowledge.loss_scale_names import LSO

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


class Collector(cst.CSTVisitor):
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


def source_text(context: FileContext, node: cst.CSTNode) -> str:
    return " ".join(context.module.code_for_node(node).split())


def parameter_names(fn: cst.FunctionDef) -> list[str]:
    p = fn.params
    return [x.name.value for x in (*p.posonly_params, *p.params, *p.kwonly_params)]


def single_assign(line: cst.SimpleStatementLine) -> bool:
    return len(line.body) == 1 and isinstance(line.body[0], cst.Assign) and len(line.body[0].targets) == 1


def assign_value(line: cst.SimpleStatementLine) -> cst.BaseExpression:
    return line.body[0].value  # type: ignore[union-attr]


def target_names(line: cst.SimpleStatementLine) -> tuple[str, ...]:
    target = line.body[0].targets[0].target  # type: ignore[union-attr]
    if isinstance(target, cst.Name):
        return (target.value,)
    if isinstance(target, (cst.Tuple, cst.List)):
        return tuple(e.value.value for e in target.elements if isinstance(e.value, cst.Name))
    return ()
