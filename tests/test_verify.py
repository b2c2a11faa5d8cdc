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
    assert [metrics(doc, r)["output_dtype"] for r in ("before", "after", "float32 reference")] == ["float16", "float32", "float32"]
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
    redirected = doc["events"]["writes_redirected"]
    for name in ("model.keras", "results.txt", "log.csv", "best.weights.h5", "writes_files.py"):
        assert any(str(project / name) in line or f"/{name} ->" in line for line in redirected), name


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
    assert "nothing-recorded" in out and "no Keras model was called" in out


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
