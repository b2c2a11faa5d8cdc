"""Since which framework version each mixed-precision name a fix may write exists.

torch: the versions the rule catalog's vocabulary gives (``torch.cuda.amp`` from 1.6, ``torch.autocast`` 1.10,
``torch.amp.autocast`` 1.12, ``torch.amp.GradScaler`` 2.3, ``torch.amp.custom_fwd/custom_bwd`` 2.4); Keras: the
generations whose LossScaleOptimizer has the name. ``tests/test_api_versions.py`` checks every entry against the
frameworks installed here (the newest end of each range) and every fix against the range it is offered for.
"""

from __future__ import annotations

TORCH_SINCE = {
    "torch.cuda.amp.autocast": "1.6",
    "torch.cuda.amp.GradScaler": "1.6",
    "torch.cuda.amp.custom_fwd": "1.6",
    "torch.cuda.amp.custom_bwd": "1.6",
    "torch.autocast": "1.10",
    "torch.amp.autocast": "1.12",
    "torch.amp.GradScaler": "2.3",
    "torch.amp.custom_fwd": "2.4",
    "torch.amp.custom_bwd": "2.4",
}

# LossScaleOptimizer members by Keras generation (2: Keras 2 / tf_keras, 3: Keras 3).
LOSS_SCALE_OPTIMIZER = {
    "get_scaled_loss": frozenset({2}),
    "get_unscaled_gradients": frozenset({2}),
    "loss_scale": frozenset({2}),
    "dynamic_counter": frozenset({2}),
    "scale_loss": frozenset({3}),
    "dynamic_scale": frozenset({3}),
    "step_counter": frozenset({3}),
}


def torch_since(name: str) -> str:
    return TORCH_SINCE[name]
