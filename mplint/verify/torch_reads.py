"""The one place where the PyTorch hooks read tensors' values.

A step's hooks keep what they want to know as tensors where torch made them (on the GPU for a CUDA script: the
loss, a finiteness flag, the scale, the update's norm, the first step's gradients) and read them all here, once,
when the step is recorded: detached, the numbers copied to the CPU in one transfer per device and each gradient in
one, in float32 (MPS has no float64), and only then turned into Python numbers. No hook calls ``.item()``,
``float()``, ``bool()`` or ``.numpy()`` on a tensor itself: on a CUDA tensor ``.numpy()`` raises, and every other
read waits for the device once per read. Nothing read stays on the device after the step."""

from __future__ import annotations


def host(values: dict) -> dict:
    """``values`` (name -> a tensor, a list of tensors, a number or None) as the step recorded them: a tensor of one
    element as a float, a list of tensors as CPU float32 tensors; numbers and None as they were."""
    import torch

    out: dict = {}
    scalars: dict = {}  # device -> [(name, detached one-element tensor)]
    for name, value in values.items():
        if isinstance(value, torch.Tensor):
            scalars.setdefault(value.device, []).append((name, value.detach().reshape(()).to(torch.float32)))
        elif isinstance(value, (list, tuple)):  # copies: the script's own tensors change in place later
            out[name] = [t.detach().to(device="cpu", dtype=torch.float32, copy=True) for t in value]
        else:
            out[name] = value
    for device, named in scalars.items():
        stacked = torch.stack([t for _, t in named])
        numbers = (stacked if device.type == "cpu" else stacked.to("cpu")).tolist()
        out.update(zip((name for name, _ in named), numbers))
    return out
