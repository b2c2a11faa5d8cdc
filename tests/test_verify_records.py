"""What `mplint verify` records and reports from a run: the one-line error of a crash, output dtypes."""

import io

from rich.console import Console

from mplint.verify.bootstrap import crash_site
from mplint.verify.report import Metrics, UnitMetrics, table

# str() of the errors a Keras 3 model raises when a layer's build() fails: called eagerly, and
# inside a tf.function (whose "in user code" part names the script's lines)
KERAS_CALL = (
    "Exception encountered when calling MyModel.call().\n\n\x1b[1mmodule 'keras.backend' has no "
    "attribute 'Variable'\x1b[0m\n\nArguments received by MyModel.call():\n"
    "  • x=tf.Tensor(shape=(32, 128), dtype=float32)"
)
IN_USER_CODE = (
    'in user code:\n\n    File "{script}", line 72, in train_step  *\n        y_pred = model(x)\n'
    '    File "/site-packages/keras/src/utils/traceback_utils.py", line 122, in error_handler  **\n'
    "        raise e.with_traceback(filtered_tb) from None\n"
    '    File "{script}", line 27, in build\n        self.w = backend.Variable(w_value, name="kernel")\n\n'
    "    AttributeError: " + KERAS_CALL.replace("\n", "\n    ") + "\n"
)


def test_a_keras_call_error_reports_its_cause_not_the_arguments_line(tmp_path):
    script = tmp_path / "demo.py"
    script.write_text("\n" * 26 + 'self.w = backend.Variable(w_value, name="kernel")\n')
    site = crash_site(AttributeError(IN_USER_CODE.format(script=script)), str(script))
    assert site == {
        "error": "AttributeError: module 'keras.backend' has no attribute 'Variable'",
        "file": "demo.py",
        "line": 27,
        "source": 'self.w = backend.Variable(w_value, name="kernel")',
    }


def test_an_eager_keras_call_error_reports_its_cause(tmp_path):
    site = crash_site(AttributeError(KERAS_CALL), str(tmp_path / "demo.py"))
    assert site["error"] == "AttributeError: module 'keras.backend' has no attribute 'Variable'"


def test_a_tf_function_error_without_keras_keeps_its_last_error_line(tmp_path):
    text = 'in user code:\n\n    File "x.py", line 3, in f  *\n        return a / b\n\n    ValueError: shapes differ\n'
    assert crash_site(ValueError(text), str(tmp_path / "x.py"))["error"] == "ValueError: shapes differ"


def test_a_torch_dtype_and_a_keras_dtype_name_one_output_dtype():
    from mplint.verify.recorder import Recorder

    rec, model = Recorder({"steps": 5}), object()
    rec.see_model(model, 3, {"torch.float32"})  # a Keras 3 model on the torch backend, seen by the Keras hook
    rec.see_model(model, 0, {"float32", "bfloat16"})  # and by the torch forward hook
    assert rec.models[str(id(model))].output_dtypes == {"float32", "bfloat16"}


def test_a_crash_is_reported_by_its_error_line_without_the_stderr_tail_after_it(tmp_path):
    from mplint.verify.cli import _failure
    from mplint.verify.runner import RunResult

    crash = {
        "error": "AttributeError: module 'keras.backend' has no attribute 'Variable'",
        "file": "demo.py",
        "line": 27,
        "source": "",
    }
    run = RunResult(
        "run",
        "crashed",
        crash["error"],
        {"crash": crash},
        stderr_tail="Arguments received by MyModel.call():\n  • x=tf.Tensor(shape=(32, 128), dtype=float32)",
    )
    assert _failure(run, tmp_path / "demo.py")["message"] == (
        "could not verify demo.py: the run run crashed: AttributeError: module 'keras.backend' has no attribute 'Variable'"
    )
    exited = RunResult(
        "run", "exited", "the script exited with status 2", {}, stderr_tail="error: --data-dir is required"
    )
    assert _failure(exited, tmp_path / "demo.py")["message"].endswith("status 2 (error: --data-dir is required)")


def test_a_fixed_copy_maps_its_lines_to_the_original_script(tmp_path):
    from mplint.verify.runner import original_lines

    original, fixed = tmp_path / "train.py", tmp_path / "fixed.py"
    original.write_text("import keras\nopt = make()\nfor x in data:\n    step(x)\nprint('done')\n")
    fixed.write_text("import keras\nopt = make()\nopt = wrap(opt)\nfor x in data:\n    step2(x)\nprint('done')\n")
    # line 3 was inserted (it takes the line before it), 4-6 moved down by one (5 also changed)
    assert original_lines(original, fixed) == {"3": 2, "4": 3, "5": 4, "6": 5}
    assert original_lines(original, original) == {}


