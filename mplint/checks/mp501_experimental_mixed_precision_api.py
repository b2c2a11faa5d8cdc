"""MP501: the TF 2.1-2.3 ``mixed_precision.experimental`` API, removed in TF 2.9.

Findings are collected during the traversal and reported at the end of the
module, because the namespace rewrites (imports, ``.experimental`` chains)
depend on the loss-scale arguments: while one of those needs a decision by
hand (a fixed scale under Keras 3, a loss scale held in a variable), the
namespace stays experimental, so the file never runs with a silently changed
loss scale (``LossScaleOptimizer(opt, 128)`` means a fixed scale in G1 but an
initial dynamic scale in Keras 3).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import libcst as cst
from libcst.helpers import get_full_name_for_node

from mplint.analysis.call_args import keyword, keyword_arg
from mplint.analysis.keras_guards import NO_FIX, guarded_target, target_eras
from mplint.analysis.loss_scale_api import (
    POLICY,
    loss_scale_class,
    loss_scale_optimizer_call,
    positional,
    read_loss_scale,
    without_arg,
)
from mplint.diagnostics import Fix, FixSafety, ImportSpec, Severity
from mplint.engine import matchers as m
from mplint.engine.names import canonical, dotted
from mplint.engine.rule import Rule
from mplint.knowledge.api_versions import G1, K2, K2_EARLY, K3

# Experimental names and their non-experimental twins (present in Keras 2 and Keras 3).
_TWINS = {
    "Policy": "Policy",
    "set_policy": "set_global_policy",
    "global_policy": "global_policy",
    "LossScaleOptimizer": "LossScaleOptimizer",
}
_EXPERIMENTAL = "mixed_precision.experimental"
_TF_LOSS_SCALE_MODULES = {_EXPERIMENTAL, "train.experimental"}
_LOSS_SCALE_CLASSES = {"DynamicLossScale", "FixedLossScale", "LossScale"}
# Where a message says what becomes of the experimental API: filled in once the range of the finding is known
# (deprecated on TF 2.4-2.8, removed from TF 2.9), with the ImportError of an import where the range removes it.
_REMOVED = "\x00removed\x00"
_REMOVED_IMPORT = "\x00removed-import\x00"


@dataclass
class _Item:
    node: cst.CSTNode
    message: str
    replacements: dict | None = None
    imports: list = field(default_factory=list)
    namespace: bool = False  # a rewrite of names only; waits while loss-scale findings need a hand
    blocks: bool = True  # without a fix, holds back the namespace rewrites


class ExperimentalMixedPrecisionApi(Rule):
    id = "MP501"
    silent_in_uncalled_code = True
    silent_in_compatibility_branches = True
    triggers = (b"experimental", b"set_policy", b"loss_scale", b"LossScaleOptimizer")

    @classmethod
    def candidate(cls, code) -> bool:
        experimental_module = "experimental" in code.words and "mixed_precision" in code.words
        return (
            experimental_module
            or "set_policy" in code.words
            or code.mentions(*_LOSS_SCALE_CLASSES)
            or code.calls_any("Policy", "LossScaleOptimizer")
        )

    @classmethod
    def active_for(cls, facts) -> bool:
        return facts.generation.value != 1  # G1 projects use exactly this API

    def __init__(self, context):
        super().__init__(context)
        self.items: list[_Item] = []
        self.handled: set[int] = set()  # loss-scale objects already covered by their consumer's finding
        self.generation = gen = context.facts.generation
        self.gen = gen.value
        self.target = f"target {gen.label}, from {gen.source}"
        self.eras = target_eras(gen)
        # The rewrite writes the TF >= 2.4 API; on TF 2.1-2.3 the experimental one is the only one: a guess where
        # nothing says which part of the range runs.
        self.safety = FixSafety.SAFE
        if gen.low <= 1 and not gen.evidenced:
            self.safety = FixSafety.NONE
            self.target += f"; {NO_FIX}"
        elif gen.low <= 1:
            self.safety = FixSafety.UNSAFE
            self.target += (
                "; the fix holds on Keras 2 or Keras 3 only: set the target or pin TensorFlow to make it safe"
            )

    # --- imports ---------------------------------------------------------------------------

    def visit_Import(self, node: cst.Import) -> None:
        for alias in node.names:
            k = canonical(dotted(alias.name) or "")
            if k is None or k.path != _EXPERIMENTAL:
                continue
            if k.is_keras:
                self._keras_module_import(node, alias)
            elif k.ns == "tf":
                bound = alias.asname.name.value if alias.asname else None
                self._tf_import(node, [bound] if bound else [], dotted(alias.name))

    def _keras_module_import(self, node: cst.Import, alias: cst.ImportAlias) -> None:
        old = dotted(alias.name)
        new = old.rsplit(".", 1)[0]
        replacements = {alias: alias.with_changes(name=alias.name.value)}
        blocker = None
        if alias.asname is not None:
            blocker = self._rename_module_uses(node, alias.asname.name.value, replacements)
        message = f"`import {old}` is the TF 2.1-2.3 experimental API, {_REMOVED_IMPORT}: import `{new}`"
        self._namespace(node, message + _rename_note(replacements), None if blocker else replacements, blocker)

    def visit_ImportFrom(self, node: cst.ImportFrom) -> None:
        if node.relative or node.module is None:
            return
        module = get_full_name_for_node(node.module) or ""
        k = canonical(module)
        if k is None:
            return
        star = isinstance(node.names, cst.ImportStar)
        if k.is_keras and k.path == "mixed_precision" and not star:
            if any(a.name.value == "experimental" for a in node.names):
                self._from_mixed_precision_import_experimental(node, module)
        elif k.is_keras and k.path == _EXPERIMENTAL:
            self._from_experimental_import(node, module, star)
        elif k.ns == "tf" and k.path in _TF_LOSS_SCALE_MODULES and not star:
            names = [a.name.value for a in node.names]
            if k.path == _EXPERIMENTAL or set(names) <= _LOSS_SCALE_CLASSES:
                self._tf_import(
                    node, [a.asname.name.value if a.asname else a.name.value for a in node.names], f"{module}"
                )

    def _from_mixed_precision_import_experimental(self, node: cst.ImportFrom, module: str) -> None:
        """``from tensorflow.keras.mixed_precision import experimental as mixed_precision``."""
        alias = next(a for a in node.names if a.name.value == "experimental")
        bound = alias.asname.name.value if alias.asname else "experimental"
        parent_module = module.rsplit(".", 1)[0]
        asname = None if bound == "mixed_precision" else cst.AsName(name=cst.Name(bound))
        new = f"from {parent_module} import mixed_precision" + (f" as {bound}" if asname else "")
        replacements = {
            node: node.with_changes(
                module=node.module.value, names=[cst.ImportAlias(cst.Name("mixed_precision"), asname=asname)]
            )
        }
        blocker = None
        if len(node.names) != 1:
            blocker = "it imports other names in the same statement"
        else:
            blocker = self._rename_module_uses(node, bound, replacements)
        message = (
            f"`from {module} import experimental` is the TF 2.1-2.3 experimental API, {_REMOVED_IMPORT}: write `{new}`"
        )
        self._namespace(node, message + _rename_note(replacements), None if blocker else replacements, blocker)

    def _from_experimental_import(self, node: cst.ImportFrom, module: str, star: bool) -> None:
        """``from tensorflow.keras.mixed_precision.experimental import Policy, set_policy``."""
        new_module = module.rsplit(".", 1)[0]
        message = f"`{module}` is the TF 2.1-2.3 experimental API, {_REMOVED_IMPORT}: import from `{new_module}`"
        if star:
            self._namespace(node, message, None, "a star import hides which names are used")
            return
        replacements: dict = {}
        aliases, blocker = [], None
        for alias in node.names:
            name = alias.name.value
            twin = _TWINS.get(name)
            if twin is None:
                blocker = f"`{name}` has no non-experimental twin"
                break
            aliases.append(alias.with_changes(name=cst.Name(twin)))
            if twin != name and alias.asname is None:
                for ref in self._references(node, name):
                    replacements[ref] = cst.Name(twin)
        if blocker is None:
            replacements[node] = node.with_changes(module=node.module.value, names=aliases)
        renamed = [a.name.value for a in node.names if _TWINS.get(a.name.value, a.name.value) != a.name.value]
        note = "".join(f"; `{n}` becomes `{_TWINS[n]}`" for n in renamed)
        self._namespace(node, message + note, None if blocker else replacements, blocker)

    def _tf_import(self, node, bound: list[str], module: str) -> None:
        """TensorFlow's G1 loss-scale module: removed once nothing uses it (the fixes below drop the uses)."""
        used = [name for name in bound if self._references(node, name)]
        message = f"`{module}` (G1 loss-scale classes) is gone from current TensorFlow"
        if used or not bound or len(getattr(node, "names", ())) != len(bound):
            message += f": replace the uses of {', '.join(f'`{n}`' for n in used) or 'it'} and remove the import"
            self.items.append(_Item(node, message, blocks=False))
        else:
            self.items.append(
                _Item(node, f"{message}; the import is unused: remove it", {node: cst.RemovalSentinel.REMOVE})
            )

    def _rename_module_uses(self, stmt, bound: str, replacements: dict) -> str | None:
        """Renames ``bound.set_policy`` uses into ``replacements``; a reason when a use has no twin."""
        for ref in self._references(stmt, bound):
            parent = self.context.parent(ref)
            if not (isinstance(parent, cst.Attribute) and parent.value is ref):
                continue
            name = parent.attr.value
            if name not in _TWINS:
                return f"`{bound}.{name}` has no non-experimental twin"
            if _TWINS[name] != name:
                replacements[parent.attr] = cst.Name(_TWINS[name])
        return None

    def _references(self, stmt: cst.CSTNode, bound: str) -> list[cst.CSTNode]:
        scope = self.context.names.scopes.get(stmt)
        if scope is None:
            return []
        return [ref.node for a in scope.assignments[bound] if getattr(a, "node", None) is stmt for ref in a.references]

    # --- code ------------------------------------------------------------------------------

    def visit_Attribute(self, node: cst.Attribute) -> None:
        attr = node.attr.value
        if attr not in ("experimental", "set_policy") or self._in_import(node):
            return
        if attr == "set_policy":
            if self.context.names.matches(node, ["mixed_precision.set_policy"]):
                self.items.append(
                    _Item(
                        node,
                        "`set_policy` does not exist outside the G1 experimental API: use `set_global_policy`",
                        {node.attr: cst.Name("set_global_policy")},
                    )
                )
            return
        if not self.context.names.matches(node, [_EXPERIMENTAL]):
            return
        parent = self.context.parent(node)
        head = dotted(node.value) or "mixed_precision"
        if isinstance(parent, cst.Attribute) and parent.value is node:
            name = parent.attr.value
            twin = _TWINS.get(name)
            message = f"`{head}.experimental.{name}` is the TF 2.1-2.3 experimental API, {_REMOVED}"
            if twin is None:
                self._namespace(parent, message, None, f"`{name}` has no non-experimental twin")
                return
            fix = {parent: parent.with_changes(value=node.value, attr=cst.Name(twin))}
            self._namespace(parent, f"{message}: use `{head}.{twin}`", fix)
        else:
            self._namespace(
                node,
                f"`{head}.experimental` is the TF 2.1-2.3 experimental API, {_REMOVED}: use `{head}`",
                {node: node.value},
            )

    def _in_import(self, node: cst.CSTNode) -> bool:
        return any(isinstance(a, (cst.Import, cst.ImportFrom)) for a in self.context.ancestors(node))

    def visit_Call(self, node: cst.Call) -> None:
        if self.context.names.callee(node, POLICY):
            self._policy(node)
        elif loss_scale_optimizer_call(self.context, node):
            self._loss_scale_optimizer(node)
        elif id(node) not in self.handled and loss_scale_class(self.context, node):
            name = loss_scale_class(self.context, node)
            if self._feeds_graph_rewrite(node):
                message = (
                    f"`{name}` is a G1 loss-scale object, deprecated from TF 2.4 under this name: the graph rewrite "
                    f"it feeds takes no Keras `LossScaleOptimizer`; use the name TF keeps for it, "
                    f"`tf.compat.v1.mixed_precision.{name.rpartition('.')[2]}`"
                )
            else:
                message = (
                    f"`{name}` is a G1 loss-scale object, gone from current TensorFlow: pass its settings to "
                    f"`LossScaleOptimizer(opt, initial_scale=..., dynamic_growth_steps=...)`"
                )
            self.items.append(_Item(node, message))

    def _feeds_graph_rewrite(self, node: cst.Call) -> bool:
        """The loss-scale object is an argument of ``enable_mixed_precision_graph_rewrite`` in the same scope,
        itself or through the name it is bound to (``scaler = DynamicLossScale(...)``, ``rewrite(opt, scaler)``)."""
        parent = self.context.parent(node)
        bound = (
            dotted(parent.targets[0].target) if isinstance(parent, cst.Assign) and len(parent.targets) == 1 else None
        )
        scope = self.context.enclosing(node, cst.FunctionDef) or self.context.module
        return any(
            (dotted(call.func) or "").endswith("enable_mixed_precision_graph_rewrite")
            and any(a.value is node or bound is not None and dotted(a.value) == bound for a in call.args)
            for call in self.context.nodes_within(scope, cst.Call)
        )

    def _policy(self, call: cst.Call) -> None:
        arg = keyword(call, "loss_scale") or positional(call, 1)
        if arg is None:
            return
        self.handled.add(id(arg.value))
        value = read_loss_scale(self.context, arg.value)
        if self.context.names.callee(call, ["mixed_precision.experimental.Policy"]):
            head = (
                "`loss_scale=` of the experimental `Policy` is G1 API, with no counterpart in the `Policy` of Keras 2 and 3 "
                "(TypeError there)"
            )
        else:
            head = "`Policy(..., loss_scale=...)` is G1 API (TypeError in Keras 2 and 3)"
        if value.kind == "dynamic":
            self.items.append(
                _Item(
                    arg,
                    f"{head}: drop it; compile() adds dynamic loss scaling itself under mixed_float16",
                    {call: without_arg(call, arg)},
                )
            )
            return
        if value.kind == "unknown":
            self.items.append(_Item(arg, f"{head}: move the loss scale to a `LossScaleOptimizer` around the optimizer"))
            return
        if value.kind == "fixed" and self.gen == 3:
            self.items.append(
                _Item(
                    arg,
                    f"{head}, and Keras 3 has no fixed-scale LossScaleOptimizer: drop `loss_scale`, pass "
                    f"`loss_scale_factor={_code(value.value)}` to the optimizer and `auto_scale_loss=False` to "
                    f"compile()",
                )
            )
            return
        settings = self._lso_settings(value)
        where = self._compile_optimizer()
        if isinstance(where, str):
            self.items.append(
                _Item(
                    arg,
                    f"{head}: wrap the optimizer as `LossScaleOptimizer(opt, {_kwargs(settings)})`; "
                    f"no automatic fix because {where}",
                )
            )
            return
        lso, imports = self._lso_reference(call.func)
        wrapped = cst.Call(
            func=lso,
            args=[cst.Arg(where.value, comma=cst.Comma(whitespace_after=cst.SimpleWhitespace(" ")))]
            + _kw_args(settings),
        )
        self.items.append(
            _Item(
                arg,
                f"{head}: the loss scale moves to `LossScaleOptimizer(opt, {_kwargs(settings)})` around "
                f"the compile() optimizer",
                {call: without_arg(call, arg), where.value: wrapped},
                imports,
            )
        )

    def _lso_settings(self, value) -> list:
        if value.kind == "fixed":
            return [("dynamic", cst.Name("False")), ("initial_scale", value.value)]
        return value.settings

    def _compile_optimizer(self) -> cst.Arg | str:
        """The optimizer argument of the file's single compile() call, or why there is none to wrap."""
        found = []
        compile_calls = m.Call(func=m.Attribute(attr=m.Name("compile")))
        for call in self.context.findall(self.context.module, compile_calls, (cst.Call,)):
            arg = keyword(call, "optimizer") or positional(call, 0)
            if arg is not None and not m.matches(call.func, m.Attribute(value=m.Name("re"))):
                found.append(arg)
        if len(found) != 1:
            return (
                "this file has no compile() call with an optimizer"
                if not found
                else "this file has several compile() calls"
            )
        arg = found[0]
        if isinstance(arg.value, (cst.SimpleString, cst.ConcatenatedString, cst.FormattedString)):
            return "compile() gets the optimizer by name; construct it to wrap it"
        if loss_scale_optimizer_call(self.context, arg.value):
            return "compile() already gets a LossScaleOptimizer"
        return arg

    def _lso_reference(self, policy_func: cst.BaseExpression):
        """``LossScaleOptimizer`` spelled in the namespace the Policy came from."""
        if isinstance(policy_func, cst.Attribute):
            base = policy_func.value
            if isinstance(base, cst.Attribute) and base.attr.value == "experimental":
                base = base.value
            return cst.Attribute(value=base, attr=cst.Name("LossScaleOptimizer")), []
        qualified = sorted(q for q in self.context.names.qualified(policy_func) if q.endswith(".Policy"))
        module = qualified[0].rsplit(".", 1)[0] if qualified else "tensorflow.keras.mixed_precision"
        if module.endswith(".experimental"):
            module = module.rsplit(".", 1)[0]
        return cst.Name("LossScaleOptimizer"), [ImportSpec(module, "LossScaleOptimizer")]

    def _loss_scale_optimizer(self, call: cst.Call) -> None:
        kname = loss_scale_optimizer_call(self.context, call)
        experimental = kname.path.startswith(_EXPERIMENTAL)
        arg = keyword(call, "loss_scale")
        if arg is None:
            arg = positional(call, 1)
            if arg is None or not (experimental or self._g1_positional(arg.value)):
                return
        self.handled.add(id(arg.value))
        value = read_loss_scale(self.context, arg.value)
        head = f"`LossScaleOptimizer(opt, {_short(arg.value)})` is the G1 signature"
        if value.kind == "dynamic":
            self.items.append(
                _Item(arg, f"{head}: `LossScaleOptimizer(opt)` is dynamic by default", {call: without_arg(call, arg)})
            )
        elif value.kind == "unknown":
            self.items.append(
                _Item(
                    arg,
                    f"{head}: pass `initial_scale=`/`dynamic_growth_steps=` (and `dynamic=False` for a fixed scale "
                    f"in Keras 2) instead of a loss-scale object",
                )
            )
        elif value.kind == "fixed" and self.gen == 3:
            self.items.append(
                _Item(
                    arg,
                    f"{head} with a fixed scale; Keras 3's LossScaleOptimizer is always dynamic: drop the "
                    f"wrapper, construct the inner optimizer with `loss_scale_factor={_code(value.value)}` (and "
                    f"`auto_scale_loss=False` in compile())",
                )
            )
        else:
            settings = self._lso_settings(value)
            self.items.append(
                _Item(
                    arg,
                    f"{head}: write `LossScaleOptimizer(opt, {_kwargs(settings)})`",
                    {call: without_arg(call, arg, _kw_args(settings))},
                )
            )

    def _g1_positional(self, value: cst.BaseExpression) -> bool:
        """A non-experimental second argument that can only be a G1 loss scale."""
        if isinstance(value, cst.SimpleString) or loss_scale_class(self.context, value):
            return True
        # A number is Keras 3's initial_scale, but a TypeError (dynamic=<number>) in Keras 2.
        kind = read_loss_scale(self.context, value).kind
        return kind == "fixed" and self.gen == 2

    # --- reporting -------------------------------------------------------------------------

    def _namespace(self, node, message, replacements, blocker: str | None = None) -> None:
        if blocker:
            message += f"; no automatic fix: {blocker}"
        self.items.append(_Item(node, message, replacements, namespace=True))

    def leave_Module(self, original_node: cst.Module) -> None:
        # a guarded arm is silent where it never runs past TF 2.8 (an arm written for the experimental API)
        judged = [
            (item, guarded_target(self.context, item.node, self.generation, frozenset({K2, K3}))) for item in self.items
        ]
        judged = [(item, guard) for item, guard in judged if guard is not False and not self._dead(item, guard)]
        waiting = any(item.replacements is None and item.blocks and not item.namespace for item, _ in judged)
        for item, guard in judged:
            fix = item.replacements
            message = item.message
            target, safety, eras = self._target(guard)
            if item.namespace and waiting and fix is not None and safety is not FixSafety.NONE:
                fix = None
                message += "; fixed once the loss-scale findings in this file are settled by hand"
            removed = bool(eras & {K2, K3})
            fate = _fate(eras)
            message = message.replace(_REMOVED_IMPORT, f"{fate} (ImportError there)" if removed else fate)
            message = message.replace(_REMOVED, fate)
            self.report(
                item.node,
                f"{message} ({target})",
                Fix(fix, safety, imports=item.imports) if fix else None,
                None if removed else Severity.WARNING,  # only deprecated where the code runs
            )
            self.findings[-1].guards_read = guard is not None

    def _dead(self, item: _Item, guard) -> bool:
        """An import nothing reads, where the range only deprecates the module (TF 2.4-2.8): it neither raises
        nor warns there (from TF 2.9 it raises ImportError, used or not, and is reported)."""
        node = item.node
        deprecated_only = K2_EARLY in self.eras and not self.eras & {K2, K3}
        if guard is not None or not deprecated_only or not isinstance(node, (cst.Import, cst.ImportFrom)):
            return False
        if isinstance(node.names, cst.ImportStar):
            return False
        for alias in node.names:
            bound = alias.asname.name if alias.asname is not None else alias.name
            while isinstance(bound, cst.Attribute):
                bound = bound.value
            if not isinstance(bound, cst.Name) or self._references(node, bound.value):
                return False
        return True

    def _target(self, guard) -> tuple[str, FixSafety, frozenset[str]]:
        """The target a finding is for, its fix's safety, and the eras it runs in: the program's, or inside a
        version guard the arm's own (the fix writes the TF >= 2.4 names)."""
        if guard is None:
            return self.target, self.safety, self.eras
        if G1 in guard.eras:
            return f"{guard.label}; the fix holds on Keras 2 or Keras 3 only", FixSafety.UNSAFE, guard.eras
        return guard.label, FixSafety.SAFE, guard.eras


def _fate(eras: frozenset[str]) -> str:
    """What the versions of a range do with the experimental API: TF 2.4-2.8 ship it deprecated, 2.9 removed it."""
    removed = bool(eras & {K2, K3})
    if K2_EARLY in eras:
        return (
            "deprecated on TF 2.4-2.8 and removed in TF 2.9"
            if removed
            else "deprecated on TF 2.4-2.8 (removed in TF 2.9)"
        )
    return "removed in TF 2.9"


def _rename_note(replacements: dict) -> str:
    renamed = {n.value for n in replacements.values() if isinstance(n, cst.Name)}
    return "".join(f"; `{old}` becomes `{new}`" for old, new in _TWINS.items() if new in renamed and old != new)


def _code(node: cst.CSTNode) -> str:
    return cst.Module([]).code_for_node(node)


def _short(node: cst.BaseExpression) -> str:
    text = _code(node)
    return f"{_code(node.func)}(...)" if len(text) > 40 and isinstance(node, cst.Call) else text


def _kwargs(settings) -> str:
    return ", ".join(f"{k}={_code(v)}" for k, v in settings)


def _kw_args(settings) -> list[cst.Arg]:
    return [keyword_arg(k, v) for k, v in settings]
