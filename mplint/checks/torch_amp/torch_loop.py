"""The order of a PyTorch training step, path by path: backward -> unscale_ -> clip -> step -> update.

Every function of the file (and its top-level code) is walked statement by statement over a set of
abstract paths. Each path knows which GradScaler holds a scaled backward not yet stepped and updated,
which (scaler, optimizer) pairs were unscaled or stepped since the last ``update()``, whether a float16
autocast region ran before a plain ``backward()``, and the branch conditions it assumed. An ``if amp:``
whose condition a path already assumed (``if amp: scaler.scale(loss).backward() else: loss.backward()``
followed by ``if amp: scaler.step(opt) else: opt.step()``) follows only the consistent branch, and an
autocast region with ``enabled=amp`` computes in float16 only on paths where ``amp`` may be true.
Any other test without calls (``accumulation_steps > 1``, ``args.precision in ("fp16", "amp")``) is
assumed the same way: the arms of a test whose names the loop never binds are exclusive for the whole loop, not
taken in turn by its iterations. Loops run their body twice (what one iteration leaves for the next), forgetting
what a path assumed of the names the body binds (the loop's target, ``i += 1``, ``self.step`` set by a method it
calls); an assignment forgets it too. ``return``, ``break`` and ``continue`` end or redirect a path as they do at
run time. Calls of functions of the same module (``train_step(...)``, ``self._backward(loss)``, a method of a base
class of the module) are followed into their bodies, three deep; a deeper call that touches a scaler leaves its
state unknown.

Each finding keeps the events that make it (``related``): the scaled backward a bypassed step or an early clip
follows, the steps around an ``update()`` that runs between them, the first ``unscale_``.

What the MPT2xx rules read (``TrainingLoopFlow.findings``): clip before ``unscale_`` (MPT204),
``optimizer.step()`` on still-scaled gradients and ``update()`` between two steps of one backward
(MPT202), ``unscale_`` twice or a manual division by ``get_scale()`` before ``scaler.step`` (MPT203),
and a float16 autocast loss whose ``backward()`` and ``optimizer.step()`` run without any scaler (MPT201).
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable
from dataclasses import dataclass, field, replace

import libcst as cst

from mplint.analysis.torch_amp import FLOAT16, Condition, TorchAmp, condition_of
from mplint.engine.context import FileContext
from mplint.engine.names import dotted
from mplint.knowledge.torch_clipping import CLIP_APIS

_MAX_PATHS = 48  # per program point; beyond it later paths are dropped (findings can only be missed)
_MAX_INLINE_DEPTH = 3

# Finding kinds
CLIP_BEFORE_UNSCALE = "clip-before-unscale"
STEP_BYPASSED = "step-bypassed"
UPDATE_BETWEEN_STEPS = "update-between-steps"
UNSCALE_TWICE = "unscale-twice"
MANUAL_UNSCALE = "manual-unscale"
MISSING_SCALER = "missing-scaler"

# A branch test evaluated anew each time it runs: a call, an await, a walrus, a generator.
_VOLATILE = (cst.Call, cst.Await, cst.Yield, cst.NamedExpr, cst.Lambda, cst.GeneratorExp, cst.ListComp, cst.SetComp)
_CHAIN = re.compile(r"(?<![\w.'\"])[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*")


@dataclass(frozen=True)
class _Path:
    assumed: frozenset[Condition] = frozenset()
    pending: frozenset[str] = frozenset()  # scalers with a scaled backward not yet updated
    # (scaler, optimizer, id of the unscale_ or step) unscaled or stepped since the scaler's last update
    unscaled: frozenset[tuple[str, str, int]] = frozenset()
    # (scaler, optimizer, id of the step) stepped since that scaler's last scaled backward, across its updates
    stepped: frozenset[tuple[str, str, int]] = frozenset()
    backward: frozenset[tuple[str, int]] = frozenset()  # (scaler, id of its last scaled backward on this path)
    step_sites: frozenset[tuple[str, int]] = frozenset()  # (scaler, id of a step) since that backward, every turn
    last_update: frozenset[tuple[str, int]] = frozenset()  # (scaler, id of its last update() since its backward)
    # (scaler, id of an update(), ids of the steps before it, id of the step after it): an update followed by the
    # step of an optimizer that the backward before it had not stepped
    between: frozenset[tuple[str, int, frozenset[int], int]] = frozenset()
    manual_unscale: int | None = None  # id of a by-hand division by get_scale() awaiting scaler.step
    # the enabling conditions of the float16 autocast regions that ran on this path (None: always enabled);
    # matched against the path's assumptions when the backward comes (``if not amp: loss.backward()``)
    float16_ran: frozenset[Condition | None] = frozenset()

    @property
    def float16_active(self) -> bool:
        return any(c is None or self.assumes(c) is not False for c in self.float16_ran)

    plain_backward: int | None = None  # id of a backward() after float16 autocast, awaiting optimizer.step()

    def assumes(self, condition: Condition | None) -> bool | None:
        """True/False when the path assumed ``condition``/its negation, else None."""
        if condition is None:
            return None
        if condition in self.assumed:
            return True
        return False if Condition(condition.key, not condition.value) in self.assumed else None

    def assume(self, conditions: list[Condition]) -> _Path:
        return replace(self, assumed=self.assumed | frozenset(conditions))

    def unassume(self, keys: frozenset[str]) -> _Path:
        """``keys`` were bound again: what the path assumed of them no longer holds."""
        if not self.assumed or not keys:
            return self
        kept = frozenset(c for c in self.assumed if not _reads(c.key, keys))
        return self if len(kept) == len(self.assumed) else replace(self, assumed=kept)

    def forget(self, keys: frozenset[str]) -> _Path:
        """A new loop iteration: conditions on names the loop rebinds no longer hold, and an optimizer
        named by the loop variable (``for opt in optimizers: scaler.unscale_(opt)``) is another one."""
        return replace(
            self.unassume(keys),
            unscaled=frozenset(u for u in self.unscaled if not _rebinds(u[1], keys)),
            stepped=frozenset(u for u in self.stepped if not _rebinds(u[1], keys)),
        )

    def new_backward(self) -> _Path:
        """A backward no scaler scaled (``loss.backward()``, ``engine.backward(loss)``): gradients of another
        backward, whatever steps and updates came before."""
        return replace(self, stepped=frozenset(), step_sites=frozenset(), last_update=frozenset(), between=frozenset())

    def unknown_scalers(self) -> _Path:
        """A call not followed that uses a scaler: what it did to any scaler is unknown."""
        return replace(
            self,
            pending=frozenset(),
            unscaled=frozenset(),
            stepped=frozenset(),
            backward=frozenset(),
            step_sites=frozenset(),
            last_update=frozenset(),
            between=frozenset(),
            manual_unscale=None,
        )


@dataclass
class _Flow:
    """Paths leaving a statement: normally, or by return/break/continue."""

    normal: list[_Path] = field(default_factory=list)
    returned: list[_Path] = field(default_factory=list)
    broken: list[_Path] = field(default_factory=list)
    continued: list[_Path] = field(default_factory=list)


@dataclass
class _Event:
    kind: str  # scaled-backward | plain-backward | other-backward | unscale | clip | scaler-step | optimizer-step | update
    #            | manual-unscale | call
    node: cst.CSTNode
    scaler: str = ""
    optimizer: str = ""
    callee: cst.FunctionDef | None = None


class TrainingLoopFlow:
    """Build with ``context.analysis(TrainingLoopFlow)``; read ``findings[kind]`` (nodes in source order)."""

    def __init__(self, context: FileContext):
        self.context = context
        self.amp: TorchAmp = context.analysis(TorchAmp.of)
        self._found: dict[str, dict[int, cst.CSTNode]] = {}
        self._nodes: dict[int, cst.CSTNode] = {}
        self._events: dict[int, list[_Event]] = {}
        self._holds: dict[int, list[bool]] = {}  # event node -> whether its finding's condition held, per path
        self._related: dict[int, dict[int, str]] = {}  # finding node -> the events that make it, with their role
        self._event_at: dict[int, _Event] = {}  # event node -> its event
        self._call_events: dict[int, _Event | None] = {}
        self._bound_at: dict[int, frozenset[str]] = {}  # statement or block -> what it binds
        self._callee_bound: dict[int, frozenset[str]] = {}  # loop body -> what the functions it calls bind
        self._uses_scaler: dict[int, bool] = {}  # function -> whether it (or what it calls) uses a scaler
        self._tests: dict[int, tuple[list[Condition], list[Condition]]] = {}  # if test -> its arms' conditions
        self.pending_scalers: dict[int, set[str]] = {}
        self.unscaled_steps: dict[
            int, dict[int, cst.Call]
        ] = {}  # MISSING_SCALER backward -> the optimizer steps after it  # clip/step node -> the scalers whose backward is pending
        self.functions = {s.name.value: s for s in context.module.body if isinstance(s, cst.FunctionDef)}
        self.classes = {s.name.value: s for s in context.module.body if isinstance(s, cst.ClassDef)}
        self._renames: dict[str, str] = {}  # parameter of an inlined callee -> the caller's text for its argument
        for root in [context.module, *context.nodes(cst.FunctionDef)]:
            self._root = root
            self._root_has_scaler = self._mentions_scaler(root, set())
            body = root.body if isinstance(root, cst.Module) else root.body.body
            if not isinstance(root, cst.Module) or any(
                not isinstance(s, (cst.FunctionDef, cst.ClassDef)) for s in body
            ):
                self._block(body, [_Path()], (id(root),))

    def findings(self, kind: str) -> list[cst.CSTNode]:
        return sorted(self._found.get(kind, {}).values(), key=self.context.source_order)

    def related(self, node: cst.CSTNode) -> list[tuple[str, str, cst.CSTNode]]:
        """The events that make the finding at ``node`` as (kind, role, node), in source order: the scaled backward
        of a bypassed step or an early clip; the steps ``before`` and ``after`` an update between them (``before and
        after``: one step line of a loop over optimizers); the first ``unscale_`` or step of gradients unscaled
        again; the ``scaler.step`` after a division by hand."""
        roles = self._related.get(id(node), {})
        events = sorted(
            (self._event_at[i] for i in roles if i in self._event_at), key=lambda e: self.context.source_order(e.node)
        )
        return [(e.kind, roles[id(e.node)], e.node) for e in events]

    def on_every_path(self, node: cst.CSTNode) -> bool:
        """Whether the finding at ``node`` holds on every path that reaches it (a fix there is then
        right on all of them, not only in the ``if amp:`` branch)."""
        return all(self._holds.get(id(node), [False]))

    def _hold(self, node: cst.CSTNode, holds: bool) -> bool:
        self._holds.setdefault(id(node), []).append(holds)
        return holds

    # --- statements ---------------------------------------------------------------------------

    def _block(self, statements, paths: list[_Path], stack: tuple[int, ...]) -> _Flow:
        out = _Flow(normal=paths)
        for statement in statements:
            if not out.normal:
                break
            step = self._statement(statement, out.normal, stack)
            out.normal = step.normal
            out.returned += step.returned
            out.broken += step.broken
            out.continued += step.continued
        return out

    def _statement(self, node: cst.CSTNode, paths: list[_Path], stack) -> _Flow:
        if isinstance(node, cst.SimpleStatementLine):
            return self._simple(node, paths, stack)
        if isinstance(node, cst.If):
            return self._if(node, paths, stack)
        if isinstance(node, (cst.For, cst.While)):
            return self._loop(node, paths, stack)
        if isinstance(node, cst.With):
            entered = self._enter(node, paths)
            return (
                self._block(node.body.body, entered, stack)
                if isinstance(node.body, cst.IndentedBlock)
                else self._simple_suite(node.body, entered, stack)
            )
        if isinstance(node, cst.Try):
            return self._try(node, paths, stack)
        return _Flow(normal=paths)  # definitions run nothing; match statements are not followed

    def _simple_suite(self, suite, paths, stack) -> _Flow:
        return self._simple(suite, paths, stack)

    def _simple(self, line, paths: list[_Path], stack) -> _Flow:
        for small in line.body:
            paths = self._run_events(self._events_of(small), paths, stack)
            if isinstance(small, (cst.Assign, cst.AugAssign, cst.AnnAssign)):
                bound = self._bound(small) & self._tested
                if bound:
                    paths = _dedupe([p.unassume(bound) for p in paths])
            if isinstance(small, cst.Return):
                return _Flow(returned=paths)
            if isinstance(small, cst.Raise):
                return _Flow()
            if isinstance(small, cst.Break):
                return _Flow(broken=paths)
            if isinstance(small, cst.Continue):
                return _Flow(continued=paths)
        return _Flow(normal=paths)

    def _if(self, node: cst.If, paths: list[_Path], stack) -> _Flow:
        when_true, when_false = self._arms(node.test)
        taken, skipped = [], []
        for path in paths:
            if _possible(path, when_true, when_false):
                taken.append(path.assume(when_true))
            if _possible(path, when_false, when_true):
                skipped.append(path.assume(when_false))
        out = self._block(node.body.body, _dedupe(taken), stack) if taken else _Flow()
        if node.orelse is None:
            other = _Flow(normal=skipped)
        elif isinstance(node.orelse, cst.If):
            other = self._if(node.orelse, skipped, stack) if skipped else _Flow()
        else:
            other = self._block(node.orelse.body.body, skipped, stack) if skipped else _Flow()
        return _merge(out, other)

    def _loop(self, node, paths: list[_Path], stack) -> _Flow:
        changed = self._bound(node.body) | self._bound_by_callees(node.body)
        over_optimizers = False
        if isinstance(node, cst.For):
            targets = {n.value for n in self.context.nodes_within(node.target, cst.Name)}
            changed |= targets
            over_optimizers = self._visits_optimizers(node, targets)
        changed = frozenset(changed)
        # ``for opt in optimizers: scaler.unscale_(opt)`` runs at least once: a training step has an optimizer
        done = _Flow(normal=[] if over_optimizers else list(paths))
        current = [p.forget(changed) for p in paths]
        for _ in range(2):
            body = self._block(node.body.body, current, stack)
            done.returned += body.returned
            done.normal += body.broken
            ended = _dedupe(body.normal + body.continued)
            # leaving the loop, what it did to each optimizer holds; a next iteration visits another one
            done.normal += ended
            current = _dedupe([p.forget(changed) for p in ended])
        if node.orelse is not None:
            rest = self._block(node.orelse.body.body, _dedupe(done.normal), stack)
            rest.returned += done.returned
            return rest
        done.normal = _dedupe(done.normal)
        return done

    @functools.cached_property
    def _tested(self) -> frozenset[str]:
        """The names and attribute chains (with their prefixes) the file's ``if`` tests read: the only bindings
        that can undo what a path assumed."""
        found: set[str] = set()
        for node in self.context.nodes(cst.If):
            when_true, when_false = self._arms(node.test)
            for chain in (c for condition in when_true + when_false for c in _chains(condition.key)):
                parts = chain.split(".")
                found.update(".".join(parts[: i + 1]) for i in range(len(parts)))
        return frozenset(found)

    def _arms(self, test: cst.BaseExpression) -> tuple[list[Condition], list[Condition]]:
        key = id(test)
        if key not in self._tests:
            self._tests[key] = _branch_conditions(self.context, test)
        return self._tests[key]

    def _bound(self, node: cst.CSTNode) -> frozenset[str]:
        key = id(node)
        if key not in self._bound_at:
            self._bound_at[key] = frozenset(_assigned_names(self.context, node))
        return self._bound_at[key]

    def _bound_by_callees(self, body: cst.CSTNode) -> frozenset[str]:
        """What the same-module functions and methods ``body`` calls bind beyond their own locals (attribute
        chains such as ``self.step``, ``global`` names), three deep: a loop test on them changes each turn."""
        key = id(body)
        if key not in self._callee_bound:
            self._callee_bound[key] = self._collect_callee_bound(body)
        return self._callee_bound[key]

    def _collect_callee_bound(self, body: cst.CSTNode) -> frozenset[str]:
        found: set[str] = set()
        seen: set[int] = set()
        todo = [(body, 0)]
        while todo:
            node, depth = todo.pop()
            for call in self.context.nodes_within(node, cst.Call):
                event = self._events_of_call(call)
                callee = event.callee if event is not None and event.kind == "call" else None
                if callee is None or id(callee) in seen or depth >= _MAX_INLINE_DEPTH:
                    continue
                seen.add(id(callee))
                found |= {n for n in self._bound(callee.body) if "." in n}
                found |= {i.name.value for g in self.context.nodes_within(callee, cst.Global) for i in g.names}
                todo.append((callee.body, depth + 1))
        return frozenset(found)

    def _events_of_call(self, call: cst.Call) -> _Event | None:
        key = id(call)
        if key not in self._call_events:
            self._call_events[key] = self._event(call)
        return self._call_events[key]

    def _visits_optimizers(self, loop: cst.For, targets: set[str]) -> bool:
        """The loop variable is what ``scaler.unscale_``/``scaler.step`` of the body receive."""
        for call in self.context.nodes_within(loop.body, cst.Call):
            func = call.func
            if (
                isinstance(func, cst.Attribute)
                and func.attr.value in ("unscale_", "step")
                and self.amp.is_scaler(func.value)
                and _first_text(call).split(".")[0] in targets
            ):
                return True
        return False

    def _try(self, node: cst.Try, paths, stack) -> _Flow:
        body = self._block(node.body.body, paths, stack)
        flows = [body]
        for handler in node.handlers:
            flows.append(self._block(handler.body.body, paths, stack))
        out = flows[0]
        for flow in flows[1:]:
            out = _merge(out, flow)
        if node.orelse is not None:
            after = self._block(node.orelse.body.body, body.normal, stack)
            out = _merge(
                _Flow(
                    returned=out.returned,
                    broken=out.broken,
                    continued=out.continued,
                    normal=[p for f in flows[1:] for p in f.normal],
                ),
                after,
            )
        if node.finalbody is not None:
            final = self._block(node.finalbody.body.body, out.normal, stack)
            out = _merge(_Flow(returned=out.returned, broken=out.broken, continued=out.continued), final)
        return out

    def _enter(self, node: cst.With, paths: list[_Path]) -> list[_Path]:
        regions = [
            r
            for r in self.amp.regions
            if r.node is node and (r.dtype == FLOAT16 or r.may_be_float16) and r.enabled is not False
        ]
        if not regions:
            return paths
        conditions = frozenset(None if r.enabled is True else r.enabled_when for r in regions)
        return [replace(path, float16_ran=path.float16_ran | conditions) for path in paths]

    # --- events -------------------------------------------------------------------------------

    def _run_events(self, events: list[_Event], paths: list[_Path], stack) -> list[_Path]:
        for event in events:
            if event.kind == "call":
                if id(event.callee) in stack or len(stack) > _MAX_INLINE_DEPTH:
                    if self._uses_a_scaler(event.callee):
                        paths = _dedupe([p.unknown_scalers() for p in paths])
                    continue
                outer = self._renames
                self._renames = {**outer, **self._bound_arguments(event.node, event.callee, outer)}
                try:
                    inner = self._block(event.callee.body.body, paths, (*stack, id(event.callee)))
                finally:
                    self._renames = outer
                # a callee that always raises is an abstract method a subclass overrides: step over it
                paths = _dedupe(inner.normal + inner.returned) or paths
            else:
                paths = _dedupe([self._apply(event, p) for p in paths])
            if not paths:
                break
        return paths

    def _bound_arguments(self, call: cst.Call, callee: cst.FunctionDef, outer: dict[str, str]) -> dict[str, str]:
        """Parameter -> the caller's text for the scaler and optimizer arguments of a same-module call
        (``unscale_all(scaler, optimizer)`` into ``def unscale_all(grad_scaler, opt)``)."""
        params = list(callee.params.params)
        if params and params[0].name.value in ("self", "cls") and isinstance(call.func, cst.Attribute):
            params = params[1:]
        bound = {}
        positional = [a for a in call.args if a.keyword is None and not a.star]
        for param, arg in zip(params, positional):
            bound[param.name.value] = arg.value
        by_name = {p.name.value for p in [*callee.params.params, *callee.params.kwonly_params]}
        for arg in call.args:
            if arg.keyword is not None and arg.keyword.value in by_name:
                bound[arg.keyword.value] = arg.value
        renames = {}
        for name, value in bound.items():
            text = dotted(value)
            if text is not None and text != name:
                root, _, rest = text.partition(".")
                text = outer.get(root, root) + (f".{rest}" if rest else "")
                renames[name] = text
        return renames

    def _renamed(self, text: str) -> str:
        if not self._renames or not text:
            return text
        root, _, rest = text.partition(".")
        return self._renames.get(root, root) + (f".{rest}" if rest else "")

    def _apply(self, event: _Event, path: _Path) -> _Path:
        if self._renames and (event.scaler or event.optimizer):
            event = replace(event, scaler=self._renamed(event.scaler), optimizer=self._renamed(event.optimizer))
        kind, at = event.kind, id(event.node)
        if kind == "scaled-backward":
            return replace(
                path,
                pending=path.pending | {event.scaler},
                backward=_drop(path.backward, event.scaler) | {(event.scaler, at)},
                step_sites=_drop(path.step_sites, event.scaler),
                last_update=_drop(path.last_update, event.scaler),
                stepped=_drop(path.stepped, event.scaler),
                between=_drop(path.between, event.scaler),
            )
        if kind == "plain-backward":
            path = path.new_backward()
            return replace(path, plain_backward=at) if path.float16_active and not self._root_has_scaler else path
        if kind == "other-backward":
            return path.new_backward()
        if kind == "unscale":
            earlier = _ids(path.unscaled, event.scaler, event.optimizer)
            if self._hold(event.node, bool(earlier)):
                self._report(UNSCALE_TWICE, event.node, earlier)
                return path
            return replace(path, unscaled=path.unscaled | {(event.scaler, event.optimizer, at)})
        if kind == "clip":
            if self._hold(event.node, bool(path.pending) and not any(u[0] in path.pending for u in path.unscaled)):
                self._report(CLIP_BEFORE_UNSCALE, event.node, self._backwards(path))
                self.pending_scalers.setdefault(id(event.node), set()).update(path.pending)
            return path
        if kind == "manual-unscale":
            return replace(path, manual_unscale=at) if path.pending else path
        if kind == "scaler-step":
            if path.manual_unscale is not None:
                self._report(MANUAL_UNSCALE, self._nodes[path.manual_unscale], (at,))
            scaler, optimizer = event.scaler, event.optimizer
            between, stepped, unscaled = path.between, path.stepped, path.unscaled
            if not _ids(stepped, scaler, optimizer):
                # another optimizer of the same backward, after an update()
                before = frozenset(u for s, u in path.step_sites if s == scaler)
                between |= {(scaler, u, before, at) for s, u in path.last_update if s == scaler}
                stepped |= {(scaler, optimizer, at)}
            if not _ids(unscaled, scaler, optimizer):
                unscaled |= {(scaler, optimizer, at)}
            return replace(
                path,
                unscaled=unscaled,
                stepped=stepped,
                step_sites=path.step_sites | {(scaler, at)},
                between=between,
                manual_unscale=None,
            )
        if kind == "optimizer-step":
            if self._hold(event.node, bool(path.pending)):
                self._report(STEP_BYPASSED, event.node, self._backwards(path))
                self.pending_scalers.setdefault(at, set()).update(path.pending)
            if path.plain_backward is not None:
                self._report(MISSING_SCALER, self._nodes[path.plain_backward])
                self.unscaled_steps.setdefault(path.plain_backward, {})[at] = event.node
            return replace(path, plain_backward=None)
        if kind == "update":
            scaler = event.scaler
            for owner, earlier, before, after in path.between:  # the earlier update() sits between two steps
                if owner == scaler:
                    self._report(UPDATE_BETWEEN_STEPS, self._nodes[earlier], before, "before")
                    self._report(UPDATE_BETWEEN_STEPS, self._nodes[earlier], (after,), "after")
            return replace(
                path,
                pending=path.pending - {scaler},
                unscaled=_drop(path.unscaled, scaler),
                last_update=_drop(path.last_update, scaler) | {(scaler, at)},
                between=_drop(path.between, scaler),
                manual_unscale=None,
            )
        return path

    @staticmethod
    def _backwards(path: _Path) -> set[int]:
        """The scaled backwards whose scale is still pending on ``path``."""
        return {at for scaler, at in path.backward if scaler in path.pending}

    def _report(self, kind: str, node: cst.CSTNode, related: Iterable[int] = (), role: str = "") -> None:
        self._found.setdefault(kind, {})[id(node)] = node
        roles = self._related.setdefault(id(node), {})
        for at in related:
            roles[at] = role if roles.get(at, role) == role else "before and after"

    def _events_of(self, small: cst.CSTNode) -> list[_Event]:
        key = id(small)
        if key not in self._events:
            self._events[key] = self._classify(small)
        return self._events[key]

    def _classify(self, small: cst.CSTNode) -> list[_Event]:
        context = self.context
        calls = [c for c in context.nodes_within(small, cst.Call) if not _in_lambda(context, c, small)]
        calls.sort(key=lambda c: (context.end_order(c), -context.source_order(c)))
        events = [e for c in calls if (e := self._event(c)) is not None]
        manual = self._manual_unscale(small)
        if manual is not None:
            events.append(manual)
        for event in events:
            self._nodes[id(event.node)] = event.node
            self._event_at[id(event.node)] = event
        return events

    def _event(self, call: cst.Call) -> _Event | None:
        func = call.func
        if isinstance(func, cst.Name) and func.value in self.functions:
            return _Event("call", call, callee=self.functions[func.value])
        if not isinstance(func, cst.Attribute):
            return _Event("clip", call) if self._is_clip(call) else None
        method, receiver = func.attr.value, func.value
        amp = self.amp
        if method == "backward":
            if (
                isinstance(receiver, cst.Call)
                and isinstance(receiver.func, cst.Attribute)
                and receiver.func.attr.value == "scale"
                and amp.is_scaler(receiver.func.value)
            ):
                return _Event("scaled-backward", call, scaler=dotted(receiver.func.value) or "")
            scaler = self._scaled_name(call, receiver)
            if scaler is not None:
                return _Event("scaled-backward", call, scaler=scaler)
            return _Event("plain-backward" if not call.args or _keyword_only(call) else "other-backward", call)
        if method == "unscale_" and amp.is_scaler(receiver):
            return _Event("unscale", call, scaler=dotted(receiver) or "", optimizer=_first_text(call))
        if method == "step" and amp.is_scaler(receiver):
            return _Event("scaler-step", call, scaler=dotted(receiver) or "", optimizer=_first_text(call))
        if method == "update" and not call.args and amp.is_scaler(receiver):
            return _Event("update", call, scaler=dotted(receiver) or "")
        if method == "step" and amp.is_optimizer(receiver):
            return _Event("optimizer-step", call, optimizer=dotted(receiver) or "")
        if isinstance(receiver, cst.Name) and receiver.value == "self":
            method_def = self._method(call, method)
            if method_def is not None:
                return _Event("call", call, callee=method_def)
        return _Event("clip", call) if self._is_clip(call) else None

    def _scaled_name(self, call: cst.Call, receiver: cst.BaseExpression) -> str | None:
        """The scaler of ``scaled = scaler.scale(loss)`` when ``receiver`` is ``scaled`` (same function)."""
        if not isinstance(receiver, cst.Name):
            return None
        scope = self.context.enclosing(call, cst.FunctionDef) or self.context.module
        for assign in self.context.nodes_within(scope, cst.Assign):
            value = assign.value
            if (
                any(dotted(t.target) == receiver.value for t in assign.targets)
                and isinstance(value, cst.Call)
                and isinstance(value.func, cst.Attribute)
                and value.func.attr.value == "scale"
                and self.amp.is_scaler(value.func.value)
            ):
                return dotted(value.func.value)
        return None

    def _is_clip(self, call: cst.Call) -> bool:
        return self.context.names.torch_api(call.func, CLIP_APIS) is not None

    def _method(self, call: cst.Call, name: str) -> cst.FunctionDef | None:
        """``self.name`` in a method: defined by its class, else by a base class of this module's top level."""
        owner = self.context.enclosing(call, cst.ClassDef)
        seen: set[int] = set()
        while owner is not None and id(owner) not in seen:
            seen.add(id(owner))
            found = next((s for s in owner.body.body if isinstance(s, cst.FunctionDef) and s.name.value == name), None)
            if found is not None:
                return found
            bases = [self.classes.get(dotted(b.value) or "") for b in owner.bases if b.keyword is None]
            owner = next((b for b in bases if b is not None), None)
        return None

    def _manual_unscale(self, small: cst.CSTNode) -> _Event | None:
        """``p.grad /= scaler.get_scale()``, ``p.grad.div_(scaler.get_scale())``: gradients unscaled by hand."""
        for call in self.context.nodes_within(small, cst.Call):
            func = call.func
            if not (
                isinstance(func, cst.Attribute) and func.attr.value == "get_scale" and self.amp.is_scaler(func.value)
            ):
                continue
            for ancestor in self.context.ancestors(call):
                if (
                    isinstance(ancestor, cst.AugAssign)
                    and isinstance(ancestor.operator, cst.DivideAssign)
                    and _is_grad(ancestor.target)
                ):
                    return _Event("manual-unscale", ancestor)
                if (
                    isinstance(ancestor, cst.Call)
                    and isinstance(ancestor.func, cst.Attribute)
                    and ancestor.func.attr.value == "div_"
                    and _is_grad(ancestor.func.value)
                ):
                    return _Event("manual-unscale", ancestor)
                if ancestor is small:
                    break
        return None

    def _uses_a_scaler(self, function: cst.FunctionDef) -> bool:
        key = id(function)
        if key not in self._uses_scaler:
            self._uses_scaler[key] = self._mentions_scaler(function, set())
        return self._uses_scaler[key]

    def _mentions_scaler(self, root: cst.CSTNode, seen: set[int]) -> bool:
        """Whether ``root`` (or a same-module function it calls) refers to a GradScaler."""
        if id(root) in seen:
            return False
        seen.add(id(root))
        for kind in (cst.Name, cst.Attribute):  # one type at a time: a union would be sorted
            if any(self.amp.is_scaler(node) for node in self.context.nodes_within(root, kind)):
                return True
        for call in self.context.nodes_within(root, cst.Call):
            if isinstance(call.func, cst.Name) and call.func.value in self.functions and len(seen) <= _MAX_INLINE_DEPTH:
                if self._mentions_scaler(self.functions[call.func.value], seen):
                    return True
        return False


