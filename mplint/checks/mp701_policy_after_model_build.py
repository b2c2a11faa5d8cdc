"""MP701: a global policy set after layers or models already exist (they keep the old policy)."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

import libcst as cst

from mplint.analysis.policy_calls import REDUCED_POLICIES, policy_setter, policy_values, sets_policy
from mplint.diagnostics import Fix, FixSafety
from mplint.engine.context import FileContext
from mplint.engine.names import last_name
from mplint.engine.rule import Rule

# Layers that hold no float weights or are adapted outside the model; their policy does not matter.
_NOT_MODEL_LAYERS = frozenset(
    {
        "Input",
        "InputLayer",
        "InputSpec",
        "TextVectorization",
        "StringLookup",
        "IntegerLookup",
        "Normalization",
        "Discretization",
        "Hashing",
        "CategoryEncoding",
    }
)
# Calls on a model that run its layers or keep them.
_MODEL_USES = frozenset(
    {
        "compile",
        "fit",
        "fit_generator",
        "train_on_batch",
        "evaluate",
        "evaluate_generator",
        "test_on_batch",
        "predict",
        "predict_generator",
        "predict_on_batch",
        "predict_step",
        "train_step",
        "test_step",
        "call",
        "__call__",
        "save",
        "save_weights",
        "export",
    }
)
_KERAS_LOADERS = frozenset({"load_model", "model_from_json", "model_from_config", "clone_model"})
_BUILDER = re.compile(
    r"^(build|create|make|get|load|construct|init)_?\w*?(model|net|network|encoder|decoder|classifier|backbone)s?$",
    re.IGNORECASE,
)
# Told by exact type (libcst's node classes have no subclasses; isinstance on them goes through ABCMeta).
_SCOPES = frozenset({cst.Module, cst.FunctionDef, cst.ClassDef, cst.Lambda})


@dataclass
class _Scope:
    """The calls one function (or the module) runs, in source order, without nested definitions."""

    node: cst.CSTNode
    calls: list[cst.Call] = field(default_factory=list)


def _scope_calls(context: FileContext) -> tuple[list[_Scope], dict[str, cst.FunctionDef], dict[str, cst.ClassDef]]:
    """Each scope's calls (module first, then functions, classes and lambdas in source order), and the first
    function and class of each name: one pass over the file's nodes in source order."""
    scopes: list[_Scope] = []
    functions: dict[str, cst.FunctionDef] = {}
    classes: dict[str, cst.ClassDef] = {}
    open_scopes: list[tuple[_Scope, int]] = []  # innermost last, each with the source order its last node has
    for number, node in enumerate(context.preorder()):
        while open_scopes and number > open_scopes[-1][1]:
            open_scopes.pop()
        kind = type(node)
        if kind in _SCOPES:
            scope = _Scope(node)
            scopes.append(scope)
            open_scopes.append((scope, context.end_order(node)))
            if kind is cst.FunctionDef:
                functions.setdefault(node.name.value, node)
            elif kind is cst.ClassDef:
                classes.setdefault(node.name.value, node)
        elif kind is cst.Call:
            open_scopes[-1][0].calls.append(node)
    return scopes, functions, classes


class Constructions:
    """Which calls of a file create layers or models (memoised per file)."""

    def __init__(self, context: FileContext):
        self.context = context
        self.scopes, self.functions, self.classes = _scope_calls(context)
        self._by_node = {id(s.node): s for s in self.scopes}
        self._builds: dict[str, bool] = {}

    def describe(self, call: cst.Call) -> str | None:
        """What the call creates (for messages), or None when it creates no layer."""
        names = self.context.names
        func = call.func
        k = names.kname(func)
        if k is not None and k.is_keras:
            if k.path in ("Sequential", "Model") or (
                k.path.startswith(("layers.", "applications."))
                and k.last[:1].isupper()
                and k.last not in _NOT_MODEL_LAYERS
            ):
                return f"`{k.path}(...)`"
        if k is not None and k.is_keras and k.last in _KERAS_LOADERS or self._hub_loader(func):
            return f"`{k.last if k is not None and k.is_keras else 'from_pretrained'}(...)`"
        local = self._local_name(func)
        if local is not None and (self._local_builder(local) or self._local_layer_class(local, frozenset())):
            return f"`{local}(...)`"
        # A builder of another module or object, known only by its name (``build_model``, ``self.create_encoder``).
        written = last_name(func)
        if written is not None and local is None and _BUILDER.match(written):
            return f"`{written}(...)`"
        return None

    def _local_name(self, func: cst.BaseExpression) -> str | None:
        """The name of a function or class this file defines that ``func`` calls (a plain name no import binds)."""
        if not isinstance(func, cst.Name) or func.value in self.context.names.bindings.imports:
            return None
        return func.value if func.value in self.functions or func.value in self.classes else None

    def _hub_loader(self, func: cst.BaseExpression) -> bool:
        """``TFAutoModel.from_pretrained``: a class of Hugging Face transformers that loads a model."""
        return any(
            path.startswith("transformers.") and path.endswith(".from_pretrained")
            for path in self.context.names.project_paths(func)
        )

    def _local_builder(self, name: str) -> bool:
        function = self.functions.get(name)
        if function is None:
            return False
        if name not in self._builds:
            self._builds[name] = False  # recursion guard
            body = self._by_node[id(function)]
            self._builds[name] = any(self.describe(c) for c in body.calls)
        return self._builds[name]

    def _local_layer_class(self, name: str, seen: frozenset) -> bool:
        cls = self.classes.get(name)
        if cls is None or name in seen:
            return False
        for base in cls.bases:
            if self.context.names.matches(base.value, ["Model", "layers.Layer", "Layer"]):
                return True
            if isinstance(base.value, cst.Name) and self._local_layer_class(base.value.value, seen | {name}):
                return True
        return False


