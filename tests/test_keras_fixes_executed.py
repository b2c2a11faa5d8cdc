"""Safe Keras fixes executed before and after ``--fix`` on both generations they write for: Keras 3 (``keras``) and
Keras 2 (``tf_keras``), in this process on CPU. Each source is linted and fixed through mplint itself; the test then
runs the code as written and as fixed and asserts what the rule's fix claims: the same float32 values, the repaired
update, no crash, the dtype it should have.

Loss scales are powers of two, so scaling and unscaling are exact in float32: where a fix claims to keep float32
behaviour, weights are compared with ``==`` under the float32 policy, and with a tolerance under mixed_float16.
"""

from __future__ import annotations

import os
import warnings

import numpy as np
import pytest

pytestmark = pytest.mark.tensorflow
tf = pytest.importorskip("tensorflow")
keras = pytest.importorskip("keras")
tf_keras = pytest.importorskip("tf_keras")

from mplint.diagnostics import FixSafety  # noqa: E402
from mplint.testing import lint_code  # noqa: E402
from mplint.verify.warm import run_python  # noqa: E402

SCALE = 2.0**15  # both generations' initial dynamic loss scale
KERAS = {3: keras, 2: tf_keras}


def _fresh_policies():
    """Both Keras as a new process has them: floatx float32 and no global policy set, so a policy follows floatx."""
    from keras.src.backend.common import global_state  # Keras 3 has no public way to unset its global policy

    for module in KERAS.values():
        module.backend.set_floatx("float32")
    global_state.set_global_attribute("dtype_policy", None)
    tf_keras.mixed_precision.set_global_policy(None)


@pytest.fixture(autouse=True)
def _fresh_policies_around_each_test():
    """Policies and floatx are process-wide: each test starts and leaves them as a new process has them."""
    _fresh_policies()
    yield
    _fresh_policies()


def _fixed(code: str, rule: str, generation: int | None, expect: list[tuple[int, int]], **kwargs) -> str:
    """The code after ``--fix`` (safe fixes only), having found ``rule`` at ``expect`` (line, column) first."""
    found = lint_code(code, keras=generation, select=[rule], **kwargs).diagnostics
    assert [(d.rule_id, d.line, d.column) for d in found] == [(rule, *where) for where in expect]
    assert [d.fix_safety for d in found] == [FixSafety.SAFE] * len(found)
    result = lint_code(code, keras=generation, select=[rule], fix=True, **kwargs)
    assert result.diagnostics == []
    return result.fixed_code


def _run(code: str, **names) -> dict:
    namespace = {"__name__": "__main__", **names}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        exec(compile(code, "<script>", "exec"), namespace)
    return namespace


def _update(namespace: dict) -> np.ndarray:
    return np.concatenate([np.ravel(np.asarray(u, dtype="float64")) for u in namespace["update"]])


# One step of a small regression model; {keras} is `keras` or `tf_keras`, {policy} the global policy,
# {optimizer} the optimizer's construction and {body} the step's gradient handling.
_LOOP = """import numpy as np
import tensorflow as tf
{imports}

{keras}.mixed_precision.set_global_policy("{policy}")
{keras}.utils.set_random_seed(0)
model = {keras}.Sequential([{keras}.Input((4,)), {keras}.layers.Dense(8, activation="relu"),
                            {keras}.layers.Dense(1, dtype="float32")])
optimizer = {optimizer}
x = np.random.RandomState(0).randn(16, 4).astype("float32")
y = 0.5 * x.sum(axis=1, keepdims=True)
start = [v.numpy().copy() for v in model.trainable_variables]
{setup}

def step():
    with tf.GradientTape() as tape:
        loss = tf.reduce_mean(tf.square(y - model(x)))
{body}


step()
update = [v.numpy() - s for s, v in zip(start, model.trainable_variables)]
"""


def _loop(generation: int, optimizer: str, *body: str, policy: str = "mixed_float16", setup: str = "") -> str:
    name = "keras" if generation == 3 else "tf_keras"
    return _LOOP.format(
        imports=f"import {name}",
        keras=name,
        policy=policy,
        setup=setup,
        optimizer=optimizer.format(keras=name),
        body="\n".join(f"    {line}".rstrip() for line in "\n".join(body).format(keras=name).splitlines()),
    )


_K3_LSO = "{keras}.optimizers.LossScaleOptimizer({keras}.optimizers.SGD(0.01))"
_K2_LSO = "{keras}.mixed_precision.LossScaleOptimizer({keras}.optimizers.SGD(0.01))"
_APPLY = "optimizer.apply_gradients(zip(grads, model.trainable_variables))"


def _float32(code: str) -> str:
    return code.replace('set_global_policy("mixed_float16")', 'set_global_policy("float32")')


