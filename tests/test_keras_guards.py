"""Keras version guards: each arm of a feature or version test runs on its own range, intersected with the
program's target; MP501/MP502 fire in an arm only where that range has a version where the code is wrong, and
their fixes are written for the arm's range."""

from __future__ import annotations

import json

import pytest
from conftest import write_files

from mplint.analysis.keras_guards import MODULE_FEATURES
from mplint.cli import main
from mplint.knowledge.api_versions import G1, K2, K2_EARLY, K3, eras_label, eras_of

ARMS = """\
import tensorflow as tf

opt = tf.keras.mixed_precision.LossScaleOptimizer(tf.keras.optimizers.SGD())


def scaled(loss):
    if {test}:
        return opt.get_scaled_loss(loss)
    else:
        return opt.get_scaled_loss(loss)
"""


def _run(capsys, *args: str) -> tuple[int, list[tuple]]:
    capsys.readouterr()
    code = main(["--format", "json", "--no-cache", *args])
    doc = json.loads(capsys.readouterr().out)
    return code, [
        (d["rule"], d["start"]["line"], d["message"], d["fix"]["safety"] if d.get("fix") else None)
        for d in doc["diagnostics"]
    ]


@pytest.mark.parametrize(
    "test, lines",
    [
        # Keras 2 and Keras 3 both have mixed_precision.LossScaleOptimizer: the body runs on Keras 3 too
        ('hasattr(tf.keras.mixed_precision, "LossScaleOptimizer")', [8]),
        # only Keras 2's LossScaleOptimizer has get_scaled_loss; the else arm runs on any optimizer
        ('hasattr(opt, "get_scaled_loss")', [10]),
        ('not hasattr(opt, "get_scaled_loss")', [8]),
        ('hasattr(tf.keras.optimizers, "LossScaleOptimizer")', [8]),  # Keras 3 only
        ('hasattr(tf.keras.mixed_precision, "experimental")', [10]),  # TF 2.1-2.8 only
        ('tf.__version__ < "2.16"', [10]),
        ('version.parse(tf.__version__) >= version.parse("2.16.0")', [8]),
        ('hasattr(opt, "get_scaled_loss") and tf.__version__ >= "2.4"', [10]),
        ('hasattr(opt, "get_scaled_loss") or hasattr(opt, "loss_scale")', [10]),
        # unknown tests: silent in both arms, as before
        ('keras.__version__.startswith("2")', []),
        ('hasattr(opt, "apply_gradients")', []),
        ('hasattr(opt, "get_scaled_loss") or LEGACY_VERSION', []),
    ],
)
def test_each_arm_has_its_range(tmp_path, capsys, test, lines):
    write_files(
        tmp_path, {".mplint.yaml": "{}\n", "requirements.txt": "tensorflow>=2.4\n", "train.py": ARMS.format(test=test)}
    )
    code, found = _run(capsys, "--select", "MP502", str(tmp_path))
    assert (code, [(rule, line) for rule, line, _, _ in found]) == (1 if lines else 0, [("MP502", n) for n in lines])


IF_EXPRESSION = """\
def scaled(opt, loss):
    return opt.get_scaled_loss(loss) if {test} else opt.get_scaled_loss(loss)
"""


@pytest.mark.parametrize(
    "test, arms",
    [
        ('hasattr(opt, "get_scaled_loss")', ["else"]),
        ('hasattr(tf.keras.mixed_precision, "LossScaleOptimizer")', ["body"]),
        ('hasattr(opt, "apply_gradients")', []),  # unknown: silent
        ("use_scaling", ["body", "else"]),  # no version test
    ],
)
def test_conditional_expression_arms(tmp_path, capsys, test, arms):
    source = IF_EXPRESSION.format(test=test)
    write_files(tmp_path, {".mplint.yaml": "{}\n", "requirements.txt": "tensorflow>=2.4\n", "train.py": source})
    line = source.splitlines()[1]
    columns = {"body": line.index("get_scaled_loss") + 1, "else": line.rindex("get_scaled_loss") + 1}
    capsys.readouterr()
    main(["--format", "json", "--no-cache", "--select", "MP502", str(tmp_path)])
    found = [(d["start"]["line"], d["start"]["column"]) for d in json.loads(capsys.readouterr().out)["diagnostics"]]
    assert found == [(2, columns[arm]) for arm in arms]