def _branch_conditions(context: FileContext, test: cst.BaseExpression) -> tuple[list[Condition], list[Condition]]:
    """What the true and the false branch of ``if test`` may assume (``a and b``: both when true)."""
    if isinstance(test, cst.BooleanOperation):
        left_true, left_false = _branch_conditions(context, test.left)
        right_true, right_false = _branch_conditions(context, test.right)
        if isinstance(test.operator, cst.And):
            return left_true + right_true, []
        return [], left_false + right_false
    condition = condition_of(context, test) or _test_condition(context, test)
    if condition is None:
        return [], []
    return [condition], [Condition(condition.key, not condition.value)]


def _possible(path: _Path, arm: list[Condition], other: list[Condition]) -> bool:
    """Whether ``path`` can take the arm that assumes ``arm`` (all of them): none of them is known false, and
    ``other`` (what the other arm assumes, all of them) is not known true."""
    if any(path.assumes(c) is False for c in arm):
        return False
    return not (other and all(path.assumes(c) is True for c in other))


def _test_condition(context: FileContext, test: cst.BaseExpression) -> Condition | None:
    """Any other test that evaluates the same until a name it reads is bound again (``accumulation_steps > 1``),
    keyed by its text; None for a test with a call (``is_last_batch()``), which may change each time it runs."""
    value = True
    while isinstance(test, cst.UnaryOperation) and isinstance(test.operator, cst.Not):
        value, test = not value, test.expression
    if any(context.nodes_within(test, kind) for kind in _VOLATILE):
        return None
    return Condition(" ".join(context.module.code_for_node(test).split()), value)


