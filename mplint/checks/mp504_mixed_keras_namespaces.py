"""MP504: the policy is set through one Keras and the layers come from another, which never sees it."""

from __future__ import annotations

import libcst as cst
import libcst.helpers

from mplint.analysis.layer_sizes import calls
from mplint.analysis.policy_calls import REDUCED_POLICIES, policy_setter, policy_values, sets_policy
from mplint.engine.context import FileContext
from mplint.engine.names import KERAS_NAMESPACES, canonical
from mplint.engine.rule import Rule

_LABELS = {"keras": "`keras`", "tf.keras": "`tf.keras`", "tf_keras": "`tf_keras`"}
_NOT_MODEL_LAYERS = frozenset({"Input", "InputLayer", "InputSpec"})


def keras_library(context: FileContext, ns: str) -> str:
    """Which installed Keras a namespace means for this project: "keras2" or "keras3"."""
    generation = context.facts.generation
    if ns == "tf_keras":
        return "keras2"
    if ns == "tf.keras":
        return "keras3" if generation.value == 3 else "keras2"
    # The `keras` package is Keras 2 only where the pins hold TensorFlow < 2.16 or keras < 3 themselves.
    pinned_old = generation.value < 3 and generation.origin in ("pin-tensorflow", "pin-keras")
    legacy_here = "tf_keras" in context.facts.keras_namespaces
    return "keras2" if pinned_old and not legacy_here else "keras3"


def _layer_namespace(context: FileContext, call: cst.Call) -> str | None:
    k = context.names.kname(call.func)
    if k is None or not k.is_keras:
        return None
    if k.path in ("Sequential", "Model") or (
        k.path.startswith(("layers.", "applications.")) and k.last[:1].isupper() and k.last not in _NOT_MODEL_LAYERS
    ):
        return k.ns
    return None


def _namespaces_read(context: FileContext) -> set[str]:
    """Keras namespaces this file imports or calls into."""
    found = set()
    for node in calls(context):
        k = context.names.kname(node.func)
        if k is not None and k.is_keras:
            found.add(k.ns)
    for statement in context.nodes(cst.Import, cst.ImportFrom):
        modules = (
            [cst.helpers.get_full_name_for_node(a.name) for a in statement.names]
            if isinstance(statement, cst.Import)
            else []
        )
        if isinstance(statement, cst.ImportFrom) and statement.module is not None and not statement.relative:
            module = cst.helpers.get_full_name_for_node(statement.module)
            names = statement.names if isinstance(statement.names, (list, tuple)) else ()
            modules += [module] + [f"{module}.{a.name.value}" for a in names if isinstance(a.name, cst.Name)]
        for module in modules:
            k = canonical(module or "")
            if k is not None and k.is_keras:
                found.add(k.ns)
    return found


class MixedKerasNamespaces(Rule):
    id = "MP504"
    triggers = (b"olicy",)

    @classmethod
    def candidate(cls, code) -> bool:
        return sets_policy(code, REDUCED_POLICIES)

    @classmethod
    def active_for(cls, facts) -> bool:
        return len(facts.keras_namespaces) > 1 and facts.reduced_precision

    def visit_Module(self, node: cst.Module) -> None:
        for call in calls(self.context):
            if policy_setter(self.context, call) and policy_values(self.context, call.args[0].value) & REDUCED_POLICIES:
                self._check(call)

    def _check(self, setter: cst.Call) -> None:
        ns = self.context.names.kname(setter.func).ns
        mine = keras_library(self.context, ns)
        for call in calls(self.context):
            other = _layer_namespace(self.context, call)
            if other is not None and keras_library(self.context, other) != mine:
                line = self.context.position(call).start.line
                self.report(setter, self._message(ns, other, f"line {line} builds layers from {_LABELS[other]}"))
                return
        used_here = _namespaces_read(self.context) | {ns}
        elsewhere = [
            other
            for other in sorted(self.context.facts.keras_namespaces & KERAS_NAMESPACES - used_here)
            if keras_library(self.context, other) != mine
        ]
        if elsewhere:
            self.report(
                setter, self._message(ns, elsewhere[0], f"other files of the project import {_LABELS[elsewhere[0]]}")
            )

    def _message(self, ns: str, other: str, where: str) -> str:
        names = {"keras2": "Keras 2", "keras3": "Keras 3"}
        return (
            f"the policy is set through {_LABELS[ns]} ({names[keras_library(self.context, ns)]}) but {where} "
            f"({names[keras_library(self.context, other)]}): each Keras keeps its own global policy, so those "
            f"layers run in float32; set the policy and build the model with the same Keras"
        )