GUARDED_LSO = """\
import tensorflow as tf

opt = tf.keras.mixed_precision.LossScaleOptimizer(tf.keras.optimizers.SGD())


def scaled(loss):
    if hasattr(tf.keras.mixed_precision, "LossScaleOptimizer"):
        return opt.get_scaled_loss(loss)
    return loss
"""

GUARDED_LSO_FIXED = GUARDED_LSO.replace("opt.get_scaled_loss(loss)", "opt.scale_loss(loss)")

NOT_GUARDED_ENOUGH = (
    "`get_scaled_loss` does not exist on Keras 3's LossScaleOptimizer (AttributeError): use "
    '`scale_loss` (target {arm}: the arm of `hasattr(tf.keras.mixed_precision, "LossScaleOptimizer")` '
    "(line 7), within {program} from requirements.txt pins {pin}{note})"
)


def test_guard_true_on_keras3_too_is_a_finding_with_an_unsafe_fix(tmp_path, capsys):
    """Keras 3 has LossScaleOptimizer but no get_scaled_loss: the arm runs on Keras 2 and Keras 3, so the rewrite
    holds on part of it only."""
    write_files(tmp_path, {".mplint.yaml": "{}\n", "requirements.txt": "tensorflow>=2.4\n", "train.py": GUARDED_LSO})
    message = NOT_GUARDED_ENOUGH.format(
        arm="Keras 2 or Keras 3",
        program="Keras 2 or Keras 3 (TF >= 2.4)",
        pin="tensorflow>=2.4",
        note="; the fix holds on Keras 3 only",
    )
    assert _run(capsys, "--select", "MP502", str(tmp_path)) == (1, [("MP502", 8, message, "unsafe")])
    assert main(["--no-cache", "--fix", "--select", "MP502", str(tmp_path)]) == 1
    assert (tmp_path / "train.py").read_text() == GUARDED_LSO
    main(["--no-cache", "--fix", "--unsafe-fixes", "--select", "MP502", str(tmp_path)])
    assert (tmp_path / "train.py").read_text() == GUARDED_LSO_FIXED


UNPINNED_PROGRAM = (
    "G1 (TF 2.1-2.3) or Keras 2 or Keras 3 (TF >= 2.1) from no pin, config or Keras import: any supported TensorFlow "
    "(set `target` or pin tensorflow)"
)


def test_guarded_arm_keeps_its_unsafe_fix_where_nothing_pins_tensorflow(tmp_path, capsys):
    """Without evidence an unguarded rewrite has no fix; inside a guard the arm's own range decides, as before."""
    write_files(tmp_path, {".mplint.yaml": "{}\n", "train.py": GUARDED_LSO})
    message = (
        "`get_scaled_loss` does not exist on Keras 3's LossScaleOptimizer (AttributeError): use `scale_loss` (target "
        'Keras 2 or Keras 3: the arm of `hasattr(tf.keras.mixed_precision, "LossScaleOptimizer")` (line 7), within '
        f"{UNPINNED_PROGRAM}; the fix holds on Keras 3 only)"
    )
    assert _run(capsys, "--select", "MP502", str(tmp_path)) == (1, [("MP502", 8, message, "unsafe")])
    main(["--no-cache", "--fix", "--unsafe-fixes", "--select", "MP502", str(tmp_path)])
    assert (tmp_path / "train.py").read_text() == GUARDED_LSO_FIXED


def test_guarded_experimental_api_keeps_its_safe_fix_where_nothing_pins_tensorflow(tmp_path, capsys):
    source = (
        "import tensorflow as tf\n\n"
        'if hasattr(tf.keras.mixed_precision, "LossScaleOptimizer"):\n'
        '    policy = tf.keras.mixed_precision.experimental.Policy("mixed_float16")\n'
    )
    write_files(tmp_path, {".mplint.yaml": "{}\n", "train.py": source})
    message = (
        "`tf.keras.mixed_precision.experimental.Policy` is the TF 2.1-2.3 experimental API, deprecated on TF 2.4-2.8 "
        "and removed in TF 2.9: use `tf.keras.mixed_precision.Policy` (target Keras 2 or Keras 3: the arm of "
        f'`hasattr(tf.keras.mixed_precision, "LossScaleOptimizer")` (line 3), within {UNPINNED_PROGRAM})'
    )
    assert _run(capsys, "--select", "MP501", str(tmp_path)) == (1, [("MP501", 4, message, "safe")])
    main(["--no-cache", "--fix", "--select", "MP501", str(tmp_path)])
    assert (tmp_path / "train.py").read_text() == source.replace(".experimental.Policy", ".Policy")


