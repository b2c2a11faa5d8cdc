"""Which mixed-precision names exist in which framework versions: the names fixes write, each with where it was checked.

Keras (read from the sources at their release tags, every tag of each span: ``keras-team/keras`` v2.6.0-v2.15.0, the
``tf.keras`` of TF 2.6-2.15; ``keras-team/tf-keras`` v2.15.0-v2.21.0; ``keras-team/keras`` v3.0.0-v3.15.1; the
``@keras_export`` names and the ``LossScaleOptimizer`` class of ``mixed_precision/loss_scale_optimizer.py`` /
``optimizers/loss_scale_optimizer.py``). TF 2.4-2.5 shipped ``tf.keras`` inside TensorFlow: checked in
``tensorflow/python/keras/mixed_precision/loss_scale_optimizer.py`` of tensorflow/tensorflow at 0029a3c3, a
pre-2.6 commit whose ``LossScaleOptimizer`` is the non-experimental one (its tag was not available to check against).
Generations: 1 = TF 2.1-2.3 (``experimental`` only), 2 = Keras 2 (TF 2.4-2.15, tf_keras), 3 = Keras 3.

torch (read in the Python sources of the PyPI wheels of each release: 1.6.0, 1.9.0, 1.10.0, 1.11.0, 1.12.0, 1.13.0,
2.0.0-2.4.0; the repository itself is too large to fetch): ``torch/__init__.py`` binds ``autocast`` from 1.10
(``from .autocast_mode import autocast``; absent on 1.9.0), ``torch/amp/`` first exists in 1.12 (``autocast_mode.py``,
``torch.amp.autocast``), ``torch/amp/grad_scaler.py`` in 2.3, and ``torch/amp/__init__.py`` exports ``custom_fwd``/
``custom_bwd`` from 2.4. ``torch.autocast(device_type, enabled=True, **kwargs)`` of 1.10 takes ``dtype`` and
``cache_enabled`` as keywords, as every later one does.

``tests/test_api_versions.py`` checks the newest end of each row against the frameworks installed here and that every
name a fix writes is in this table for every version of the range the fix is offered for.
"""

from __future__ import annotations

from typing import NamedTuple

from mplint.knowledge.loss_scale_names import LSO_MEMBERS


class KerasName(NamedTuple):
    generations: frozenset[int]  # the Keras generations that have it
    tf_until: str | None  # the last TF minor version that has it, where it was removed inside a generation
    source: str


_K2 = "keras-team/keras v2.6.0-v2.15.0 and keras-team/tf-keras v2.15.0-v2.21.0, keras/mixed_precision/loss_scale_optimizer.py"
_K2_TF = (
    "tensorflow/tensorflow@0029a3c3 tensorflow/python/keras/mixed_precision/loss_scale_optimizer.py (TF 2.4-2.5); "
    + _K2
)
_K3 = "keras-team/keras v3.0.0-v3.15.1, keras/src/optimizers/loss_scale_optimizer.py"

KERAS = {
    # LossScaleOptimizer(opt): positional inner optimizer in both generations; Keras 2's second parameter is `dynamic`,
    # Keras 3's `initial_scale`, so only the one-argument call and the keywords below mean the same in both.
    "mixed_precision.LossScaleOptimizer": KerasName(frozenset({2, 3}), None, f"{_K2_TF}; {_K3}"),
    "LossScaleOptimizer(initial_scale=)": KerasName(frozenset({2, 3}), None, f"{_K2_TF}; {_K3}"),
    "LossScaleOptimizer(dynamic_growth_steps=)": KerasName(frozenset({2, 3}), None, f"{_K2_TF}; {_K3}"),
    "LossScaleOptimizer(dynamic=)": KerasName(frozenset({2}), None, _K2_TF),
    "optimizers.LossScaleOptimizer": KerasName(
        frozenset({3}), None, _K3 + " (@keras_export keras.optimizers.LossScaleOptimizer)"
    ),
    "mixed_precision.set_global_policy": KerasName(
        frozenset({2, 3}), None, f"{_K2}; keras-team/keras v3.0.0-v3.15.1 dtype policy module"
    ),
    "mixed_precision.experimental.LossScaleOptimizer": KerasName(
        frozenset({1, 2}), "2.8", "keras-team/keras v2.6.0-v2.8.0; absent from v2.9.0"
    ),
    "mixed_precision.experimental.set_policy": KerasName(
        frozenset({1, 2}), "2.8", "keras-team/keras v2.6.0-v2.8.0; absent from v2.9.0"
    ),
    # LossScaleOptimizer members
    "get_scaled_loss": KerasName(frozenset({2}), None, _K2_TF),
    "get_unscaled_gradients": KerasName(frozenset({2}), None, _K2_TF),
    "loss_scale": KerasName(frozenset({2}), None, _K2_TF),
    "dynamic_counter": KerasName(frozenset({2}), None, _K2_TF),
    "scale_loss": KerasName(frozenset({3}), None, _K3),
    "dynamic_scale": KerasName(frozenset({3}), None, _K3),
    "step_counter": KerasName(frozenset({3}), None, _K3),
    # an optimizer's own scaling argument (BaseOptimizer.__init__)
    "optimizer(loss_scale_factor=)": KerasName(
        frozenset({3}), None, "keras-team/keras v3.0.0-v3.15.1, keras/src/optimizers/base_optimizer.py"
    ),
}

