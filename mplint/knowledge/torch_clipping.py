"""PyTorch's gradient-clipping functions, as ``torch_canonical`` names them: clipping reads the gradients' values,
so a loop must unscale them first (MPT204), and apex's ``amp.master_params`` clip migrates to them (MPT501)."""

from __future__ import annotations

CLIP_APIS = frozenset(
    {
        "nn.utils.clip_grad_norm_",
        "nn.utils.clip_grad_value_",
        "nn.utils.clip_grad.clip_grad_norm_",
        "nn.utils.clip_grad.clip_grad_value_",
        "nn.utils.clip_grad_norm",
        "nn.utils.clip_grads_with_norm_",
    }
)
