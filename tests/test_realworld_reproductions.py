"""Small reproductions of real code on which the real-world check (bench/realworld/snapshot.yaml) found a rule
wrong: each pins what the rule says there now."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from mplint.diagnostics import FixSafety
from mplint.testing import lint_code

# mlcommons/training retired_benchmarks/resnet-tf2: --fp16_implementation=graph_rewrite builds the model in float32
# (get_tf_dtype) and wraps the optimizer in the graph rewrite; --dtype=fp16 sets mixed_float16 and a
# LossScaleOptimizer instead. The two are modes of one program, never combined.
PERFORMANCE = """import tensorflow as tf


def configure_optimizer(optimizer, use_float16=False, use_graph_rewrite=False):
    if use_float16:
        optimizer = tf.keras.mixed_precision.LossScaleOptimizer(optimizer)
    if use_graph_rewrite:
        # the model dtype is float32 here: the rewrite and the Keras policy never double up
        optimizer = tf.train.experimental.enable_mixed_precision_graph_rewrite(optimizer)
    return optimizer


def set_mixed_precision_policy(dtype):
    if dtype == tf.float16:
        tf.keras.mixed_precision.set_global_policy("mixed_float16")
    elif dtype == tf.float32:
        tf.keras.mixed_precision.set_global_policy("float32")
"""
RUNNABLE = """import tensorflow as tf


class Runnable:
    def __init__(self, flags, dtype):
        self.optimizer = tf.keras.optimizers.SGD(0.1)
        if dtype == tf.float16:
            self.optimizer = tf.keras.mixed_precision.LossScaleOptimizer(self.optimizer)
        elif flags.fp16_implementation == "graph_rewrite":
            self.optimizer = (
                tf.train.experimental.enable_mixed_precision_graph_rewrite(self.optimizer))
"""
MAIN = """import tensorflow as tf

import performance
import runnable


def get_tf_dtype(flags):
    if flags.fp16_implementation == "graph_rewrite":
        return tf.float32  # the rewrite changes ops to float16
    return tf.float16 if flags.dtype == "fp16" else tf.float32


def main(flags):
    dtype = get_tf_dtype(flags)
    performance.set_mixed_precision_policy(dtype)
    opt = performance.configure_optimizer(tf.keras.optimizers.SGD(0.1), use_graph_rewrite=True)
    runnable.Runnable(flags, dtype)


if __name__ == "__main__":
    main(None)
"""
MLCOMMONS = {"performance.py": PERFORMANCE, "runnable.py": RUNNABLE, "main.py": MAIN}


@pytest.mark.parametrize("path", ["performance.py", "runnable.py"])
def test_mp503_graph_rewrite_as_the_float32_mode_of_a_mode_switch_is_silent(path):
    files = {name: text for name, text in MLCOMMONS.items() if name != path}
    out = lint_code(MLCOMMONS[path], path=path, files=files, select=["MP503"], fix=True, unsafe_fixes=True)
    assert out.diagnostics == [] and not out.written


def test_mp503_unconditional_rewrite_in_a_program_that_may_set_float32_is_an_unsafe_fix():
    code = RUNNABLE.replace(
        '        elif flags.fp16_implementation == "graph_rewrite":\n            self.optimizer = (\n'
        "                tf.train.experimental.enable_mixed_precision_graph_rewrite(self.optimizer))\n",
        "        self.optimizer = tf.train.experimental.enable_mixed_precision_graph_rewrite(self.optimizer)\n",
    )
    files = {name: text for name, text in MLCOMMONS.items() if name != "runnable.py"}
    found = lint_code(code, path="runnable.py", files=files, select=["MP503"])
    assert [(d.rule_id, d.line, d.column, d.message) for d in found.diagnostics] == [
        (
            "MP503",
            9,
            26,
            "`enable_mixed_precision_graph_rewrite` applies TensorFlow's graph rewrite: together with the Keras policy "
            "(mixed_float16 set at performance.py:15 in the program of main.py, which imports this module) it raises at "
            "run time (the program may also set float32, where deleting the rewrite drops mixed precision: unsafe fix). "
            "The rewrite also added loss scaling; compile() adds a LossScaleOptimizer under mixed_float16",
        )
    ]
    assert not lint_code(code, path="runnable.py", files=files, select=["MP503"], fix=True).written  # not safe
    fixed = lint_code(code, path="runnable.py", files=files, select=["MP503"], fix=True, unsafe_fixes=True)
    assert fixed.fixed_code == code.replace(
        "        self.optimizer = tf.train.experimental.enable_mixed_precision_graph_rewrite(self.optimizer)\n", ""
    )


# A container monorepo's ResNet (Keras, TF 2.3): --dtype=fp16 sets mixed_float16 where the model's dtype is float16;
# --fp16_implementation=graph_rewrite wraps the optimizer in the rewrite and makes that dtype float32 (in another
# module). The two tests read different settings, which the code ties together: never both in one run.
FLAGS_CORE = """import tensorflow as tf