# MP203 ---------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("generation", [3, 2], ids=["keras3", "keras2"])
def test_mp203_removed_second_unscale_restores_the_update(generation):
    """Keras 3: a hand division by dynamic_scale before apply_gradients (which divides again) makes the update
    1/32768 of the right one; Keras 2: get_unscaled_gradients then a hand division. The fix removes the extra
    division; the fixed loop then updates exactly as a plain float32 optimizer does under the float32 policy, and as
    the float32 update (within float16 noise) under mixed_float16."""
    cases = {
        3: (
            _K3_LSO,
            [
                "    scaled_loss = optimizer.scale_loss(loss)",
                "grads = tape.gradient(scaled_loss, model.trainable_variables)",
            ],
            "grads = [g / optimizer.dynamic_scale for g in grads]",
            (21, 13),
        ),
        2: (
            _K2_LSO,
            [
                "    scaled_loss = optimizer.get_scaled_loss(loss)",
                "grads = tape.gradient(scaled_loss, model.trainable_variables)",
                "grads = optimizer.get_unscaled_gradients(grads)",
            ],
            "grads = [g / optimizer.loss_scale for g in grads]",
            (21, 13),
        ),
    }
    lso, head, division, where = cases[generation]
    setup = "optimizer.build(model.trainable_variables)  # dynamic_scale exists once built\n" if generation == 3 else ""
    buggy = _loop(generation, lso, *head, division, _APPLY, setup=setup)
    fixed = _fixed(buggy, "MP203", generation, [where])
    assert fixed == _loop(generation, lso, *head, _APPLY, setup=setup)
    plain = _loop(
        generation,
        "{keras}.optimizers.SGD(0.01)",
        "grads = tape.gradient(loss, model.trainable_variables)",
        _APPLY,
        policy="float32",
    )
    reference = _update(_run(plain))
    assert np.array_equal(_update(_run(_float32(fixed))), reference)
    before, after = _update(_run(buggy)), _update(_run(fixed))
    assert np.linalg.norm(before) / np.linalg.norm(reference) == pytest.approx(1 / SCALE, rel=0.05)
    assert np.linalg.norm(after - reference) / np.linalg.norm(reference) < 0.01


# MP204 ---------------------------------------------------------------------------------------------------------

_CLIP = "grads, _ = tf.clip_by_global_norm(grads, 0.1)"
_K2_LSO_LR1 = _K2_LSO.replace("0.01", "1.0")


@pytest.mark.parametrize("generation", [3, 2], ids=["keras3", "keras2"])
def test_mp204_clip_after_unscaling_restores_the_clipped_update(generation):
    """A global-norm clip on still-scaled gradients clips 32768x harder than written. Keras 2's fix moves the clip
    after get_unscaled_gradients; Keras 3's passes global_clipnorm= to the inner optimizer, which clips what
    apply_gradients has unscaled. Either way the fixed step is the float32 loop that clips the real gradients:
    update norm lr * 0.1 (lr 1 keeps the buggy update above float32's rounding of the weights), equal to it under the float32 policy."""
    scaled = "grads = tape.gradient(scaled_loss, model.trainable_variables)"
    cases = {
        3: (
            "{keras}.optimizers.LossScaleOptimizer({keras}.optimizers.SGD(1.0))",
            ["    scaled_loss = optimizer.scale_loss(loss)", scaled, _CLIP, _APPLY],
            (20, 16),
            (
                "{keras}.optimizers.LossScaleOptimizer({keras}.optimizers.SGD(1.0, global_clipnorm=0.1))",
                ["    scaled_loss = optimizer.scale_loss(loss)", scaled, _APPLY],
            ),
        ),
        2: (
            _K2_LSO_LR1,
            [
                "    scaled_loss = optimizer.get_scaled_loss(loss)",
                scaled,
                _CLIP,
                "grads = optimizer.get_unscaled_gradients(grads)",
                _APPLY,
            ],
            (20, 16),
            (
                _K2_LSO_LR1,
                [
                    "    scaled_loss = optimizer.get_scaled_loss(loss)",
                    scaled,
                    "grads = optimizer.get_unscaled_gradients(grads)",
                    _CLIP,
                    _APPLY,
                ],
            ),
        ),
    }
    lso, body, where, (fixed_lso, fixed_body) = cases[generation]
    buggy = _loop(generation, lso, *body)
    fixed = _fixed(buggy, "MP204", generation, [where])
    assert fixed == _loop(generation, fixed_lso, *fixed_body)
    plain = _loop(
        generation,
        "{keras}.optimizers.SGD(1.0)",
        "grads = tape.gradient(loss, model.trainable_variables)",
        _CLIP,
        _APPLY,
        policy="float32",
    )
    reference = _update(_run(plain))
    assert np.linalg.norm(reference) == pytest.approx(1.0 * 0.1, rel=1e-4)  # the clip is active
    np.testing.assert_allclose(_update(_run(_float32(fixed))), reference, rtol=1e-5, atol=1e-9)
    before, after = _update(_run(buggy)), _update(_run(fixed))
    assert np.linalg.norm(before) / np.linalg.norm(reference) == pytest.approx(
        1 / SCALE, rel=0.1
    )  # float32 rounding of tiny updates
    assert np.linalg.norm(after - reference) / np.linalg.norm(reference) < 0.01


