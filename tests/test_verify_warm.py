"""Warm starts (mplint/verify/warm.py): each run of ``mplint verify`` is a fork of an interpreter that imported
the framework once. A forked run reports what a fresh interpreter's run reports, cannot leave its private view of
the file system, and where no warm interpreter can be had the run starts fresh. Real subprocesses (TensorFlow and
PyTorch on CPU)."""

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

import mplint
from mplint.verify import isolate, runner, warm
from mplint.verify.cli import main
from mplint.verify.report import without_timings

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="the private view needs Linux namespaces")
FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "verify"
needs_warm_starts = pytest.mark.skipif(
    not warm.usable(True, None), reason="warm starts are not used on this machine (an accelerator is visible)"
)

# What the run sees before its own imports, whether it can unmount its private view, and its capabilities.
PROBE = """import ctypes, sys
print("framework imported before the script:", "{module}" in sys.modules, file=sys.stderr)
libc = ctypes.CDLL(None, use_errno=True)
refused = libc.umount2(b"/", 2) != 0
print("unmount:", "refused " + str(ctypes.get_errno()) if refused else "done", file=sys.stderr)
caps = next(line.split()[1] for line in open("/proc/self/status") if line.startswith("CapEff:"))
print("CAP_SYS_ADMIN:", bool(int(caps, 16) >> 21 & 1), file=sys.stderr)
library = next(line.split()[0] for line in open("/proc/self/maps") if ".so" in line)  # mapped before the view
try:
    open(f"/proc/self/map_files/{{library}}", "rb").close()
    print("map_files: opened", file=sys.stderr)
except OSError as error:
    print("map_files: refused", error.errno, file=sys.stderr)
"""
KERAS_TRAINS = """import numpy as np
import keras
model = keras.Sequential([keras.Input(shape=(4,)), keras.layers.Dense(1)])
model.compile(optimizer="sgd", loss="mse")
model.fit(np.ones((16, 4), "float32"), np.ones((16, 1), "float32"), batch_size=8, epochs=1, verbose=0)
"""
TORCH_TRAINS = """import torch
model = torch.nn.Linear(4, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
for _ in range(3):
    optimizer.zero_grad()
    model(torch.ones(8, 4)).square().mean().backward()
    optimizer.step()
"""


def probe_lines(result: runner.RunResult) -> list[str]:
    return [line for line in result.stderr_tail.splitlines() if line.split(":")[0] in PROBE]


@needs_warm_starts
@pytest.mark.parametrize(
    ("framework", "module", "trains"),
    [
        pytest.param("keras", "tensorflow", KERAS_TRAINS, marks=pytest.mark.tensorflow, id="keras"),
        pytest.param("torch", "torch", TORCH_TRAINS, marks=pytest.mark.torch, id="torch"),
    ],
)
def test_a_warm_run_starts_with_the_framework_imported_and_cannot_unmount_its_view(tmp_path, framework, module, trains):
    pytest.importorskip(module, reason=f"{module} is not installed: this runs a {framework} script")
    script = tmp_path / "train.py"
    script.write_text(PROBE.format(module=module) + trains)
    result = runner.run_script("run", script, [], runner.RunOptions(steps=2, framework=framework))
    assert result.status in runner.OK_STATUSES, result.detail + result.stderr_tail
    assert probe_lines(result) == [
        "framework imported before the script: True",
        "unmount: refused 1",  # EPERM
        "CAP_SYS_ADMIN: False",
        "map_files: refused 1",  # the real files behind the warm import's mappings stay closed
    ]
    cold = runner.run_script("run", script, [], runner.RunOptions(steps=2, framework=framework, warm=False))
    assert probe_lines(cold) == ["framework imported before the script: False", *probe_lines(result)[1:]]


@needs_warm_starts
@pytest.mark.tensorflow
def test_warm_and_cold_runs_report_the_same(capsys):
    pytest.importorskip("tensorflow", reason="TensorFlow is not installed: this verifies a Keras fixture")
    reports = []
    for flags in ([], ["--cold-start"]):
        code = main([str(FIXTURES / "underflow_loop.py"), "--fix", "--steps", "3", "--format", "json", *flags])
        reports.append((code, without_timings(json.loads(capsys.readouterr().out))))
    assert reports[0] == reports[1]


@pytest.mark.parametrize(
    ("framework", "module", "trains"),
    [
        pytest.param("keras", "tensorflow", KERAS_TRAINS, marks=pytest.mark.tensorflow, id="keras"),
        pytest.param("torch", "torch", TORCH_TRAINS, marks=pytest.mark.torch, id="torch"),
    ],
)
def test_a_run_starts_fresh_where_no_warm_interpreter_can_be_had(tmp_path, monkeypatch, framework, module, trains):
    pytest.importorskip(module, reason=f"{module} is not installed: this runs a {framework} script")
    monkeypatch.setitem(warm.IMPORTS, framework, "no_such_framework_module")
    warm._close_all()
    script = tmp_path / "train.py"
    script.write_text(PROBE.format(module=module) + trains)
    result = runner.run_script("run", script, [], runner.RunOptions(steps=2, framework=framework))
    assert result.status in runner.OK_STATUSES, result.detail + result.stderr_tail
    assert probe_lines(result)[0] == "framework imported before the script: False"


