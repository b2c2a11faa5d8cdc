"""``check_model()`` for PyTorch: one forward pass under autocast with real tensors, watched by forward hooks
(which module runs) and a dispatch mode (the ops and the constants they get, in the dtypes autocast chose)."""

from __future__ import annotations

from mplint.knowledge.dtypes import REDUCED_DTYPES
from mplint.knowledge.float16_range import FLOAT16_MAX
from mplint.runtime.model_checks import RuntimeFinding

FLOAT16_ZERO = 2.0**-25  # this and smaller round to 0 in float16 (its smallest subnormal is 2**-24)
# Elementwise ops whose scalar operand becomes a float16 value (an epsilon, a mask fill, a bound).
OVERFLOW_OPS = frozenset(
    {
        "add",
        "sub",
        "rsub",
        "mul",
        "div",
        "masked_fill",
        "fill",
        "clamp",
        "clamp_min",
        "clamp_max",
        "where",
        "full_like",
        "new_full",
    }
)
ZERO_OPS = frozenset({"add", "sub", "rsub", "masked_fill", "fill", "clamp", "clamp_min", "clamp_max", "where"})
# layer type -> the size it chooses, a matmul/conv dimension (as MPT301: the sizes taken from the layer before are not its own)
SIZES = {
    "Linear": "out_features",
    "Embedding": "embedding_dim",
    "MultiheadAttention": "embed_dim",
    **{f"{kind}{n}d": "out_channels" for kind in ("Conv", "ConvTranspose") for n in (1, 2, 3)},
}


class _Stop(Exception):
    """The forward pass raised on a constant already reported."""


def _tensors(value):
    """The tensors in a model output: a tensor, tuples, lists, dicts (and dict-like outputs)."""
    import torch

    if isinstance(value, torch.Tensor):
        yield value
    elif isinstance(value, dict):
        for item in value.values():
            yield from _tensors(item)
    elif isinstance(value, (list, tuple)):
        for item in value:
            yield from _tensors(item)


def _scalars(torch, values):
    for value in values:
        if isinstance(value, float) or (isinstance(value, int) and not isinstance(value, bool)):
            yield float(value)
        elif isinstance(value, torch.Tensor) and value.ndim == 0 and value.dtype in (torch.float32, torch.float64):
            yield float(value.item())  # a 0-dim tensor does not promote a float16 operand


def _constant_problem(op: str, value: float) -> str | None:
    if abs(value) > FLOAT16_MAX and op in OVERFLOW_OPS:
        return f"{value:g} overflows float16 (largest {FLOAT16_MAX:g}): use torch.finfo(x.dtype).min/max"
    if 0 < abs(value) <= FLOAT16_ZERO and op in ZERO_OPS:
        return f"{value:g} is 0 in float16: use an epsilon of the tensor's dtype (torch.finfo(x.dtype).eps)"
    return None


class _Watch:
    """Forward hooks keep the stack of running modules; the dispatch mode reports constants against the innermost."""

    def __init__(self, torch, model):
        self.torch = torch
        self.names = {module: name or type(model).__name__ for name, module in model.named_modules()}
        self.stack: list[str] = []
        self.called: list = []  # modules with a size, in call order
        self.producers: dict[int, tuple] = {}  # id(tensor) -> (tensor, module name): the innermost module returning it
        self.findings: list[RuntimeFinding] = []
        self._seen: set = set()

    def pre(self, module, args) -> None:
        self.stack.append(self.names[module])

    def post(self, module, args, output) -> None:
        self.stack.pop()
        if type(module).__name__ in SIZES and all(module is not m for m in self.called):
            self.called.append(module)
        for tensor in _tensors(output):
            self.producers.setdefault(id(tensor), (tensor, self.names[module]))

    def dispatch(self, func, args, kwargs):
        torch = self.torch
        op = func.overloadpacket.__name__.rstrip("_")
        operands = [a for a in (*args, *kwargs.values()) if isinstance(a, torch.Tensor)]
        reported = None
        if op in OVERFLOW_OPS and any(t.dtype == torch.float16 and t.ndim > 0 for t in operands):
            for value in _scalars(torch, (*args, *kwargs.values())):
                problem = _constant_problem(op, value)
                where = self.stack[-1] if self.stack else None
                if problem and (where, op, value) not in self._seen:
                    self._seen.add((where, op, value))
                    reported = len(self.findings)
                    self.findings.append(
                        RuntimeFinding("MPT601", f"`{op}` with {value:g} on a float16 tensor: {problem}", where)
                    )
        try:
            return func(*args, **kwargs)
        except RuntimeError as error:
            if reported is None:
                raise
            finding = self.findings[reported]
            self.findings[reported] = RuntimeFinding(
                finding.rule_id, f"{finding.message} (raises: {error})", finding.layer
            )
            raise _Stop from error


