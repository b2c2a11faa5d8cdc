"""``mplint verify`` end to end: real subprocesses running the fixtures under real TensorFlow (CPU)."""

import json
import shutil
from pathlib import Path

import pytest

pytest.importorskip("tensorflow")

from mplint.verify.cli import main  # noqa: E402

pytestmark = pytest.mark.tensorflow
FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "verify"


def verify(capsys, *argv):
    code = main([*map(str, argv)])
    out = capsys.readouterr().out
    return code, out


def verify_json(capsys, *argv):
    argv = list(argv)
    cut = argv.index("--") if "--" in argv else len(argv)
    code, out = verify(capsys, *argv[:cut], "--format", "json", *argv[cut:])
    return code, json.loads(out)


def metrics(doc, run):
    return doc["runs"][run]["metrics"]


def rules(doc, run):
    return sorted({f["rule"] for f in metrics(doc, run)["findings"]})


def test_fix_turns_float16_softmax_output_into_float32(capsys):
    code, doc = verify_json(capsys, FIXTURES / "fit_softmax.py", "--fix", "--steps", "5")
    assert code == 0
    assert "MP101" in doc["fixed_rules"]
    assert [metrics(doc, r)["output_dtype"] for r in ("before", "after", "float32 reference")] == [
        "float16",
        "float32",
        "float32",
    ]
    assert rules(doc, "before") == ["MP101", "MP806"]
    assert rules(doc, "after") == []
    assert [metrics(doc, r)["steps"] for r in doc["runs"]] == [5, 5, 5]
    assert doc["events"]["datasets_replaced"] == ["mnist"]


def test_fix_removes_gradient_underflow_of_custom_loop(capsys):
    code, doc = verify_json(capsys, FIXTURES / "underflow_loop.py", "--fix", "--steps", "5")
    assert code == 0
    assert "MP201" in doc["fixed_rules"]
    before, after = metrics(doc, "before"), metrics(doc, "after")
    assert before["underflow"] > 0.5
    assert after["underflow"] < 0.01
    # the fix inserts a line above the loop: the fixed run still names the loop by the original's line
    assert (
        [u["loop"] for u in before["units"]] == [u["loop"] for u in after["units"]] == ["loop at underflow_loop.py:33"]
    )
    assert rules(doc, "before") == ["MP804"]
    assert (before["scale_first"], after["scale_first"]) == (None, 32768.0)


def test_fix_removes_nan_from_additive_mask(capsys):
    code, doc = verify_json(capsys, FIXTURES / "mask_nan.py", "--fix", "--steps", "5")
    assert code == 0
    assert "MP601" in doc["fixed_rules"]
    before, after = metrics(doc, "before"), metrics(doc, "after")
    assert before["non_finite_steps"] == 5 and before["final_loss"] != before["final_loss"]  # NaN
    assert after["non_finite_steps"] == 0
    assert "MP802" in rules(doc, "before")
    assert "MP802" not in rules(doc, "after")


def test_without_fix_a_nan_run_exits_1_and_the_table_names_the_findings(capsys):
    code, out = verify(capsys, FIXTURES / "mask_nan.py", "--steps", "4")
    assert code == 1
    assert "non-finite steps" in out and "4/4" in out
    assert "problems: MP802, MP803" in out


def test_crashing_script_cannot_be_verified(capsys):
    code, out = verify(capsys, FIXTURES / "crash.py")
    assert code == 2
    assert "could not verify crash.py: the run run crashed: RuntimeError: dataset shard missing" in out
    assert 'crash.py", line 5' in out  # the stderr tail


def test_missing_required_argument_is_reported_then_passed_after_double_dash(capsys):
    code, out = verify(capsys, FIXTURES / "needs_argument.py")
    assert code == 2
    assert "exited: the script exited with status 2" in out
    assert "the following arguments are required: --data-dir" in out
    code, doc = verify_json(capsys, FIXTURES / "needs_argument.py", "--steps", "1", "--", "--data-dir", "data")
    assert code == 0
    assert metrics(doc, "run")["steps"] == 1  # capped: the script asks for 3 epochs of 2 batches