def test_guarded_fix_is_safe_where_the_arm_runs_on_keras3_alone(tmp_path, capsys):
    write_files(tmp_path, {".mplint.yaml": "{}\n", "requirements.txt": "tensorflow>=2.16\n", "train.py": GUARDED_LSO})
    message = NOT_GUARDED_ENOUGH.format(arm="Keras 3", program="Keras 3 (TF >= 2.16)", pin="tensorflow>=2.16", note="")
    assert _run(capsys, "--select", "MP502", str(tmp_path)) == (1, [("MP502", 8, message, "safe")])
    assert main(["--no-cache", "--fix", "--select", "MP502", str(tmp_path)]) == 0
    assert (tmp_path / "train.py").read_text() == GUARDED_LSO_FIXED


def test_guard_that_excludes_keras3_is_silent(tmp_path, capsys):
    source = GUARDED_LSO.replace(
        'hasattr(tf.keras.mixed_precision, "LossScaleOptimizer")', 'hasattr(opt, "get_scaled_loss")'
    )
    write_files(tmp_path, {".mplint.yaml": "{}\n", "requirements.txt": "tensorflow>=2.4\n", "train.py": source})
    assert _run(capsys, "--select", "MP502", str(tmp_path)) == (0, [])
    main(["--no-cache", "--fix", "--unsafe-fixes", "--select", "MP502", str(tmp_path)])
    assert (tmp_path / "train.py").read_text() == source


IMPORT_GUARDED = """\
import tensorflow as tf

try:
    from keras.optimizers import LossScaleOptimizer
    keras3 = opt.get_scaled_loss(loss)
except ImportError:
    keras2 = opt.get_scaled_loss(loss)
"""


def test_import_guard_gives_the_body_keras3_and_the_handler_the_rest(tmp_path, capsys):
    write_files(tmp_path, {".mplint.yaml": "{}\n", "train.py": IMPORT_GUARDED})
    code, found = _run(capsys, "--select", "MP502", str(tmp_path))
    assert (code, found) == (
        1,
        [
            (
                "MP502",
                5,
                (
                    "`get_scaled_loss` does not exist on Keras 3's LossScaleOptimizer (AttributeError): use `scale_loss` (target "
                    "Keras 3: the arm of `try: import ... except ImportError` (line 3), within G1 (TF 2.1-2.3) or Keras 2 or "
                    "Keras 3 (TF >= 2.1) from no pin, config or Keras import: any supported TensorFlow (set `target` or pin "
                    "tensorflow))"
                ),
                "safe",
            )
        ],
    )


EXPERIMENTAL_GUARDED = """\
import tensorflow as tf

try:
    from tensorflow.keras.mixed_precision import experimental as mixed_precision
except ImportError:
    from tensorflow.keras import mixed_precision

if hasattr(tf.keras.mixed_precision, "experimental"):
    tf.keras.mixed_precision.experimental.set_policy("mixed_float16")
else:
    tf.keras.mixed_precision.set_global_policy("mixed_float16")

if hasattr(tf.keras.mixed_precision, "LossScaleOptimizer"):
    policy = tf.keras.mixed_precision.experimental.Policy("mixed_float16")
"""


def test_mp501_fires_only_in_arms_that_run_past_tf_2_8(tmp_path, capsys):
    """The shims' experimental arms run on TF 2.1-2.8 only, where the experimental API exists: silent. The last arm
    runs on TF 2.4 and later, Keras 3 included: a finding, with a fix safe on that whole arm."""
    write_files(
        tmp_path, {".mplint.yaml": "{}\n", "requirements.txt": "tensorflow>=2.4\n", "train.py": EXPERIMENTAL_GUARDED}
    )
    code, found = _run(capsys, "--select", "MP501", str(tmp_path))
    assert (code, found) == (
        1,
        [
            (
                "MP501",
                14,
                (
                    "`tf.keras.mixed_precision.experimental.Policy` is the TF 2.1-2.3 experimental API, deprecated on TF "
                    "2.4-2.8 and removed in TF 2.9: use `tf.keras.mixed_precision.Policy` (target Keras 2 or Keras 3: the arm of `hasattr(tf.keras.mixed_precision, "
                    '"LossScaleOptimizer")` (line 13), within Keras 2 or Keras 3 (TF >= 2.4) from requirements.txt pins '
                    "tensorflow>=2.4)"
                ),
                "safe",
            )
        ],
    )
    assert main(["--no-cache", "--fix", "--select", "MP501", str(tmp_path)]) == 0
    assert (tmp_path / "train.py").read_text() == EXPERIMENTAL_GUARDED.replace(
        "policy = tf.keras.mixed_precision.experimental.Policy", "policy = tf.keras.mixed_precision.Policy"
    )


