"""Mixed precision at run time: pick the policy for this hardware, scale losses, check built models.

TensorFlow is optional for mplint (the ``runtime`` extra: ``python3 -m pip install ".[runtime]"`` in a clone
of mplint); it is imported only when
one of these functions is called. The PyTorch half is ``mplint.runtime.torch_precision`` (``choose``, ``Scaler``,
``check_model``); torch too is imported only when they are called.
"""

from mplint.runtime.model_checks import RuntimeFinding, check_model
from mplint.runtime.policy import PolicyChoice, enable
from mplint.runtime.scaling import apply_gradients, scale_loss, wrap_optimizer

__all__ = [
    "PolicyChoice",
    "RuntimeFinding",
    "apply_gradients",
    "check_model",
    "enable",
    "scale_loss",
    "wrap_optimizer",
]
