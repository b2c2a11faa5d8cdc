"""``mplint verify`` on any device: every tensor value the PyTorch hooks read goes through one place
(``torch_reads.host``), which copies it to the CPU first; nothing read stays on the device after a step; an
exception in mplint's own hooks is reported as mplint's, never as the script's crash; a machine with only torch (no
NumPy) verifies; a timed run (``--benchmark``) carries only the step timer. CPU only: a GPU is stood in for by a
tensor that says it lives on one, and by a script that makes every read mplint's hooks make outside that one place
fail, as ``.numpy()`` of a CUDA tensor fails."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest

torch = pytest.importorskip(
    "torch", reason="torch is not installed: these tests run PyTorch scripts under mplint verify (docs/install.md)"
)

from mplint.verify import failures, torch_hooks, torch_reads  # noqa: E402
from mplint.verify.cli import main  # noqa: E402
from mplint.verify.report import without_timings  # noqa: E402

pytestmark = pytest.mark.torch
NUMPY_ERROR = (
    "can't convert cuda:0 device type tensor to numpy. Use Tensor.cpu() to copy the tensor to host memory first."
)


class OnGPU(torch.Tensor):
    """A tensor that says it lives on a GPU: its values are read only from a copy moved to the CPU (``.numpy()``
    raises as on a CUDA tensor; ``.item()``, ``.tolist()``, ``float()`` and ``bool()``, which on a GPU wait for it,
    raise too). Counts the copies made to the CPU."""

    copies = 0

    @property
    def device(self):
        return torch.device("cuda", 0)

    def to(self, *args, **kwargs):
        target = kwargs.get("device", args[0] if args and isinstance(args[0], (str, torch.device)) else None)
        if target is not None and torch.device(target).type == "cpu":
            OnGPU.copies += 1
            return self.as_subclass(torch.Tensor).to(*args, **kwargs)
        return super().to(*args, **kwargs)

    def cpu(self):
        return self.to("cpu")

    def numpy(self, *args, **kwargs):
        raise TypeError(NUMPY_ERROR)

    def _read(self, *args, **kwargs):
        raise AssertionError("a value read on the device")

    item = tolist = __float__ = __int__ = __bool__ = __index__ = _read


def on_gpu(value) -> OnGPU:
    return torch.as_tensor(value).as_subclass(OnGPU)


def test_the_stand_in_gpu_tensor_refuses_what_a_cuda_tensor_refuses():
    grad = on_gpu([[1.0, 2.0]])
    with pytest.raises(TypeError, match=re.escape(NUMPY_ERROR)):
        grad.detach().float().numpy()  # what the step hook did: the crash a CUDA script met
    assert grad.detach().reshape(2).device.type == "cuda"  # what torch makes of it still says so
    with pytest.raises(AssertionError, match="a value read on the device"):
        float(grad.sum())


def test_host_reads_device_tensors_only_after_one_copy_to_the_cpu_per_device_and_per_gradient():
    OnGPU.copies = 0
    grads = [on_gpu([[2.0**-20, 0.0]]).to(torch.float16), on_gpu([3.0])]
    read = torch_reads.host(
        {
            "loss": on_gpu(0.25),
            "finite": on_gpu(True),
            "scale": on_gpu(65536.0),
            "found_inf 0": on_gpu(0.0),
            "update": torch.tensor(2.0),  # a CPU tensor beside them is read where it is
            "grads": grads,
            "seen": 3,
            "nothing": None,
        }
    )
    assert {name: value for name, value in read.items() if name != "grads"} == {
        "loss": 0.25,
        "finite": 1.0,
        "scale": 65536.0,
        "found_inf 0": 0.0,
        "update": 2.0,
        "seen": 3,
        "nothing": None,
    }
    assert OnGPU.copies == 3  # the four numbers of the GPU in one copy, each gradient in one
    assert [type(g) for g in read["grads"]] == [torch.Tensor, torch.Tensor]
    assert [g.dtype for g in read["grads"]] == [torch.float32, torch.float32]
    assert read["grads"][0].tolist() == [[2.0**-20, 0.0]] and read["grads"][1].tolist() == [3.0]


def test_host_copies_cpu_gradients_so_that_later_steps_do_not_change_them():
    grad = torch.ones(3)
    read = torch_reads.host({"grads": [grad]})
    grad.zero_()  # optimizer.zero_grad(set_to_none=False)
    assert read["grads"][0].tolist() == [1.0, 1.0, 1.0]


def test_the_step_clock_waits_for_the_gpu_once_cuda_is_in_use(monkeypatch):
    calls = []
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: True)
    monkeypatch.setattr(torch.cuda, "synchronize", lambda *args: calls.append("synchronize"))
    torch_hooks._clock()
    assert calls == ["synchronize"]
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: False)
    torch_hooks._clock()
    assert calls == ["synchronize"]


# Every read of a tensor's value made by mplint's hooks anywhere but torch_reads.py fails here, as .numpy() of a
# CUDA tensor fails on a GPU; the script's own reads are its business. At the end, mplint's step state must hold no
# tensor.
READS_ONLY_THROUGH_HOST = r"""import os
import sys