# MP206 ---------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("generation", [3, 2], ids=["keras3", "keras2"])
def test_mp206_loss_scaling_removed_under_bfloat16_computes_the_same_weights(generation):
    """Under mixed_bfloat16 the wrapper and scaling calls only multiply and divide by a power of two, which bfloat16
    (float32's exponent range) holds exactly: without them the steps compute the very same weights."""
    cases = {
        3: (
            _K3_LSO,
            [
                "    scaled_loss = optimizer.scale_loss(loss)",
                "grads = tape.gradient(scaled_loss, model.trainable_variables)",
                _APPLY,
            ],
            [(9, 13), (18, 23)],
            ["    scaled_loss = loss", "grads = tape.gradient(scaled_loss, model.trainable_variables)", _APPLY],
        ),
        2: (
            _K2_LSO,
            [
                "    scaled_loss = optimizer.get_scaled_loss(loss)",
                "grads = tape.gradient(scaled_loss, model.trainable_variables)",
                "grads = optimizer.get_unscaled_gradients(grads)",
                _APPLY,
            ],
            [(9, 13), (18, 23), (20, 13)],
            ["    scaled_loss = loss", "grads = tape.gradient(scaled_loss, model.trainable_variables)", _APPLY],
        ),
    }
    lso, body, where, fixed_body = cases[generation]
    buggy = _loop(generation, lso, *body, policy="mixed_bfloat16")
    fixed = _fixed(buggy, "MP206", generation, where)
    assert fixed == _loop(generation, "{keras}.optimizers.SGD(0.01)", *fixed_body, policy="mixed_bfloat16")
    before, after = _update(_run(buggy)), _update(_run(fixed))
    assert np.abs(before).max() > 0
    assert np.array_equal(after, before)
    as_float32 = {code: code.replace('"mixed_bfloat16"', '"float32"') for code in (buggy, fixed)}
    assert np.array_equal(_update(_run(as_float32[fixed])), _update(_run(as_float32[buggy])))


# MP207 ---------------------------------------------------------------------------------------------------------

# One fit() step of a model whose hidden layer alone is mixed_float16; the loss is small enough that the float16
# gradients of the hidden activations underflow to zero without loss scaling.
_PER_LAYER = """import numpy as np
import tensorflow as tf
import {keras}

{keras}.utils.set_random_seed(0)
inputs = {keras}.Input((4,))
hidden = {keras}.layers.Dense(8, activation="relu", dtype="mixed_float16")(inputs)
model = {keras}.Model(inputs, {keras}.layers.Dense(1)(hidden))


def tiny_mse(y, p):
    return 1e-8 * tf.reduce_mean(tf.square(y - p))


{compile}
x = np.random.RandomState(0).randn(16, 4).astype("float32")
start = [v.numpy().copy() for v in model.trainable_variables]
model.fit(x, x.sum(axis=1, keepdims=True), batch_size=16, epochs=1, verbose=0)
update = [v.numpy() - s for s, v in zip(start, model.trainable_variables)]
"""


@pytest.mark.parametrize("generation", [3, 2], ids=["keras3", "keras2"])
def test_mp207_loss_scale_optimizer_wrapped_for_per_layer_float16_recovers_the_underflowing_update(generation):
    """Per-layer mixed_float16 under a float32 global policy: compile() adds no loss scaling, the hidden kernel's
    gradients underflow and SGD leaves it exactly where it was (a learning rate of 1e4 makes the float32 update of
    this tiny loss visible). After the fix (inline in compile() on Keras 3, an optimizer name on Keras 2) it moves as
    the float32 model's does, and with the layer back in float32 the fixed program computes the float32 model's
    weights exactly."""
    cases = {
        3: (
            "model.compile(optimizer=keras.optimizers.SGD(1e4), loss=tiny_mse)",
            (15, 25),
            "model.compile(optimizer=keras.optimizers.LossScaleOptimizer(keras.optimizers.SGD(1e4)), loss=tiny_mse)",
        ),
        2: (
            "optimizer = tf_keras.optimizers.SGD(1e4)\nmodel.compile(optimizer, loss=tiny_mse)",
            (16, 15),
            "optimizer = tf_keras.mixed_precision.LossScaleOptimizer(tf_keras.optimizers.SGD(1e4))\n"
            "model.compile(optimizer, loss=tiny_mse)",
        ),
    }
    compile_, where, fixed_compile = cases[generation]
    name = "keras" if generation == 3 else "tf_keras"
    buggy = _PER_LAYER.format(keras=name, compile=compile_)
    fixed = _fixed(buggy, "MP207", generation, [where])
    assert fixed == _PER_LAYER.format(keras=name, compile=fixed_compile)
    reference = _run(buggy.replace('dtype="mixed_float16"', 'dtype="float32"'))["update"]
    before, after = _run(buggy)["update"], _run(fixed)
    assert isinstance(after["model"].optimizer, KERAS[generation].mixed_precision.LossScaleOptimizer)
    after = after["update"]
    hidden_kernel = 0
    assert np.abs(reference[hidden_kernel]).max() > 1e-5  # float32 moves it
    assert not before[hidden_kernel].any()  # underflowed: not one element moved
    np.testing.assert_allclose(after[hidden_kernel], reference[hidden_kernel], rtol=0.05, atol=1e-6)
    as_float32 = _run(fixed.replace('dtype="mixed_float16"', 'dtype="float32"'))["update"]
    assert all(map(np.array_equal, as_float32, reference))


