"""PyTorch mixed precision at run time: the dtype for this hardware, and an autocast context and a loss scaler
spelled right for the installed torch.

``choose()`` picks bfloat16 on GPUs that compute in it (compute capability >= 8.0), float16 with a loss scaler on
GPUs with Tensor Cores but no bfloat16 (7.x), float32 elsewhere (a CPU unless asked), and says why. The spellings come
from the API table in ``mplint.knowledge.api_versions``: ``torch.amp.autocast`` / ``torch.autocast`` (1.10) /
``torch.cuda.amp.autocast`` (1.6, CUDA and float16 only), ``torch.amp.GradScaler(device)`` (2.3) /
``torch.cuda.amp.GradScaler()`` (CUDA only). ``Scaler`` keeps the GradScaler order in one loop for every dtype;
``check_model`` runs a model once under autocast. torch is imported only when these functions are called.
"""

from __future__ import annotations

import contextlib
import logging
from dataclasses import dataclass, field

from mplint.knowledge.api_versions import torch_since
from mplint.runtime.install_hints import TORCH, require
from mplint.runtime.policy import Hardware
from mplint.runtime.torch_model_checks import check_model
from mplint.runtime.torch_scaling import Scaler

__all__ = ["Scaler", "Spelling", "TorchPrecision", "check_model", "choose"]

log = logging.getLogger("mplint.runtime")

DTYPES = ("auto", "float32", "float16", "bfloat16")
AUTOCASTS = ("torch.amp.autocast", "torch.autocast")  # newest first; both take (device_type, dtype=)
SCALERS = ("torch.amp.GradScaler",)  # takes the device


@dataclass(frozen=True)
class Spelling:
    """The names this torch has for ``device``: None where it has none (then that precision is not available)."""

    autocast: str | None
    scaler: str | None

    @property
    def autocast_takes_dtype(self) -> bool:
        return self.autocast in AUTOCASTS


def torch_version(torch) -> str:
    from packaging.version import Version

    return Version(str(torch.__version__)).base_version


def _resolve(torch, name: str):
    """``name`` ("torch.amp.GradScaler") on this torch, or None when missing or older than the table's version."""
    from packaging.version import Version

    if Version(torch_version(torch)) < Version(torch_since(name)):
        return None
    found = torch
    for part in name.split(".")[1:]:
        found = getattr(found, part, None)
        if found is None:
            return None
    return found


def spelling(torch, device_type: str) -> Spelling:
    autocast = next((name for name in AUTOCASTS if _resolve(torch, name) is not None), None)
    if autocast is None and device_type == "cuda" and _resolve(torch, "torch.cuda.amp.autocast") is not None:
        autocast = "torch.cuda.amp.autocast"
    scaler = next((name for name in SCALERS if _resolve(torch, name) is not None), None)
    if scaler is None and device_type == "cuda" and _resolve(torch, "torch.cuda.amp.GradScaler") is not None:
        scaler = "torch.cuda.amp.GradScaler"
    return Spelling(autocast, scaler)


def detect_hardware(torch, device_type: str) -> Hardware:
    if device_type == "cuda" and torch.cuda.is_available():
        index = torch.cuda.current_device()
        return Hardware("GPU", torch.cuda.get_device_name(index), tuple(torch.cuda.get_device_capability(index)))
    return Hardware(device_type.upper(), device_type.upper())


@dataclass(frozen=True)
class TorchPrecision:
    """What :func:`choose` picked and why, with the autocast and scaler for it."""

    dtype: str  # "float32", "float16" or "bfloat16"
    device_type: str
    reason: str
    hardware: Hardware
    spelling: Spelling
    torch_version: str
    findings: tuple = field(default_factory=tuple)  # RuntimeFinding, e.g. MP801

    @property
    def scaling(self) -> bool:
        return self.dtype == "float16"

    def autocast(self):
        """The autocast region for the forward pass and the loss; a no-op context under float32."""
        import torch

        if self.dtype == "float32":
            return contextlib.nullcontext()
        if self.spelling.autocast == "torch.cuda.amp.autocast":
            return torch.cuda.amp.autocast()  # before 1.10: no dtype parameter, float16 only
        return _resolve(torch, self.spelling.autocast)(self.device_type, dtype=getattr(torch, self.dtype))

    def grad_scaler(self, **options):
        """This torch's GradScaler for the device (``options``: init_scale, growth_interval, ...); None unless float16."""
        import torch

        if not self.scaling:
            return None
        if self.spelling.scaler == "torch.cuda.amp.GradScaler":
            return torch.cuda.amp.GradScaler(**options)
        return _resolve(torch, self.spelling.scaler)(self.device_type, **options)

    def scaler(self, *, accumulation_steps: int = 1, **options) -> Scaler:
        """A :class:`Scaler` around :meth:`grad_scaler`: the same training loop under every dtype."""
        return Scaler(self.grad_scaler(**options), accumulation_steps=accumulation_steps)