def _snapshot(root: Path) -> dict:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def test_script_that_writes_files_leaves_the_user_tree_untouched(capsys, tmp_path, monkeypatch):
    project = tmp_path / "project"
    project.mkdir()
    shutil.copy(FIXTURES / "writes_files.py", project)
    before = _snapshot(project)
    monkeypatch.chdir(project)
    monkeypatch.setenv("DELETE_ME", "1")
    code, doc = verify_json(capsys, "writes_files.py", "--steps", "3")
    assert code == 0
    assert _snapshot(project) == before
    assert sorted(p.name for p in project.iterdir()) == ["writes_files.py"]
    assert doc["events"]["writes_redirected"] == []  # it ran in a scratch copy of its folder: all writes land there


def test_writes_outside_the_scripts_folder_stay_in_the_private_view(capsys, tmp_path):
    outside = tmp_path / "elsewhere" / "out.txt"
    outside.parent.mkdir()
    script = tmp_path / "project" / "train.py"
    script.parent.mkdir()
    script.write_text(
        f"import keras\nopen({str(outside)!r}, 'w').write('x')\nassert open({str(outside)!r}).read() == 'x'\n"
        + _TINY_FIT
    )
    code, doc = verify_json(capsys, script, "--steps", "2")
    assert code == 0
    assert list(outside.parent.iterdir()) == []
    assert doc["events"]["writes_redirected"] == [str(outside)]
    code, out = verify(capsys, script, "--steps", "2")
    assert f"1 write(s) outside the scratch folder kept from your files: {outside}\n" in out


def test_without_isolation_python_level_writes_are_redirected(capsys, tmp_path):
    outside = tmp_path / "elsewhere" / "out.txt"
    script = tmp_path / "project" / "train.py"
    script.parent.mkdir()
    script.write_text(f"import keras\nopen({str(outside)!r}, 'w').write('x')\n" + _TINY_FIT)
    code, doc = verify_json(capsys, script, "--steps", "2", "--no-isolation")
    assert code == 0
    assert not outside.parent.exists()
    assert doc["events"]["writes_redirected"] == [f"{outside} -> redirected{outside}"]


_TINY_FIT = """model = keras.Sequential([keras.Input(shape=(4,)), keras.layers.Dense(8), keras.layers.Dense(1)])
model.compile(optimizer="sgd", loss="mse")
model.fit(keras.random.normal((64, 4)), keras.random.normal((64, 1)), batch_size=8, epochs=2)
"""


def test_script_reads_its_sibling_files_at_the_same_relative_paths(capsys, tmp_path, monkeypatch):
    project = tmp_path / "project"
    (project / "data").mkdir(parents=True)
    (project / "config.json").write_text('{"units": 8}')
    (project / "data" / "scale.txt").write_text("0.5")
    (project / "train.py").write_text(
        "import json\nfrom pathlib import Path\nimport keras\n"
        "units = json.load(open('config.json'))['units']\n"
        "scale = float((Path(__file__).parent / 'data' / 'scale.txt').read_text())\n"
        "open('config.json', 'w').write('{}')  # changes the scratch copy only\n"
        "model = keras.Sequential([keras.Input(shape=(4,)), keras.layers.Dense(units), keras.layers.Dense(1)])\n"
        "model.compile(optimizer='sgd', loss='mse')\n"
        "model.fit(keras.random.normal((64, 4)) * scale, keras.random.normal((64, 1)), batch_size=8)\n"
    )
    monkeypatch.chdir(tmp_path)  # run from elsewhere: the script's folder is its working directory
    code, doc = verify_json(capsys, project / "train.py", "--steps", "2")
    assert code == 0
    assert metrics(doc, "run")["steps"] == 2
    assert (project / "config.json").read_text() == '{"units": 8}'