@pytest.mark.parametrize(
    "module, name", [(module, name) for module, names in MODULE_FEATURES.items() for name in names]
)
def test_feature_table_matches_the_installed_keras_2_and_3(module, name):
    """The newest end of each feature-test row: tf_keras is Keras 2 on TF >= 2.9, keras is Keras 3."""
    import importlib

    for era, package in ((K2, "tf_keras"), (K3, "keras")):
        pytest.importorskip(package)
        try:
            owner = importlib.import_module(f"{package}.{module}")
        except ImportError:
            owner = None
        assert (owner is not None and hasattr(owner, name), package) == (era in MODULE_FEATURES[module][name], package)


def test_eras_label_merges_keras_2():
    assert eras_label({K2_EARLY, K2, K3}) == "Keras 2 or Keras 3"
    assert eras_label({G1, K2_EARLY}) == "G1 (TF 2.1-2.3) or Keras 2 (TF 2.4-2.8)"
    assert eras_of({2, 3}, "2.8") == {K2_EARLY, K3}


def test_a_try_whose_body_defines_a_function_is_read_without_crashing(tmp_path, capsys):
    """A compound statement in a try body (a ``def``) has an indented block, not small statements: no import there
    makes the try an arm with a known range; the engine's silence in version gates stays (found by the fuzzer: the
    rule crashed, MP002)."""
    write_files(
        tmp_path,
        {
            ".mplint.yaml": "keras: 3\n",
            "train.py": (
                "try:\n    def reset(model):\n        model.optimizer.loss_scale = 2.0 ** 15\nexcept Exception:\n    pass\n"
            ),
        },
    )
    assert _run(capsys, "--select", "ALL", str(tmp_path)) == (0, [])


EARLY_EXIT = """\
import tensorflow as tf

opt = tf.keras.mixed_precision.LossScaleOptimizer(tf.keras.optimizers.SGD())


def scaled(loss):
    if {test}:
        {exit}
    return opt.get_scaled_loss(loss)
"""
PAST = (
    "`get_scaled_loss` does not exist on Keras 3's LossScaleOptimizer (AttributeError): use `scale_loss` (target "
    "{arm}: the code past `if {test}: {keyword}` (line 7), within Keras 2 or Keras 3 (TF >= 2.4) from "
    "requirements.txt pins tensorflow>=2.4{note})"
)


@pytest.mark.parametrize(
    "test, exit, arm, safety",
    [
        # the code past the exit runs where the test is false: Keras 3 alone, so the rewrite is safe there
        (
            'not hasattr(tf.keras.optimizers, "LossScaleOptimizer")',
            "return opt.get_scaled_loss(loss)",
            "Keras 3",
            "safe",
        ),
        (
            'version.parse(tf.__version__) < version.parse("2.16")',
            'raise ImportError("Keras 3 only")',
            "Keras 3",
            "safe",
        ),
        (
            'hasattr(tf.keras.mixed_precision, "experimental")',
            "return loss",
            "Keras 2 (TF >= 2.9 or tf_keras) or Keras 3",
            "unsafe",
        ),
        # ... or never on Keras 3: silent
        ('hasattr(tf.keras.optimizers, "LossScaleOptimizer")', "return opt.scale_loss(loss)", None, None),
        ('tf.__version__ >= "2.16"', "raise ImportError", None, None),
    ],
)
def test_code_past_an_early_exit_runs_in_the_false_arm(tmp_path, capsys, test, exit, arm, safety):
    source = EARLY_EXIT.format(test=test, exit=exit)
    write_files(tmp_path, {".mplint.yaml": "{}\n", "requirements.txt": "tensorflow>=2.4\n", "train.py": source})
    keyword = exit.split()[0].split("(")[0]
    note = "; the fix holds on Keras 3 only" if safety == "unsafe" else ""
    expected = [("MP502", 9, PAST.format(arm=arm, test=test, keyword=keyword, note=note), safety)] if arm else []
    assert _run(capsys, "--select", "MP502", str(tmp_path)) == (1 if arm else 0, expected)
    main(["--no-cache", "--fix", "--select", "MP502", str(tmp_path)])
    head, _, _ = source.rpartition("get_scaled_loss")  # line 9 only: the exit's own arm is no Keras 3 code
    fixed = f"{head}scale_loss(loss)\n"
    assert (tmp_path / "train.py").read_text() == (fixed if safety == "safe" else source)


