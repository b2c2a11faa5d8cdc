"""MPT301: PyTorch layer sizes that are not multiples of 8 in a file that computes in float16/bfloat16."""

from __future__ import annotations

import re

import libcst as cst

from mplint.analysis.call_args import argument
from mplint.analysis.constants import evaluate_int, only_used_where
from mplint.analysis.reshapes import split_by_a_reshape
from mplint.analysis.torch_amp import TorchAmp, is_half_cast
from mplint.checks._torch_rule import TorchRule
from mplint.diagnostics import Fix, FixSafety
from mplint.engine.names import dotted

# layer -> (position, keyword) of the size that is a matmul/conv dimension the layer chooses
_SIZES = {
    "nn.Linear": (1, "out_features"),
    **{f"nn.{conv}{n}d": (1, "out_channels") for conv in ("Conv", "ConvTranspose") for n in (1, 2, 3)},
    "nn.Embedding": (1, "embedding_dim"),
    "nn.MultiheadAttention": (0, "embed_dim"),
    "nn.LSTM": (1, "hidden_size"),
    "nn.GRU": (1, "hidden_size"),
}
# layer -> (position, keyword) of the size it takes from the layer before
_INPUTS = {
    name: (0, "in_channels" if "Conv" in name else "input_size" if name in ("nn.LSTM", "nn.GRU") else "in_features")
    for name in _SIZES
    if name not in ("nn.Embedding", "nn.MultiheadAttention")
}
# Layers and functions whose output has their input's shape: what follows the last sized layer to the output.
_ACTIVATIONS = (
    "ReLU",
    "ReLU6",
    "LeakyReLU",
    "ELU",
    "GELU",
    "SiLU",
    "Sigmoid",
    "Tanh",
    "Softmax",
    "LogSoftmax",
    "Hardtanh",
    "Mish",
)
_PRESERVING_LAYERS = frozenset(
    {*(f"nn.{a}" for a in _ACTIVATIONS), "nn.Identity", *(f"nn.Dropout{n}" for n in ("", "1d", "2d", "3d"))}
)
_PRESERVING_FUNCTIONS = frozenset(
    {
        *(
            f"nn.functional.{f}"
            for f in (
                "relu",
                "relu6",
                "leaky_relu",
                "elu",
                "gelu",
                "silu",
                "sigmoid",
                "tanh",
                "softmax",
                "log_softmax",
                "dropout",
                "mish",
            )
        ),
        "relu",
        "sigmoid",
        "tanh",
        "softmax",
        "log_softmax",
    }
)
# Names of sizes and attributes that are a model's output (a class count, a vocabulary, a head).
_OUTPUT_NAME = re.compile(r"class|label|vocab|target|out(put)?s?$|^n_?out|head|classifier|logit|num_out", re.I)


