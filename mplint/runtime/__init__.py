"""Mixed precision at run time: pick the policy for this hardware, scale losses, check built models.

Keras is optional for mplint (the ``runtime`` extra, ``python3 -m pip install ".[runtime]"`` in a clone of mplint,
brings it with TensorFlow; Keras 3 on JAX or torch needs only ``keras`` and that backend); it is imported only when
one of these functions is called, and TensorFlow only on its own backend. The PyTorch half is
``mplint.runtime.torch_precision`` (``choose``, ``Scaler``, ``check_model``); torch too is imported only when they
are called.
"""

from mplint.runtime.model_checks import RuntimeFinding, check_model
from mplint.runtime.policy import PolicyChoice, enable
from mplint.runtime.scaling import apply, apply_gradients, scale_loss, stateless_apply, wrap_optimizer

__all__ = [
    "PolicyChoice",
    "RuntimeFinding",
    "apply",
    "apply_gradients",
    "check_model",
    "enable",
    "scale_loss",
    "stateless_apply",
    "wrap_optimizer",
]
