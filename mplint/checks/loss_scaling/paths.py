"""The paths of a gradient site (``SitePaths``). Loops that scale only on some paths are read path by path
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
from typing import Protocol

import libcst as cst

from mplint.analysis.keras_guards import test_arms
from mplint.checks.loss_scaling.sites import (
    Collector,
    GradientPath,
    GradientSite,
    OptimizerOrigin,
    assign_value,
    is_lso_call,
    method_name,
    parameter_names,
    single_assign,
    source_text,
    target_names,
)
from mplint.engine.context import FileContext
from mplint.engine.names import last_name
from mplint.knowledge.api_versions import ERA_GENERATION
from mplint.knowledge.loss_scale_names import LSO, LSO_ATTRS, SCALE_METHOD, SCALE_METHODS, UNSCALE_METHOD

MAX_ATOMS = 6  # flags and optimizer tests one site is split on (2**6 paths); beyond, the site is read as one path


class SiteFlow(Protocol):
    """What the path engine asks of the file's gradient sites (``OptimizerFlow``)."""

    context: FileContext
    c: Collector

    def is_scaling(self, call: cst.Call) -> bool: ...

    def origin(self, expr: cst.BaseExpression | None, at: cst.CSTNode, depth: int = 0) -> OptimizerOrigin: ...

    def project_steps(self, call: cst.Call) -> frozenset[str]: ...


class SitePaths:
    """Splits one gradient site into the paths its flags and optimizer tests select."""

    def __init__(self, flow: SiteFlow, site: GradientSite, before: list[cst.SimpleStatementLine]):
        self.flow = flow
        self.context = flow.context
        self.site = site
        self.before = before
        self.optimizer = source_text(self.context, site.optimizer_expr) if site.optimizer_expr is not None else ""
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
            subject = source_text(self.context, test.args[0].value)
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
        key = source_text(self.context, test)
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
        key = source_text(self.context, test)
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
            if single_assign(line) and target_names(line) == (name,):
                yield i, line

    def scaled_on(self, path, target, lines, depth: int = 0) -> cst.Call | None:
        target = self.choose(target, path)
        if isinstance(target, cst.Call):
            return target if self.flow.is_scaling(target) else None
        if not isinstance(target, cst.Name) or depth > 4:
            return None
        for i, line in self._bindings(target.value, lines):
            if self.holds(self.conds(line), path):
                return self.scaled_on(path, assign_value(line), lines[:i], depth + 1)
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
                    new |= {n.value for n in self._plain_names(assign_value(line))}
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
            if expr.value in parameter_names(fn):
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