import torch

HOOKS = os.sep + os.path.join("mplint", "verify") + os.sep


def refuse_outside_host(name):
    original = getattr(torch.Tensor, name)

    def read(self, *args, **kwargs):
        caller = sys._getframe(1).f_code.co_filename
        if HOOKS in caller and not caller.endswith("torch_reads.py"):
            raise TypeError(f"{name} of a tensor called by {os.path.basename(caller)}")
        return original(self, *args, **kwargs)

    setattr(torch.Tensor, name, read)


for name in ("numpy", "item", "tolist", "__float__", "__int__", "__bool__", "__index__"):
    refuse_outside_host(name)

torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4))
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
scaler = torch.amp.GradScaler("cpu")
x, y = torch.randn(64, 16), torch.randn(64, 4)
for step in range(100):
    with torch.autocast("cpu", dtype=torch.float16):
        loss = 1e-3 * torch.nn.functional.mse_loss(model(x), y)
    optimizer.zero_grad()
    scaler.scale(loss).backward()
    scaler.step(optimizer)
    scaler.update()

from mplint.verify import torch_hooks

state = {name: value for name, value in vars(torch_hooks._local).items() if name in ("loss", "pending")}
held = [name for name, value in state.items() if isinstance(value, torch.Tensor) or value not in (None, {})]
if held:
    raise SystemExit(f"mplint still holds {held} after its last step")
"""


def test_every_value_the_hooks_read_goes_through_host_and_nothing_is_held_after_the_step(capsys, tmp_path):
    script = tmp_path / "reads.py"
    script.write_text(READS_ONLY_THROUGH_HOST)
    code = main([str(script), "--steps", "3", "--format", "json"])
    doc = json.loads(capsys.readouterr().out)
    assert code == 0, doc.get("error")
    run, reference = (doc["runs"][label]["metrics"] for label in ("run", "float32 reference"))
    (unit,) = run["units"]
    assert unit["steps"] == 3 and unit["non_finite_steps"] == 0
    assert unit["scale_history"] == [65536.0] * 3
    assert unit["final_loss"] == pytest.approx(reference["units"][0]["final_loss"], rel=1e-2)
    assert unit["update_ratio"] == pytest.approx(1.0, rel=1e-2)
    assert unit["underflow"] == 0.0  # the first step's gradients were read and compared
    assert run["autocast_ops"].startswith("each of 4 autocast regions:")


BREAKS_MPLINT = """import torch
import mplint.verify.torch_hooks