def _ids(entries: frozenset[tuple[str, str, int]], scaler: str, optimizer: str) -> set[int]:
    """The events of ``entries`` (unscaled, stepped) for one (scaler, optimizer)."""
    return {at for s, o, at in entries if s == scaler and o == optimizer}


@functools.lru_cache(maxsize=4096)
def _chains(text: str) -> tuple[str, ...]:
    """The names and attribute chains a test's text reads (``args.accum > 1`` -> ``args.accum``)."""
    return tuple(_CHAIN.findall(text))


@functools.lru_cache(maxsize=65536)
def _reads(text: str, keys: frozenset[str]) -> bool:
    """Whether ``text`` reads a name of ``keys`` or an attribute chain one of them starts (``self.step``)."""
    if not keys:
        return False
    for chain in _chains(text):
        parts = chain.split(".")
        if any(".".join(parts[: i + 1]) in keys for i in range(len(parts))):
            return True
    return False


def _rebinds(optimizer: str, keys: frozenset[str]) -> bool:
    """Whether ``keys`` bind the optimizer ``optimizer`` names anew, or one of its attributes
    (``self.optimizer.param_groups = [group]``: the next step updates other parameters)."""
    return _reads(optimizer, keys) or any(k.startswith(f"{optimizer}.") for k in keys)


