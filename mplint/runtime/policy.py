"""``enable()``: choose the global policy for the hardware this process runs on."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

from mplint.knowledge.policies import MIXED_POLICIES, POLICY_NAMES
from mplint.runtime.keras_generation import backend_of, keras_module

log = logging.getLogger("mplint.runtime")

# What enable() may be asked for: the choice left to the hardware, float32 or a mixed policy.
POLICIES = ("auto", *(p for p in POLICY_NAMES if p == "float32" or p in MIXED_POLICIES))


@dataclass(frozen=True)
class Hardware:
    device: str  # "TPU", "GPU" or "CPU"
    name: str
    compute_capability: tuple[int, int] | None = None

    @property
    def has_tensor_cores(self) -> bool:
        return self.device == "GPU" and (self.compute_capability or (0, 0)) >= (7, 0)


@dataclass(frozen=True)
class PolicyChoice:
    """What :func:`enable` set and why."""

    policy: str
    reason: str
    hardware: Hardware
    keras: int
    alternatives: tuple[str, ...] = ()
    findings: tuple = field(default_factory=tuple)  # RuntimeFinding, e.g. MP801
    backend: str = "tensorflow"  # Keras 3's backend (jax, torch, tensorflow); Keras 2's is always TensorFlow


def detect_hardware(strategy=None, backend: str = "tensorflow") -> Hardware:
    """The accelerator this process trains on, as the Keras backend sees it (TensorFlow's devices, ``jax.devices()``
    or ``torch.cuda``): only the backend in use is imported."""
    if backend == "jax":
        return _jax_hardware()
    if backend == "torch":
        return _torch_hardware()
    return _tensorflow_hardware(strategy)


def _tensorflow_hardware(strategy) -> Hardware:
    import tensorflow as tf

    if strategy is None and tf.distribute.has_strategy():
        strategy = tf.distribute.get_strategy()
    on_tpu_strategy = strategy is not None and "TPU" in type(strategy).__name__
    if on_tpu_strategy or tf.config.list_logical_devices("TPU"):
        return Hardware("TPU", "TPU")
    gpus = tf.config.list_physical_devices("GPU")
    if gpus:
        details = tf.config.experimental.get_device_details(gpus[0])
        return Hardware("GPU", details.get("device_name", gpus[0].name), details.get("compute_capability"))
    return Hardware("CPU", "CPU")


def _jax_hardware() -> Hardware:
    import jax

    device = jax.devices()[0]  # the default backend's: TPU, else GPU, else CPU
    kind = getattr(device, "device_kind", "") or device.platform
    if device.platform == "tpu":
        return Hardware("TPU", kind)
    if device.platform in ("gpu", "cuda", "rocm"):
        return Hardware("GPU", kind, _capability(getattr(device, "compute_capability", None)))
    return Hardware("CPU", "CPU")


def _capability(value) -> tuple[int, int] | None:
    """``"8.6"`` (jax's CUDA devices) as (8, 6); None where the device does not say."""
    try:
        major, minor = str(value).split(".")[:2]
        return int(major), int(minor)
    except (TypeError, ValueError):
        return None


def _torch_hardware() -> Hardware:
    import torch

    if torch.cuda.is_available():
        major, minor = torch.cuda.get_device_capability(0)
        return Hardware("GPU", torch.cuda.get_device_name(0), (int(major), int(minor)))
    return Hardware("CPU", "CPU")


def _auto(hw: Hardware) -> tuple[str, str, tuple[str, ...]]:
    if hw.device == "TPU":
        return "mixed_bfloat16", "TPU: bfloat16 needs no loss scaling", ()
    if hw.has_tensor_cores:
        major, minor = hw.compute_capability
        alternatives = ("mixed_bfloat16",) if hw.compute_capability >= (8, 0) else ()
        return "mixed_float16", f"{hw.name} (compute capability {major}.{minor}) has Tensor Cores", alternatives
    if hw.device == "GPU":
        major, minor = hw.compute_capability or (0, 0)
        return "float32", f"{hw.name} (compute capability {major}.{minor}) has no Tensor Cores (needs 7.0)", ()
    return "float32", "no GPU or TPU found: float16 is slower than float32 on CPUs", ()


def enable(policy: str = "auto", *, keras: int | None = None, strategy=None) -> PolicyChoice:
    """Set the global Keras policy and return what was chosen and why.

    ``policy="auto"`` picks mixed_float16 on GPUs with compute capability >= 7.0 (mixed_bfloat16
    offered from 8.0), mixed_bfloat16 on TPUs and float32 elsewhere. An explicit policy is set as
    asked, with MP801 when it is float16 on hardware without Tensor Cores. ``keras`` (2 or 3)
    defaults to the Keras this process uses. Call it before building models (also inside
    ``strategy.scope()``: the policy is global). The hardware is the Keras backend's: TensorFlow's devices,
    ``jax.devices()`` or ``torch.cuda``; TensorFlow is not imported on the jax and torch backends.
    """
    from mplint.runtime.model_checks import RuntimeFinding

    if policy not in POLICIES:
        raise ValueError(f"policy must be one of {', '.join(POLICIES)}, not {policy!r}")
    module = keras_module(keras)
    backend = backend_of(module)
    hw = detect_hardware(strategy, backend)
    findings: tuple = ()
    if policy == "auto":
        chosen, reason, alternatives = _auto(hw)
        if chosen == "float32" and hw.device != "TPU":
            findings = (RuntimeFinding("MP801", f"mixed_float16 not enabled: {reason}"),)
    else:
        chosen, reason, alternatives = policy, "requested", ()
        if policy == "mixed_float16" and not hw.has_tensor_cores and hw.device != "TPU":
            findings = (
                RuntimeFinding("MP801", f"mixed_float16 on {hw.name} without Tensor Cores: expect no speed-up"),
            )
    module.mixed_precision.set_global_policy(chosen)
    for finding in findings:
        log.warning("%s %s", finding.rule_id, finding.message)
    log.info("mplint.runtime: policy %s (%s)", chosen, reason)
    generation = 2 if module.__name__ == "tf_keras" else 3
    return PolicyChoice(chosen, reason, hw, generation, alternatives, findings, backend)