EARLY_CONTINUE = """\
import tensorflow as tf

opt = tf.keras.mixed_precision.LossScaleOptimizer(tf.keras.optimizers.SGD())


def scale_all(self, losses):
    for loss in losses:
        if hasattr(opt, "get_scaled_loss"):
            continue
        if not hasattr(self, "built"):
            return
        opt.get_scaled_loss(loss)
"""


def test_early_continue_is_read_and_an_exit_of_unknown_range_is_not_a_guard(tmp_path, capsys):
    """``hasattr(opt, "get_scaled_loss")`` is false on Keras 3 and on any optimizer that is no LossScaleOptimizer:
    past its ``continue`` every era remains, so it narrows nothing; ``hasattr(self, "built")`` says nothing of
    versions: the program's own target decides, as with no guard at all."""
    write_files(
        tmp_path, {".mplint.yaml": "{}\n", "requirements.txt": "tensorflow>=2.16\n", "train.py": EARLY_CONTINUE}
    )
    assert _run(capsys, "--select", "MP502", str(tmp_path)) == (
        1,
        [
            (
                "MP502",
                12,
                (
                    "`get_scaled_loss` does not exist on Keras 3's LossScaleOptimizer (AttributeError): use `scale_loss` (target "
                    "Keras 3 (TF >= 2.16), from requirements.txt pins tensorflow>=2.16)"
                ),
                "safe",
            )
        ],
    )


EXPERIMENTAL_PAST_EXIT = """\
import tensorflow as tf


def enable():
    if not hasattr(tf.keras.mixed_precision, "experimental"):
        tf.keras.mixed_precision.set_global_policy("mixed_float16")
        return
    tf.keras.mixed_precision.experimental.set_policy("mixed_float16")


def enable_late():
    if hasattr(tf.keras.mixed_precision, "experimental"):
        return
    tf.keras.mixed_precision.experimental.set_policy("mixed_float16")
"""


def test_mp501_past_an_early_exit(tmp_path, capsys):
    """Past ``if not hasattr(..., "experimental"): return`` the experimental API exists (TF 2.1-2.8): silent. Past
    ``if hasattr(..., "experimental"): return`` it never does: a finding, safe on that arm (Keras 2 from TF 2.9, and
    Keras 3)."""
    write_files(
        tmp_path, {".mplint.yaml": "{}\n", "requirements.txt": "tensorflow>=2.4\n", "train.py": EXPERIMENTAL_PAST_EXIT}
    )
    code, found = _run(capsys, "--select", "MP501", str(tmp_path))
    assert (code, found) == (
        1,
        [
            (
                "MP501",
                14,
                (
                    "`tf.keras.mixed_precision.experimental.set_policy` is the TF 2.1-2.3 experimental API, removed in TF 2.9: use "
                    "`tf.keras.mixed_precision.set_global_policy` (target Keras 2 (TF >= 2.9 or tf_keras) or Keras 3: the code "
                    'past `if hasattr(tf.keras.mixed_precision, "experimental"): return` (line 12), within Keras 2 or Keras 3 '
                    "(TF >= 2.4) from requirements.txt pins tensorflow>=2.4)"
                ),
                "safe",
            )
        ],
    )
    assert main(["--no-cache", "--fix", "--select", "MP501", str(tmp_path)]) == 0
    head, _, _ = EXPERIMENTAL_PAST_EXIT.rpartition("experimental.set_policy")
    assert (tmp_path / "train.py").read_text() == f'{head}set_global_policy("mixed_float16")\n'