# The LossScaleOptimizer members above, by generation (the form tests and MP502 read).
LOSS_SCALE_OPTIMIZER = {name: KERAS[name].generations for name in sorted(LSO_MEMBERS)}


class TorchName(NamedTuple):
    since: str
    source: str


_AMP_2_4 = (
    "https://github.com/pytorch/pytorch/pull/126531 (merged 2024-05, the 2.4 deprecation of torch.cuda.amp."
    "custom_fwd/custom_bwd in favour of torch.amp's); https://pytorch.org/docs/2.4/amp.html"
)

_WHEELS = "the torch wheels' sources (see the module docstring)"
TORCH = {
    "torch.cuda.amp.autocast": TorchName("1.6", f"torch/cuda/amp/autocast_mode.py in 1.6.0, {_WHEELS}"),
    "torch.cuda.amp.GradScaler": TorchName("1.6", f"torch/cuda/amp/grad_scaler.py in 1.6.0, {_WHEELS}"),
    "torch.cuda.amp.custom_fwd": TorchName("1.6", f"torch/cuda/amp/autocast_mode.py in 1.6.0, {_WHEELS}"),
    "torch.cuda.amp.custom_bwd": TorchName("1.6", f"torch/cuda/amp/autocast_mode.py in 1.6.0, {_WHEELS}"),
    "torch.cpu.amp.autocast": TorchName(
        "1.10", f"torch/cpu/amp/autocast_mode.py in 1.10.0, no torch/cpu in 1.9.0, {_WHEELS}"
    ),
    "torch.cpu.amp.GradScaler": TorchName(
        "2.3",
        "torch/cpu/amp/grad_scaler.py subclasses torch.amp.GradScaler (torch/amp/grad_scaler.py, first in 2.3.0); "
        "both came with the CPU GradScaler of https://github.com/pytorch/pytorch/issues/111559",
    ),
    # the dtype/cache_enabled parameters: torch.cuda.amp.autocast(enabled=True) alone in 1.6-1.9
    "torch.cuda.amp.autocast(dtype=)": TorchName(
        "1.10", f"torch/cuda/amp/autocast_mode.py in 1.10.0 and 1.9.0, {_WHEELS}"
    ),
    "torch.autocast": TorchName("1.10", f"torch/__init__.py in 1.10.0, absent from 1.9.0, {_WHEELS}"),
    "torch.amp.autocast": TorchName("1.12", f"torch/amp/autocast_mode.py in 1.12.0, no torch/amp in 1.11.0, {_WHEELS}"),
    "torch.amp.GradScaler": TorchName("2.3", f"torch/amp/grad_scaler.py in 2.3.0, absent from 2.2.0, {_WHEELS}"),
    "torch.amp.custom_fwd": TorchName(
        "2.4", f"torch/amp/__init__.py in 2.4.0, absent from 2.3.0, {_WHEELS}; {_AMP_2_4}"
    ),
    "torch.amp.custom_bwd": TorchName(
        "2.4", f"torch/amp/__init__.py in 2.4.0, absent from 2.3.0, {_WHEELS}; {_AMP_2_4}"
    ),
}

TORCH_SINCE = {name: row.since for name, row in TORCH.items()}


def torch_since(name: str) -> str:
    return TORCH[name].since


def keras_holds(names, generations, tf_newest: str | None = None) -> bool:
    """Whether every name in ``names`` exists in every admitted generation (and, for a name removed inside a
    generation, on the newest TF the range admits; unknown newest: not)."""
    from packaging.version import Version

    for name in names:
        row = KERAS[name]
        if not set(generations) <= row.generations:
            return False
        if row.tf_until and (tf_newest is None or Version(tf_newest).release[:2] > Version(row.tf_until).release[:2]):
            return False
    return True


# Finer than generations, for version guards: the experimental module outlived G1 until TF 2.8.
G1, K2_EARLY, K2, K3 = "G1 (TF 2.1-2.3)", "Keras 2 (TF 2.4-2.8)", "Keras 2 (TF >= 2.9 or tf_keras)", "Keras 3"
ERAS = (G1, K2_EARLY, K2, K3)
ERA_GENERATION = {G1: 1, K2_EARLY: 2, K2: 2, K3: 3}


def keras_eras(name: str) -> frozenset[str]:
    """The eras in which the Keras name ``name`` (a row of ``KERAS``) exists."""
    row = KERAS[name]
    return frozenset(e for e in ERAS if ERA_GENERATION[e] in row.generations and not (row.tf_until and e == K2))


def eras_of(generations, tf_newest: str | None = None) -> frozenset[str]:
    """The eras a range of generations spans (TF >= 2.9 only where the newest TF the range admits reaches it)."""
    from packaging.version import Version

    late = not tf_newest or Version(tf_newest).release[:2] >= (2, 9)
    return frozenset(e for e in ERAS if ERA_GENERATION[e] in set(generations) and (e != K2 or late))


def eras_label(eras) -> str:
    """ "Keras 2 or Keras 3"; an era of Keras 2 alone keeps its TF versions."""
    names = [e for e in ERAS if e in eras]
    if K2_EARLY in eras and K2 in eras:
        names = [e for e in names if e != K2_EARLY]
        names[names.index(K2)] = "Keras 2"
    return " or ".join(names)
