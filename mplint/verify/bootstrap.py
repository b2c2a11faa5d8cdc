"""Entry point of the instrumented process: ``python -m mplint.verify.bootstrap CONFIG.json``.

Installs the sandbox and the import hooks, then runs the user's script as ``__main__``."""

from __future__ import annotations

import json
import linecache
import os
import random
import re
import sys
import traceback

from mplint.verify import failures, loops, patching, recorder, sandbox, torch_hooks


def install_tensorflow(tf) -> None:
    from mplint.verify import hooks

    tf.random.set_seed(recorder.RECORDER.config["seed"])
    patching.patch_method(type(tf.GradientTape()), "gradient", hooks.wrap_gradient)
    patching.patch_method(
        type(tf.function(lambda: None)), "__call__", hooks.wrap_traced_call
    )  # a step, seen from Python
    tf.function = hooks.wrap_function(tf.function)
    tf.saved_model.save = hooks.wrap_path_arg(1)(tf.saved_model.save)
    tf.summary.create_file_writer = hooks.wrap_path_arg(0)(tf.summary.create_file_writer)
    for name in ("save", "write"):
        patching.patch_method(tf.train.Checkpoint, name, hooks.wrap_path_arg(1))


def install_jax(jax) -> None:
    from mplint.verify import jax_hooks  # imports NumPy, as JAX does: not on a machine with only torch

    jax_hooks.install_jax(jax)


def _install_models(model_cls, generation: int) -> None:
    from mplint.verify import hooks

    for name, make in (
        ("__call__", hooks.wrap_call(generation)),
        ("fit", hooks.wrap_fit),
        ("evaluate", hooks.wrap_capped("steps")),
        ("predict", hooks.wrap_capped("steps")),
        ("compile", hooks.wrap_compile),
        ("save", hooks.wrap_path_arg(1)),
        ("save_weights", hooks.wrap_path_arg(1)),
        ("load_weights", hooks.wrap_path_arg(1, writing=False)),
    ):
        setattr(model_cls, name, make(getattr(model_cls, name)))


def _install_optimizers(classes, methods) -> None:
    for cls in classes:
        for name, make in methods:
            patching.patch_method(cls, name, make)


def install_keras3(keras) -> None:
    from keras.src.dtype_policies import dtype_policy
    from keras.src.optimizers import base_optimizer, loss_scale_optimizer
    from keras.src.saving import saving_api

    from mplint.verify import datasets, hooks

    keras.utils.set_random_seed(recorder.RECORDER.config["seed"])
    patching.patch_function(dtype_policy.__name__, "set_dtype_policy", hooks.wrap_policy_setter, "keras")
    for name in datasets.DATASETS:
        patching.patch_function(f"keras.src.datasets.{name}", "load_data", hooks.fake_load_data(name), "keras")
    patching.patch_function("keras.src.utils.file_utils", "get_file", hooks.blocked_get_file, "keras")
    patching.patch_function(saving_api.__name__, "save_model", hooks.wrap_path_arg(1), "keras")
    patching.patch_function(saving_api.__name__, "load_model", hooks.wrap_path_arg(0, writing=False), "keras")
    _install_models(keras.Model, 3)
    keras.Model.stateless_call = hooks.wrap_stateless_call(keras.Model.stateless_call)
    methods = (
        ("apply_gradients", hooks.wrap_apply_gradients),
        ("apply", hooks.wrap_apply),
        ("stateless_apply", hooks.wrap_stateless_apply),
        ("scale_loss", hooks.wrap_scale_loss),
    )
    optimizers = {base_optimizer.BaseOptimizer, loss_scale_optimizer.LossScaleOptimizer}
    optimizers.update(c for c in type(keras.optimizers.SGD()).__mro__ if c.__module__.startswith("keras."))
    _install_optimizers(optimizers, methods)


def install_keras2(tf_keras) -> None:
    from tf_keras.src.mixed_precision import loss_scale_optimizer, policy
    from tf_keras.src.optimizers import optimizer
    from tf_keras.src.optimizers.legacy import optimizer_v2
    from tf_keras.src.saving import saving_api

    from mplint.verify import datasets, hooks

    tf_keras.utils.set_random_seed(recorder.RECORDER.config["seed"])
    patching.patch_function(policy.__name__, "set_global_policy", hooks.wrap_policy_setter, "tf_keras")
    patching.patch_function(policy.__name__, "set_policy", hooks.wrap_policy_setter, "tf_keras")
    for name in datasets.DATASETS:
        if f"tf_keras.src.datasets.{name}" in sys.modules or name != "california_housing":
            patching.patch_function(
                f"tf_keras.src.datasets.{name}", "load_data", hooks.fake_load_data(name), "tf_keras"
            )
    patching.patch_function("tf_keras.src.utils.data_utils", "get_file", hooks.blocked_get_file, "tf_keras")
    patching.patch_function(saving_api.__name__, "save_model", hooks.wrap_path_arg(1), "tf_keras")
    patching.patch_function(saving_api.__name__, "load_model", hooks.wrap_path_arg(0, writing=False), "tf_keras")
    _install_models(tf_keras.Model, 2)
    classes = [
        optimizer._BaseOptimizer,
        optimizer.Optimizer,
        optimizer_v2.OptimizerV2,
        loss_scale_optimizer.LossScaleOptimizer,
        loss_scale_optimizer.LossScaleOptimizerV3,
        loss_scale_optimizer.BaseLossScaleOptimizer,
    ]
    _install_optimizers(
        classes, (("apply_gradients", hooks.wrap_apply_gradients), ("get_scaled_loss", hooks.wrap_scale_loss))
    )


