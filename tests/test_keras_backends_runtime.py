"""mplint.runtime on each Keras 3 backend (TensorFlow, JAX, torch) on CPU, TensorFlow hidden from the JAX and torch
processes as on a machine without it: the policy and the hardware from the backend, the three step shapes (a
``GradientTape`` step with ``apply_gradients``, ``backward()`` with ``apply``, ``stateless_apply`` inside
``jax.jit``) updating as float32 does under mixed_float16, ``check_model``, the page's documented example, and the
one-line error where Keras or its backend is missing."""

from __future__ import annotations

import json
import subprocess
import sys
from types import SimpleNamespace

import pytest
from conftest import REPO
from keras_backends import backend_env, backend_params, missing, warm_module

from mplint.runtime import policy
from mplint.verify.warm import run_python

# Each backend's probe prints one JSON object: what the runtime did there.
PROBE = """\
import json, sys
import keras
import numpy as np
from mplint import runtime

backend = keras.backend.backend()
found = {"backend": backend}
auto = runtime.enable()
found["auto"] = [auto.policy, auto.backend, auto.hardware.device, [f.rule_id for f in auto.findings]]
choice = runtime.enable("mixed_float16")
found["mixed"] = [choice.policy, choice.keras, [f.rule_id for f in choice.findings]]
model = keras.Sequential(
    [
        keras.Input((10,)),
        keras.layers.Dense(12, activation="relu", name="hidden"),
        keras.layers.Dense(16, dtype="float16", name="half"),
        keras.layers.Dense(3, activation="softmax", name="probs"),
    ],
    name="sequential",
)
found["check_model"] = [[f.rule_id, f.layer] for f in runtime.check_model(model)]


def fresh():
    optimizer = runtime.wrap_optimizer(keras.optimizers.SGD(learning_rate=1.0))
    return optimizer, keras.Variable(np.ones((1,), "float32"))


def value(variable):
    return float(keras.ops.convert_to_numpy(variable)[0])


updates = {}
if backend == "tensorflow":
    import tensorflow as tf

    optimizer, var = fresh()

    @tf.function
    def step():
        with tf.GradientTape() as tape:
            scaled = runtime.scale_loss(optimizer, 3.0 * tf.reduce_sum(var.value))
        runtime.apply_gradients(optimizer, zip(tape.gradient(scaled, [var.value]), [var]))

    step()
    updates["apply_gradients"] = value(var)
elif backend == "torch":
    for name in ("apply", "apply_gradients"):
        optimizer, var = fresh()
        runtime.scale_loss(optimizer, 3.0 * var.value.sum()).backward()
        if name == "apply":
            runtime.apply(optimizer, [var.value.grad], [var])
        else:
            runtime.apply_gradients(optimizer, [(var.value.grad, var)])
        updates[name] = value(var)
else:
    import jax

    optimizer, var = fresh()
    grads = jax.grad(lambda v: runtime.scale_loss(optimizer, 3.0 * v.sum()))(var.value)
    runtime.apply(optimizer, [grads], [var])
    updates["apply"] = value(var)
    for carried in (True, False):
        optimizer, var = fresh()
        optimizer.build([var])

        def loss(trainable, optimizer_variables):
            return runtime.scale_loss(optimizer, 3.0 * trainable[0].sum(), optimizer_variables if carried else None)

        @jax.jit
        def step(trainable, optimizer_variables):
            grads = jax.grad(loss)(trainable, optimizer_variables)
            return runtime.stateless_apply(optimizer, optimizer_variables, grads, trainable)

        state = [v.value for v in optimizer.variables]
        trainable, state = step([var.value], state)  # traced with the scale at 32768
        scale = [i for i, v in enumerate(optimizer.variables) if v is optimizer.dynamic_scale][0]
        state[scale] = state[scale] / 32  # the scale has changed since: 1024
        trainable, _ = step(trainable, state)
        updates["stateless_apply" if carried else "stateless_apply without optimizer_variables"] = float(
            trainable[0][0]
        )
found["updates"] = updates
found["tensorflow imported"] = sys.modules.get("tensorflow") is not None
print("RESULT " + json.dumps(found))
"""


@pytest.fixture(scope="module")
def probes(tmp_path_factory) -> dict:
    return {}


def probe(backend: str, probes: dict, tmp_path_factory) -> dict:
    if backend not in probes:
        folder = tmp_path_factory.mktemp(backend)
        done = run_python(["-c", PROBE], module=warm_module(backend), cwd=REPO, env=backend_env(backend, folder))
        assert done.returncode == 0, done.stderr[-3000:]
        line = next(line for line in done.stdout.splitlines() if line.startswith("RESULT "))
        probes[backend] = json.loads(line[len("RESULT ") :])
    return probes[backend]


