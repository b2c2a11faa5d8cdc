"""``check_model()``: mixed-precision findings read from a built model's layers and tensors."""

from __future__ import annotations

from dataclasses import dataclass

REDUCED = ("float16", "bfloat16")
SOFTMAX_LAYERS = ("Softmax",)
MATMUL_LAYERS = ("Dense", "EinsumDense", "Conv1D", "Conv2D", "Conv3D", "Conv1DTranspose", "Conv2DTranspose",
                 "Conv3DTranspose", "SeparableConv1D", "SeparableConv2D")


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


def _output_layers(model) -> list:
    outputs = getattr(model, "outputs", None) or []
    layers = []
    for tensor in outputs:
        history = getattr(tensor, "_keras_history", None)
        if history is not None and history[0] not in layers:
            layers.append(history[0])
    if not layers and getattr(model, "layers", None):
        layers = [model.layers[-1]]
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
        if _dtype_name(tensor) in REDUCED:
            layer = getattr(tensor, "_keras_history", (None,))[0]
            findings.append(RuntimeFinding("MP806", f"model output is {_dtype_name(tensor)}", getattr(layer, "name", None)))
    for layer in output_layers:
        if _is_softmax(layer) and _compute_dtype(layer) in REDUCED:
            findings.append(RuntimeFinding(
                "MP101", f"softmax output computed in {_compute_dtype(layer)}: pass dtype=\"float32\" to this layer", layer.name))
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
            findings.append(RuntimeFinding("MP807", f"{type(layer).__name__} {text} not a multiple of 8: no Tensor Cores", layer.name))
    for variable in getattr(model, "weights", []):
        if _dtype_name(variable) in REDUCED:
            name = getattr(variable, "path", None) or variable.name
            findings.append(RuntimeFinding("MP602", f"variable {name} is stored in {_dtype_name(variable)}: small updates are lost", name))
    return findings