model = torch.nn.Linear(4, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
for step in range(10):
    loss = model(torch.randn(8, 4)).pow(2).mean()
    optimizer.zero_grad()
    mplint.verify.torch_hooks._local = None  # mplint's own state, broken: its next hook raises
    loss.backward()
    optimizer.step()
"""


def test_an_exception_in_mplints_hook_is_mplints_error_not_a_crash_of_the_script(capsys, tmp_path):
    script = tmp_path / "broken.py"
    script.write_text(BREAKS_MPLINT)
    code = main([str(script), "--fix", "--format", "json"])
    doc = json.loads(capsys.readouterr().out)
    source = Path(torch_hooks.__file__).read_text().splitlines()
    line = next(i for i, text in enumerate(source, 1) if "_local.loss = _loss_tensor(" in text)
    assert code == 2 and doc["exit_code"] == 2
    assert doc["error"]["status"] == "instrumentation-failed"
    assert doc["error"]["message"] == (
        "could not verify broken.py: mplint's instrumentation failed in the before run: AttributeError: 'NoneType' "
        f"object has no attribute 'loss' (at mplint/verify/torch_hooks.py:{line}, in backward); this is an error "
        "in mplint, not in broken.py"
    )
    assert not re.search(r"broken\.py:\d|crashed", doc["error"]["message"])  # no line of the script is blamed
    assert doc["error"]["stderr_tail"].splitlines()[-1] == "AttributeError: 'NoneType' object has no attribute 'loss'"


def test_the_last_frame_of_mplints_code_names_the_failure():
    with pytest.raises(ValueError) as caught:
        raise ValueError("raised here, in no code of mplint")
    assert failures.own_frame(caught.value) is None
    with pytest.raises(AttributeError) as caught:
        torch_reads.host(None)
    frame = failures.own_frame(caught.value)
    source = Path(torch_reads.__file__).read_text().splitlines()
    line = next(i for i, text in enumerate(source, 1) if "in values.items()" in text)
    assert frame == {"file": "mplint/verify/torch_reads.py", "line": line, "function": "host"}
    assert failures.describe(caught.value) == (
        f"AttributeError: 'NoneType' object has no attribute 'items' (at mplint/verify/torch_reads.py:{line}, in host)"
    )


UNDERFLOWS = """import torch

torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4))
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
x, y = torch.randn(64, 16), torch.randn(64, 4)
for step in range(100):
    with torch.autocast("cpu", dtype=torch.float16):
        loss = 1e-6 * torch.nn.functional.mse_loss(model(x), y)
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
"""


def test_a_machine_with_torch_and_without_numpy_verifies_the_same(capsys, tmp_path, monkeypatch):
    script = tmp_path / "underflow.py"
    script.write_text(UNDERFLOWS)
    assert main([str(script), "--steps", "2", "--format", "json"]) == 1
    with_numpy = json.loads(capsys.readouterr().out)
    hidden = tmp_path / "no_numpy" / "numpy"
    hidden.mkdir(parents=True)
    (hidden / "__init__.py").write_text("raise ModuleNotFoundError(\"No module named 'numpy'\", name='numpy')\n")
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(hidden.parent), os.environ.get("PYTHONPATH")])))
    assert main([str(script), "--steps", "2", "--format", "json"]) == 1
    without_numpy = json.loads(capsys.readouterr().out)
    assert without_timings(without_numpy) == without_timings(with_numpy)
    (unit,) = with_numpy["runs"]["run"]["metrics"]["units"]
    assert unit["underflow"] > 0.5  # float16 flushed most of this loss's gradients to zero
    assert with_numpy["verdict"] == "problems: MP804"


# A timed run must carry nothing but the step timer: this script stops with what it finds of mplint's instrumentation.
FINDS_INSTRUMENTATION = r"""import os
import sys

import torch
from torch.utils._python_dispatch import _get_current_dispatch_mode

HOOKS = os.sep + os.path.join("mplint", "verify") + os.sep
found = set()


def called_by_mplint(what, owner, name):
    original = getattr(owner, name)

    def call(*args, **kwargs):
        if HOOKS in sys._getframe(1).f_code.co_filename:
            found.add(what)
        return original(*args, **kwargs)

    setattr(owner, name, call)


called_by_mplint("finiteness read", torch, "isfinite")
called_by_mplint("gradients copied", torch.Tensor, "clone")
module = torch.nn.modules.module
model = torch.nn.Linear(8, 8)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
scaler = torch.amp.GradScaler("cpu")
for step in range(1000):
    if found:  # after a step
        raise SystemExit("instrumented: " + ", ".join(sorted(found)))
    with torch.autocast("cpu", dtype=torch.float16):
        if _get_current_dispatch_mode() is not None:
            found.add("dispatch mode")
        loss = model(torch.randn(4, 8)).float().pow(2).mean()
    if module._global_forward_hooks or module._global_forward_pre_hooks:
        found.add("forward hooks")
    if torch.Tensor.backward.__module__ != "torch._tensor" or torch.amp.GradScaler.scale.__module__ != "torch.amp.grad_scaler":
        found.add("loss read")
    optimizer.zero_grad()
    scaler.scale(loss).backward()
    scaler.step(optimizer)
    scaler.update()
"""


def test_a_timed_run_carries_only_the_step_timer(capsys, tmp_path):
    script = tmp_path / "timed.py"
    script.write_text(FINDS_INSTRUMENTATION)
    code = main([str(script), "--benchmark", "--steps", "6", "--format", "json"])
    doc = json.loads(capsys.readouterr().out)
    assert code == 0, doc.get("error")
    assert doc["benchmark"]["policy"] == "autocast float16"
    assert doc["benchmark"]["device"] == "cpu"
    assert doc["benchmark"]["mixed_ms_per_step"] > 0 and doc["benchmark"]["float32_ms_per_step"] > 0
    # the same script under a verifying run finds what a timed run leaves out
    assert main([str(script), "--steps", "6", "--format", "json"]) == 2
    assert json.loads(capsys.readouterr().out)["error"]["message"] == (
        "could not verify timed.py: the run run exited: the script exited with status 1 (instrumented: dispatch "
        "mode, finiteness read, forward hooks, gradients copied, loss read)"
    )