@pytest.mark.parametrize("backend", backend_params())
def test_enable_picks_the_policy_on_the_backends_hardware(backend, probes, tmp_path_factory):
    found = probe(backend, probes, tmp_path_factory)
    assert found["backend"] == backend
    assert found["auto"] == ["float32", backend, "CPU", ["MP801"]]  # a CPU: float32, and MP801 says why
    assert found["mixed"] == ["mixed_float16", 3, ["MP801"]]
    assert found["tensorflow imported"] is (backend == "tensorflow")


@pytest.mark.parametrize("backend", backend_params())
def test_check_model_reads_the_same_findings_on_every_backend(backend, probes, tmp_path_factory):
    assert probe(backend, probes, tmp_path_factory)["check_model"] == [
        ["MP806", "probs"],
        ["MP101", "probs"],
        ["MP807", "hidden"],
        ["MP807", "half"],
        ["MP602", "sequential/half/kernel"],
        ["MP602", "sequential/half/bias"],
    ]


@pytest.mark.parametrize("backend", backend_params())
def test_scaled_steps_update_as_float32_does_under_mixed_float16(backend, probes, tmp_path_factory):
    """SGD(1.0) on ``3 * v`` from v = 1: the float32 update is v = -2. The loss is scaled by 32768 and each step
    shape unscales it exactly once; an update off by the scale would leave v near 1 or far below -2."""
    updates = probe(backend, probes, tmp_path_factory)["updates"]
    expected = {
        "tensorflow": {"apply_gradients": -2.0},
        "torch": {"apply": -2.0, "apply_gradients": -2.0},
        # two steps of the jitted loop: -2, then -5. Scaled by the carried scale (1024), the second step is right;
        # scaled by the scale the optimizer held when the step was traced (32768), it is 32x too large
        "jax": {
            "apply": -2.0,
            "stateless_apply": -5.0,
            "stateless_apply without optimizer_variables": -2.0 - 3.0 * 32,
        },
    }[backend]
    assert updates == expected


def test_hardware_from_jax_devices(monkeypatch):
    jax = pytest.importorskip("jax")
    tpu = SimpleNamespace(platform="tpu", device_kind="TPU v4")
    monkeypatch.setattr(jax, "devices", lambda: [tpu])
    assert policy.detect_hardware(backend="jax") == policy.Hardware("TPU", "TPU v4")
    gpu = SimpleNamespace(platform="gpu", device_kind="NVIDIA A100-SXM4-80GB", compute_capability="8.0")
    monkeypatch.setattr(jax, "devices", lambda: [gpu])
    hardware = policy.detect_hardware(backend="jax")
    assert hardware == policy.Hardware("GPU", "NVIDIA A100-SXM4-80GB", (8, 0))
    assert policy._auto(hardware)[0::2] == ("mixed_float16", ("mixed_bfloat16",))
    monkeypatch.setattr(jax, "devices", lambda: [SimpleNamespace(platform="cpu", device_kind="cpu")])
    assert policy.detect_hardware(backend="jax") == policy.Hardware("CPU", "CPU")


def test_hardware_from_torch_cuda(monkeypatch):
    torch = pytest.importorskip("torch")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda index=0: "Tesla T4")
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda index=0: (7, 5))
    hardware = policy.detect_hardware(backend="torch")
    assert hardware == policy.Hardware("GPU", "Tesla T4", (7, 5))
    assert policy._auto(hardware) == ("mixed_float16", "Tesla T4 (compute capability 7.5) has Tensor Cores", ())
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert policy.detect_hardware(backend="torch") == policy.Hardware("CPU", "CPU")


ON_TPU = """\
from types import SimpleNamespace
import jax
jax.devices = lambda: [SimpleNamespace(platform="tpu", device_kind="TPU v5 lite")]
import keras
from mplint import runtime
choice = runtime.enable()
layer = keras.layers.Dense(4)
layer.build((None, 3))
print(choice.policy, choice.hardware.device, choice.findings, layer.compute_dtype, layer.kernel.dtype)
"""


@pytest.mark.parametrize("backend", backend_params("jax"))
def test_enable_sets_mixed_bfloat16_on_a_jax_tpu(backend, tmp_path):
    done = run_python(["-c", ON_TPU], module="keras", cwd=REPO, env=backend_env(backend, tmp_path))
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.splitlines()[-1] == "mixed_bfloat16 TPU () bfloat16 float32"