DTYPES = {"fp16": tf.float16, "bf16": tf.bfloat16, "fp32": tf.float32}


def get_tf_dtype(flags_obj):
    if flags_obj.fp16_implementation == "graph_rewrite":
        return tf.float32  # the rewrite casts; the model is built in float32
    return DTYPES[flags_obj.dtype]
"""
IMAGENET_MAIN = """import tensorflow as tf
from absl import app, flags

import flags_core


def run(flags_obj):
    dtype = flags_core.get_tf_dtype(flags_obj)
    if dtype == tf.float16:
        tf.keras.mixed_precision.set_global_policy("mixed_float16")
    elif dtype == tf.bfloat16:
        tf.keras.mixed_precision.set_global_policy("mixed_bfloat16")
    optimizer = tf.keras.optimizers.SGD(0.1, momentum=0.9)
    if flags_obj.fp16_implementation == "graph_rewrite":
        optimizer = tf.train.experimental.enable_mixed_precision_graph_rewrite(optimizer)
    model = tf.keras.applications.ResNet50(weights=None)
    model.compile(optimizer=optimizer, loss="sparse_categorical_crossentropy")
    return model


def main(_):
    run(flags.FLAGS)


if __name__ == "__main__":
    app.run(main)
"""


def test_mp503_rewrite_and_policy_under_tests_of_different_settings_are_silent():
    out = lint_code(IMAGENET_MAIN, path="imagenet_main.py", files={"flags_core.py": FLAGS_CORE}, select=["MP503"])
    assert out.diagnostics == []


def test_mp503_rewrite_that_runs_whenever_the_policy_does_is_reported_with_the_policy_related():
    code = IMAGENET_MAIN.replace(
        '    if flags_obj.fp16_implementation == "graph_rewrite":\n        optimizer = tf.train',
        "    optimizer = tf.train",
    )
    files = {"flags_core.py": FLAGS_CORE}
    found = lint_code(code, path="imagenet_main.py", files=files, select=["MP503"]).diagnostics
    assert [(d.rule_id, d.line, d.column, d.fix_safety.value, d.message) for d in found] == [
        (
            "MP503",
            14,
            17,
            "safe",
            "`enable_mixed_precision_graph_rewrite` applies TensorFlow's graph rewrite: together with the Keras policy "
            "(mixed_float16 set at imagenet_main.py:10) it raises at run time. The "
            "rewrite also added loss scaling; compile() adds a LossScaleOptimizer under mixed_float16",
        )
    ]
    assert [(r.path, r.line, r.message) for r in found[0].related] == [
        ("imagenet_main.py", 10, "sets the mixed policy"),
        ("imagenet_main.py", 12, "sets the mixed policy"),
    ]
    fixed = lint_code(code, path="imagenet_main.py", files=files, select=["MP503"], fix=True)
    assert fixed.fixed_code == code.replace(
        "    optimizer = tf.train.experimental.enable_mixed_precision_graph_rewrite(optimizer)\n", ""
    )


# NVIDIA/apex tests/distributed/synced_batchnorm: BatchNorm and SyncBatchNorm made float16 under --fp16, one SGD
# step each, compared: half precision is what the test exercises.
APEX_SYNCBN_TEST = """import torch
from torch import optim

bn = torch.nn.BatchNorm2d(32).cuda()
if args.fp16:
    bn.half()
out_bn = bn(inp)
out_bn.backward(grad)
bn_opt = optim.SGD(bn.parameters(), lr=1.0)
bn_opt.step()
"""


@pytest.mark.parametrize("path", ["tests/test_groups.py", "tests/two_gpu_unit_test.py"])
def test_mpt101_half_model_in_a_test_module_is_silent(path):
    assert lint_code(APEX_SYNCBN_TEST, path=path, select=["MPT101"]).diagnostics == []


def test_mpt101_the_same_code_in_a_training_script_is_reported():
    found = lint_code(APEX_SYNCBN_TEST, path="train_groups.py", select=["MPT101"]).diagnostics
    assert [(d.rule_id, d.line, d.column, d.message) for d in found] == [
        (
            "MPT101",
            6,
            5,
            "`bn` is made pure float16 and then trained: its weights and their updates are float16, so updates smaller "
            "than 1/2048 of a weight vanish; keep the model float32 and train under `torch.autocast` with a GradScaler",
        )
    ]


# keras-team/tf-keras mixed_precision_graph_rewrite_test.py: the tests of the rewrite call it, and check that it
# raises together with a policy the test itself sets.
REWRITE_TEST = """import tensorflow as tf
from tf_keras import mixed_precision
from tf_keras.optimizers import legacy as optimizer_v2


