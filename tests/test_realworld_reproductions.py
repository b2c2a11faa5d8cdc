"""Small reproductions of real code on which the real-world check (bench/realworld/snapshot.yaml) found a rule
wrong: each pins what the rule says there now."""

from __future__ import annotations

import pytest

from mplint.testing import lint_code

# mlcommons/training retired_benchmarks/resnet-tf2: --fp16_implementation=graph_rewrite builds the model in float32
# (get_tf_dtype) and wraps the optimizer in the graph rewrite; --dtype=fp16 sets mixed_float16 and a
# LossScaleOptimizer instead. The two are modes of one program, never combined.
PERFORMANCE = '''import tensorflow as tf


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
'''
RUNNABLE = '''import tensorflow as tf


class Runnable:
    def __init__(self, flags, dtype):
        self.optimizer = tf.keras.optimizers.SGD(0.1)
        if dtype == tf.float16:
            self.optimizer = tf.keras.mixed_precision.LossScaleOptimizer(self.optimizer)
        elif flags.fp16_implementation == "graph_rewrite":
            self.optimizer = (
                tf.train.experimental.enable_mixed_precision_graph_rewrite(self.optimizer))
'''
MAIN = '''import tensorflow as tf

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
'''
MLCOMMONS = {"performance.py": PERFORMANCE, "runnable.py": RUNNABLE, "main.py": MAIN}


@pytest.mark.parametrize("path", ["performance.py", "runnable.py"])
def test_mp503_graph_rewrite_as_the_float32_mode_of_a_mode_switch_is_silent(path):
    files = {name: text for name, text in MLCOMMONS.items() if name != path}
    out = lint_code(MLCOMMONS[path], path=path, files=files, select=["MP503"], fix=True, unsafe_fixes=True)
    assert out.diagnostics == [] and not out.written


def test_mp503_unconditional_rewrite_in_a_program_that_may_set_float32_is_an_unsafe_fix():
    code = RUNNABLE.replace(
        '        elif flags.fp16_implementation == "graph_rewrite":\n            self.optimizer = (\n'
        '                tf.train.experimental.enable_mixed_precision_graph_rewrite(self.optimizer))\n',
        "        self.optimizer = tf.train.experimental.enable_mixed_precision_graph_rewrite(self.optimizer)\n")
    files = {name: text for name, text in MLCOMMONS.items() if name != "runnable.py"}
    found = lint_code(code, path="runnable.py", files=files, select=["MP503"])
    assert [(d.rule_id, d.line, d.column, d.message) for d in found.diagnostics] == [(
        "MP503", 9, 26,
        "`enable_mixed_precision_graph_rewrite` applies TensorFlow's graph rewrite: together with the Keras policy "
        "(mixed_float16 set at performance.py:15 in the program of main.py, which imports this module) it raises at "
        "run time (the program may also set float32, where deleting the rewrite drops mixed precision: unsafe fix). "
        "The rewrite also added loss scaling; compile() adds a LossScaleOptimizer under mixed_float16",
    )]
    assert not lint_code(code, path="runnable.py", files=files, select=["MP503"], fix=True).written  # not safe
    fixed = lint_code(code, path="runnable.py", files=files, select=["MP503"], fix=True, unsafe_fixes=True)
    assert fixed.fixed_code == code.replace(
        "        self.optimizer = tf.train.experimental.enable_mixed_precision_graph_rewrite(self.optimizer)\n", "")