def _global_policy() -> str | None:
    for name in ("tf_keras", "keras"):
        module = sys.modules.get(name)
        if module is not None and hasattr(module, "mixed_precision"):
            try:
                return module.mixed_precision.global_policy().name
            except Exception:
                continue
    return None


ANSI = re.compile(r"\x1b\[[0-9;]*m")
KERAS_CALL_ERROR = "Exception encountered when calling"  # Keras 3 wraps a layer's error in this line
ERROR_LINE = re.compile(r"^[A-Za-z_][\w.]*(Error|Exception|Exit|Interrupt|Blocked)\b:")


def _error_line(lines: list[str]) -> str:
    """The last ``SomeError: message`` line of a ``tf.function`` error (Keras appends the call's
    arguments after it), else its last line."""
    return next((line for line in reversed(lines) if ERROR_LINE.match(line)), lines[-1])


def crash_site(exc: BaseException, script: str) -> dict:
    """The error in one line and the script line it happened at: the deepest frame of the script, or
    the line a ``tf.function`` error names in its "in user code" part (deeper than any frame)."""
    text = ANSI.sub("", str(exc))
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    error = (
        _error_line(lines)
        if "in user code:" in text and lines
        else f"{type(exc).__name__}: {lines[0] if lines else ''}"
    )
    if error.split(": ", 1)[-1].startswith(KERAS_CALL_ERROR):  # the cause is on the line after it
        at = max(i for i, line in enumerate(lines) if KERAS_CALL_ERROR in line)
        following = lines[at + 1 :]
        error = f"{error.split(': ', 1)[0]}: {following[0]}" if following else error
    line = None
    for frame, lineno in traceback.walk_tb(exc.__traceback__):
        if os.path.abspath(frame.f_code.co_filename) == script:
            line = lineno
    for match in re.finditer(r'File "([^"]+)", line (\d+)', text):
        if os.path.abspath(match[1]) == script:
            line = int(match[2])
    return {
        "error": error.rstrip(": "),
        "file": os.path.basename(script),
        "line": line,
        "source": linecache.getline(script, line).strip() if line else "",
    }


def main(config_path: str) -> None:
    with open(config_path, encoding="utf-8") as fh:
        config = json.load(fh)
    recorder.RECORDER = rec = recorder.Recorder(config)
    rec.policy_reader = _global_policy
    random.seed(config["seed"])
    try:
        import numpy as np
    except ImportError:  # a machine with only torch
        pass
    else:
        np.random.seed(config["seed"])
    sandbox.install()
    installers = {  # in the order a fresh import runs them: TensorFlow's import imports Keras
        name: failures.guarded(install)  # an installer that fails is mplint's error, not the script's import's
        for name, install in (
            ("keras", install_keras3),
            ("tf_keras", install_keras2),
            ("tensorflow", install_tensorflow),
            ("torch", torch_hooks.install_torch),
            ("torchvision", torch_hooks.install_torchvision),
            ("jax", install_jax),
        )
    }
    sys.meta_path.insert(0, patching.PostImportHook(installers))
    # imported before the run (warm.py); None where a module is blocked from importing
    for name in [name for name in installers if sys.modules.get(name) is not None]:
        installers.pop(name)(sys.modules[name])
    script = config["script"]
    sys.argv = [script, *config["argv"]]
    sys.path[0] = os.path.dirname(script)
    if config.get("source_dir"):
        sys.path.insert(1, config["source_dir"])
    try:
        loops.run(script)  # a torch script's training loops each capped on their own
    except SystemExit as exc:
        code = exc.code
        if code not in (None, 0):
            print(code if isinstance(code, str) else f"script exited with status {code}", file=sys.stderr)
            rec.finish("exited", f"the script exited with status {code if isinstance(code, int) else 1}", 1)
    except BaseException as exc:
        traceback.print_exc()
        crash = crash_site(exc, os.path.abspath(script))
        if torch_hooks.stopped_after_cap(exc, crash):
            rec.finish("step-cap")
        rec.crash = crash
        rec.finish("crashed", rec.crash["error"], 1)
    rec.finish("completed")


if __name__ == "__main__":
    main(sys.argv[1])