class MixedPrecisionTest(tf.test.TestCase):
    def test_wrap_optimizer(self):
        opt = optimizer_v2.SGD(1.0)
        opt = tf.compat.v1.mixed_precision.enable_mixed_precision_graph_rewrite(opt, 123.0)
        self.assertIsInstance(opt, mixed_precision.LossScaleOptimizer)

    def test_error_if_policy_is_set(self):
        mixed_precision.set_global_policy("mixed_float16")
        with self.assertRaisesRegex(ValueError, "the global Keras dtype Policy has been set"):
            tf.compat.v1.mixed_precision.enable_mixed_precision_graph_rewrite(optimizer_v2.SGD(1.0))
"""


def test_mp503_tests_of_the_rewrite_itself_are_silent():
    assert lint_code(REWRITE_TEST, path="mixed_precision_graph_rewrite_test.py", select=["MP503"]).diagnostics == []


# NVIDIA/apex tests/L0/run_optimizers/test_adam.py: a LeNet whose last Linear (10 classes) is followed by a ReLU.
LENET = """import torch
from torch import nn


class Model(torch.nn.Module):
    def __init__(self):
        super(Model, self).__init__()
        self.fc2 = nn.Linear(120, 84)
        self.relu4 = nn.ReLU()
        self.fc3 = nn.Linear(84, 10)
        self.relu5 = nn.ReLU()

    def forward(self, x):
        y = self.fc2(x)
        y = self.relu4(y)
        y = self.fc3(y)
        y = self.relu5(y)
        return y


with torch.amp.autocast("cuda", enabled=True):
    Model().cuda()(torch.randn(2, 120, device="cuda")).sum().backward()
"""


def test_mpt301_the_last_linear_before_an_activation_is_the_class_count():
    found = lint_code(LENET, path="lenet.py", select=["MPT301"]).diagnostics
    assert [(d.rule_id, d.line, d.column, d.message) for d in found] == [
        (
            "MPT301",
            8,
            35,
            "`out_features=84` of `nn.Linear` is not a multiple of 8: under float16 autocast its matmuls cannot use "
            "tensor cores fully (use 88)",
        )
    ]


def test_mpt301_layer_sizes_of_a_test_module_are_fixtures():
    assert lint_code(LENET, path="tests/L0/run_optimizers/test_adam.py", select=["MPT301"]).diagnostics == []


# NVIDIA/apex tests/distributed/amp_master_params: trains under O2, then saves the float16 model and apex's float32
# master copy for a comparison script. Migrating would save model.parameters() twice.
APEX_MASTER_PARAMS = """import torch
from apex import amp

model = torch.nn.Linear(1024, 16).cuda()
optimizer = torch.optim.SGD(model.parameters(), lr=1e-3)
model, optimizer = amp.initialize(model, optimizer, opt_level="O2")
for t in range(500):
    optimizer.zero_grad()
    loss = torch.nn.functional.mse_loss(model(x), y)
    with amp.scale_loss(loss, optimizer) as scaled_loss:
        scaled_loss.backward()
    optimizer.step()
torch.save(list(model.parameters()), "model.pth")
torch.save(list(amp.master_params(optimizer)), "master.pth")
"""


def test_mpt501_master_params_saved_for_comparison_get_no_migration():
    out = lint_code(APEX_MASTER_PARAMS, path="amp_master_params.py", select=["MPT501"], fix=True, unsafe_fixes=True)
    assert [(d.rule_id, d.line, d.column, d.message) for d in out.diagnostics] == [
        (
            "MPT501",
            6,
            20,
            '`amp.initialize(..., opt_level="O2")` is apex\'s deprecated AMP: keep model and optimizer, create '
            "`scaler = torch.cuda.amp.GradScaler()`, run the forward and loss under `torch.cuda.amp.autocast()` "
            "(target any torch >= 1.6: no torch pin); no automatic fix: `amp.master_params` is used outside a gradient clip (saved or compared): apex's float32 "
            "master copy of an O2 model has no torch.amp counterpart",
        )
    ]
    assert not out.written


def test_mpt501_master_params_in_a_clip_still_migrate():
    code = APEX_MASTER_PARAMS.replace(
        """    optimizer.step()