def _dispatch_mode(torch, watch):
    """None before torch 2.0 (earlier dispatch modes were entered another way): no MPT601, the other checks run."""
    from packaging.version import Version

    from mplint.runtime.torch_precision import torch_version

    if Version(torch_version(torch)) < Version("2.0"):
        return None
    from torch.utils._python_dispatch import TorchDispatchMode

    class ConstantWatch(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            return watch.dispatch(func, args, kwargs or {})

    return ConstantWatch()


def check_model(model, *inputs, precision=None, dtype: str = "float16", **kwargs) -> list[RuntimeFinding]:
    """Run ``model(*inputs, **kwargs)`` once, without gradients, under ``precision``'s autocast (default:
    ``choose(dtype)`` on the device of the model's first parameter). Findings, in this order: MP806 float16/bfloat16
    model outputs; MP807 sizes of the Linear/Conv/Embedding/MultiheadAttention layers that ran that are not multiples
    of 8 under reduced precision (not below 8, not the layer producing an output or the last one: a class count);
    MPT601 constants that overflow float16 or round to 0 in it, in the module that used them; MPT101 parameters
    stored in float16/bfloat16."""
    import contextlib

    import torch

    from mplint.runtime.torch_precision import choose

    if precision is None:
        first = next(model.parameters(), None)
        precision = choose(dtype, device=first.device if first is not None else None)
    watch = _Watch(torch, model)
    handles = []
    for module in model.modules():
        handles.append(module.register_forward_pre_hook(watch.pre))
        handles.append(module.register_forward_hook(watch.post))
    mode = _dispatch_mode(torch, watch)
    output = None
    try:
        with torch.no_grad(), precision.autocast(), mode if mode is not None else contextlib.nullcontext():
            output = model(*inputs, **kwargs)
    except _Stop:
        pass
    finally:
        for handle in handles:
            handle.remove()
    findings: list[RuntimeFinding] = []
    outputs = list(_tensors(output))
    producers = {watch.producers[id(t)][1] for t in outputs if id(t) in watch.producers}
    for tensor in outputs:
        name = str(tensor.dtype).replace("torch.", "")
        if name in REDUCED_DTYPES:
            findings.append(
                RuntimeFinding("MP806", f"model output is {name}", watch.producers.get(id(tensor), (None, None))[1])
            )
    if precision.dtype in REDUCED_DTYPES:
        last = watch.called[-1] if watch.called else None
        for module in watch.called:
            attribute = SIZES[type(module).__name__]
            size = int(getattr(module, attribute))
            if size % 8 == 0 or size < 8 or module is last or watch.names[module] in producers:
                continue
            findings.append(
                RuntimeFinding(
                    "MP807",
                    f"{type(module).__name__} {attribute} {size} not a multiple of 8: no Tensor Cores under "
                    f"{precision.dtype}",
                    watch.names[module],
                )
            )
    findings.extend(watch.findings)
    for name, parameter in model.named_parameters():
        dtype_name = str(parameter.dtype).replace("torch.", "")
        if dtype_name in REDUCED_DTYPES:
            findings.append(
                RuntimeFinding("MPT101", f"parameter {name} is stored in {dtype_name}: small updates are lost", name)
            )
    return findings