def constructions(context: FileContext) -> Constructions:
    return context.analysis(Constructions)


def _bound_name(context: FileContext, call: cst.Call) -> str | None:
    for ancestor in context.ancestors(call):
        if isinstance(ancestor, cst.Assign):
            targets = ancestor.targets
            return targets[0].target.value if len(targets) == 1 and isinstance(targets[0].target, cst.Name) else None
        if isinstance(ancestor, (cst.BaseSmallStatement, cst.BaseCompoundStatement)):
            return None
    return None


class PolicyAfterModelBuild(Rule):
    id = "MP701"
    program_choice = True
    triggers = (b"olicy",)

    @classmethod
    def candidate(cls, code) -> bool:
        return sets_policy(code, REDUCED_POLICIES)

    def visit_Module(self, node: cst.Module) -> None:
        built = constructions(self.context)
        setters = [
            [
                call
                for call in scope.calls
                if policy_setter(self.context, call)
                and policy_values(self.context, call.args[0].value) & REDUCED_POLICIES
            ]
            for scope in built.scopes
        ]
        last = max((i for i, found in enumerate(setters) if found), default=-1)
        # What calls create is asked in source order up to the last scope that sets a policy (``describe``
        # memoises local builders as it meets them); scopes after it are not asked at all.
        for scope, found in zip(built.scopes[: last + 1], setters):
            made = [(c, what) for c in scope.calls if (what := built.describe(c))]
            for call in found:
                self._check(call, made, scope.node)

    def _check(self, setter: cst.Call, made: list[tuple[cst.Call, str]], scope: cst.CSTNode) -> None:
        start = self._start(setter)
        before = [(c, what) for c, what in made if self._start(c) < start]
        after = {_bound_name(self.context, c) for c, _ in made if self._start(c) > start}
        stale = [(c, what) for c, what in before if _bound_name(self.context, c) not in after - {None}]
        # Only a model the program goes on to use keeps float32 where it meant mixed precision: one built and
        # trained before the setter (a float32 run, then a one-line demo of the setter) is what it was meant to be.
        used = self._used_after(scope, start)
        stale = [(c, what) for c, what in stale if _bound_name(self.context, c) in used]
        if not stale:
            return  # nothing built, or every early model is rebuilt under the new policy (a float32 baseline)
        first, what = stale[0]
        line = self.context.position(first).start.line
        self.report(
            setter,
            f"the policy is set after {what} at line {line} created layers: layers that already exist keep their "
            "float32 policy, so that model silently trains without mixed precision; set the policy before "
            "building or loading any model",
            self._move_fix(setter, before[0][0]),
        )

    def _start(self, node: cst.CSTNode) -> int:
        return self.context.source_order(node)

    def _used_after(self, scope: cst.CSTNode, start: int) -> set[str]:
        """Names the scope uses after ``start`` as a model: trained, evaluated, saved or called, handed to a call,
        returned or yielded."""
        used: set[str] = set()
        for name in self.context.nodes_within(scope, cst.Name):
            if self._start(name) <= start or name.value in used:
                continue
            parent = self.context.parent(name)
            if isinstance(parent, cst.Attribute) and parent.value is name:
                holder = self.context.parent(parent)
                if isinstance(holder, cst.Call) and holder.func is parent and parent.attr.value in _MODEL_USES:
                    used.add(name.value)
                continue
            if isinstance(parent, cst.Call) and parent.func is name:
                used.add(name.value)
                continue
            for ancestor in self.context.ancestors(name):
                if isinstance(ancestor, (cst.Arg, cst.Return, cst.Yield)):
                    used.add(name.value)
                if isinstance(
                    ancestor, (cst.Arg, cst.Return, cst.Yield, cst.BaseSmallStatement, cst.BaseCompoundStatement)
                ):
                    break
        return used

    def _move_fix(self, setter: cst.Call, first: cst.Call) -> Fix | None:
        """Move the setter's statement before the statement of the first construction, in the same block."""
        expr = self.context.parent(setter)
        line = self.context.parent(expr) if isinstance(expr, cst.Expr) else None
        if not isinstance(line, cst.SimpleStatementLine) or len(line.body) != 1:
            return None
        block = self.context.parent(line)
        target = first
        while target is not None and self.context.parent(target) is not block:
            target = self.context.parent(target)
        if target is None or not self._names_bound_before(setter, target):
            return None
        return Fix(
            {target: cst.FlattenSentinel([line, target]), line: cst.RemovalSentinel.REMOVE}, safety=FixSafety.UNSAFE
        )

    def _names_bound_before(self, setter: cst.Call, target: cst.CSTNode) -> bool:
        """Every name the setter reads is bound before ``target`` (the import may come late in the file)."""
        limit = self._start(target)
        scopes = self.context.names.scopes
        for name in _names(setter):
            scope = scopes.get(name)
            if scope is None:
                return False
            for assignment in scope[name.value]:
                node = getattr(assignment, "node", None)
                if isinstance(node, cst.CSTNode) and self._start(node) >= limit:
                    return False
        return True


def _names(node: cst.CSTNode):
    if isinstance(node, cst.Name):
        yield node
    if isinstance(node, cst.Attribute):
        yield from _names(node.value)  # `mp.set_global_policy`: only the head is looked up
        return
    if isinstance(node, cst.Arg):
        yield from _names(node.value)  # not the keyword's own name
        return
    for child in node.children:
        yield from _names(child)