def _auto(hw: Hardware, sp: Spelling) -> tuple[str, str]:
    if hw.device != "GPU":
        return "float32", f"no CUDA GPU: float32 on {hw.name} unless asked (reduced precision is rarely faster there)"
    major, minor = hw.compute_capability or (0, 0)
    gpu = f"{hw.name} (compute capability {major}.{minor})"
    if (major, minor) >= (8, 0) and sp.autocast_takes_dtype:
        return "bfloat16", f"{gpu} computes in bfloat16: float32's range, no loss scaling"
    if hw.has_tensor_cores and sp.autocast and sp.scaler:
        no_bf16 = "no bfloat16" if (major, minor) < (8, 0) else "no bfloat16 autocast before torch 1.10"
        return "float16", f"{gpu} has Tensor Cores and {no_bf16}: float16 with loss scaling"
    return "float32", f"{gpu} has no Tensor Cores (needs 7.0)"


def _unavailable(dtype: str, device_type: str, hw: Hardware, sp: Spelling, version: str) -> str | None:
    """Why this torch cannot run ``dtype`` autocast on the device, or None."""
    if dtype == "float32":
        return None
    if sp.autocast is None:
        return f"torch {version} has no autocast for {device_type} (torch.autocast came in {torch_since('torch.autocast')})"
    if dtype == "bfloat16":
        if not sp.autocast_takes_dtype:
            return f"torch {version} autocasts only to float16 (a dtype came with torch.autocast in {torch_since('torch.autocast')})"
        if hw.device == "GPU" and (hw.compute_capability or (0, 0)) < (8, 0):
            return f"{hw.name} does not compute in bfloat16 (needs compute capability 8.0)"
    if dtype == "float16" and sp.scaler is None:
        return (
            f"torch {version} has no GradScaler for {device_type} "
            f"(torch.amp.GradScaler(device) came in {torch_since('torch.amp.GradScaler')})"
        )
    return None


def choose(dtype: str = "auto", *, device=None) -> TorchPrecision:
    """The precision to train in on ``device`` (default: CUDA when available, else CPU), and why; logged.

    ``dtype="auto"``: bfloat16 from compute capability 8.0, float16 (scaled) on 7.x, float32 below and on CPUs.
    An explicit dtype is used as asked where this torch can run it on the device, else float32 with the reason.
    """
    if dtype not in DTYPES:
        raise ValueError(f"dtype must be one of {', '.join(DTYPES)}, not {dtype!r}")
    require("mplint.runtime.torch_precision.choose()", "PyTorch", ("torch",), TORCH)
    import torch

    from mplint.runtime.model_checks import RuntimeFinding

    device_type = torch.device(device).type if device is not None else "cuda" if torch.cuda.is_available() else "cpu"
    version = torch_version(torch)
    hw = detect_hardware(torch, device_type)
    sp = spelling(torch, device_type)
    findings: tuple = ()
    if dtype == "auto":
        chosen, reason = _auto(hw, sp)
        if chosen == "float32":
            findings = (RuntimeFinding("MP801", f"float16/bfloat16 autocast not enabled: {reason}"),)
    elif (why := _unavailable(dtype, device_type, hw, sp, version)) is not None:
        chosen, reason = "float32", f"{dtype} asked, but {why}"
        log.warning("mplint.runtime: %s", reason)
    else:
        chosen, reason = dtype, "requested"
        if dtype == "float16" and not hw.has_tensor_cores:
            findings = (
                RuntimeFinding("MP801", f"float16 autocast on {hw.name} without Tensor Cores: expect no speed-up"),
            )
    for finding in findings:
        log.warning("%s %s", finding.rule_id, finding.message)
    log.info("mplint.runtime: torch %s on %s (%s)", chosen, device_type, reason)
    return TorchPrecision(chosen, device_type, reason, hw, sp, version, findings)