# MP602 ---------------------------------------------------------------------------------------------------------

# One fit() step of a small model in float16 (by {setup} or the layers' {dtype}); weights are read as float64.
_FLOAT16 = """import numpy as np
import {keras}

{keras}.utils.set_random_seed(0)
{setup}
model = {keras}.Sequential([{keras}.Input((4,)), {keras}.layers.Dense(8, activation="relu"{dtype}),
                            {keras}.layers.Dense(1{dtype})])
model.compile(optimizer={keras}.optimizers.SGD(1e-4), loss="mse")
x = 0.5 * np.random.RandomState(0).randn(16, 4).astype("float32")
start = [v.numpy().astype("float64") for v in model.trainable_variables]
model.fit(x, 0.1 * x.sum(axis=1, keepdims=True), batch_size=16, epochs=1, verbose=0)
update = [v.numpy().astype("float64") - s for s, v in zip(start, model.trainable_variables)]
variables = {{str(v.dtype).replace("<dtype: '", "").strip("'>") for v in model.trainable_variables}}
outputs = str(model(x[:2]).dtype)
"""

_SET_FLOATX = {3: 'keras.config.set_floatx("float16")', 2: 'tf_keras.backend.set_floatx("float16")'}


@pytest.mark.parametrize("generation", [3, 2], ids=["keras3", "keras2"])
@pytest.mark.parametrize("form", ["layer-dtype", "global-policy", "set-floatx"])
def test_mp602_mixed_float16_keeps_float32_variables_and_the_small_updates(generation, form):
    """float16 layers, policy or floatx store the weights in float16, where an SGD step of 1e-4 mostly rounds away;
    after the fix (dtype="mixed_float16", the "mixed_float16" policy, set_global_policy("mixed_float16") for
    set_floatx) the variables are float32, the computation float16, and the step is the float32 model's to float16
    noise. Under the global policy compile() adds dynamic loss scaling, which skips a step whose scaled gradients
    overflow (larger targets than these do on the first step): the data keep this step finite."""
    name = "keras" if generation == 3 else "tf_keras"
    if form == "layer-dtype":
        buggy = _FLOAT16.format(keras=name, setup="", dtype=', dtype="float16"')
        where = [
            (n, line.index('"float16"') + 1) for n, line in enumerate(buggy.splitlines(), 1) if '"float16"' in line
        ]
        right = _FLOAT16.format(keras=name, setup="", dtype=', dtype="mixed_float16"')
    elif form == "global-policy":
        buggy = _FLOAT16.format(keras=name, setup=f'{name}.mixed_precision.set_global_policy("float16")', dtype="")
        where = [(5, len(name) + 36)]
        right = _FLOAT16.format(
            keras=name, setup=f'{name}.mixed_precision.set_global_policy("mixed_float16")', dtype=""
        )
    else:
        buggy = _FLOAT16.format(keras=name, setup=_SET_FLOATX[generation], dtype="")
        where = [(5, 1)]
        right = _FLOAT16.format(
            keras=name, setup=f'{name}.mixed_precision.set_global_policy("mixed_float16")', dtype=""
        )
    fixed = _fixed(buggy, "MP602", generation, where)
    assert fixed == right
    reference = _run(_FLOAT16.format(keras=name, setup="", dtype=""))
    _fresh_policies()
    before = _run(buggy)
    _fresh_policies()
    after = _run(fixed)
    assert (before["variables"], after["variables"], reference["variables"]) == ({"float16"}, {"float32"}, {"float32"})
    assert "float16" in after["outputs"]  # still computed in float16
    ref, lost, kept = (_update(ns) for ns in (reference, before, after))
    assert np.count_nonzero(kept) == np.count_nonzero(ref) == ref.size
    assert np.count_nonzero(lost) < 0.5 * ref.size  # most of the float16 weights did not move at all
    assert np.linalg.norm(kept - ref) / np.linalg.norm(ref) < 0.02


# MP503 ---------------------------------------------------------------------------------------------------------

_REWRITE = """import numpy as np
import tensorflow as tf
import {keras}

{keras}.mixed_precision.set_global_policy("mixed_float16")
{keras}.utils.set_random_seed(0)
base = {keras}.optimizers.SGD(0.01)
optimizer = tf.compat.v1.mixed_precision.enable_mixed_precision_graph_rewrite(base)
model = {keras}.Sequential([{keras}.Input((4,)), {keras}.layers.Dense(8, activation="relu"),
                            {keras}.layers.Dense(1, dtype="float32")])
model.compile(optimizer=optimizer, loss="mse")
x = 0.5 * np.random.RandomState(0).randn(16, 4).astype("float32")
start = [v.numpy().copy() for v in model.trainable_variables]
history = model.fit(x, 0.1 * x.sum(axis=1, keepdims=True), batch_size=16, epochs=2, verbose=0)
update = [v.numpy() - s for s, v in zip(start, model.trainable_variables)]
"""


