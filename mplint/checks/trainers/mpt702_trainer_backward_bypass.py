"""MPT702: ``loss.backward()`` where Accelerate's float16 needs ``accelerator.backward(loss)``."""

from __future__ import annotations

import libcst as cst

from mplint.analysis.torch_amp import TorchAmp
from mplint.checks.trainers.config import Configuration, TrainerConfig
from mplint.diagnostics import Fix, FixSafety
from mplint.engine.names import dotted
from mplint.engine.rule import Rule


class TrainerBackwardBypass(Rule):
    id = "MPT702"
    triggers = (b"backward",)
    requires = (b"accelerate",)

    @classmethod
    def candidate(cls, code) -> bool:
        return "Accelerator" in code.calls and {"prepare", "backward", "step"} <= code.calls

    def visit_Module(self, node: cst.Module) -> None:
        target = self.context.facts.trainer_target("accelerate")
        for config in TrainerConfig.of(self.context).of_stack("accelerate"):
            name = self._bound_name(config.call)
            if name is None or not _float16(config):
                continue
            prepared = self._prepared(name)
            for scope in self._scopes_stepping(prepared):
                calls = list(self.context.nodes_within(scope, cst.Call))
                if any(dotted(c.func) == f"{name}.backward" for c in calls):
                    continue  # the trainer's backward is called here too: which one runs depends on the path
                for call in calls:
                    func = call.func
                    if not (isinstance(func, cst.Attribute) and func.attr.value == "backward") or call.args:
                        continue
                    loss = dotted(func.value)
                    if loss is None or loss == name or self._enclosing_scope(call) is not scope:
                        continue
                    self.report(
                        call,
                        f"`{loss}.backward()` bypasses `{name}.backward({loss})`: under "
                        f'`{self.context.module.code_for_node(config.call.func)}(mixed_precision="fp16")` that is '
                        "what scales the loss, and the prepared optimizer's `step()` runs the GradScaler's, which "
                        "unscales gradients never scaled (torch's GradScaler asserts 'Attempted step but _scale is "
                        f"None' on the first step) (target {target.described})",
                        Fix(
                            {
                                call: cst.Call(
                                    cst.Attribute(cst.Name(name), cst.Name("backward")), [cst.Arg(func.value)]
                                )
                            },
                            FixSafety.UNSAFE,
                        ),
                    )

    def _bound_name(self, call: cst.Call) -> str | None:
        parent = self.context.parent(call)
        if isinstance(parent, cst.Assign) and len(parent.targets) == 1:
            return dotted(parent.targets[0].target)
        return None

    def _prepared(self, name: str) -> set[str]:
        """The names ``model, optimizer = name.prepare(model, optimizer)`` binds to a torch optimizer: an argument
        that is one's construction, or a name the file binds only to constructions."""
        amp = self.context.analysis(TorchAmp.of)
        optimizers = self._optimizer_names(amp)
        found: set[str] = set()
        for call in self.context.nodes(cst.Call):
            if dotted(call.func) != f"{name}.prepare" or any(a.keyword or a.star for a in call.args):
                continue
            parent = self.context.parent(call)
            if not (isinstance(parent, cst.Assign) and len(parent.targets) == 1):
                continue
            target = parent.targets[0].target
            elements = [e.value for e in target.elements] if isinstance(target, (cst.Tuple, cst.List)) else [target]
            if len(elements) != len(call.args):
                continue
            for element, arg in zip(elements, call.args):
                value = arg.value
                optimizer = dotted(value) in optimizers or (
                    isinstance(value, cst.Call) and amp.is_optimizer_construction(value)
                )
                if optimizer and (text := dotted(element)) is not None:
                    found.add(text)
        return found

    def _optimizer_names(self, amp: TorchAmp) -> set[str]:
        bound: dict[str, bool] = {}
        for assign in self.context.nodes(cst.Assign):
            for target in assign.targets:
                if (text := dotted(target.target)) is not None:
                    made = isinstance(assign.value, cst.Call) and amp.is_optimizer_construction(assign.value)
                    bound[text] = bound.get(text, True) and made
        return {text for text, made in bound.items() if made}

    def _scopes_stepping(self, prepared: set[str]) -> list[cst.CSTNode]:
        """The functions (or the module) that call ``step()`` of a prepared object."""
        scopes: list[cst.CSTNode] = []
        for call in self.context.nodes(cst.Call):
            func = call.func
            if isinstance(func, cst.Attribute) and func.attr.value == "step" and dotted(func.value) in prepared:
                scope = self._enclosing_scope(call)
                if all(scope is not s for s in scopes):
                    scopes.append(scope)
        return scopes

    def _enclosing_scope(self, node: cst.CSTNode) -> cst.CSTNode:
        return self.context.enclosing(node, cst.FunctionDef) or self.context.module


def _float16(config: Configuration) -> bool:
    """``mixed_precision="fp16"`` (or the older ``fp16=True``) written in the code, not a flag's default."""
    precision, old = config.values.get("mixed_precision"), config.values.get("fp16")
    return (precision is not None and precision.value == "fp16" and not precision.from_flag) or (
        old is not None and old.value is True and not old.from_flag
    )