torch.save(list(model.parameters()), "model.pth")
torch.save(list(amp.master_params(optimizer)), "master.pth")
""",
        """    torch.nn.utils.clip_grad_norm_(amp.master_params(optimizer), 1.0)
    optimizer.step()
""",
    )
    out = lint_code(code, path="train.py", select=["MPT501"], fix=True, unsafe_fixes=True)
    assert (
        out.fixed_code
        == """import torch

model = torch.nn.Linear(1024, 16).cuda()
optimizer = torch.optim.SGD(model.parameters(), lr=1e-3)
scaler = torch.cuda.amp.GradScaler()
for t in range(500):
    optimizer.zero_grad()
    with torch.cuda.amp.autocast():
        loss = torch.nn.functional.mse_loss(model(x), y)
    scaler.scale(loss).backward()
    scaler.unscale_(optimizer)
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    scaler.step(optimizer)
    scaler.update()
"""
    )


# mlcommons/training retired_benchmarks/rnnt/pytorch/inference.py: O3 with no optimizer, after model.eval().
def test_mpt501_o3_without_an_optimizer_is_inference():
    code = "import torch\nfrom apex import amp\n\nmodel.eval()\nmodel = amp.initialize(model, opt_level='O3')\n"
    found = lint_code(code, path="inference.py", select=["MPT501"]).diagnostics
    assert [(d.rule_id, d.line, d.column, d.message) for d in found] == [
        (
            "MPT501",
            5,
            9,
            '`amp.initialize(model, opt_level="O3")` without an optimizer casts the model to float16 for inference: '
            "write `model.half()`, which needs no apex (target any torch >= 1.6: no torch pin); no automatic fix: only "
            "opt_level O1/O2 map onto autocast + GradScaler",
        )
    ]


# mlcommons/training resnet-tf2 performance.py: the experimental Policy takes loss_scale= (TF 2.1-2.8); the Policy
# its rewrite names does not.
def test_mp501_loss_scale_of_the_experimental_policy_names_the_policy_that_lacks_it():
    code = (
        "import tensorflow as tf\n\n\ndef set_mixed_precision_policy(loss_scale=None):\n"
        "    policy = tf.keras.mixed_precision.experimental.Policy('mixed_float16', loss_scale=loss_scale)\n"
        "    tf.keras.mixed_precision.experimental.set_policy(policy)\n"
    )
    found = [d for d in lint_code(code, path="performance.py", select=["MP501"], keras=2).diagnostics if d.line == 5]
    assert [(d.rule_id, d.line, d.column, d.message) for d in found] == [
        (
            "MP501",
            5,
            14,
            "`tf.keras.mixed_precision.experimental.Policy` is the TF 2.1-2.3 experimental API, deprecated on "
            "TF 2.4-2.8 and removed in TF 2.9: use `tf.keras.mixed_precision.Policy`; fixed once the loss-scale findings in this file "
            "are settled by hand (target Keras 2, from keras = 2 in the mplint config)",
        ),
        (
            "MP501",
            5,
            76,
            "`loss_scale=` of the experimental `Policy` is G1 API, with no counterpart in the `Policy` of "
            "Keras 2 and 3 (TypeError there): move the loss scale to a `LossScaleOptimizer` around the optimizer (target Keras 2, "
            "from keras = 2 in the mplint config)",
        ),
    ]


# keras-team/keras keras/src/backend/tensorflow/trainer.py: Keras 3's own train_step scales with
# `optimizer.scale_loss`, and its LossScaleOptimizer.apply_gradients unscales.
KERAS3_TRAIN_STEP = """import tensorflow as tf
import keras


class Trainer(keras.Model):
    def train_step(self, data):
        x, y = data
        with tf.GradientTape() as tape:
            y_pred = self(x, training=True)
            loss = self.compute_loss(x=x, y=y, y_pred=y_pred)
            if self.optimizer is not None:
                loss = self.optimizer.scale_loss(loss)
        gradients = tape.gradient(loss, self.trainable_weights)
        self.optimizer.apply_gradients(zip(gradients, self.trainable_weights))
        return {}


