"""Keras 3's custom loops on the JAX and torch backends, as gradient sites of ``optimizer_flow``.

JAX (the keras.io "training loop from scratch in JAX"): ``grad_fn = jax.value_and_grad(compute_loss_and_updates,
has_aux=True)`` (or ``jax.grad``) of a function of the file, whose (first) return is the differentiated value; a call
of ``grad_fn`` binds the gradients, which ``optimizer.stateless_apply(optimizer_variables, grads, variables)``
consumes. torch: ``loss.backward()``, then ``optimizer.apply(gradients, variables)`` of gradients read from the
variables' ``.grad``. A ``train_step`` override of ``keras.Model`` for either backend is the same shape in a method,
its optimizer ``self.optimizer`` (the one ``compile()`` was given, and wraps under mixed_float16).

A site is kept only on clear evidence that it is Keras's: the optimizer is a Keras optimizer (a LossScaleOptimizer,
compile()'s, or a ``keras.optimizers`` construction), and the site's Keras range includes Keras 3 (these loops exist
nowhere else: the range is narrowed to Keras 3). Its optimizer and paths are read by ``OptimizerFlow`` itself.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import libcst as cst

from mplint.analysis.keras_guards import KerasRange, code_range
from mplint.checks.loss_scaling.optimizer_flow import OptimizerFlow
from mplint.checks.loss_scaling.sites import GradientSite, method_name, names_in
from mplint.engine.code_summary import CodeSummary
from mplint.engine.context import FileContext
from mplint.engine.names import dotted, last_name
from mplint.knowledge.api_versions import K3

TRIGGERS = (b"stateless_apply", b"backward")
# How a JAX loop scales its loss, and why mplint writes no fix there: ``scale_loss`` reads the optimizer's own loss
# scale variable, which a stateless loop never updates (it carries the optimizer's variables itself), so a plain
# ``optimizer.scale_loss(loss)`` keeps the first scale while ``stateless_apply`` unscales by the carried one.
JAX_SCALED_LOSS = (
    "optimizer.scale_loss(loss) computed under keras.StatelessScope(state_mapping=list(zip(optimizer.variables, "
    "optimizer_variables))), with the optimizer variables the loop carries"
)
_JAX_TRANSFORMS = frozenset({"jax.value_and_grad", "jax.grad"})


def has_backend_loops(code: CodeSummary) -> bool:
    """Pre-filter: ``stateless_apply`` after a JAX gradient transform, or ``backward()`` and ``apply``."""
    jax = "stateless_apply" in code.calls and code.calls_any("value_and_grad", "grad")
    return jax or code.calls_any("backward") and "apply" in code.calls


@dataclass
class BackendSite(GradientSite):
    transform: str = ""  # on JAX: value_and_grad or grad
    override: bool = False  # a train_step method of a class


def describe_loop(site: GradientSite) -> str:
    """What kind of loop a site is, for messages."""
    backend = {"jax": "the JAX backend", "torch": "the torch backend"}.get(site.backend)
    if not isinstance(site, BackendSite) or backend is None:
        return "custom training loop"
    return f"train_step override for {backend}" if site.override else f"custom training loop on {backend}"


def differentiation(site: GradientSite) -> str:
    """What differentiates the loss at a site: the tape, ``jax.value_and_grad``, ``backward()``."""
    if isinstance(site, BackendSite) and site.backend == "jax":
        return f"`jax.{site.transform}`"
    if site.backend == "torch":
        return "`backward()`"
    return "the tape"


class BackendLoops:
    """``context.analysis(BackendLoops)``: the file's Keras 3 loops on JAX and torch."""

    def __init__(self, context: FileContext):
        self.context = context
        self.flow = context.analysis(OptimizerFlow)
        self.c = self.flow.c
        self.sites: list[BackendSite] = []
        for lines in self.c.lines.values():
            for index, line in enumerate(lines):
                for call in context.nodes_within(line, cst.Call):
                    site = self._torch_site(call, line, lines, index) or self._jax_site(call, line, lines, index)
                    if site is not None:
                        self.sites.append(site)
        self.sites.sort(key=lambda s: context.source_order(s.call))

    # --- torch ---------------------------------------------------------------------------------

    def _torch_site(self, call: cst.Call, line, lines, index) -> BackendSite | None:
        """``loss.backward()`` whose gradients (``.grad``) a later ``optimizer.apply`` of its function takes."""
        if method_name(call) != "backward" or any(arg.keyword is None for arg in call.args):
            return None  # a positional argument is the gradient of a non-scalar: not a loss's backward()
        target = call.func.value  # type: ignore[attr-defined]
        grads: set[str] = set()
        for later in lines[index + 1 :]:
            for apply in self.context.nodes_within(later, cst.Call):
                if method_name(apply) == "apply" and apply.args and self._reads_grad(apply.args[0].value, grads):
                    return self._site(call, line, target, apply, lines[:index], "torch")
            for assign in self.context.nodes_within(later, cst.Assign):
                if self._reads_grad(assign.value, grads):
                    grads |= {n.value for t in assign.targets for n in self.context.nodes_within(t.target, cst.Name)}
        return None

    def _reads_grad(self, value: cst.BaseExpression, grads: set[str]) -> bool:
        """A value built from the variables' ``.grad`` (directly or through names bound to it)."""
        return bool(names_in(self.context, value) & grads) or any(
            a.attr.value == "grad" for a in self.context.nodes_within(value, cst.Attribute)
        )

    # --- jax -----------------------------------------------------------------------------------

    def _jax_site(self, call: cst.Call, line, lines, index) -> BackendSite | None:
        """``(loss, aux), grads = grad_fn(...)`` whose gradients a later ``stateless_apply`` takes."""
        transform = self._transform(call.func, call)
        if transform is None or not transform.args:
            return None
        loss_fn = self._function(transform.args[0].value)
        grads = self._grad_names(line, call, transform)
        if loss_fn is None or grads is None:
            return None
        returned = self._differentiated(loss_fn, transform)
        if returned is None:
            return None
        target, before = returned
        flow = set(grads)
        for later in lines[index + 1 :]:
            for apply in self.context.nodes_within(later, cst.Call):
                if method_name(apply) == "stateless_apply" and names_in(self.context, _grads_arg(apply)) & flow:
                    site = self._site(call, line, target, apply, before, "jax", last_name(transform.func) or "")
                    if site is not None:
                        _decided_by_the_call(site, loss_fn)
                    return site
            for assign in self.context.nodes_within(later, cst.Assign):
                if names_in(self.context, assign.value) & flow:
                    flow |= {n.value for t in assign.targets for n in self.context.nodes_within(t.target, cst.Name)}
        return None

    def _transform(self, func: cst.BaseExpression, at: cst.CSTNode) -> cst.Call | None:
        """The ``jax.value_and_grad(...)``/``jax.grad(...)`` call that made the called function: the callee itself,
        or a name bound to one in an enclosing function or the module."""
        if isinstance(func, cst.Call):
            return func if self.context.names.project_paths(func.func) & _JAX_TRANSFORMS else None
        if not isinstance(func, cst.Name):
            return None
        scope = self.context.enclosing(at, cst.FunctionDef)
        while True:
            key = id(scope) if scope is not None else id(self.context.module)
            values = self.c.assigns.get(key, {}).get(func.value)
            if values:
                value = values[-1]
                return value if isinstance(value, cst.Call) and self._transform(value, value) is value else None
            if scope is None:
                return None
            scope = self.context.enclosing(scope, cst.FunctionDef)

    def _function(self, expr: cst.BaseExpression) -> cst.FunctionDef | None:
        """The function of this file a name or ``self.method`` stands for (one definition only)."""
        if isinstance(expr, cst.Name) or (isinstance(expr, cst.Attribute) and dotted(expr.value) == "self"):
            defs = self.c.functions.get(last_name(expr) or "", [])
            return defs[0] if len(defs) == 1 else None
        return None

    def _grad_names(self, line, call: cst.Call, transform: cst.Call) -> tuple[str, ...] | None:
        """The names the call binds the gradients to: ``(value, aux), grads = value_and_grad(...)(...)``,
        ``grads, aux = grad(..., has_aux=True)(...)``, ``grads = grad(...)(...)``."""
        if not (len(line.body) == 1 and isinstance(line.body[0], cst.Assign) and line.body[0].value is call):
            return None
        targets = line.body[0].targets
        if len(targets) != 1:
            return None
        target = targets[0].target
        pair = [e.value for e in target.elements] if isinstance(target, (cst.Tuple, cst.List)) else None
        if last_name(transform.func) == "value_and_grad":
            part = pair[1] if pair is not None and len(pair) == 2 else None
        elif _has_aux(transform):
            part = pair[0] if pair is not None and len(pair) == 2 else None
        else:
            part = target
        if part is None:
            return None
        return tuple(n.value for n in self.context.nodes_within(part, cst.Name)) or None

    def _differentiated(self, fn: cst.FunctionDef, transform: cst.Call):
        """The value the transform differentiates (the first element of the return with ``has_aux``), and the
        function's statement lines before that return; None unless the function has one return."""
        returns = [
            r
            for r in self.context.nodes_within(fn, cst.Return)
            if r.value is not None and self.context.enclosing(r, cst.FunctionDef) is fn
        ]
        if len(returns) != 1:
            return None
        value = returns[0].value
        if _has_aux(transform):
            if not isinstance(value, cst.Tuple) or len(value.elements) < 2:
                return None
            value = value.elements[0].value
        lines = self.c.lines.get(id(fn), [])
        line = next((ln for ln in lines if self.context.contains(ln, returns[0])), None)
        if line is None:
            return None
        return value, lines[: lines.index(line)]

    # --- the site ------------------------------------------------------------------------------

    def _site(self, call, line, target, apply, before, backend: str, transform: str = "") -> BackendSite | None:
        keras = _keras3(code_range(self.context, call))
        if keras is None:
            return None
        scope = self.c.scope_of[id(line)]
        override = (
            isinstance(scope, cst.FunctionDef)
            and scope.name.value == "train_step"
            and self.c.class_of.get(id(scope)) is not None
        )
        site = BackendSite(scope, None, call, None, (), target, keras=keras, backend=backend)
        site.apply_call, site.transform, site.override = apply, transform, override
        self._find_loss(site, line, before)
        self.flow.resolve(site, line, before)
        return site if self._keras_optimizer(site) else None

    def _find_loss(self, site: GradientSite, line, before) -> None:
        """Whether the differentiated value is a scaled loss (directly or through its last binding), and, on
        torch, the binding a fix scales after (in the block of the ``backward()`` statement)."""
        if isinstance(site.target, cst.Call) and self.flow.is_scaling(site.target):
            site.scaled_by = site.target
            return
        if not isinstance(site.target, cst.Name):
            return
        for earlier in reversed(before):
            body = earlier.body
            if len(body) == 1 and isinstance(body[0], cst.Assign) and len(body[0].targets) == 1:
                bound = body[0].targets[0].target
                if isinstance(bound, cst.Name) and bound.value == site.target.value:
                    value = body[0].value
                    if isinstance(value, cst.Call) and self.flow.is_scaling(value):
                        site.scaled_by = value
                    if site.backend == "torch" and self.context.parent(earlier) is self.context.parent(line):
                        site.loss_stmt = earlier
                    return

    def _keras_optimizer(self, site: GradientSite) -> bool:
        """The optimizer is Keras's: a LossScaleOptimizer, compile()'s, or a construction Keras names."""
        origin = site.origin
        if origin is None:
            return False
        if origin.wrap in ("explicit", "auto") or origin.compile_call is not None:
            return True
        construction = origin.construction
        if origin.wrap != "none" or not isinstance(construction, cst.Call):
            return False
        kname = self.context.names.kname(construction.func)
        return kname is not None and kname.is_keras and kname.path.startswith("optimizers.")