@pytest.mark.parametrize("generation", [3, 2], ids=["keras3", "keras2"])
def test_mp503_graph_rewrite_deleted_keeps_the_optimizer_and_compile_adds_loss_scaling(generation):
    """TF 2.21 refuses the graph rewrite next to a mixed policy (Keras 2) or of a Keras 3 optimizer: the program
    raises. After the fix the optimizer is the one constructed, compile() wraps it in a LossScaleOptimizer under
    mixed_float16 (the loss scaling the rewrite promised), and fit() trains to a finite loss."""
    name = "keras" if generation == 3 else "tf_keras"
    buggy = _REWRITE.format(keras=name)
    fixed = _fixed(buggy, "MP503", generation, [(8, 13)])
    assert fixed == buggy.replace("tf.compat.v1.mixed_precision.enable_mixed_precision_graph_rewrite(base)", "base")
    with pytest.raises(ValueError, match="mixed precision policy" if generation == 2 else "must be an instance"):
        _run(buggy)
    _fresh_policies()
    after = _run(fixed)
    assert isinstance(after["model"].optimizer, KERAS[generation].mixed_precision.LossScaleOptimizer)
    assert after["model"].optimizer.inner_optimizer is after["base"]
    assert all(np.isfinite(after["history"].history["loss"])) and np.abs(_update(after)).max() > 0


def test_mp503_deleted_switches_leave_other_grappler_options_and_no_environment_variable(monkeypatch):
    """The environment variable and the auto_mixed_precision option are removed; another option of the same call
    stays set."""
    monkeypatch.delenv("TF_ENABLE_AUTO_MIXED_PRECISION", raising=False)
    saved = tf.config.optimizer.get_experimental_options()
    source = """import os

import keras
import tensorflow as tf

keras.mixed_precision.set_global_policy("mixed_float16")
os.environ["TF_ENABLE_AUTO_MIXED_PRECISION"] = "1"
tf.config.optimizer.set_experimental_options({"layout_optimizer": False, "auto_mixed_precision": True})
model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(4)])
"""
    fixed = _fixed(source, "MP503", 3, [(7, 1), (8, 74)])
    assert fixed == source.replace('os.environ["TF_ENABLE_AUTO_MIXED_PRECISION"] = "1"\n', "").replace(
        ', "auto_mixed_precision": True', ""
    )
    try:
        _run(source)
        assert os.environ.pop("TF_ENABLE_AUTO_MIXED_PRECISION") == "1"
        assert tf.config.optimizer.get_experimental_options()["auto_mixed_precision"] is True
        tf.config.optimizer.set_experimental_options({"auto_mixed_precision": False, "layout_optimizer": True})
        _run(fixed)
        assert "TF_ENABLE_AUTO_MIXED_PRECISION" not in os.environ
        options = tf.config.optimizer.get_experimental_options()
        assert options.get("auto_mixed_precision") is False and options["layout_optimizer"] is False
    finally:
        tf.config.optimizer.set_experimental_options({"auto_mixed_precision": False, "layout_optimizer": True, **saved})


# MP303 ---------------------------------------------------------------------------------------------------------

_TPU_OR_GPU = """import tensorflow as tf
import {keras}

try:
    resolver = tf.distribute.cluster_resolver.TPUClusterResolver()
    tf.config.experimental_connect_to_cluster(resolver)
    tf.tpu.experimental.initialize_tpu_system(resolver)
    strategy = tf.distribute.TPUStrategy(resolver)
except ValueError:
    strategy = tf.distribute.get_strategy()

{keras}.mixed_precision.set_global_policy("mixed_float16")
policy = {keras}.mixed_precision.global_policy().name
"""

_CONFIGURE = """import tensorflow as tf
from {keras} import mixed_precision


def configure(strategy, optimizer):
    if isinstance(strategy, tf.distribute.TPUStrategy):
        mixed_precision.set_global_policy('mixed_float16')
        optimizer = mixed_precision.LossScaleOptimizer(optimizer)
    else:
        mixed_precision.set_global_policy('mixed_float16')
        optimizer = mixed_precision.LossScaleOptimizer(optimizer)
    return optimizer
"""


@pytest.fixture
def tpu(monkeypatch):
    """A TPU as far as the code can tell without one: the resolver and the system calls answer, and the strategy is
    a real TPUStrategy (isinstance holds) that is never connected. ``tpu(False)`` makes the resolver raise, as it
    does where no TPU is configured."""
    monkeypatch.setattr(tf.config, "experimental_connect_to_cluster", lambda resolver: None)
    monkeypatch.setattr(tf.tpu.experimental, "initialize_tpu_system", lambda resolver: None)
    monkeypatch.setattr(tf.distribute.TPUStrategy, "__init__", lambda self, resolver: None)

    def present(available: bool) -> None:
        def resolver():
            if not available:
                raise ValueError("no TPU")
            return object()

        monkeypatch.setattr(tf.distribute.cluster_resolver, "TPUClusterResolver", resolver)

    return present