def test_warm_starts_are_not_used_where_a_fork_is_less_faithful(tmp_path, monkeypatch):
    monkeypatch.setattr(warm, "DEVICE_PATTERNS", (str(tmp_path / "nvidia*"),))
    assert warm.usable(isolated=True, memory_limit_mb=None)
    assert not warm.usable(isolated=False, memory_limit_mb=None)  # Python-level redirection: before the import
    assert not warm.usable(isolated=True, memory_limit_mb=512)  # the cap would count the warm import
    (tmp_path / "nvidia0").touch()  # a GPU's runtime does not survive a fork
    assert not warm.usable(isolated=True, memory_limit_mb=None)


# In a fresh interpreter, as a warm start's child does it: enter the view, then (or not) drop privileges.
ENTER_THEN_UNMOUNT = """import ctypes, sys
from mplint.verify import isolate
isolate.enter(sys.argv[1])
if sys.argv[2] == "drop":
    isolate.drop_privileges()
caps = next(line.split()[1] for line in open("/proc/self/status") if line.startswith("CapEff:"))
libc = ctypes.CDLL(None, use_errno=True)
print(bool(int(caps, 16) >> 21 & 1), "refused" if libc.umount2(b"/", 2) != 0 else "unmounted")
"""


@pytest.mark.parametrize("who", ["caller", "unprivileged"])
def test_without_exec_only_dropping_privileges_keeps_the_view(tmp_path, who):
    become = []
    if who == "unprivileged":  # the user-namespace branch: the new namespace gives every capability in it
        if os.geteuid() != 0 or not shutil.which("setpriv"):
            pytest.skip("needs root (to become another user) and setpriv")
        become = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"]
    outcomes = []
    for step in ("drop", "keep"):
        base = Path(tempfile.mkdtemp())  # reachable by another user, unlike pytest's temporary folder
        try:
            isolate.make_layout(base)
            if become:
                for path in [base, *base.iterdir()]:
                    os.chown(path, 65534, 65534)
            proc = subprocess.run(
                [*become, sys.executable, "-c", ENTER_THEN_UNMOUNT, str(base), step],
                cwd=base / "scratch",
                capture_output=True,
                text=True,
                env=dict(os.environ, PYTHONPATH=str(Path(mplint.__file__).parent.parent)),
            )
            assert proc.returncode == 0, proc.stderr
            outcomes.append(proc.stdout.strip())
        finally:
            isolate.remove_layout(base)
    # without exec, root still holds CAP_SYS_ADMIN (enter drops it from the bounding set only), and can unmount the
    # view; an unprivileged caller holds every capability of its new user namespace (which cannot unmount "/")
    assert outcomes[0] == "False refused"
    assert outcomes[1] == ("True unmounted" if who == "caller" and os.geteuid() == 0 else "True refused")


# run_python (executed tests): what `python ARGV` prints and returns, from a fork of a warm interpreter.
PROGRAMS = {
    "code": ["-c", "import os, sys; print(sys.argv, repr(sys.path[0]), __name__, os.environ['WHO']); sys.exit(3)", "a"],
    "script": ["main.py", "b"],
    "exits with a message": ["-c", "raise SystemExit('stopped here')"],
    "raises": ["-c", "import json\nraise ValueError('boom')"],
}
MAIN = """import os, sys
print(sys.argv, sys.path[0] == os.path.dirname(os.path.abspath(__file__)), __name__, os.getcwd(), os.environ["WHO"])
"""


@pytest.mark.parametrize("name", PROGRAMS)
def test_run_python_gives_what_a_fresh_interpreter_gives(tmp_path, name):
    (tmp_path / "main.py").write_text(MAIN)
    env = dict(os.environ, WHO="me")
    warm_run = warm.run_python(PROGRAMS[name], module="json", cwd=tmp_path, env=env)
    fresh = subprocess.run([sys.executable, *PROGRAMS[name]], cwd=tmp_path, env=env, capture_output=True, text=True)
    assert (warm_run.returncode, warm_run.stdout) == (fresh.returncode, fresh.stdout)
    assert warm_run.stderr.splitlines()[-1:] == fresh.stderr.splitlines()[-1:]  # the traceback's frames differ


def test_run_python_times_out_and_kills_the_program(tmp_path):
    start = time.monotonic()
    with pytest.raises(subprocess.TimeoutExpired):
        warm.run_python(["-c", "import time; time.sleep(60)"], module="json", cwd=tmp_path, timeout=2)
    assert time.monotonic() - start < 15


@needs_warm_starts
@pytest.mark.torch
def test_a_run_whose_warm_interpreter_dies_under_it_runs_again_fresh(tmp_path):
    script = tmp_path / "train.py"
    killer = "import os, signal, sys\nif 'torch' in sys.modules:\n    os.kill(os.getppid(), signal.SIGKILL)\n"
    script.write_text(killer + PROBE.format(module="torch") + TORCH_TRAINS)  # kills the warm interpreter only
    result = runner.run_script("run", script, [], runner.RunOptions(steps=2, framework="torch"))
    assert result.status in runner.OK_STATUSES, result.detail + result.stderr_tail
    assert probe_lines(result)[0] == "framework imported before the script: False"  # the fresh run's
    (tmp_path / "probe.py").write_text(PROBE.format(module="torch") + TORCH_TRAINS)
    again = runner.run_script("run", tmp_path / "probe.py", [], runner.RunOptions(steps=2, framework="torch"))
    assert probe_lines(again)[0] == "framework imported before the script: True"  # a new warm interpreter