model = Trainer()
keras.mixed_precision.set_global_policy("mixed_float16")
model.compile(optimizer="adam", loss="mse")
model.fit(x, y)
"""


@pytest.mark.parametrize("keras", [2, 3])
def test_mp202_a_loss_scaled_with_keras3_scale_loss_is_not_asked_to_unscale(keras):
    assert lint_code(KERAS3_TRAIN_STEP, path="trainer.py", select=["MP202"], keras=keras).diagnostics == []


def test_mp202_keras2_get_scaled_loss_without_unscale_is_still_reported():
    code = KERAS3_TRAIN_STEP.replace("scale_loss", "get_scaled_loss")
    found = lint_code(code, path="trainer.py", select=["MP202"], keras=2).diagnostics
    assert [(d.rule_id, d.line, d.column, d.message) for d in found] == [
        (
            "MP202",
            14,
            9,
            "compile() wraps the optimizer in a LossScaleOptimizer; when `self.optimizer is not None` is true, the tape "
            "differentiates the scaled loss but get_unscaled_gradients is never called: updates 32768x too large",
        )
    ]


# keras-team/keras-rs keras_rs/src/losses/list_mle_loss.py: an epsilon of a Keras 3 Loss subclass, whose __call__
# converts the predictions to the loss's float32 dtype before `call` sees them.
LIST_MLE_LOSS = """import keras
from keras import ops


class ListMLELoss(keras.losses.Loss):
    def __init__(self, temperature=1.0, **kwargs):
        super().__init__(**kwargs)
        self.temperature = temperature
        self._epsilon = 1e-10

    def call(self, y_true, y_pred):
        logits = ops.divide(y_pred, ops.cast(self.temperature, dtype=y_pred.dtype))
        cumsum_from_right = ops.flip(ops.cumsum(ops.flip(ops.exp(logits), axis=1), axis=1), axis=1)
        return -ops.sum(logits - ops.log(cumsum_from_right + self._epsilon), axis=1)
"""
EPSILON_VANISHES = (
    "MP601",
    14,
    62,
    "`self._epsilon` (set at line 9: `1e-10`) flushes to 0 in float16 (smallest subnormal 6e-8): combined with the "
    "compute-dtype tensor `cumsum_from_right` under a float16 policy the epsilon vanishes and a log or division by it "
    "gives inf or NaN",
)


def test_mp601_a_keras3_loss_computes_in_its_own_float32_dtype():
    found = lint_code(LIST_MLE_LOSS, path="list_mle_loss.py", select=["MP601"], keras=3, policy="mixed_float16")
    assert found.diagnostics == []


@pytest.mark.parametrize(
    "keras,code",
    [
        (2, LIST_MLE_LOSS),  # Keras 2's Loss keeps the predictions' float16
        (3, LIST_MLE_LOSS.replace("super().__init__(**kwargs)", 'super().__init__(dtype="float16", **kwargs)')),
    ],
)
def test_mp601_a_loss_that_computes_in_float16_is_still_reported(keras, code):
    found = lint_code(code, path="list_mle_loss.py", select=["MP601"], keras=keras, policy="mixed_float16")
    assert [(d.rule_id, d.line, d.column, d.message) for d in found.diagnostics] == [EPSILON_VANISHES]


def test_keras3_loss_call_sees_float32_predictions_under_mixed_float16():
    """The fact the MP601 exemption rests on, executed on the installed Keras 3."""
    script = """
import keras, numpy as np
keras.mixed_precision.set_global_policy("mixed_float16")
seen = []
class L(keras.losses.Loss):
    def call(self, y_true, y_pred):
        seen.append(str(y_pred.dtype))
        return keras.ops.mean(y_pred)
out = keras.Sequential([keras.Input((4,)), keras.layers.Dense(2)])(np.ones((1, 4)))
L()(np.ones((1, 2)), out)
print(keras.backend.standardize_dtype(out.dtype), seen[0].rsplit("'", 2)[-2] if "'" in seen[0] else seen[0])
"""
    env = {**os.environ, "KERAS_BACKEND": "tensorflow", "TF_CPP_MIN_LOG_LEVEL": "3"}
    done = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["float16", "float32"]


# keras-team/tf-keras tf_keras/integration_test/models/vae.py: the model of an integration test, reached only by the
# test modules beside it (fit_test.py, saving_v3_test.py), none of which sets a policy. Support code of the tests
# is not library code whose users pick a mixed policy: MP103's three findings there were wrong.
TF_KERAS_VAE = '''"""Variable autoencoder."""

import tensorflow as tf
from tensorflow import keras


class VAE(keras.Model):
    def __init__(self, encoder, decoder, **kwargs):
        super(VAE, self).__init__(**kwargs)
        self.encoder = encoder
        self.decoder = decoder

    def train_step(self, data):
        with tf.GradientTape() as tape:
            z_mean, z_log_var, z = self.encoder(data)
            reconstruction = self.decoder(z)
            reconstruction_loss = tf.reduce_mean(
                tf.reduce_sum(
                    keras.losses.binary_crossentropy(data, reconstruction),
                    axis=(1, 2),
                )
            )
            kl_loss = -0.5 * (
                1 + z_log_var - tf.square(z_mean) - tf.exp(z_log_var)
            )
            kl_loss = tf.reduce_mean(tf.reduce_sum(kl_loss, axis=1))
            total_loss = reconstruction_loss + kl_loss
        grads = tape.gradient(total_loss, self.trainable_weights)
        self.optimizer.apply_gradients(zip(grads, self.trainable_weights))
        return {"loss": total_loss}
'''
TF_KERAS_FIT_TEST = """import tensorflow as tf

