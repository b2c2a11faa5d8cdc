"""The precision a trainer runs with, read from the file's configuring calls.

``TrainingArguments(fp16=True)``, ``Accelerator(mixed_precision="fp16")``, Lightning's ``Trainer(precision=...,
accelerator=...)`` / ``Fabric(...)`` and FSDP's ``MixedPrecision(param_dtype=torch.float16)``: each keyword's value is
read where it is written, through a variable bound once (``precision = "16-mixed"``), a parameter's default, or an
argparse flag's default (``args.precision`` with ``parser.add_argument("--precision", default=16)``; the command line
may change it, ``from_flag``). A value read no such way is unknown: the rules stay silent on it.
"""

from __future__ import annotations

from dataclasses import dataclass

import libcst as cst

from mplint.analysis.bindings import binding_nodes, scope_referents
from mplint.engine.context import FileContext
from mplint.engine.names import dotted
from mplint.knowledge.trainer_versions import CONFIGURING

_MAX_DEPTH = 8


@dataclass(frozen=True)
class Value:
    """A keyword's value and the expression that writes it (the literal an edit replaces)."""

    value: object
    written: cst.BaseExpression
    from_flag: bool = False  # an argparse default: the command line may give another
    from_default: bool = False  # a parameter's default: callers may pass another

    @property
    def editable(self) -> bool:
        """Whether replacing ``written`` changes this value alone."""
        return not self.from_default


@dataclass(frozen=True)
class Configuration:
    """One configuring call: its stack, the class, and each keyword read (absent: not passed, or unknown)."""

    stack: str
    kind: str  # the class name: "Trainer", "Fabric", "Accelerator", ...
    call: cst.Call
    values: dict[str, Value]


class TrainerConfig:
    def __init__(self, context: FileContext) -> None:
        self.context = context
        self.configurations = [c for call in context.nodes(cst.Call) if (c := self._configuration(call)) is not None]

    @classmethod
    def of(cls, context: FileContext) -> TrainerConfig:
        return cls(context)

    def of_stack(self, stack: str) -> list[Configuration]:
        return [c for c in self.configurations if c.stack == stack]

    def _configuration(self, call: cst.Call) -> Configuration | None:
        name = dotted(call.func)
        if name is None:
            return None
        last = name.rsplit(".", 1)[-1]
        for stack, (packages, classes, keywords) in CONFIGURING.items():
            if last in classes or self.context.names.could_be(call.func, classes):
                paths = self.context.names.project_paths(call.func)
                kind = next(
                    (
                        p.rsplit(".", 1)[-1]
                        for p in paths
                        if p.split(".")[0] in packages and p.rsplit(".", 1)[-1] in classes
                    ),
                    None,
                )
                if kind is None:
                    continue
                values = {}
                for arg in call.args:
                    if arg.keyword is not None and arg.keyword.value in keywords:
                        found = self.value(arg.value)
                        if found is not None:
                            values[arg.keyword.value] = found
                return Configuration(stack, kind, call, values)
        return None

    def value(self, expr: cst.BaseExpression, depth: int = 0) -> Value | None:
        """What ``expr`` holds, where it is written; None where unknown."""
        if depth > _MAX_DEPTH:
            return None
        if isinstance(expr, cst.SimpleString):
            return Value(expr.evaluated_value, expr)
        if isinstance(expr, cst.Integer):
            return Value(int(expr.value), expr)
        if isinstance(expr, cst.Name) and expr.value in ("True", "False", "None"):
            return Value({"True": True, "False": False, "None": None}[expr.value], expr)
        if isinstance(expr, cst.Name):
            return self._name(expr, depth)
        if isinstance(expr, cst.Attribute):
            if (dtype := self._torch_dtype(expr)) is not None:
                return Value(dtype, expr)
            return self._flag(expr, depth)
        return None

    def _torch_dtype(self, expr: cst.Attribute) -> str | None:
        found = self.context.names.torch_api(expr, {"float16", "half", "bfloat16", "float32"})
        return None if found is None else {"half": "float16"}.get(found.path, found.path)

    def _name(self, name: cst.Name, depth: int) -> Value | None:
        nodes = binding_nodes(self.context, name)
        if nodes is None:
            nodes = scope_referents(self.context, name)
        if nodes is None or len(nodes) != 1:
            return None  # unbound, or bound more than once
        node = nodes[0]
        if isinstance(node, cst.Param):
            if node.default is None:
                return None
            found = self.value(node.default, depth + 1)
            return None if found is None else Value(found.value, found.written, found.from_flag, True)
        assign = self.context.parent(node) if isinstance(node, cst.Name) else None
        if isinstance(assign, cst.AssignTarget):
            statement = self.context.parent(assign)
            if isinstance(statement, cst.Assign) and len(statement.targets) == 1:
                return self.value(statement.value, depth + 1)
        if isinstance(node, cst.AnnAssign) and node.value is not None:
            return self.value(node.value, depth + 1)
        return None

    def _flag(self, attribute: cst.Attribute, depth: int) -> Value | None:
        """``args.name``: the default of the file's one ``add_argument`` whose destination is ``name``."""
        dest = attribute.attr.value
        found = [call for call in self.context.nodes(cst.Call) if _argument_dest(call) == dest]
        if len(found) != 1:
            return None
        keywords = {a.keyword.value: a.value for a in found[0].args if a.keyword is not None}
        action = keywords.get("action")
        action_name = action.evaluated_value if isinstance(action, cst.SimpleString) else None
        if action_name in ("store_true", "store_false") and "default" not in keywords:
            return Value(action_name == "store_false", found[0], from_flag=True)
        if "default" not in keywords:
            return None
        value = self.value(keywords["default"], depth + 1)
        return None if value is None else Value(value.value, value.written, True, value.from_default)


def _argument_dest(call: cst.Call) -> str | None:
    """The destination of ``parser.add_argument("--name", ...)`` (``dest=`` when given), else None."""
    if not (isinstance(call.func, cst.Attribute) and call.func.attr.value == "add_argument"):
        return None
    for arg in call.args:
        if arg.keyword is not None and arg.keyword.value == "dest":
            return arg.value.evaluated_value if isinstance(arg.value, cst.SimpleString) else None  # type: ignore[return-value]
    options = [
        a.value.evaluated_value
        for a in call.args
        if a.keyword is None and isinstance(a.value, cst.SimpleString) and isinstance(a.value.evaluated_value, str)
    ]
    long = [o for o in options if o.startswith("--")]
    chosen = long[0] if long else options[0] if options else None
    return None if chosen is None else chosen.lstrip("-").replace("-", "_")