@pytest.mark.parametrize("generation", [3, 2], ids=["keras3", "keras2"])
def test_mp303_tpu_path_gets_mixed_bfloat16_and_the_gpu_path_keeps_mixed_float16(generation, tpu):
    """The choice written by strategy, and the literal and wrapper rewritten inside a TPU branch: on the TPU path
    the policy becomes mixed_bfloat16 (and the optimizer is no longer wrapped), on the other path everything is
    as the code wrote it, and a model trains under the policy chosen."""
    name = "keras" if generation == 3 else "tf_keras"
    source = _TPU_OR_GPU.format(keras=name)
    fixed = _fixed(source, "MP303", generation, [(12, 1)])
    assert fixed == source.replace(
        'set_global_policy("mixed_float16")',
        'set_global_policy("mixed_bfloat16" if isinstance(strategy, tf.distribute.TPUStrategy) else "mixed_float16")',
    )
    policies = {}
    for available in (True, False):
        tpu(available)
        for version, code in (("before", source), ("after", fixed)):
            _fresh_policies()
            policies[available, version] = _run(code)["policy"]
    assert policies == {
        (True, "before"): "mixed_float16",
        (True, "after"): "mixed_bfloat16",
        (False, "before"): "mixed_float16",
        (False, "after"): "mixed_float16",
    }

    configure = _CONFIGURE.format(keras=name)
    fixed = _fixed(
        configure,
        "MP303",
        generation,
        [(7, 9)],
        files={
            "train.py": (
                "import tensorflow as tf\nfrom example import configure\n\nstrategy = tf.distribute.get_strategy()\n"
                "optimizer = configure(strategy, tf.keras.optimizers.Adam())\n"
            )
        },
    )
    assert fixed == configure.replace(
        "        mixed_precision.set_global_policy('mixed_float16')\n        optimizer = mixed_precision.LossScaleOptimizer(optimizer)\n    else",
        "        mixed_precision.set_global_policy('mixed_bfloat16')\n        optimizer = optimizer\n    else",
    )
    keras_ = KERAS[generation]
    for strategy, policy, wrapped in (
        (tf.distribute.TPUStrategy(None), "mixed_bfloat16", False),
        (tf.distribute.get_strategy(), "mixed_float16", True),
    ):
        _fresh_policies()
        optimizer = _run(fixed)["configure"](strategy, keras_.optimizers.SGD(0.01))
        assert keras_.mixed_precision.global_policy().name == policy
        assert isinstance(optimizer, keras_.mixed_precision.LossScaleOptimizer) is wrapped
        model = keras_.Sequential([keras_.Input((4,)), keras_.layers.Dense(8), keras_.layers.Dense(1, dtype="float32")])
        model.compile(optimizer=optimizer, loss="mse")
        loss = model.fit(np.ones((8, 4), "float32"), np.ones((8, 1), "float32"), verbose=0).history["loss"]
        assert np.isfinite(loss).all() and model.layers[0].compute_dtype == policy.removeprefix("mixed_")


# MP103 ---------------------------------------------------------------------------------------------------------

# The shape of tf-keras' integration-test VAE (tf_keras/integration_test/models/vae.py), under a mixed policy: a sum of
# a functional cross-entropy and a KL term whose exponential runs on the encoder's float16 output. The z_log_var head
# gives 12, whose exponential (162755) is inf in float16.
_VAE = """import numpy as np
import tensorflow as tf
{imports}

keras.mixed_precision.set_global_policy("{policy}")


class VAE(keras.Model):
    def __init__(self, encoder, decoder, **kwargs):
        super().__init__(**kwargs)
        self.encoder = encoder
        self.decoder = decoder

    def train_step(self, data):
        with tf.GradientTape() as tape:
            z_mean, z_log_var, z = self.encoder(data)
            reconstruction = self.decoder(z)
            reconstruction_loss = {reconstruction}
            kl_loss = -0.5 * (
                1 + z_log_var - tf.square(z_mean) - tf.exp(z_log_var)
            )
            kl_loss = tf.reduce_mean(tf.reduce_sum(kl_loss, axis=1))
            total_loss = reconstruction_loss + kl_loss
        grads = tape.gradient(total_loss, self.trainable_weights)
        return {{"loss": total_loss, "kl": kl_loss}}


inputs = keras.Input((2, 2, 1))
hidden = keras.layers.Flatten()(inputs)
z_mean = keras.layers.Dense(2, kernel_initializer="zeros", bias_initializer="ones")(hidden)
z_log_var = keras.layers.Dense(2, kernel_initializer="zeros", bias_initializer=keras.initializers.Constant(12.0))(hidden)
encoder = keras.Model(inputs, [z_mean, z_log_var, z_mean])
latent = keras.Input((2,))
pixels = keras.layers.Dense(4, activation="sigmoid", kernel_initializer="ones", bias_initializer="zeros")(latent)
decoder = keras.Model(latent, keras.layers.Reshape((2, 2, 1))(pixels))
vae = VAE(encoder, decoder)
step = vae.train_step(np.full((2, 2, 2, 1), 0.25, "float32"))
loss = {{name: (value.dtype.name, float(value)) for name, value in step.items()}}
"""
_SUMMED_CROSS_ENTROPY = """tf.reduce_mean(
                tf.reduce_sum(
                    keras.losses.binary_crossentropy(data, reconstruction),
                    axis=(1, 2),
                )
            )"""