from tf_keras.integration_test.models import vae


class FitTest(tf.test.TestCase):
    def test_fit(self):
        vae.VAE(None, None)
"""
TF_KERAS_TESTS = {
    "tf_keras/__init__.py": "",
    "tf_keras/integration_test/__init__.py": "",
    "tf_keras/integration_test/models/__init__.py": "",
    "tf_keras/integration_test/fit_test.py": TF_KERAS_FIT_TEST,
}
VAE_LIBRARY = (
    "; library code (no program of this project that reaches it sets a policy; any user may pick mixed_float16)"
)
VAE_CROSS_ENTROPY = (
    "MP103",
    19,
    21,
    "`keras.losses.binary_crossentropy` computes in the dtype of its predictions, here the compute dtype of "
    "`reconstruction`: under mixed_float16 the loss overflows to inf above 65504; cast the predictions to float32 "
    "first (loss objects such as `MeanSquaredError()` do this themselves)",
)
VAE_KL = (
    "MP103",
    26,
    38,
    "this loss squares, exponentiates or sums the compute-dtype `kl_loss`: under mixed_float16 "
    "it overflows to inf above 65504 (an error of 256 squared is already inf); compute the loss in float32",
)
# Cast where float16 overflows, not after the sums: the cross-entropy's predictions, the KL term's operands.
VAE_FIXED = TF_KERAS_VAE.replace(
    "binary_crossentropy(data, reconstruction)", "binary_crossentropy(data, tf.cast(reconstruction, tf.float32))"
).replace(
    "                1 + z_log_var - tf.square(z_mean) - tf.exp(z_log_var)\n",
    "                tf.cast(1 + z_log_var, tf.float32) - tf.square(tf.cast(z_mean, tf.float32)) - "
    "tf.exp(tf.cast(z_log_var, tf.float32))\n",
)


def test_mp103_model_of_an_integration_test_reached_only_by_tests_is_silent():
    path = "tf_keras/integration_test/models/vae.py"
    out = lint_code(TF_KERAS_VAE, path=path, files=TF_KERAS_TESTS, select=["MP103"], fix=True)
    assert out.diagnostics == [] and not out.written


def test_mp103_the_same_model_in_the_package_itself_is_library_code():
    files = {
        **TF_KERAS_TESTS,
        "tf_keras/models/__init__.py": "",
        "tf_keras/integration_test/fit_test.py": TF_KERAS_FIT_TEST.replace("integration_test.models", "models"),
    }
    found = lint_code(TF_KERAS_VAE, path="tf_keras/models/vae.py", files=files, select=["MP103"]).diagnostics
    assert [(d.rule_id, d.line, d.column, d.message) for d in found] == [
        (*VAE_CROSS_ENTROPY[:3], VAE_CROSS_ENTROPY[3] + VAE_LIBRARY),
        (*VAE_KL[:3], VAE_KL[3] + VAE_LIBRARY),
    ]
    fixed = lint_code(TF_KERAS_VAE, path="tf_keras/models/vae.py", files=files, select=["MP103"], fix=True)
    assert fixed.fixed_code == VAE_FIXED


def test_mp103_the_integration_test_model_trained_by_a_mixed_program_is_reported_and_cast_before_the_sums():
    files = {
        **TF_KERAS_TESTS,
        "train.py": (
            "import tensorflow as tf\nfrom tf_keras.integration_test.models import vae\n\n"
            "tf.keras.mixed_precision.set_global_policy('mixed_float16')\nvae.VAE(None, None).fit(None)\n"
        ),
    }
    path = "tf_keras/integration_test/models/vae.py"
    found = lint_code(TF_KERAS_VAE, path=path, files=files, select=["MP103"]).diagnostics
    assert [(d.rule_id, d.line, d.column, d.message) for d in found] == [VAE_CROSS_ENTROPY, VAE_KL]
    assert lint_code(TF_KERAS_VAE, path=path, files=files, select=["MP103"], fix=True).fixed_code == VAE_FIXED


# keras-team/keras keras/src/quantizers/quantizers.py compute_quantization_parameters: weight quantization computes in
# `compute_dtype="float32"` (its callers pass "float32" or the layer's float32 variable dtype), so the `1e-8` floor
# of the scale never meets float16 under a mixed policy: a policy never changes a default argument.
KERAS_QUANTIZERS = """from keras.src import ops


