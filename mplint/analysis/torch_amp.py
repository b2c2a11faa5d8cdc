"""PyTorch mixed-precision facts of one file: autocast regions, GradScalers, optimizers, half models.

The MP context of PyTorch code is lexical and local (see the rule catalog): a ``with torch.autocast(...)``
block computes in its dtype, whatever the rest of the program does. The analysis reads, per file:

- autocast regions: ``torch.autocast``/``torch.amp.autocast``/``torch.cuda.amp.autocast``/
  ``torch.cpu.amp.autocast`` (also imported by name, and ``autocast(...) if cond else nullcontext()``),
  with their device, dtype (explicit, or the device's default: float16 on CUDA, bfloat16 on CPU) and
  ``enabled=`` (a literal, or the condition it follows, which the loop analysis matches against
  ``if amp:`` branches);
- GradScaler constructions and what they are bound to (``scaler``, ``self.scaler``);
- which receivers are scalers and which are optimizers, for method calls such as ``x.step()``.

Names of PyTorch APIs are resolved through the file's imports (``NameResolver.torch_api``); re-exports
of torch by other modules of the project are not followed.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass

import libcst as cst

from mplint.analysis.bindings import same_variable
from mplint.analysis.call_args import argument, keyword_value
from mplint.engine.context import FileContext
from mplint.engine.names import dotted
from mplint.knowledge.dtypes import FLOAT16_NAMES

FLOAT16 = "float16"
BFLOAT16 = "bfloat16"

# autocast APIs -> the device they imply (None: the device argument says).
AUTOCAST_APIS = {
    "autocast": None,
    "amp.autocast": None,
    "amp.autocast_mode.autocast": None,
    "cuda.amp.autocast": "cuda",
    "cuda.amp.autocast_mode.autocast": "cuda",
    "cpu.amp.autocast": "cpu",
    "cpu.amp.autocast_mode.autocast": "cpu",
}
SCALER_APIS = frozenset(
    {
        "amp.GradScaler",
        "amp.grad_scaler.GradScaler",
        "cuda.amp.GradScaler",
        "cuda.amp.grad_scaler.GradScaler",
        "cpu.amp.GradScaler",
        "cpu.amp.grad_scaler.GradScaler",
        "GradScaler",
        "distributed.fsdp.sharded_grad_scaler.ShardedGradScaler",
    }
)
OPTIMIZER_MODULES = ("optim.",)
OPTIMIZER_CLASSES = frozenset(
    {
        "SGD",
        "Adam",
        "AdamW",
        "Adamax",
        "Adagrad",
        "Adadelta",
        "Adafactor",
        "ASGD",
        "LBFGS",
        "NAdam",
        "RAdam",
        "RMSprop",
        "Rprop",
        "SparseAdam",
        "Muon",
    }
)
_CONSTRUCTED = OPTIMIZER_CLASSES | {"GradScaler", "ShardedGradScaler"}
_DTYPES = {**dict.fromkeys(FLOAT16_NAMES, FLOAT16), "bfloat16": BFLOAT16, "float32": "float32", "float": "float32"}
_FLOAT16_STRINGS = frozenset({FLOAT16, *(f"torch.{name}" for name in FLOAT16_NAMES)})
# Receivers of .step() that are not optimizers, and of .update() that are not scalers.
_SCALER_NAME = re.compile(r"scaler", re.I)
_OPTIMIZER_NAME = re.compile(r"(^|_)opt(im(izer)?)?s?($|_)|optimizer", re.I)
_NOT_OPTIMIZER_NAME = re.compile(r"sched|lr_|swa|ema|warmup", re.I)


@dataclass(frozen=True)
class Condition:
    """A branch condition the analysis can match: ``key`` is the source text of a name or attribute
    chain (``amp``, ``self.use_amp``), ``value`` what it is assumed to be on the path."""

    key: str
    value: bool


@dataclass
class AutocastRegion:
    node: cst.With
    call: cst.Call
    device: str | None  # cuda | cpu | another device string | None when computed
    dtype: str | None  # float16 | bfloat16 | float32 | None when computed
    enabled: bool | None  # None: follows a condition or an expression
    enabled_when: Condition | None = None  # the region computes in ``dtype`` only where this holds
    # a dtype computed at run time that can be float16: ``{"float16": torch.float16, ...}[dtype]`` with
    # ``dtype = "bfloat16" if torch.cuda.is_bf16_supported() else "float16"`` (the text of the dtype argument)
    may_be_float16: str | None = None

    @property
    def float16(self) -> bool:
        """Certainly float16 when enabled (explicitly, or the default of a known non-CPU device)."""
        return self.dtype == FLOAT16 and self.enabled is not False

    @property
    def reduced(self) -> bool:
        """Float16 or bfloat16 (or a computed dtype) when enabled."""
        return self.enabled is not False and self.dtype in (FLOAT16, BFLOAT16, None)


@dataclass
class ScalerBinding:
    call: cst.Call
    target: str  # ``scaler``, ``self.scaler``
    stmt: cst.CSTNode | None  # the assignment statement
    enabled: cst.BaseExpression | None


class TorchAmp:
    """Per-file facts; build with ``context.analysis(TorchAmp.of)``. Regions are read at once (a walk over the
    file's ``with`` statements); scalers and optimizers on first use (they resolve names of many calls)."""

    def __init__(self, context: FileContext):
        self.context = context
        self.regions: list[AutocastRegion] = []
        for with_node in context.nodes(cst.With):
            for item in with_node.items:
                region = self._region(with_node, self._context_manager(item.item))
                if region is not None:
                    self.regions.append(region)

    of = classmethod(lambda cls, context: cls(context))

    @functools.cached_property
    def _bindings(self) -> tuple[list[ScalerBinding], set[str]]:
        """GradScalers with what they are bound to, and the texts bound to ``torch.optim`` optimizers."""
        scalers: list[ScalerBinding] = []
        optimizers: set[str] = set()
        for call in self.context.nodes(cst.Call):
            self._binding(call, scalers, optimizers)
        return scalers, optimizers

    @property
    def scalers(self) -> list[ScalerBinding]:
        return self._bindings[0]

    @property
    def optimizer_targets(self) -> set[str]:
        return self._bindings[1]

    @functools.cached_property
    def scaler_steps(self) -> set[str]:
        """Texts passed to ``scaler.step(...)``/``scaler.unscale_(...)``: optimizers whatever their names."""
        return {text for s in self.scaler_calls("step", "unscale_") if (text := _arg_text(self.context, s))}

    # --- autocast -----------------------------------------------------------------------------

    def autocast_call(self, call: cst.BaseExpression) -> str | None:
        """The AUTOCAST_APIS key of ``call`` when it constructs an autocast context."""
        if not isinstance(call, cst.Call):
            return None
        found = self.context.names.torch_api(call.func, AUTOCAST_APIS)
        return found.path if found is not None and found.ns == "torch" else None

    def _context_manager(self, item: cst.BaseExpression) -> cst.BaseExpression:
        """``with ctx:`` where ``ctx`` is bound once to an autocast (or a conditional one): that expression."""
        if not isinstance(item, cst.Name) or "autocast" not in self.context.text:
            return item
        value = self._bound_once(item)
        if (
            isinstance(value, cst.IfExp)
            and (self.autocast_call(value.body) or self.autocast_call(value.orelse))
            or self.autocast_call(value)
        ):
            return value
        return item

    def _region(self, with_node: cst.With, item: cst.BaseExpression) -> AutocastRegion | None:
        condition = None
        if isinstance(item, cst.IfExp) and self.autocast_call(item.body):
            condition = condition_of(self.context, item.test)
            item = item.body
        elif isinstance(item, cst.IfExp) and self.autocast_call(item.orelse):  # nullcontext() if cpu else autocast(...)
            condition = condition_of(self.context, item.test)
            condition = Condition(condition.key, not condition.value) if condition is not None else None
            item = item.orelse
        api = self.autocast_call(item)
        if api is None:
            return None
        call = item
        device = AUTOCAST_APIS[api]
        if device is None:
            device_arg = argument(call, 0, "device_type")
            device = _string(device_arg)
            enabled_arg = argument(call, 2, "enabled")
            dtype_arg = argument(call, 1, "dtype")
        else:  # torch.cuda.amp.autocast(enabled=True, dtype=torch.float16, cache_enabled=True)
            enabled_arg = argument(call, 0, "enabled")
            dtype_arg = argument(call, 1, "dtype")
        dtype = self.dtype_of(dtype_arg) if dtype_arg is not None else _default_dtype(device)
        enabled: bool | None = True
        if enabled_arg is not None:
            literal = _bool(enabled_arg)
            enabled = literal
            if literal is None and condition is None:
                condition = condition_of(self.context, enabled_arg)
        if condition is not None:
            enabled = None if enabled is not False else False
        may_be_float16 = None
        if dtype is None and dtype_arg is not None and self._can_be_float16(dtype_arg):
            may_be_float16 = self.context.module.code_for_node(dtype_arg)
        return AutocastRegion(with_node, call, device, dtype, enabled, condition, may_be_float16)

    def _can_be_float16(self, node: cst.BaseExpression, depth: int = 0) -> bool:
        """Whether a dtype computed at run time can be float16: a conditional with a float16 arm, a name bound
        once to one, or a dict of dtypes indexed by such a name (``{"float16": torch.float16, ...}[dtype]``)."""
        if depth > 4:
            return False
        if self.dtype_of(node) == FLOAT16:
            return True
        if isinstance(node, cst.IfExp):
            return self._can_be_float16(node.body, depth + 1) or self._can_be_float16(node.orelse, depth + 1)
        if isinstance(node, cst.Subscript) and isinstance(node.value, cst.Dict) and len(node.slice) == 1:
            key = node.slice[0].slice
            keys = self._strings(key.value, depth + 1) if isinstance(key, cst.Index) else None
            return any(
                isinstance(e, cst.DictElement)
                and self.dtype_of(e.value) == FLOAT16
                and (keys is None or _string(e.key) in keys)
                for e in node.value.elements
            )
        if isinstance(node, cst.Name):
            value = self._bound_once(node)
            return value is not None and self._can_be_float16(value, depth + 1)
        return False

    def _bound_once(self, name: cst.Name) -> cst.BaseExpression | None:
        """What a name bound once holds (its assignment, or its parameter's default); None: bound on several paths."""
        from mplint.analysis.constants import origin_of

        try:
            found = origin_of(self.context, name)
        except Exception:  # names libcst's scopes cannot place
            return None
        return found.value if found is not None and not isinstance(found.value, cst.Name) else None

    def _strings(self, node: cst.BaseExpression, depth: int) -> set[str] | None:
        """The strings an expression can be (a literal, a conditional of them, a name bound once to one); None:
        unknown."""
        if depth > 4:
            return None
        if (text := _string(node)) is not None:
            return {text}
        if isinstance(node, cst.IfExp):
            body, orelse = self._strings(node.body, depth + 1), self._strings(node.orelse, depth + 1)
            return body | orelse if body is not None and orelse is not None else None
        if isinstance(node, cst.Name):
            value = self._bound_once(node)
            return self._strings(value, depth + 1) if value is not None else None
        return None

    def dtype_of(self, node: cst.BaseExpression | None) -> str | None:
        """``torch.float16``/``torch.half``/``"float16"``/a name bound once to one of them -> its name."""
        if node is None:
            return None
        text = _string(node)
        if text is not None:
            return _DTYPES.get(text.replace("torch.", ""))
        for k in self.context.names.torch_names(node):
            if k.ns == "torch" and k.path in _DTYPES:
                return _DTYPES[k.path]
        if isinstance(node, cst.Name):
            value = self._bound_once(node)
            if value is not None:
                return self.dtype_of(value)
        return None

    def enclosing_regions(self, node: cst.CSTNode) -> list[AutocastRegion]:
        """The regions whose body holds ``node``, innermost last."""
        return [r for r in self.regions if self.context.contains(r.node.body, node)]

    # --- scalers and optimizers -----------------------------------------------------------------

    def is_scaler_construction(self, node: cst.BaseExpression) -> bool:
        if isinstance(node, cst.IfExp):
            return self.is_scaler_construction(node.body) or self.is_scaler_construction(node.orelse)
        if not isinstance(node, cst.Call):
            return False
        found = self.context.names.torch_api(node.func, SCALER_APIS)
        return found is not None and (found.path != "GradScaler" or found.ns == "torch")

    def _binding(self, call: cst.Call, scalers: list[ScalerBinding], optimizers: set[str]) -> None:
        if not self.context.names.could_be(call.func, _CONSTRUCTED):
            return  # textual reject before name resolution
        parent = self.context.parent(call)
        if isinstance(parent, cst.IfExp):
            parent = self.context.parent(parent)
        if not isinstance(parent, (cst.Assign, cst.AnnAssign)):
            return
        targets = [t.target for t in parent.targets] if isinstance(parent, cst.Assign) else [parent.target]
        texts = [t for t in map(dotted, targets) if t]
        if self.is_scaler_construction(call):
            for text in texts:
                scalers.append(ScalerBinding(call, text, self.context.parent(parent), argument(call, None, "enabled")))
        elif self.is_optimizer_construction(call):
            optimizers.update(texts)

    def is_optimizer_construction(self, call: cst.Call) -> bool:
        if not self.context.names.could_be(call.func, OPTIMIZER_CLASSES):
            return False
        return any(
            k.ns == "torch"
            and k.path.startswith(OPTIMIZER_MODULES)
            and "lr_scheduler" not in k.path
            and k.last[:1].isupper()
            for k in self.context.names.torch_names(call.func)
        )

    @property
    def scaler_targets(self) -> set[str]:
        return {s.target for s in self.scalers}

    def is_scaler(self, node: cst.BaseExpression) -> bool:
        """A GradScaler of this file, or a receiver named like one (a parameter, ``self._scaler``)."""
        text = dotted(node)
        if text is None:
            return False
        return text in self.scaler_targets or bool(_SCALER_NAME.search(text.rsplit(".", 1)[-1]))

    def is_optimizer(self, node: cst.BaseExpression) -> bool:
        text = dotted(node)
        if text is None or self.is_scaler(node):
            return False
        if text in self.optimizer_targets or text in self.scaler_steps:
            return True
        last = text.rsplit(".", 1)[-1]
        return bool(_OPTIMIZER_NAME.search(last)) and not _NOT_OPTIMIZER_NAME.search(last)

    def scaler_calls(self, *methods: str) -> list[cst.Call]:
        """Every ``<scaler>.<method>(...)`` call of the file, in source order."""
        return [
            c
            for c in self.context.nodes(cst.Call)
            if isinstance(c.func, cst.Attribute) and c.func.attr.value in methods and self.is_scaler(c.func.value)
        ]


def condition_of(context: FileContext, test: cst.BaseExpression) -> Condition | None:
    """``amp`` -> (amp, True); ``not amp``/``amp is None`` -> (amp, False); ``x is not None`` -> (x, True)."""
    value = True
    while isinstance(test, cst.UnaryOperation) and isinstance(test.operator, cst.Not):
        value, test = not value, test.expression
    if isinstance(test, cst.Comparison) and len(test.comparisons) == 1:
        target = test.comparisons[0]
        if isinstance(target.comparator, cst.Name) and target.comparator.value == "None":
            if isinstance(target.operator, cst.IsNot):
                test = test.left
            elif isinstance(target.operator, cst.Is):
                value, test = not value, test.left
        elif isinstance(target.operator, (cst.Equal, cst.NotEqual)) and (text := dotted(test.left)):
            # ``backend == "apex"`` ... ``if backend == "apex":`` again: the same branch
            literal = _literal(target.comparator)
            if literal is None:
                return None
            return Condition(f"{text} == {literal}", value == isinstance(target.operator, cst.Equal))
    text = dotted(test)
    return Condition(text, value) if text else None


def _literal(node: cst.BaseExpression) -> str | None:
    if isinstance(node, cst.SimpleString):
        return repr(node.evaluated_value)
    if isinstance(node, cst.Integer) or isinstance(node, cst.Name) and node.value in ("True", "False"):
        return node.value
    return None


def _arg_text(context: FileContext, call: cst.Call) -> str | None:
    first = argument(call, 0, "optimizer")
    return dotted(first) if first is not None else None


def _string(node: cst.BaseExpression | None) -> str | None:
    if isinstance(node, cst.SimpleString):
        value = node.evaluated_value
        return value if isinstance(value, str) else None
    return None


def _bool(node: cst.BaseExpression) -> bool | None:
    if isinstance(node, cst.Name) and node.value in ("True", "False"):
        return node.value == "True"
    return None


def _default_dtype(device: str | None) -> str | None:
    if device is None:
        return None
    return BFLOAT16 if device == "cpu" else FLOAT16


def keyword_text(context: FileContext, call: cst.Call, name: str) -> str | None:
    value = keyword_value(call, name)
    return context.module.code_for_node(value) if value is not None else None


def is_half_cast(context: FileContext, amp: TorchAmp, node: cst.CSTNode) -> bool:
    """``x.half()``, ``x.to(torch.float16)``, ``x.to(device, dtype=torch.half)``, ``x.type(torch.float16)``."""
    if not (isinstance(node, cst.Call) and isinstance(node.func, cst.Attribute)):
        return False
    method = node.func.attr.value
    if method == "half":
        return not node.args
    if method in ("to", "type"):
        dtypes = [a.value for a in node.args if a.keyword is None or a.keyword.value == "dtype"]
        return any(_names_float16(context, d) or _string(d) in _FLOAT16_STRINGS for d in dtypes)
    return False


def _names_float16(context: FileContext, node: cst.BaseExpression) -> bool:
    """``torch.float16``/``torch.half`` spelled out (a plain name could be anything)."""
    return (
        any(k.ns == "torch" and k.path in FLOAT16_NAMES for k in context.names.torch_names(node))
        if isinstance(node, cst.Attribute)
        else False
    )


class BoundNames:
    """The names and attribute chains a file binds to a call of some torch APIs (``criterion``, ``self.loss_fn`` for
    ``{"nn.BCELoss"}``), each read where it is bound: in its own function, ``self.x`` in its own class."""

    def __init__(self, context: FileContext, apis: set[str]):
        self.context = context
        self.targets: dict[str, list[cst.BaseExpression]] = {}
        for assign in context.nodes(cst.Assign):
            value = assign.value
            if isinstance(value, cst.Call) and (api := context.names.torch_api(value.func, apis)) and api.ns == "torch":
                for target in assign.targets:
                    if text := dotted(target.target):
                        self.targets.setdefault(text, []).append(target.target)

    def binds(self, node: cst.BaseExpression) -> bool:
        """Whether ``node`` (a name or attribute chain as read) holds one of those calls' results."""
        text = dotted(node)
        return text is not None and any(same_variable(self.context, node, t) for t in self.targets.get(text, ()))


def half_names(context: FileContext, amp: TorchAmp, scope: cst.CSTNode) -> dict[str, cst.CSTNode]:
    """Names ``scope`` binds to a float16 cast (``x = batch.half()``), with the cast."""
    found = {}
    for assign in context.nodes_within(scope, cst.Assign):
        if is_half_cast(context, amp, assign.value):
            for target in assign.targets:
                text = dotted(target.target)
                if text:
                    found[text] = assign.value
    return found


def float32_cast(node: cst.CSTNode) -> bool:
    """``x.float()``/``x.to(torch.float32)``: explicitly float32."""
    return (
        isinstance(node, cst.Call)
        and isinstance(node.func, cst.Attribute)
        and (
            node.func.attr.value == "float"
            or node.func.attr.value == "to"
            and "float32" in cst.Module([]).code_for_node(node)
        )
    )