_KL_FIXED = (
    """            kl_loss = -0.5 * (
                1 + z_log_var - tf.square(z_mean) - tf.exp(z_log_var)
            )""",
    """            kl_loss = -0.5 * (
                tf.cast(1 + z_log_var, tf.float32) - tf.square(tf.cast(z_mean, tf.float32)) - tf.exp(tf.cast(z_log_var, tf.float32))
            )""",
)
_VAE_IMPORTS = {3: "from tensorflow import keras", 2: "import tf_keras as keras"}


def _vae(generation: int, reconstruction: str, policy: str = "mixed_float16") -> str:
    return _VAE.format(imports=_VAE_IMPORTS[generation], policy=policy, reconstruction=reconstruction)


def _losses(code: str) -> dict:
    _fresh_policies()
    return _run(code)["loss"]


@pytest.mark.parametrize("generation", [3, 2], ids=["keras3", "keras2"])
def test_mp103_casts_before_the_exponential_and_the_cross_entropy_not_after_the_sum(generation):
    """The fix casts the predictions of the cross-entropy and the operands of the KL term's arithmetic, where
    float16 overflows: not the sums' results (a no-op, the exponential was already inf). Executed with Keras 2 and
    Keras 3: the fixed loss is finite float32 under mixed_float16, and identical under float32."""
    source = _vae(generation, _SUMMED_CROSS_ENTROPY)
    fixed = _fixed(source, "MP103", generation, [(20, 21), (27, 38)], policy="mixed_float16")
    assert fixed == source.replace(*_KL_FIXED).replace(
        "binary_crossentropy(data, reconstruction)", "binary_crossentropy(data, tf.cast(reconstruction, tf.float32))"
    )

    before, after = _losses(source), _losses(fixed)
    assert before["kl"] == ("float16", float("inf")) and before["loss"] == ("float16", float("inf"))
    assert after["kl"][0] == after["loss"][0] == "float32"
    kl = 2 * 0.5 * (np.exp(np.float32(12.0)) - 12.0)  # summed over the 2 latent dimensions
    assert after["kl"][1] == pytest.approx(kl, rel=1e-6)
    assert _losses(_float32(fixed)) == _losses(_float32(source))


@pytest.mark.parametrize("generation", [3, 2], ids=["keras3", "keras2"])
def test_mp103_casts_the_float16_operand_the_fixed_loss_meets_after_its_name(generation):
    """Only the KL term is reported (a mean of absolute errors cannot overflow): its float32 result meets the
    float16 reconstruction loss at ``total_loss = reconstruction_loss + kl_loss``, two statements later. Without the
    partner's cast that sum raises TypeError (x and y must have the same dtype) on both generations."""
    source = _vae(generation, "tf.reduce_mean(tf.abs(data - reconstruction))")
    fixed = _fixed(source, "MP103", generation, [(22, 38)], policy="mixed_float16")
    assert fixed == source.replace(*_KL_FIXED).replace(
        "total_loss = reconstruction_loss + kl_loss", "total_loss = tf.cast(reconstruction_loss, tf.float32) + kl_loss"
    )

    with pytest.raises((TypeError, tf.errors.InvalidArgumentError)):
        _losses(fixed.replace("tf.cast(reconstruction_loss, tf.float32)", "reconstruction_loss"))
    before, after = _losses(source), _losses(fixed)
    assert before["loss"] == ("float16", float("inf"))
    assert after["loss"][0] == "float32" and np.isfinite(after["loss"][1])
    assert _losses(_float32(fixed)) == _losses(_float32(source))


# MP601 ---------------------------------------------------------------------------------------------------------

# keras' UnitNormalization (keras/src/layers/normalization/unit_normalization.py) and the same layer written with
# TensorFlow's l2_normalize: the norm's clamp (1e-24 / 1e-12) flushes to 0 in float16.
_UNIT_NORMALIZATION = """import numpy as np
{imports}

keras.mixed_precision.set_global_policy("mixed_float16")


class UnitNormalization(keras.layers.Layer):
    def call(self, inputs):
        return {normalize}


rows = np.array([[0.0, 0.0, 0.0], [1e-4, 0.0, 0.0], [3.0, 4.0, 0.0]], "float32")
outputs = UnitNormalization()(rows)
result = (np.dtype(outputs.dtype.name if hasattr(outputs.dtype, "name") else outputs.dtype).name, np.asarray(outputs))
"""
_NORMALIZE_CASES = {
    "keras3-ops": (
        3,
        "import keras\nfrom keras import ops",
        "ops.normalize(inputs, axis=-1, order=2, epsilon=1e-12)",
        (10, 64),
        'ops.cast(ops.normalize(ops.cast(inputs, "float32"), axis=-1, order=2, epsilon=1e-12), '
        'inputs.dtype) if keras.backend.standardize_dtype(inputs.dtype) in ("float16", "bfloat16") '
        "else ops.normalize(inputs, axis=-1, order=2, epsilon=1e-12)",
    ),
    "keras3-tf": (
        3,
        "import tensorflow as tf\nimport keras",
        "tf.math.l2_normalize(inputs, axis=-1)",
        (10, 16),
        "tf.cast(tf.math.l2_normalize(tf.cast(inputs, tf.float32), axis=-1), inputs.dtype) if inputs.dtype in "
        "(tf.float16, tf.bfloat16) else tf.math.l2_normalize(inputs, axis=-1)",
    ),
    "keras2-tf": (
        2,
        "import tensorflow as tf\nimport tf_keras as keras",
        "tf.math.l2_normalize(inputs, axis=-1)",
        (10, 16),
        "tf.cast(tf.math.l2_normalize(tf.cast(inputs, tf.float32), axis=-1), inputs.dtype) if "
        "inputs.dtype in (tf.float16, tf.bfloat16) else tf.math.l2_normalize(inputs, axis=-1)",
    ),
}