def compute_quantization_parameters(
    x,
    *,
    bits,
    compute_dtype="float32",
    epsilon=0.0,
):
    min_values = ops.min(x, axis=1)
    max_values = ops.max(x, axis=1)
    zero_range = ops.equal(min_values, max_values)
    min_values = ops.where(zero_range, ops.subtract(min_values, 1), min_values)
    max_values = ops.where(zero_range, ops.add(max_values, 1), max_values)
    maxq = ops.cast(ops.subtract(ops.power(2, bits), 1), compute_dtype)
    range_values = ops.subtract(max_values, min_values)
    if epsilon > 0:
        range_values = ops.add(range_values, epsilon)
    scale = ops.divide(range_values, maxq)
    scale = ops.where(ops.less_equal(scale, 0), 1e-8, scale)
    return scale, maxq
"""
KERAS_PACKAGE = {
    "pyproject.toml": '[project]\nname = "keras"\n',
    "keras/__init__.py": "",
    "keras/src/__init__.py": "",
    "keras/src/quantizers/__init__.py": "",
}


def test_mp601_epsilon_of_a_function_computing_in_its_float32_default_dtype_is_silent():
    found = lint_code(
        KERAS_QUANTIZERS, path="keras/src/quantizers/quantizers.py", files=KERAS_PACKAGE, select=["MP601"]
    ).diagnostics
    assert found == []


@pytest.mark.parametrize("signature", ["compute_dtype=None,", "compute_dtype,"])
def test_mp601_the_same_epsilon_with_a_dtype_the_caller_must_pick_is_library_code(signature):
    code = KERAS_QUANTIZERS.replace('compute_dtype="float32",', signature)
    found = lint_code(
        code, path="keras/src/quantizers/quantizers.py", files=KERAS_PACKAGE, select=["MP601"]
    ).diagnostics
    assert [(d.rule_id, d.line, d.column, d.message) for d in found] == [
        (
            "MP601",
            21,
            49,
            "`1e-8` flushes to 0 in float16 (smallest subnormal 6e-8): combined with the compute-dtype tensor `scale` "
            "under a float16 policy the epsilon vanishes and a log or division by it gives inf or NaN; library code of "
            "keras (users pick the policy)",
        )
    ]


# keras-team/keras keras/src/layers/normalization/unit_normalization.py (a planted defect the check missed): the
# epsilon reaches float16 inside `ops.normalize`, which bounds the L2 norm by it (epsilon * epsilon, or 1 / epsilon). Executed by
# tests/test_keras_fixes_executed.py::test_mp601_normalization_in_float32_keeps_zero_and_tiny_vectors_finite.
KERAS_UNIT_NORMALIZATION = """from keras.src import ops
from keras.src.api_export import keras_export
from keras.src.layers.layer import Layer


@keras_export("keras.layers.UnitNormalization")
class UnitNormalization(Layer):
    def __init__(self, axis=-1, **kwargs):
        super().__init__(**kwargs)
        self.axis = axis
        self.supports_masking = True
        self._build_at_init()

    def call(self, inputs):
        return ops.normalize(inputs, axis=self.axis, order=2, epsilon=1e-12)