def _unit(loop: str, optimizer: str, loss: float, scales=(), underflow=None, unit: str | None = None) -> UnitMetrics:
    return UnitMetrics(
        unit=unit or f"{loop} / {optimizer}",
        loop=loop,
        optimizer=optimizer,
        model="sequential",
        steps=5,
        final_loss=loss,
        non_finite_steps=0,
        skipped_steps=0,
        scale_history=list(scales),
        underflow=underflow,
        ms_per_iteration=None,
        ms_spread=None,
    )


def _rendered(columns: dict[str, Metrics]) -> list[str]:
    out = io.StringIO()
    Console(file=out, width=160, color_system=None).print(table("verify", columns))
    return [line.rstrip() for line in out.getvalue().splitlines()]


def test_an_optimizer_the_fix_wrapped_stays_in_one_block_beside_the_original():
    """MP201's fix wraps Adam in a LossScaleOptimizer: the unit has another name, the same by its loop and its
    optimizer's order in it, so before, after and the float32 reference share one block."""
    loop = "loop at underflow_loop.py:33"
    columns = {
        "before": Metrics("mixed_float16", "step-cap", None, [_unit(loop, "Adam", 2.303, underflow=0.62)]),
        "after": Metrics(
            "mixed_float16", "step-cap", None, [_unit(loop, "LossScaleOptimizer(Adam)", 1.9, [32768.0], 0.0)]
        ),
        "float32 reference": Metrics("float32", "step-cap", None, [_unit(loop, "Adam", 1.9)]),
    }
    assert _rendered(columns)[7:18] == [
        "│ loop at underflow_loop.py:33       │ Adam, trains sequential │ LossScaleOptimizer(Adam), trains sequential │ Adam, trains sequential │",
        "│   steps                            │ 5                       │ 5                                           │ 5                       │",
        "│   final loss                       │ 2.303                   │ 1.9                                         │ 1.9                     │",
        "│   non-finite steps                 │ 0/5                     │ 0/5                                         │ 0/5                     │",
        "│   skipped steps                    │ 0                       │ 0                                           │ 0                       │",
        "│   loss scale first -> last         │ none                    │ 32768 -> 32768                              │ none                    │",
        "│   gradient underflow               │ 62.0%                   │ 0.0%                                        │ n/a                     │",
        "│   first update / float32 reference │ n/a                     │ n/a                                         │ n/a                     │",
        "│   ms/iteration (fastest-slowest)   │ n/a                     │ n/a                                         │ n/a                     │",
        "├────────────────────────────────────┼─────────────────────────┼─────────────────────────────────────────────┼─────────────────────────┤",
        "│ findings                           │ none                    │ none                                        │ none                    │",
    ]


def test_two_wrapped_optimizers_of_one_loop_pair_by_their_order_and_a_unit_named_alike_keeps_its_name():
    gan, fit = "loop at gan.py:20", "fit #1"
    before = [_unit(gan, "Adam", 0.7), _unit(gan, "Adam", 0.6, unit=f"{gan} / Adam #2"), _unit(fit, "SGD", 0.5)]
    after = [
        _unit(gan, "LossScaleOptimizer(Adam)", 0.69),
        _unit(gan, "LossScaleOptimizer(Adam)", 0.59, unit=f"{gan} / LossScaleOptimizer(Adam) #2"),
        _unit(fit, "SGD", 0.5),
    ]
    shown = _rendered({"before": Metrics(None, "ok", None, before), "after": Metrics(None, "ok", None, after)})
    headers = [line for line in shown if line.startswith("│ ") and not line.startswith("│   ")]
    assert headers == [
        "│ status                             │ ok                      │ ok                                          │",
        "│ policy                             │ n/a                     │ n/a                                         │",
        "│ loop at gan.py:20 / optimizer 1    │ Adam, trains sequential │ LossScaleOptimizer(Adam), trains sequential │",
        "│ loop at gan.py:20 / optimizer 2    │ Adam, trains sequential │ LossScaleOptimizer(Adam), trains sequential │",
        "│ fit #1 / SGD                       │ trains sequential       │ trains sequential                           │",
        "│ findings                           │ none                    │ none                                        │",
    ]
    assert [line for line in shown if "final loss" in line] == [
        "│   final loss                       │ 0.7                     │ 0.69                                        │",
        "│   final loss                       │ 0.6                     │ 0.59                                        │",
        "│   final loss                       │ 0.5                     │ 0.5                                         │",
    ]
