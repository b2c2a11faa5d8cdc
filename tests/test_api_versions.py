"""The names fixes write exist where the knowledge table says, checked on the newest end installed here."""

from __future__ import annotations

import importlib

import pytest
from packaging.version import Version

from mplint.knowledge.api_versions import LOSS_SCALE_OPTIMIZER, TORCH_SINCE


@pytest.mark.parametrize("name", sorted(TORCH_SINCE))
def test_every_torch_name_exists_in_the_installed_torch(name):
    torch = pytest.importorskip("torch")
    assert Version(torch.__version__.split("+")[0]) >= Version(TORCH_SINCE[name])
    module, _, attr = name.rpartition(".")
    assert hasattr(importlib.import_module(module), attr)


@pytest.mark.parametrize("member, generations", sorted(LOSS_SCALE_OPTIMIZER.items()))
def test_loss_scale_optimizer_members_by_generation(member, generations):
    keras3 = pytest.importorskip("keras")
    tf_keras = pytest.importorskip("tf_keras")
    for generation, keras in ((3, keras3), (2, tf_keras)):
        optimizer = keras.mixed_precision.LossScaleOptimizer(keras.optimizers.SGD())
        if generation == 3:  # Keras 3 creates its scale and counter when the optimizer is built
            optimizer.build([keras.Variable(1.0)])
        assert hasattr(optimizer, member) is (generation in generations), (generation, member)


def test_every_replacement_mpt502_writes_is_in_the_table():
    from mplint.checks.mpt502_deprecated_cuda_amp_api import _DEPRECATED

    assert {f"torch.amp.{name}" for _, name in _DEPRECATED.values()} <= set(TORCH_SINCE)
