"""Packages that replace torch names when they are imported: where a program imports one, the name runs that
package's class, not torch's.

Intel Extension for PyTorch (IPEX), read in its sources (intel/intel-extension-for-pytorch, the release tags named):
- ``intel_extension_for_pytorch/cpu/autocast/_autocast_mode.py`` (v1.12.0 to v2.1.x, removed in v2.2.0) binds
  ``torch.cpu.amp.autocast = _autocast`` on import: IPEX's own autocast, which accepts float16 on the CPU. torch's
  own CPU autocast before 2.2 accepts bfloat16 only: ``torch.autocast("cpu", dtype=torch.half)`` warns "CPU Autocast
  only supports dtype of torch.bfloat16" and turns itself off (float16 on CPU came with pytorch/pytorch#112484).
- ``intel_extension_for_pytorch/cpu/autocast/_grad_scaler.py`` (v2.0.0 to v2.8.0, the newest release) binds
  ``torch.cpu.amp.GradScaler = GradScaler`` on import: a plain IPEX class with no deprecation warning.
IPEX x.y is built for torch x.y alone (its installation guide pins the pair), so its versions bound torch's.
"""

from __future__ import annotations

from typing import NamedTuple

IPEX = "intel_extension_for_pytorch"


class TorchPatch(NamedTuple):
    package: str  # the top-level module whose import replaces the name
    name: str  # the torch name replaced (``torch.cpu.amp.autocast``)
    torch_from: str  # the first torch the replacing releases run on
    torch_until: str | None  # the first torch none of them runs on; None: the newest release still replaces it
    source: str  # the package's file that replaces it, and the releases that have it
    effect: str  # what the replacement does that torch's own does not, for messages


PATCHES = (
    TorchPatch(
        IPEX,
        "torch.cpu.amp.autocast",
        "1.12",
        "2.2",
        "intel_extension_for_pytorch/cpu/autocast/_autocast_mode.py, IPEX 1.12-2.1",
        "an autocast that accepts float16 on the CPU, which torch's own CPU autocast of those releases turns off",
    ),
    TorchPatch(
        IPEX,
        "torch.cpu.amp.GradScaler",
        "2.0",
        None,
        "intel_extension_for_pytorch/cpu/autocast/_grad_scaler.py, IPEX 2.0-2.8",
        "a GradScaler of its own, which is not deprecated",
    ),
)

# The packages the project facts look for among a program's imports.
PATCHING_PACKAGES = frozenset(p.package for p in PATCHES)


def patches_of(name: str, imported) -> list[TorchPatch]:
    """The replacements of the torch name ``name`` by the packages in ``imported``."""
    return [p for p in PATCHES if p.name == name and p.package in imported]