class TorchTensorCoreAlignment(TorchRule):
    id = "MPT301"
    program_choice = True
    triggers = (b"nn.", b"Linear", b"Conv", b"Embedding")

    @classmethod
    def active_for(cls, facts) -> bool:
        return not facts.test_module  # a test's layer sizes are fixtures: tensor-core throughput is not what it checks

    @classmethod
    def candidate(cls, code) -> bool:
        layers = (
            "Linear",
            "Conv1d",
            "Conv2d",
            "Conv3d",
            "ConvTranspose1d",
            "ConvTranspose2d",
            "ConvTranspose3d",
            "Embedding",
            "MultiheadAttention",
            "LSTM",
            "GRU",
        )
        reduced = code.calls_any("autocast", "half") or code.mentions("float16")  # .to(torch.float16)
        return code.imports_torch and reduced and code.calls_any(*layers)

    def visit_Module(self, node: cst.Module) -> None:
        amp = self.context.analysis(TorchAmp.of)
        reduced = [r for r in amp.regions if r.reduced]
        halves = any(is_half_cast(self.context, amp, c) for c in self.context.nodes(cst.Call))
        if not reduced and not halves:
            return
        dtypes = {r.dtype for r in reduced}
        precision = f"{dtypes.pop() if len(dtypes) == 1 and None not in dtypes else 'float16/bfloat16'} autocast"
        if not reduced:
            precision = "float16"
        for call in self.context.nodes(cst.Call):
            found = self.context.names.torch_api(call.func, _SIZES)
            if found is None or found.ns != "torch" or self._is_output(call):
                continue
            position, keyword = _SIZES[found.path]
            size = argument(call, position, keyword)
            value = evaluate_int(self.context, size) if size is not None else None
            if value is None or value.value % 8 == 0 or value.value < 8 or _OUTPUT_NAME.search(dotted(size) or ""):
                continue  # sizes below 8 are heads (a regression output, 3D coordinates), not widths to pad
            if split_by_a_reshape(self.context, size):
                continue  # a product of factors a view splits again: rounding it breaks the view
            rounded = -(-value.value // 8) * 8
            fix = self._fix(call, size, value, rounded)
            self.report(
                size,
                f"`{keyword}={value.value}` of `{found.path}` is not a multiple of 8: under {precision} its "
                f"matmuls cannot use tensor cores fully (use {rounded})",
                fix,
            )

    def _fix(self, call: cst.Call, size, value, rounded: int) -> Fix | None:
        """A PyTorch layer's size is also the next layer's input size: round a literal together with the
        next layer's equal input literal in an ``nn.Sequential``, or a constant used only as layer sizes."""
        new = cst.Integer(str(rounded))
        if value.binding is not None and value.literal is not None:
            if only_used_where(self.context, value.binding, self._layer_size):
                return Fix({value.literal: new}, FixSafety.UNSAFE)
            return None
        if not isinstance(size, cst.Integer):
            return None
        following = self._next_in_sequential(call)
        if following is None:
            return None
        found = self.context.names.torch_api(following.func, _INPUTS)
        position, keyword = _INPUTS[found.path] if found is not None else (None, "")
        width = argument(following, position, keyword) if found is not None else None
        if not isinstance(width, cst.Integer) or evaluate_int(self.context, width).value != value.value:
            return None
        return Fix({size: new, width: cst.Integer(str(rounded))}, FixSafety.UNSAFE)

    def _next_in_sequential(self, call: cst.Call) -> cst.Call | None:
        arg = self.context.parent(call)
        outer = self.context.parent(arg) if isinstance(arg, cst.Arg) else None
        if not isinstance(outer, cst.Call) or not (dotted(outer.func) or "").endswith("Sequential"):
            return None
        later = outer.args[outer.args.index(arg) + 1 :]
        return next(
            (
                a.value
                for a in later
                if isinstance(a.value, cst.Call) and self.context.names.torch_api(a.value.func, _SIZES) is not None
            ),
            None,
        )

    def _layer_size(self, name: cst.Name) -> bool:
        arg = self.context.parent(name)
        call = self.context.parent(arg) if isinstance(arg, cst.Arg) else None
        return isinstance(call, cst.Call) and self.context.names.torch_api(call.func, _SIZES) is not None

    def _is_output(self, call: cst.Call) -> bool:
        """The last layer of an ``nn.Sequential``, or a layer bound to a name like ``head``/``classifier``,
        or the one ``forward`` returns directly."""
        parent = self.context.parent(call)
        if isinstance(parent, cst.Arg):
            outer = self.context.parent(parent)
            if isinstance(outer, cst.Call) and dotted(outer.func) and dotted(outer.func).endswith("Sequential"):
                return outer.args[-1] is parent
        if isinstance(parent, cst.Assign):
            targets = [dotted(t.target) or "" for t in parent.targets]
            if any(_OUTPUT_NAME.search(t.rsplit(".", 1)[-1]) for t in targets):
                return True
            owner = self.context.enclosing(call, cst.ClassDef)
            return owner is not None and any(t.startswith("self.") and self._returned(owner, t) for t in targets)
        return False

    def _returned(self, owner: cst.ClassDef, attribute: str) -> bool:
        """Whether ``forward`` returns what ``attribute`` computes, directly or through shape-preserving layers
        (``y = self.fc3(y); y = self.relu5(y); return y``): its size is then the class count."""
        preserving = self._shape_preserving_attributes(owner)
        for method in owner.body.body:
            if isinstance(method, cst.FunctionDef) and method.name.value == "forward":
                statements = list(method.body.body)
                for ret in self.context.nodes_within(method, cst.Return):
                    top = next(a for a in [ret, *self.context.ancestors(ret)] if self.context.parent(a) is method.body)
                    if self._produced_by(ret.value, statements[: statements.index(top)], attribute, preserving):
                        return True
        return False

    def _produced_by(self, value, before: list, attribute: str, preserving: set[str]) -> bool:
        """Follow ``value`` back through simple assignments of ``forward``'s body and shape-preserving calls."""
        for _ in range(len(before) + 8):  # each step consumes an assignment or unwraps a call
            if isinstance(value, cst.Name):
                index = _last_assignment(before, value.value)
                if index is None:
                    return False
                before, value = before[:index], _assignment_to(before[index]).value
            elif isinstance(value, cst.Call) and value.args:
                name = dotted(value.func)
                if name == attribute:
                    return True
                if name not in preserving and self.context.names.torch_api(value.func, _PRESERVING_FUNCTIONS) is None:
                    return False
                value = value.args[0].value
            else:
                return isinstance(value, cst.Call) and dotted(value.func) == attribute
        return False

    def _shape_preserving_attributes(self, owner: cst.ClassDef) -> set[str]:
        """``self.x`` attributes of the class bound to an activation, dropout or identity layer."""
        found = set()
        for assign in self.context.nodes_within(owner, cst.Assign):
            if isinstance(assign.value, cst.Call) and self.context.names.torch_api(
                assign.value.func, _PRESERVING_LAYERS
            ):
                found.update(dotted(t.target) or "" for t in assign.targets)
        return found - {""}


def _assignment_to(statement) -> cst.Assign | None:
    """``name = value`` as a whole statement line, else None."""
    if isinstance(statement, cst.SimpleStatementLine) and len(statement.body) == 1:
        assign = statement.body[0]
        if (
            isinstance(assign, cst.Assign)
            and len(assign.targets) == 1
            and isinstance(assign.targets[0].target, cst.Name)
        ):
            return assign
    return None


def _last_assignment(statements: list, name: str) -> int | None:
    """Index of the last ``name = ...`` statement line in ``statements``."""
    for index in range(len(statements) - 1, -1, -1):
        assign = _assignment_to(statements[index])
        if assign is not None and assign.targets[0].target.value == name:
            return index
    return None