def test_fit_then_custom_loop_each_get_the_step_cap_and_the_table_names_the_loops(capsys, tmp_path):
    script = tmp_path / "two_loops.py"
    script.write_text(
        "import keras\nimport tensorflow as tf\n"
        + _TINY_FIT
        + """\
optimizer = keras.optimizers.SGD(0.01)
for step in range(100):
    with tf.GradientTape() as tape:
        loss = tf.reduce_mean(tf.square(model(tf.ones((8, 4)))))
    grads = tape.gradient(loss, model.trainable_variables)
    optimizer.apply_gradients(zip(grads, model.trainable_variables))
"""
    )
    code, doc = verify_json(capsys, script, "--steps", "3")
    assert code == 0
    units = metrics(doc, "run")["units"]
    assert [(u["unit"], u["steps"], u["model"]) for u in units] == [
        ("fit() #1 / SGD", 3, "sequential"),
        ("loop at two_loops.py:7 / SGD", 3, "sequential"),
    ]
    code, out = verify(capsys, script, "--steps", "3")
    assert "at most 3 steps per training loop" in out
    assert "│ fit() #1 / SGD " in out and "│ loop at two_loops.py:7 / SGD " in out


_TWO_CUSTOM_LOOPS = """import keras
import tensorflow as tf

model = keras.Sequential([keras.Input(shape=(4,)), keras.layers.Dense(8), keras.layers.Dense(1)])
warmup, optimizer = keras.optimizers.SGD(0.001), keras.optimizers.Adam(0.01)


@tf.function
def train_step(opt, x):
    with tf.GradientTape() as tape:
        loss = tf.reduce_mean(tf.square(model(x)))
    grads = tape.gradient(loss, model.trainable_variables)
    opt.apply_gradients(zip(grads, model.trainable_variables))
    return loss


for step in range(100):  # warm-up, in a tf.function
    train_step(warmup, tf.ones((8, 4)))
print("warm-up over")
for epoch in range(10):  # the main loop, eager
    for step in range(20):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.square(model(tf.ones((8, 4)))))
        grads = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(grads, model.trainable_variables))
print("training over")
"""


def test_two_keras_custom_loops_in_a_row_each_get_the_step_cap(capsys, tmp_path):
    """A warm-up loop calling a tf.function, then an eager epoch/batch loop: each is ended at its own cap (the
    tf.function's steps are counted from the Python call around them) and the script goes on after each."""
    script = tmp_path / "two_loops.py"
    script.write_text(_TWO_CUSTOM_LOOPS)
    code, doc = verify_json(capsys, script, "--steps", "3")
    assert code == 0
    run = doc["runs"]["run"]
    assert run["status"] == "completed"
    assert [(u["unit"], u["steps"]) for u in metrics(doc, "run")["units"]] == [
        ("loop at two_loops.py:17 / SGD", 3),
        ("loop at two_loops.py:20 / Adam", 3),
    ]


def test_guide_keras2_loop_crashes_on_keras3_and_its_fix_is_a_verified_repair(capsys):
    code, doc = verify_json(capsys, FIXTURES / "guide_keras2_loop.py", "--fix", "--steps", "3")
    assert code == 0
    assert doc["fixed_rules"] == ["MP502"]
    before, after = metrics(doc, "before"), metrics(doc, "after")
    assert doc["runs"]["before"]["status"] == "crashed"
    assert before["crash"] == {
        "error": "AttributeError: 'LossScaleOptimizer' object has no attribute 'get_scaled_loss'",
        "file": "guide_keras2_loop.py",
        "line": 33,
        "source": "scaled_loss = optimizer.get_scaled_loss(loss)",
    }
    assert before["steps"] == 0
    assert (after["steps"], after["non_finite_steps"], after["scale_first"]) == (3, 0, 32768.0)
    assert doc["summary"] == (
        "before: crashed with AttributeError: 'LossScaleOptimizer' object has no attribute "
        "'get_scaled_loss' at guide_keras2_loop.py:33 (scaled_loss = optimizer.get_scaled_loss(loss)); "
        "after: runs"
    )
    assert doc["verdict"].startswith("verified repair: the original crashed with AttributeError")
    assert metrics(doc, "float32 reference")["steps"] == 3  # the reference runs the fixed copy