def _drop(pairs: frozenset[tuple], scaler: str) -> frozenset[tuple]:
    """``pairs`` without those of ``scaler`` (each scaler's state is its own: a GAN has one per model)."""
    return frozenset(p for p in pairs if p[0] != scaler)


def _merge(first: _Flow, second: _Flow) -> _Flow:
    return _Flow(
        _dedupe(first.normal + second.normal),
        first.returned + second.returned,
        first.broken + second.broken,
        first.continued + second.continued,
    )


def _dedupe(paths: list[_Path]) -> list[_Path]:
    return list(dict.fromkeys(paths))[:_MAX_PATHS]


def _assigned_names(context: FileContext, body: cst.CSTNode) -> set[str]:
    """What ``body`` binds: names, and attribute chains as written (``self.step``); a subscript target binds
    every name it is written with."""
    names = set()
    kinds = (cst.AssignTarget, cst.AugAssign, cst.AnnAssign, cst.For, cst.AsName, cst.NamedExpr)
    for node in (n for kind in kinds for n in context.nodes_within(body, kind)):  # one type at a time: no sort
        target = node.name if isinstance(node, cst.AsName) else node.target
        text = dotted(target)
        if text:
            names.add(text)
        else:
            names.update(n.value for n in context.nodes_within(target, cst.Name))
    return names


def _in_lambda(context: FileContext, call: cst.Call, stop: cst.CSTNode) -> bool:
    for ancestor in context.ancestors(call):
        if ancestor is stop:
            return False
        if isinstance(ancestor, (cst.Lambda, cst.FunctionDef)):
            return True
    return False


def _keyword_only(call: cst.Call) -> bool:
    return all(a.keyword is not None for a in call.args)


def _first_text(call: cst.Call) -> str:
    first = next((a.value for a in call.args if a.keyword is None or a.keyword.value == "optimizer"), None)
    return (dotted(first) or "?") if first is not None else ""


def _is_grad(node: cst.BaseExpression) -> bool:
    text = dotted(node) or ""
    return text.endswith(".grad") or text == "grad" or "grad" in text.rsplit(".", 1)[-1]