"""
KERAS_LAYERS = {**KERAS_PACKAGE, "keras/src/layers/__init__.py": "", "keras/src/layers/normalization/__init__.py": ""}
UNIT_NORMALIZATION_EFFECT = (
    ", so rsqrt(0) turns a zero vector into NaN and a vector whose squares underflow into inf; normalize in float32; "
    "library code of keras (users pick the policy)"
)


@pytest.mark.parametrize(
    "epsilon,column,clamp",
    [
        (
            ", epsilon=1e-12",
            71,
            "(`epsilon=1e-12`) in the dtype of `inputs`, the compute dtype: under a float16 policy the "
            "bound is lost (the floor epsilon * epsilon = 1e-24 on the squared norm flushes to 0, "
            "smallest subnormal 6e-8, and the cap 1 / epsilon = 1e+12 that other Keras releases put on "
            "rsqrt overflows to inf)",
        ),
        (
            ", epsilon=backend.epsilon()",
            71,
            "(`epsilon=backend.epsilon()`) in the dtype of `inputs`, the compute dtype: "
            "under a float16 policy the bound is lost (the floor epsilon * epsilon = 1e-14 "
            "on the squared norm flushes to 0, smallest subnormal 6e-8, and the cap 1 / "
            "epsilon = 1e+07 that other Keras releases put on rsqrt overflows to inf)",
        ),
        (
            "",
            16,
            "(the default epsilon 1e-07, `keras.config.epsilon()`) in the dtype of `inputs`, the compute dtype: under "
            "a float16 policy the bound is lost (the floor epsilon * epsilon = 1e-14 on the squared norm flushes to 0, "
            "smallest subnormal 6e-8, and the cap 1 / epsilon = 1e+07 that other Keras releases put on rsqrt "
            "overflows to inf)",
        ),
    ],
)
def test_mp601_epsilon_of_keras_normalize_on_the_compute_dtype(epsilon, column, clamp):
    code = KERAS_UNIT_NORMALIZATION.replace(", epsilon=1e-12", epsilon).replace(
        "from keras.src import ops\n",
        "from keras.src import backend\nfrom keras.src import ops\n"
        if "backend" in epsilon
        else "from keras.src import ops\n",
    )
    line = 16 if "backend" in epsilon else 15
    path = "keras/src/layers/normalization/unit_normalization.py"
    out = lint_code(code, path=path, files=KERAS_LAYERS, select=["MP601"])
    assert [(d.rule_id, d.line, d.column, d.message, d.fix_safety) for d in out.diagnostics] == [
        (
            "MP601",
            line,
            column,
            f"`ops.normalize` bounds the L2 norm by epsilon {clamp}{UNIT_NORMALIZATION_EFFECT}",
            FixSafety.SAFE,
        )
    ]  # only float16/bfloat16 inputs take the float32 path; every other input runs the call as is
    fixed = lint_code(code, path=path, files=KERAS_LAYERS, select=["MP601"], fix=True).fixed_code
    original = f"ops.normalize(inputs, axis=self.axis, order=2{epsilon})"
    expected = code.replace(
        original,
        f'ops.cast(ops.normalize(ops.cast(inputs, "float32"), axis=self.axis, order=2'
        f"{epsilon}), inputs.dtype) if backend.standardize_dtype(inputs.dtype) in "
        f'("float16", "bfloat16") else {original}',
    )
    # Keras' own sources get `backend` from keras.src, beside `ops`
    expected = (
        expected.replace("from keras.src import ops\n", "from keras.src import backend, ops\n")
        if "backend" not in epsilon
        else expected
    )
    assert fixed == expected


@pytest.mark.parametrize(
    "call",
    [
        "ops.normalize(inputs, axis=self.axis, order=2, epsilon=1e-2)",
        "ops.normalize(inputs, axis=self.axis, order=1, epsilon=1e-7)",
        "ops.normalize(inputs, axis=self.axis, order=self.order, epsilon=1e-12)",
        'ops.normalize(ops.cast(inputs, "float32"), axis=self.axis, order=2, epsilon=1e-12)',
    ],
)
def test_mp601_normalize_whose_clamp_float16_holds_or_in_float32_is_silent(call):
    code = KERAS_UNIT_NORMALIZATION.replace("ops.normalize(inputs, axis=self.axis, order=2, epsilon=1e-12)", call)
    out = lint_code(
        code, path="keras/src/layers/normalization/unit_normalization.py", files=KERAS_LAYERS, select=["MP601"]
    )
    assert out.diagnostics == []


def test_mp601_normalize_of_another_order_clamps_the_norm_itself():
    code = KERAS_UNIT_NORMALIZATION.replace("order=2, epsilon=1e-12", "order=1, epsilon=1e-12")
    out = lint_code(
        code, path="keras/src/layers/normalization/unit_normalization.py", files=KERAS_LAYERS, select=["MP601"]
    )
    assert [(d.rule_id, d.line, d.column, d.message) for d in out.diagnostics] == [
        (
            "MP601",
            15,
            71,
            "`ops.normalize` clamps the norm with 1e-12 (`epsilon=1e-12`) in the dtype of `inputs`, the "
            "compute dtype: under a float16 policy it flushes to 0 (smallest subnormal 6e-8), so dividing "
            "by the norm turns a zero vector into NaN; normalize in float32; library code of keras (users "
            "pick the policy)",
        )
    ]


def test_mp103_test_support_code_a_published_package_ships_stays_library_code():
    files = {**TF_KERAS_TESTS, "pyproject.toml": '[project]\nname = "tf-keras"\n'}
    found = lint_code(
        TF_KERAS_VAE, path="tf_keras/integration_test/models/vae.py", files=files, select=["MP103"]
    ).diagnostics
    library = "; library code of tf-keras (users pick the policy)"
    assert [(d.rule_id, d.line, d.column, d.message) for d in found] == [
        (*VAE_CROSS_ENTROPY[:3], VAE_CROSS_ENTROPY[3] + library),
        (*VAE_KL[:3], VAE_KL[3] + library),
    ]