_SOFTMAX_THEN_MISSING_FILE = """import keras
keras.mixed_precision.set_global_policy("mixed_float16")
model = keras.Sequential([keras.Input(shape=(4,)), keras.layers.Dense(8), keras.layers.Dense(3, activation="softmax")])
open("missing.csv").read()
"""


def test_fix_that_runs_neither_before_nor_after_cannot_be_verified(capsys, tmp_path):
    script = tmp_path / "missing_file.py"
    script.write_text(_SOFTMAX_THEN_MISSING_FILE)
    code, out = verify(capsys, script, "--fix", "--steps", "2")
    assert code == 2
    assert (
        "could not verify missing_file.py: it runs neither before nor after the fixes (MP101): "
        "before: crashed with FileNotFoundError: [Errno 2] No such file or directory: 'missing.csv' at "
        'missing_file.py:4 (open("missing.csv").read()); after: crashed with FileNotFoundError'
    ) in out


def test_fix_that_breaks_a_running_script_is_worse(capsys, tmp_path, monkeypatch):
    from mplint.verify import cli

    script = tmp_path / "clean.py"
    script.write_text("import keras\n" + _TINY_FIT)

    def breaking_fix(path, keras, folder):
        copy = folder / path.name
        copy.write_text(path.read_text() + "raise ValueError('broken by the fix')\n")
        return copy, ["MP000"], None

    monkeypatch.setattr(cli, "fix_copy", breaking_fix)
    code, doc = verify_json(capsys, script, "--fix", "--steps", "2")
    assert code == 3
    assert (
        doc["summary"] == "before: runs; after: crashed with ValueError: broken by the fix at clean.py:5 "
        "(raise ValueError('broken by the fix'))"
    )
    assert doc["verdict"] == (
        "worse: the fixed script no longer runs (crashed with ValueError: broken by the fix at "
        "clean.py:5 (raise ValueError('broken by the fix')))"
    )


def test_fix_that_changes_nothing_is_not_verified(capsys, tmp_path):
    script = tmp_path / "clean.py"
    script.write_text("import keras\n" + _TINY_FIT)
    code, out = verify(capsys, script, "--fix", "--steps", "2")
    assert code == 4
    assert "fixes applied to the copy: none" in out
    assert out.strip().splitlines()[-1] == (
        "nothing to verify: mplint --fix changed nothing (no MP802/MP803/MP804 in the capped run)"
    )
    assert "verified" not in out


@pytest.mark.parametrize("fixture", ["bare_except_loop.py", "graph_loop.py"])
def test_custom_loops_cannot_escape_the_step_cap(capsys, fixture):
    code, doc = verify_json(capsys, FIXTURES / fixture, "--steps", "4", "--timeout", "120")
    assert code == 0
    assert doc["runs"]["run"]["status"] == "step-cap"
    assert metrics(doc, "run")["steps"] == 4


def test_keras2_script_is_detected_and_its_float16_output_seen(capsys):
    code, doc = verify_json(capsys, FIXTURES / "keras2_fit.py", "--steps", "3")
    assert code == 0
    assert doc["keras"] == 2
    assert metrics(doc, "run")["output_dtype"] == "float16"
    assert rules(doc, "run") == ["MP101", "MP806"]
    assert metrics(doc, "float32 reference")["output_dtype"] == "float32"


def test_a_run_that_records_nothing_is_an_error(capsys, tmp_path):
    script = tmp_path / "no_model.py"
    script.write_text("print('hello')\n")
    code, out = verify(capsys, script)
    assert code == 2
    assert "nothing-recorded" in out and "no Keras model or torch module was called" in out


def test_downloads_are_blocked_and_reported(capsys, tmp_path):
    script = tmp_path / "download.py"
    script.write_text("import keras\nkeras.utils.get_file('w.h5', 'https://example.com/w.h5')\n")
    code, out = verify(capsys, script)
    assert code == 2
    assert "DownloadBlocked: mplint verify: download of https://example.com/w.h5 blocked" in out