def _documented_example(backend: str) -> str:
    """The page's common block and the block of ``backend``."""
    from markdown_it import MarkdownIt

    page = (REPO / "docs" / "runtime.md").read_text(encoding="utf-8").split("## PyTorch", 1)[0]
    tokens = MarkdownIt().parse(page)
    blocks, heading = {}, ""
    for index, token in enumerate(tokens):
        if token.type == "heading_open":
            heading = tokens[index + 1].content
        elif token.type == "fence" and token.info == "python":
            blocks.setdefault(heading, token.content)
    common = blocks[next(iter(blocks))]
    title = {"tensorflow": "On TensorFlow", "jax": "On JAX", "torch": "On torch"}[backend]
    return common + "\n" + blocks[title]


@pytest.mark.parametrize("policy_asked", ["auto", "mixed_float16"])
@pytest.mark.parametrize("backend", backend_params())
def test_the_documented_keras_example_runs_on_every_backend(backend, policy_asked, tmp_path):
    code = _documented_example(backend)
    if policy_asked != "auto":
        code = code.replace("runtime.enable()", f'runtime.enable("{policy_asked}")')
    code += "\nimport sys\nprint('tensorflow imported:', sys.modules.get('tensorflow') is not None)\n"
    done = run_python(["-c", code], module=warm_module(backend), cwd=REPO, env=backend_env(backend, tmp_path))
    assert done.returncode == 0, done.stderr[-3000:]
    first, trained, imported = done.stdout.splitlines()
    reason = "no GPU or TPU found: float16 is slower than float32 on CPUs" if policy_asked == "auto" else "requested"
    assert first == f"{'float32' if policy_asked == 'auto' else policy_asked} on {backend} - {reason}"
    start, end = (float(value) for value in trained.removeprefix("loss ").split(" -> "))
    assert 0 < end < start  # finite, and it trains
    assert imported == f"tensorflow imported: {backend == 'tensorflow'}"


def test_the_documented_console_is_the_jax_example_on_a_cpu():
    from markdown_it import MarkdownIt

    page = (REPO / "docs" / "runtime.md").read_text(encoding="utf-8").split("## PyTorch", 1)[0]
    [console] = [token.content for token in MarkdownIt().parse(page) if token.info == "console"]
    first, trained = console.splitlines()
    assert first == "float32 on jax - no GPU or TPU found: float16 is slower than float32 on CPUs"
    assert trained.startswith("loss ")


ENABLE = "from mplint import runtime\nruntime.enable()\n"


@pytest.mark.parametrize(
    ("hidden", "backend", "message"),
    [
        (
            "keras",
            "jax",
            "mplint.runtime needs Keras, and keras is not installed in this environment: install it with a backend, "
            'jax, torch or tensorflow: python3 -m pip install keras "jax[cpu]" ("jax[cuda12]" in place of '
            '"jax[cpu]" for NVIDIA GPUs)',
        ),
        (
            "jax",
            "jax",
            "mplint.runtime runs Keras 3 on the jax backend (KERAS_BACKEND=jax), and jax is not installed in this "
            'environment: install it, python3 -m pip install "jax[cpu]" ("jax[cuda12]" in place of "jax[cpu]" for '
            "NVIDIA GPUs), or set KERAS_BACKEND to an installed backend",
        ),
        (
            "torch",
            "torch",
            "mplint.runtime runs Keras 3 on the torch backend (KERAS_BACKEND=torch), and torch is not installed in "
            "this environment: install it, python3 -m pip install torch (a CPU-only torch: python3 -m pip install "
            "torch --index-url https://download.pytorch.org/whl/cpu), or set KERAS_BACKEND to an installed backend",
        ),
        (
            "tensorflow",
            "tensorflow",
            "mplint.runtime runs Keras 3 on the tensorflow backend (KERAS_BACKEND=tensorflow), and tensorflow is not "
            "installed in this environment: install it, python3 -m pip install tensorflow, or set KERAS_BACKEND to an "
            "installed backend",
        ),
    ],
    ids=["keras", "jax", "torch", "tensorflow"],
)
def test_enable_without_keras_or_its_backend_says_what_to_install(hidden, backend, message, tmp_path):
    if hidden != "keras" and missing("keras"):
        pytest.skip("keras is not installed")
    env = backend_env(backend, tmp_path)
    hide = f"import sys\nsys.modules[{hidden!r}] = None\n"
    done = subprocess.run(
        [sys.executable, "-c", hide + ENABLE], capture_output=True, text=True, cwd=REPO, env=env, timeout=300
    )
    assert done.returncode == 1
    assert done.stderr.splitlines()[-1] == f"ModuleNotFoundError: {message}"
    assert "During handling of the above exception" not in done.stderr  # the import's own chain is left out
