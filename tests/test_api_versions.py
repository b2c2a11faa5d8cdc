"""The API table: its newest end checked on the frameworks installed here, and every name a fix writes exists on every
version of the range the fix is offered for (safe) or the fix is unsafe and says where it holds."""

from __future__ import annotations

import importlib
import inspect
import re

import pytest
from conftest import KERAS_LOOP, PER_LAYER
from packaging.version import Version

from mplint.knowledge.api_versions import KERAS, LOSS_SCALE_OPTIMIZER, TORCH, TORCH_SINCE, keras_holds
from mplint.testing import lint_code


@pytest.mark.parametrize("name", sorted(TORCH))
def test_every_torch_name_exists_in_the_installed_torch(name):
    torch = pytest.importorskip("torch")
    assert Version(torch.__version__.split("+")[0]) >= Version(TORCH[name].since)
    api, _, parameter = name.partition("(")  # "torch.cuda.amp.autocast(dtype=)": a parameter of the API
    module, _, attr = api.rpartition(".")
    assert hasattr(importlib.import_module(module), attr)
    if parameter:
        assert parameter.rstrip("=)") in inspect.signature(getattr(importlib.import_module(module), attr)).parameters
    assert TORCH[name].source


@pytest.mark.parametrize("member, generations", sorted(LOSS_SCALE_OPTIMIZER.items()))
def test_loss_scale_optimizer_members_by_generation(member, generations):
    keras3 = pytest.importorskip("keras")
    tf_keras = pytest.importorskip("tf_keras")
    for generation, keras in ((3, keras3), (2, tf_keras)):
        optimizer = keras.mixed_precision.LossScaleOptimizer(keras.optimizers.SGD())
        if generation == 3:  # Keras 3 creates its scale and counter when the optimizer is built
            optimizer.build([keras.Variable(1.0)])
        assert hasattr(optimizer, member) is (generation in generations), (generation, member)


def test_module_names_and_constructor_keywords_on_the_installed_generations():
    keras3 = pytest.importorskip("keras")
    tf_keras = pytest.importorskip("tf_keras")
    for generation, keras in ((3, keras3), (2, tf_keras)):
        for name, row in KERAS.items():
            if "(" in name or "." not in name:
                continue
            module, _, attr = name.rpartition(".")
            owner = keras
            for part in module.split("."):
                owner = getattr(owner, part, None)
            here = generation in row.generations and (
                row.tf_until is None or Version(keras.__version__) <= Version(row.tf_until + ".99")
            )
            assert (owner is not None and hasattr(owner, attr)) is here, (generation, name)
        # the keywords both generations accept, and the one only Keras 2 has
        keras.mixed_precision.LossScaleOptimizer(keras.optimizers.SGD(), initial_scale=256.0, dynamic_growth_steps=10)
        if generation == 2:
            keras.mixed_precision.LossScaleOptimizer(keras.optimizers.SGD(), dynamic=False, initial_scale=128.0)
        else:
            with pytest.raises(ValueError, match="no longer supports `dynamic=False`"):
                keras.mixed_precision.LossScaleOptimizer(keras.optimizers.SGD(), dynamic=False)
            keras.optimizers.SGD(loss_scale_factor=128.0)


def test_every_row_cites_a_source():
    assert all(row.source for row in KERAS.values()) and all(row.source for row in TORCH.values())


def test_range_check():
    assert keras_holds({"mixed_precision.LossScaleOptimizer"}, [2, 3])
    assert not keras_holds({"mixed_precision.LossScaleOptimizer"}, [1, 2, 3])
    assert not keras_holds({"scale_loss"}, [2, 3]) and keras_holds({"scale_loss"}, [3])
    assert keras_holds({"mixed_precision.experimental.set_policy"}, [2], "2.8.0")
    assert not keras_holds({"mixed_precision.experimental.set_policy"}, [2], "2.9.0")
    assert not keras_holds({"mixed_precision.experimental.set_policy"}, [2], None)


def test_every_replacement_mpt502_writes_is_in_the_table():
    from mplint.checks.mpt502_deprecated_cuda_amp_api import _DEPRECATED

    assert {f"torch.amp.{name}" for _, name in _DEPRECATED.values()} <= set(TORCH_SINCE)


# --- every name a Keras fix writes, on the range it is offered for ------------------------------------------------


_WRITTEN = re.compile(
    r"\.(get_scaled_loss|get_unscaled_gradients|scale_loss|dynamic_scale)\(|"
    r"(mixed_precision|optimizers)\.LossScaleOptimizer\("
)


def _written(text: str) -> set[str]:
    return {m.group(1) or f"{m.group(2)}.LossScaleOptimizer" for m in _WRITTEN.finditer(text)}


@pytest.mark.parametrize("rule, code", [("MP201", KERAS_LOOP), ("MP207", PER_LAYER)])
@pytest.mark.parametrize(
    "keras, pin, generations", [(2, None, [2]), (3, None, [3]), (None, "tensorflow>=2.3", [1, 2, 3])]
)
def test_a_safe_keras_fix_writes_only_names_the_whole_range_has(rule, code, keras, pin, generations):
    files = {"requirements.txt": f"{pin}\n"} if pin else None
    (diagnostic,) = lint_code(code, files=files, keras=keras, select=[rule]).diagnostics
    fixed = lint_code(code, files=files, keras=keras, select=[rule], fix=True, unsafe_fixes=True).fixed_code
    written = _written(fixed) - _written(code)
    assert written
    assert (diagnostic.fix_safety.value == "safe") is keras_holds(written, generations), (written, diagnostic.message)
    if diagnostic.fix_safety.value != "safe":
        assert "the fix holds on " in diagnostic.message
