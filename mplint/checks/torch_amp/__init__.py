"""MPT201-MPT206: PyTorch's GradScaler and autocast in a training loop.

The rules (``TorchRule``s, the base class every PyTorch rule shares) and the analysis only they use: the
path-sensitive order of backward, unscale_, clip, step and update in a loop (``torch_loop``). The file's lexical
context (autocast regions, GradScalers, optimizers) is ``mplint.analysis.torch_amp``, which other PyTorch rules read
too.
"""
