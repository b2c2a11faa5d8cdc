"""``check_model()``: mixed-precision findings read from a built model's layers and tensors."""

from __future__ import annotations

from dataclasses import dataclass

from mplint.knowledge.dtypes import REDUCED_DTYPES
from mplint.knowledge.layers import SHAPE_PRESERVING

SOFTMAX_LAYERS = ("Softmax",)
MATMUL_LAYERS = (
    "Dense",
    "EinsumDense",
    "Conv1D",
    "Conv2D",
    "Conv3D",
    "Conv1DTranspose",
    "Conv2DTranspose",
    "Conv3DTranspose",
    "SeparableConv1D",
    "SeparableConv2D",
)


@dataclass(frozen=True)
class RuntimeFinding:
    rule_id: str
    message: str
    layer: str | None = None

    @property
    def name(self) -> str:
        from mplint.catalog import load_catalog

        meta = load_catalog().get(self.rule_id)
        return meta.name if meta else ""

    def to_dict(self) -> dict:
        return {"rule": self.rule_id, "name": self.name, "message": self.message, "layer": self.layer}


def _dtype_name(value) -> str:
    dtype = getattr(value, "dtype", value)
    return getattr(dtype, "name", str(dtype))


def _compute_dtype(layer) -> str:
    return _dtype_name(getattr(layer, "compute_dtype", None) or "float32")


def _producer(tensor):
    history = getattr(tensor, "_keras_history", None)
    return history[0] if history is not None else None


def _inputs_of(layer, tensor) -> list:
    """The tensors a layer was called on to produce ``tensor`` (Keras 3 and Keras 2 nodes)."""
    history = getattr(tensor, "_keras_history", None)
    nodes = getattr(layer, "_inbound_nodes", None) or []
    if history is None or not nodes:
        return []
    index = history[1] if len(history) > 1 and isinstance(history[1], int) and history[1] < len(nodes) else 0
    node = nodes[index]
    for attribute in ("input_tensors", "keras_inputs"):
        try:
            found = getattr(node, attribute, None)
        except Exception:  # noqa: BLE001 - a node of another Keras version
            found = None
        if found is not None:
            return list(found) if isinstance(found, (list, tuple)) else [found]
    return []


def _output_layers(model) -> list:
    """The layers that produce the model's outputs (inside sub-models too), and the ones before
    them while the later ones only preserve the shape (``Dense(10)`` before
    ``Activation("softmax", dtype="float32")`` sets the class count)."""
    layers: list = []

    def add(layer) -> None:
        if layer is not None and all(layer is not known for known in layers):
            layers.append(layer)

    for tensor in getattr(model, "outputs", None) or []:
        for _ in range(32):
            layer = _producer(tensor)
            if layer is None:
                break
            add(layer)
            if getattr(layer, "outputs", None) and getattr(layer, "layers", None):
                for inner in _output_layers(layer):  # a sub-model produces the output
                    add(inner)
                break
            inputs = _inputs_of(layer, tensor) if type(layer).__name__ in SHAPE_PRESERVING else []
            if len(inputs) != 1:
                break
            tensor = inputs[0]
    if not layers and getattr(model, "layers", None):
        stack = list(model.layers)
        while stack:
            layer = stack.pop()
            add(layer)
            if type(layer).__name__ not in SHAPE_PRESERVING:
                break
    return layers


def _is_softmax(layer) -> bool:
    if type(layer).__name__ in SOFTMAX_LAYERS:
        return True
    activation = getattr(layer, "activation", None)
    return getattr(activation, "__name__", "") == "softmax"


def _flatten(model) -> list:
    found = []
    for layer in getattr(model, "layers", []):
        found.append(layer)
        if getattr(layer, "layers", None):
            found.extend(_flatten(layer))
    return found


def check_model(model) -> list[RuntimeFinding]:
    """MP806 reduced-precision outputs, MP101 softmax outputs, MP807 misaligned matmul/conv
    dimensions under float16, MP602 float16 variables. The model must be built."""
    findings: list[RuntimeFinding] = []
    output_layers = _output_layers(model)
    for tensor in getattr(model, "outputs", None) or []:
        if _dtype_name(tensor) in REDUCED_DTYPES:
            layer = getattr(tensor, "_keras_history", (None,))[0]
            findings.append(
                RuntimeFinding("MP806", f"model output is {_dtype_name(tensor)}", getattr(layer, "name", None))
            )
    for layer in output_layers:
        if _is_softmax(layer) and _compute_dtype(layer) in REDUCED_DTYPES:
            findings.append(
                RuntimeFinding(
                    "MP101",
                    f'softmax output computed in {_compute_dtype(layer)}: pass dtype="float32" to this layer',
                    layer.name,
                )
            )
    layers = _flatten(model)
    first = layers[0] if layers else None
    for layer in layers:
        kernel = getattr(layer, "kernel", None)
        if type(layer).__name__ not in MATMUL_LAYERS or kernel is None or _compute_dtype(layer) != "float16":
            continue
        shape = [int(d) for d in kernel.shape]
        dims = {"input": shape[-2], "output": shape[-1]}
        if layer is first:
            dims.pop("input")  # set by the data, not by the model
        if layer in output_layers:
            dims.pop("output")  # a class count
        odd = {k: v for k, v in dims.items() if v % 8}
        if odd:
            text = ", ".join(f"{k} {v}" for k, v in odd.items())
            findings.append(
                RuntimeFinding(
                    "MP807", f"{type(layer).__name__} {text} not a multiple of 8: no Tensor Cores", layer.name
                )
            )
    for variable in getattr(model, "weights", []):
        if _dtype_name(variable) in REDUCED_DTYPES:
            name = getattr(variable, "path", None) or variable.name
            findings.append(
                RuntimeFinding(
                    "MP602", f"variable {name} is stored in {_dtype_name(variable)}: small updates are lost", name
                )
            )
    return findings