def _decided_by_the_call(site: BackendSite, loss_fn: cst.FunctionDef) -> None:
    """Drop the paths a test of the loss function's own parameters selects (``if training and self.optimizer is
    not None:`` in Keras's own ``compute_loss_and_updates``): the call's arguments decide them, not a flag of the
    program, and mplint does not evaluate them."""
    p = loss_fn.params
    params = {a.name.value for a in (*p.posonly_params, *p.params, *p.kwonly_params)} - {"self"}
    site.paths = [path for path in site.paths if not any(set(re.findall(r"\w+", test)) & params for test in path.when)]


def _grads_arg(apply: cst.Call) -> cst.CSTNode:
    """``stateless_apply(optimizer_variables, grads, trainable_variables)``'s gradients."""
    for i, arg in enumerate(apply.args):
        if (arg.keyword is not None and arg.keyword.value == "grads") or (arg.keyword is None and i == 1):
            return arg.value
    return cst.Name("_")


def _has_aux(transform: cst.Call) -> bool:
    return any(
        arg.keyword is not None
        and arg.keyword.value == "has_aux"
        and isinstance(arg.value, cst.Name)
        and arg.value.value == "True"
        for arg in transform.args
    )


def _keras3(keras: KerasRange | None) -> KerasRange | None:
    """The site's range narrowed to Keras 3, where its loop can run; None where the range has no Keras 3."""
    if keras is None or K3 not in keras.eras:
        return None
    return KerasRange(frozenset({K3}), keras.tf_newest, keras.text, keras.guarded, keras.evidenced)