# CPUs have no fast float16 convolution: mixed_float16 is several times slower there than float32
# (about 6x on a 2-core AMD EPYC; a small dense model is within timing noise).
_CONV_NET = """\
import keras
import numpy as np

keras.mixed_precision.set_global_policy("mixed_float16")
x = np.random.rand(512, 32, 32, 3).astype("float32")
y = np.random.randint(0, 8, size=(512,))
model = keras.Sequential([
    keras.Input(shape=(32, 32, 3)),
    keras.layers.Conv2D(64, 3, padding="same", activation="relu"),
    keras.layers.Conv2D(64, 3, padding="same", activation="relu"),
    keras.layers.GlobalAveragePooling2D(),
    keras.layers.Dense(8, activation="softmax", dtype="float32"),
])
model.compile(optimizer="adam", loss="sparse_categorical_crossentropy")
model.fit(x, y, epochs=1, batch_size=64)
"""


def test_benchmark_on_cpu_prints_figures_and_mp805(capsys, tmp_path):
    script = tmp_path / "conv_net.py"
    script.write_text(_CONV_NET)
    code, doc = verify_json(capsys, script, "--benchmark", "--steps", "8")
    assert code == 0
    bench = doc["benchmark"]
    assert bench["policy"] == "mixed_float16"
    assert bench["mixed_ms_per_step"] > 0 and bench["float32_ms_per_step"] > 0
    assert [f["rule"] for f in doc["findings"]] == ["MP805"]
    assert doc["verdict"].startswith("MP805 mixed_float16 is not faster than float32 here")


def test_benchmark_prints_a_table_and_a_verdict_as_text(capsys, tmp_path):
    script = tmp_path / "conv_net.py"
    script.write_text(_CONV_NET)
    code, out = verify(capsys, script, "--benchmark", "--steps", "6")
    assert code == 0
    assert "mplint verify --benchmark conv_net.py" in out
    assert out.strip().splitlines()[-1].startswith("MP805 mixed_float16 is not faster than float32 here (")


def test_missing_script_is_a_usage_error(capsys, tmp_path):
    assert main([str(tmp_path / "absent.py")]) == 2
    assert "is not a file" in capsys.readouterr().err


def test_gan_is_reported_per_optimizer_and_model(capsys):
    code, doc = verify_json(capsys, FIXTURES / "gan_loop.py", "--steps", "6")
    assert code == 1
    run = metrics(doc, "run")
    assert run["model_outputs"] == {"generator": ["float16"], "discriminator": ["float32"]}
    generator, discriminator = run["units"]
    assert (generator["unit"], generator["model"], generator["steps"]) == (
        "loop at gan_loop.py:39 / LossScaleOptimizer(Adam)",
        "generator",
        6,
    )
    assert (discriminator["unit"], discriminator["model"], discriminator["steps"]) == (
        "loop at gan_loop.py:39 / LossScaleOptimizer(Adam) #2",
        "discriminator",
        6,
    )
    assert generator["final_loss"] > 100 and discriminator["final_loss"] < 10  # each its own tape's loss
    assert generator["scale_history"] == [16384.0, 8192.0, 4096.0, 2048.0, 1024.0, 512.0]
    assert generator["skipped_steps"] == 6
    assert discriminator["scale_history"] == [32768.0] * 6 and discriminator["skipped_steps"] == 0
    # one iteration runs both optimizers: both units share the loop's clock, which spans a whole train step
    assert generator["ms_per_iteration"] == discriminator["ms_per_iteration"]
    low, high = generator["ms_spread"]
    assert low <= generator["ms_per_iteration"] <= high
    assert [f["message"] for f in run["findings"]] == [
        "generator (loop at gan_loop.py:39): loss scale 16384 -> 512, 6 skipped steps",
        "generator: output observed as float16",
    ]
    assert doc["verdict"] == "problems: MP803"