@pytest.mark.parametrize("case", list(_NORMALIZE_CASES))
def test_mp601_normalization_in_float32_keeps_zero_and_tiny_vectors_finite(case):
    """Executed: under mixed_float16 the layer gives NaN for a zero row and inf/NaN for [1e-4, 0, 0] (the planted
    defect's values); the fixed layer gives 0 and the unit vector, still in float16; float32 runs are identical."""
    generation, imports, normalize, where, fixed_normalize = _NORMALIZE_CASES[case]
    source = _UNIT_NORMALIZATION.format(imports=imports, normalize=normalize)
    found = lint_code(source, keras=generation, select=["MP601"], policy="mixed_float16").diagnostics
    assert [(d.rule_id, d.line, d.column, d.fix_safety) for d in found] == [("MP601", *where, FixSafety.SAFE)]
    result = lint_code(source, keras=generation, select=["MP601"], policy="mixed_float16", fix=True)
    assert result.diagnostics == []
    fixed = result.fixed_code
    assert fixed == source.replace(normalize, fixed_normalize)

    def result(code):
        _fresh_policies()
        return _run(code)["result"]

    dtype, before = result(source)
    assert dtype == "float16" and np.isnan(before[0]).all() and before[1][0] == np.inf and np.isnan(before[1][1:]).all()
    dtype, after = result(fixed)
    assert dtype == "float16"
    assert after.tolist() == np.array([[0, 0, 0], [1, 0, 0], [0.6, 0.8, 0]], "float16").tolist()
    (dtype32, plain), (fixed_dtype32, fixed_plain) = result(_float32(source)), result(_float32(fixed))
    assert dtype32 == fixed_dtype32 == "float32" and np.array_equal(plain, fixed_plain)
    assert plain.tolist() == np.array([[0, 0, 0], [1, 0, 0], [0.6, 0.8, 0]], "float32").tolist()


_OTHER_INPUTS_UNIT_NORMALIZATION = """import numpy as np
import keras
from keras import ops

keras.mixed_precision.set_global_policy("{policy}")


class UnitNormalization(keras.layers.Layer):
    def call(self, inputs):
        return {normalize}


for inputs, autocast in [(np.arange(6).reshape(2, 3), True), (np.array([[1.0, 2.0, 1e-3]], "float64"), True),
                         (np.array([[1.0, 2.0, 1e-3]], "float64"), False)]:
    try:
        outputs = ops.convert_to_numpy(UnitNormalization(autocast=autocast)(inputs))
        print(outputs.dtype.name, outputs.astype("float64").tolist())
    except Exception as error:
        print("raised", type(error).__name__)
"""


@pytest.mark.parametrize("backend", ["tensorflow", "torch"])
def test_mp601_normalization_fix_leaves_every_other_input_as_it_was(tmp_path, backend):
    """Inputs other than float16 and bfloat16 through each Keras 3 backend, each in a process of its own: the layer's
    own docstring example (integers) and float64 inputs, under the float32 policy, the float64 policy and with the
    layer's autocast off, print exactly what the original layer prints (float unit vectors on torch, the same
    exception on TensorFlow for integers; float64 to the last digit), since the fixed code runs the original call
    for them."""
    pytest.importorskip(backend)
    _, _, normalize, _, fixed_normalize = _NORMALIZE_CASES["keras3-ops"]

    def run(code):
        script = tmp_path / "layer.py"
        script.write_text(code)
        env = dict(os.environ, KERAS_BACKEND=backend, CUDA_VISIBLE_DEVICES="", TF_CPP_MIN_LOG_LEVEL="3")
        proc = run_python([str(script)], module="keras", env=env)
        assert proc.returncode == 0, proc.stderr
        return proc.stdout.strip().splitlines()[-3:]

    for policy in ("float32", "float64"):
        before = run(_OTHER_INPUTS_UNIT_NORMALIZATION.format(policy=policy, normalize=normalize))
        after = run(_OTHER_INPUTS_UNIT_NORMALIZATION.format(policy=policy, normalize=fixed_normalize))
        assert after == before
        assert after[2].startswith("float64 ")  # autocast off: the float64 input's own precision
        assert after[1].startswith(f"{policy} ")  # autocast on: the layer's dtype
        assert after[0].startswith("raised" if backend == "tensorflow" else "float")
