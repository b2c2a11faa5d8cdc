"""The MPT fixes executed on CPU with real PyTorch: what the findings claim is what torch does.

(a) MPT204: a clip before ``unscale_`` shrinks the update to about 1/scale of the right one; after
    ``--fix`` the update is the right one.
(b) MPT202: ``optimizer.step()`` after a scaled backward makes the update ``scale`` times too large;
    after ``--fix`` it is the right one.
(c) MPT601: ``masked_fill(mask, -1e9)`` (or ``-1e8``, ``-10000.0 * 1e5``) on float16 scores raises; after
    ``--fix`` the output is finite under float16 and bfloat16 autocast, and float32 results are bit-identical
    (the code's own value is kept wherever the dtype holds it, never ``finfo(torch.float32).min``).
(d) MPT501: the apex O1 fixture, migrated by ``--fix --unsafe-fixes``, trains on a machine without CUDA (where the
    migrated autocast and GradScaler disable themselves) exactly as the apex script did in float32; on CUDA, with
    float16 autocast and the scaler really on, to within float16's rounding of the float32 run.
(e) MPT203: a second ``unscale_`` before ``step`` raises; after ``--fix`` the loop runs and updates as the loop
    written right does.
(f) MPT205: ``backward()`` inside the autocast region; after ``--fix`` (moved out) the weights are the same.
(g) MPT206: a GradScaler under bfloat16 autocast; after ``--fix`` (plain backward and step) the weights are the same.
(h) MPT103: a loss and an exp on float16 logits outside autocast; after ``--fix`` (``.float()``) the loss is what
    float16 autocast computes, bit for bit, and the exp no longer overflows.
(i) MPT201: float16 autocast without a GradScaler flushes small gradients to zero; after ``--fix`` they are the
    float32 ones (a CPU region; on CUDA a CUDA region), and without CUDA a CUDA region's scaler disables itself
    with the same weights; a step function nested in main() sees the scaler the fix creates.
(k) MPT104: binary cross-entropy of a sigmoid bound on an earlier line of a CUDA autocast region raises on CUDA;
    after ``--fix --unsafe-fixes`` the logits form trains, to within float16's rounding of float32 (on the CPU,
    where the region does not apply, it computes what the original computed).
(j) MPT502: the torch.amp spellings configure and compute what the deprecated ones did, without their FutureWarning.

CPU autocast runs float16 (``torch.autocast("cpu", dtype=torch.float16)``) and ``torch.amp.GradScaler("cpu")``
scales as on a GPU. Ratios and equalities are asserted, never timings. The proofs of fixes that write a device
(``"cuda"`` regions and scalers: d, i, j, k) run on each device of ``conftest.devices``: the CPU always, CUDA where
the machine has it (bench/gpu/check runs them on a GPU machine).
"""

from __future__ import annotations

import contextlib
import inspect
import sys
import types
import warnings
from pathlib import Path

import pytest

# The test extra installs torch==2.13.0, so CI runs these; an install without torch skips them, saying why.
torch = pytest.importorskip(
    "torch",
    reason="torch is not installed: these tests execute the MPT fixes with PyTorch on CPU (see docs/install.md)",
)

from conftest import devices  # noqa: E402

from mplint.testing import lint_code  # noqa: E402  (after the skip: collecting needs no torch)

pytestmark = pytest.mark.torch
DEVICES = devices(torch)

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "torch"
SCALE = 2.0**16  # GradScaler's initial scale

# One training step of a small MLP under float16 CPU autocast and a GradScaler; STEP is filled in.
_SCRIPT = """import torch

torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4))
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
scaler = torch.amp.GradScaler("cpu")
x = torch.randn(64, 16)
y = torch.randn(64, 4)
before = [p.detach().clone() for p in model.parameters()]


def train_step():
    optimizer.zero_grad()
    with torch.autocast("cpu", dtype=torch.float16):
        loss = torch.nn.functional.mse_loss(model(x), y)
{step}

train_step()
# What SGD applied: lr times the gradients it read (weight differences this small are float32 rounding).
update = 0.1 * torch.cat([p.grad.flatten() for p in model.parameters()])
weights = [p.detach() for p in model.parameters()]
"""


def _run(code: str) -> dict:
    namespace: dict = {"__name__": "__main__"}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        exec(compile(code, "<script>", "exec"), namespace)
    return namespace


def _step(*lines: str) -> str:
    return "\n".join(f"    {line}" for line in lines)


def _fixed(code: str, rule: str, unsafe: bool = False, **kwargs) -> str:
    result = lint_code(code, select=[rule], fix=True, unsafe_fixes=unsafe, **kwargs)
    assert [d.rule_id for d in result.diagnostics if d.rule_id == rule] == []
    return result.fixed_code


def test_a_clip_before_unscale_shrinks_the_update_by_the_scale_and_the_fix_restores_it():
    clip = "torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm=0.01)"
    buggy = _SCRIPT.format(
        step=_step("scaler.scale(loss).backward()", clip, "scaler.step(optimizer)", "scaler.update()")
    )
    right = _SCRIPT.format(
        step=_step(
            "scaler.scale(loss).backward()",
            "scaler.unscale_(optimizer)",
            clip,
            "scaler.step(optimizer)",
            "scaler.update()",
        )
    )
    found = lint_code(buggy, select=["MPT204"]).diagnostics
    assert [(d.rule_id, d.line, d.column) for d in found] == [("MPT204", 17, 5)]
    fixed = _fixed(buggy, "MPT204")
    assert fixed == right
    wrong_update = _run(buggy)["update"].norm().item()
    right_update = _run(right)["update"].norm().item()
    assert right_update == pytest.approx(0.1 * 0.01, rel=1e-3)  # lr * max_norm: the clip is active
    assert wrong_update / right_update == pytest.approx(1 / SCALE, rel=1e-2)
    assert all(map(torch.equal, _run(fixed)["weights"], _run(right)["weights"]))


def test_b_optimizer_step_bypassing_the_scaler_makes_the_update_scale_times_too_large():
    buggy = _SCRIPT.format(step=_step("scaler.scale(loss).backward()", "optimizer.step()"))
    right = _SCRIPT.format(step=_step("scaler.scale(loss).backward()", "scaler.step(optimizer)", "scaler.update()"))
    found = lint_code(buggy, select=["MPT202"]).diagnostics
    assert [(d.rule_id, d.line, d.column) for d in found] == [("MPT202", 17, 5)]
    fixed = _fixed(buggy, "MPT202")
    assert fixed == right
    wrong, good = _run(buggy)["update"], _run(right)["update"]
    assert (wrong.norm() / good.norm()).item() == pytest.approx(SCALE, rel=1e-2)
    assert all(map(torch.equal, _run(fixed)["weights"], _run(right)["weights"]))


def _attention(source: str):
    namespace = _run(source)
    torch.manual_seed(0)
    layer = namespace["MaskedAttention"](dim=32, heads=4)
    x = torch.randn(2, 6, 32)
    mask = torch.tensor([[True] * 6, [True] * 4 + [False] * 2])
    return layer, x, mask


@pytest.mark.parametrize("constant", ["-1e9", "-1e8", "-10000.0 * 1e5"])
def test_c_minus_1e9_mask_overflows_float16_and_the_fix_is_finite_and_float32_identical(constant):
    source = (FIXTURES / "attention.py").read_text().replace("], -1e9)", f"], {constant})")
    found = lint_code(source, select=["MPT601"]).diagnostics
    assert [(d.rule_id, d.line, d.column) for d in found] == [("MPT601", 20, 62)]
    fixed = _fixed(source, "MPT601")
    assert fixed == source.replace(f"], {constant})", f"], max({constant}, torch.finfo(scores.dtype).min))")
    assert "torch.float32" not in fixed

    layer, x, mask = _attention(source)
    with pytest.raises(RuntimeError, match="overflow"), torch.autocast("cpu", dtype=torch.float16):
        layer(x, mask)
    float32_before = layer(x, mask)

    layer, x, mask = _attention(fixed)
    with torch.autocast("cpu", dtype=torch.float16):
        half = layer(x, mask)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        brain = layer(x, mask)
    assert half.dtype == torch.float16 and torch.isfinite(half).all()
    assert brain.dtype == torch.bfloat16 and torch.isfinite(brain).all()
    assert torch.equal(layer(x, mask), float32_before)
    assert torch.allclose(half.float(), float32_before, atol=2e-2)


def test_c_the_kept_value_matters_where_masks_add_up_in_float32():
    """Code that adds two masks picks -1e9 because finfo(float32).min twice is -inf (a NaN row after softmax):
    the fixed code keeps -1e9 in float32, so its results are the original's, NaN-free."""
    source = """import torch
from torch import nn


class TwoMasks(nn.Module):
    def forward(self, scores, keys, queries):
        # -1e9, not finfo(float32).min: the two masks are added and min + min overflows to -inf
        masked = scores.masked_fill(keys, -1e9)
        penalty = torch.zeros_like(scores)
        penalty = penalty.masked_fill(queries, -1e9)
        return torch.softmax(masked + penalty, dim=-1)
"""
    found = lint_code(source, select=["MPT601"]).diagnostics
    assert [(d.rule_id, d.line, d.column) for d in found] == [("MPT601", 8, 43), ("MPT601", 10, 48)]
    fixed = _fixed(source, "MPT601")
    assert fixed == source.replace("(keys, -1e9)", "(keys, max(-1e9, torch.finfo(scores.dtype).min))").replace(
        "(queries, -1e9)", "(queries, max(-1e9, torch.finfo(penalty.dtype).min))"
    )
    # the second sequence of the batch is all padding: both masks cover its whole score matrix
    lengths = torch.tensor([3, 0])
    padded = torch.arange(4)[None, :] >= lengths[:, None]
    scores, keys, queries = torch.randn(2, 4, 4), padded[:, None, :].expand(2, 4, 4), padded[:, :, None].expand(2, 4, 4)
    before = _run(source)["TwoMasks"]()(scores, keys, queries)
    after = _run(fixed)["TwoMasks"]()(scores, keys, queries)
    assert torch.isfinite(before).all() and torch.equal(after, before)
    float32_limit = source.replace("-1e9)", "torch.finfo(torch.float32).min)")
    assert torch.isnan(
        _run(float32_limit)["TwoMasks"]()(scores, keys, queries)
    ).any()  # what writing the limit computes


def test_e_a_second_unscale_raises_and_the_fix_trains_like_the_right_loop():
    clip = "torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm=0.01)"
    head = ("scaler.scale(loss).backward()", "scaler.unscale_(optimizer)", clip)
    buggy = _SCRIPT.format(step=_step(*head, "scaler.unscale_(optimizer)", "scaler.step(optimizer)", "scaler.update()"))
    right = _SCRIPT.format(step=_step(*head, "scaler.step(optimizer)", "scaler.update()"))
    found = lint_code(buggy, select=["MPT203"]).diagnostics
    assert [(d.rule_id, d.line, d.column) for d in found] == [("MPT203", 19, 5)]
    fixed = _fixed(buggy, "MPT203")
    assert fixed == right
    with pytest.raises(RuntimeError, match=r"unscale_\(\) has already been called"):
        _run(buggy)
    assert all(map(torch.equal, _run(fixed)["weights"], _run(right)["weights"]))


def test_f_backward_moved_out_of_autocast_computes_the_same_weights():
    inside = _SCRIPT.format(
        step=_step("    scaler.scale(loss).backward()", "    scaler.step(optimizer)", "    scaler.update()")
    )
    right = _SCRIPT.format(step=_step("scaler.scale(loss).backward()", "scaler.step(optimizer)", "scaler.update()"))
    found = lint_code(inside, select=["MPT205"]).diagnostics
    assert [(d.rule_id, d.line, d.column) for d in found] == [("MPT205", 16, 9)]
    fixed = _fixed(inside, "MPT205")
    assert fixed == right
    assert all(map(torch.equal, _run(fixed)["weights"], _run(inside)["weights"]))


def test_g_grad_scaler_removed_under_bfloat16_computes_the_same_weights():
    bfloat16 = _SCRIPT.replace("dtype=torch.float16", "dtype=torch.bfloat16")
    scaled = bfloat16.format(step=_step("scaler.scale(loss).backward()", "scaler.step(optimizer)", "scaler.update()"))
    right = bfloat16.replace('scaler = torch.amp.GradScaler("cpu")\n', "").format(
        step=_step("loss.backward()", "optimizer.step()")
    )
    found = lint_code(scaled, select=["MPT206"]).diagnostics
    assert [(d.rule_id, d.line, d.column) for d in found] == [("MPT206", 6, 10)]
    fixed = _fixed(scaled, "MPT206")
    assert fixed == right
    assert all(map(torch.equal, _run(fixed)["weights"], _run(scaled)["weights"]))


@contextlib.contextmanager
def _apex_stub():
    """apex's amp API as O1 behaves on a machine without it: float32 training, no scaling."""
    amp = types.ModuleType("apex.amp")
    amp.initialize = lambda model, optimizer, opt_level=None, **kwargs: (model, optimizer)

    @contextlib.contextmanager
    def scale_loss(loss, optimizer):
        yield loss

    amp.scale_loss = scale_loss
    amp.master_params = lambda optimizer: (p for group in optimizer.param_groups for p in group["params"])
    amp.state_dict = lambda: {}
    apex = types.ModuleType("apex")
    apex.amp = amp
    saved = {name: sys.modules.get(name) for name in ("apex", "apex.amp")}
    sys.modules.update({"apex": apex, "apex.amp": amp})
    try:
        yield
    finally:
        for name, module in saved.items():
            if module is None:
                sys.modules.pop(name, None)
            else:
                sys.modules[name] = module


def _flat(model) -> torch.Tensor:
    return torch.cat([p.detach().float().flatten().cpu() for p in model.parameters()])


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize(
    "pin, scaler, autocast",
    [
        ("torch>=2.4", 'torch.amp.GradScaler("cuda")', 'torch.autocast("cuda")'),
        ("torch==1.8.0", "torch.cuda.amp.GradScaler()", "torch.cuda.amp.autocast()"),  # before 1.10 and 2.3
    ],
)
def test_d_migrated_apex_script_trains_like_the_float32_original(device, pin, scaler, autocast, monkeypatch):
    source = (FIXTURES / "apex_o1.py").read_text()
    migrated = _fixed(source, "MPT501", unsafe=True, files={"requirements.txt": f"{pin}\n"})
    assert "from apex" not in migrated and "amp.initialize" not in migrated and f"scaler = {scaler}" in migrated
    assert f"with {autocast}:" in migrated and "scaler.unscale_(optimizer)" in migrated
    if device == "cpu":  # a machine without CUDA: the script picks the CPU, the CUDA region and scaler turn off
        monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with _apex_stub():
        original = _run(source)  # float32 (apex O1 stubbed) on the device the script picks
    after = _run(migrated)  # no apex needed any more
    assert original["x"].device.type == after["x"].device.type == device
    if device == "cpu":
        assert after["final_loss"] == original["final_loss"]
        assert torch.equal(_flat(after["model"]), _flat(original["model"]))
        # the scaler's state replaces apex's (empty here: a CUDA GradScaler disables itself without CUDA)
        assert after["checkpoint"]["amp"] == after["scaler"].state_dict() == {}
        return
    # CUDA: autocast ran the model in float16 and the scaler scaled, and training is float32's to float16's rounding
    assert after["output"].dtype == torch.float16 and after["scaler"].is_enabled()
    assert after["checkpoint"]["amp"]["scale"] == after["scaler"].get_scale() >= 1.0
    assert after["final_loss"] == pytest.approx(original["final_loss"], rel=1e-2)
    torch.manual_seed(0)  # the fixture's first draws: the model's initial weights
    initial = _flat(torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 4)))
    trained, migrated_weights = _flat(original["model"]), _flat(after["model"])
    assert (migrated_weights - trained).norm() < 0.1 * (trained - initial).norm()


def test_h_float_before_a_loss_outside_autocast_computes_what_autocast_computes():
    """A cross-entropy over 5000 classes and an exp on float16 logits, outside autocast: the fix's ``.float()``
    keeps the values and moves the computation to float32, which is what float16 autocast does for cross_entropy
    (bit for bit); exp no longer overflows, and the loss still backpropagates into the model."""
    source = """import torch
import torch.nn.functional as F


def loss_fn(model, x, y):
    logits = model(x).half()
    return F.cross_entropy(logits, y), torch.exp(logits).sum()
"""
    found = lint_code(source, select=["MPT103"]).diagnostics
    assert [(d.rule_id, d.line, d.column) for d in found] == [("MPT103", 7, 28), ("MPT103", 7, 50)]
    fixed = _fixed(source, "MPT103")
    assert fixed == source.replace("(logits, y)", "(logits.float(), y)").replace("exp(logits)", "exp(logits.float())")
    torch.manual_seed(0)
    model = torch.nn.Linear(64, 5000)
    x, y = 4 * torch.randn(8, 64), torch.randint(0, 5000, (8,))
    loss_before, exp_before = _run(source)["loss_fn"](model, x, y)
    loss_after, exp_after = _run(fixed)["loss_fn"](model, x, y)
    half, cross_entropy = model(x).half(), torch.nn.functional.cross_entropy
    with torch.autocast("cpu", dtype=torch.float16):
        autocast_loss = cross_entropy(half, y)
    assert (loss_before.dtype, loss_after.dtype, autocast_loss.dtype) == (torch.float16, torch.float32, torch.float32)
    assert torch.equal(loss_after, autocast_loss)
    exact = cross_entropy(half.double(), y)
    assert abs(loss_after.double() - exact) < abs(loss_before.double() - exact)
    assert torch.isinf(exp_before) and torch.isfinite(exp_after)
    assert exp_after.item() == pytest.approx(torch.exp(half.double()).sum().item(), rel=1e-6)
    loss_after.backward()
    assert torch.isfinite(model.weight.grad).all() and model.weight.grad.abs().sum() > 0


# One SGD step with a tiny loss under an autocast region and no GradScaler; REGION is the autocast call, DEVICE where
# the model and data are.
_UNSCALED = """import torch

torch.manual_seed(0)
device = "{device}"
model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4)).to(device)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
x = torch.randn(64, 16).to(device)
y = torch.randn(64, 4).to(device)


def train_step():
    optimizer.zero_grad()
    with {region}:
        loss = 1e-6 * torch.nn.functional.mse_loss(model(x), y)
    loss.backward()
    optimizer.step()


train_step()
grads = [p.grad.clone() for p in model.parameters()]
weights = [p.detach() for p in model.parameters()]
"""


def _with_scaler(source: str, construction: str) -> str:
    return source.replace("lr=0.1)\n", f"lr=0.1)\n{construction}\n").replace(
        "    loss.backward()\n    optimizer.step()\n",
        "    scaler.scale(loss).backward()\n    scaler.step(optimizer)\n    scaler.update()\n",
    )


@pytest.mark.parametrize("device", DEVICES)
def test_i_grad_scaler_added_to_float16_autocast_recovers_the_underflowing_gradients(device):
    """Float16 autocast of the device (CPU: torch >= 2.3 pinned, so ``torch.amp.GradScaler("cpu")``; CUDA: float16 is
    the region's default, and the fix writes ``torch.amp.GradScaler("cuda")``, or ``torch.cuda.amp.GradScaler()``
    where the range starts before 2.3): without a scaler the float16 backward flushes this loss's gradients to zero
    in every layer below the output; after the fix they are the float32 gradients."""
    region = 'torch.autocast("cpu", dtype=torch.float16)' if device == "cpu" else 'torch.autocast("cuda")'
    source = _UNSCALED.format(device=device, region=region)
    constructions = {
        "cpu": [("torch>=2.3\n", 'scaler = torch.amp.GradScaler("cpu")')],
        "cuda": [
            ("torch>=2.3\n", 'scaler = torch.amp.GradScaler("cuda")'),
            ("torch>=2.0,<2.2\n", "scaler = torch.cuda.amp.GradScaler()"),
        ],
    }[device]
    found = lint_code(source, select=["MPT201"], files={"requirements.txt": "torch>=2.3\n"}).diagnostics
    assert [(d.rule_id, d.line, d.column) for d in found] == [("MPT201", 15, 5)]
    float32 = _run(_UNSCALED.format(device=device, region=f'torch.autocast("{device}", enabled=False)'))["grads"]
    before = _run(source)["grads"]
    first_kernel = 0
    assert float32[first_kernel].abs().max() > 0
    assert not before[first_kernel].any()  # underflowed in the float16 backward
    for pins, construction in constructions:
        fixed = _fixed(source, "MPT201", files={"requirements.txt": pins})
        assert fixed == _with_scaler(source, construction)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", FutureWarning)  # torch.cuda.amp.GradScaler's deprecation
            after = _run(fixed)["grads"]
        for right, recovered in zip(float32, after):  # float16 rounding of the scaled gradients: under 1%
            assert ((recovered - right).norm() / right.norm()).item() < 1e-2


def test_i_a_cuda_regions_scaler_turns_itself_off_without_cuda_and_changes_nothing(monkeypatch):
    """On a machine without CUDA a CUDA region and the scaler the fix adds both disable themselves: the fixed step
    computes the original's weights exactly."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    cuda = _UNSCALED.format(device="cpu", region='torch.autocast("cuda")')
    for pins, construction in [
        ("torch>=2.3\n", 'scaler = torch.amp.GradScaler("cuda")'),
        ("torch>=2.0,<2.2\n", "scaler = torch.cuda.amp.GradScaler()"),
    ]:
        fixed = _fixed(cuda, "MPT201", files={"requirements.txt": pins})
        assert fixed == _with_scaler(cuda, construction)
        assert not _run(fixed)["scaler"].is_enabled()
        assert all(map(torch.equal, _run(fixed)["weights"], _run(cuda)["weights"]))


# The optimizer built in a helper, one arm of whose `if` constructs it; the step a function nested in main(), which
# reads the optimizer main() unpacked from the helper's result.
_NESTED_STEP = """import torch

torch.manual_seed(0)


def prepare_model_and_optimizer(device, name):
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4)).to(device)
    if name == "sgd":
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    else:
        optimizer = getattr(torch.optim, name)(model.parameters(), lr=0.1)
    return model, optimizer


def main(device):
    model, optimizer = prepare_model_and_optimizer(device, "sgd")
    x = torch.randn(64, 16).to(device)
    y = torch.randn(64, 4).to(device)

    def step_training():
        optimizer.zero_grad()
        with {region}:
            loss = 1e-6 * torch.nn.functional.mse_loss(model(x), y)
        loss.backward()
        optimizer.step()

    step_training()
    return [p.grad.clone() for p in model.parameters()]


grads = main("{device}")
"""


@pytest.mark.parametrize("device", DEVICES)
def test_i_b_the_scaler_is_created_where_the_nested_step_function_sees_it(device):
    """The scaler goes after main()'s `model, optimizer = prepare_model_and_optimizer(...)`, which the nested step
    function reads, not beside the construction in the helper's `if` arm (a local of the helper there: NameError
    at the first step). Fixed, the step runs and its gradients are the float32 ones."""
    region = f'torch.autocast("{device}", dtype=torch.float16)'
    source = _NESTED_STEP.replace("{region}", region).replace("{device}", device)
    fixed = _fixed(source, "MPT201", files={"requirements.txt": "torch>=2.3\n"})
    assert fixed == source.replace('"sgd")\n', f'"sgd")\n    scaler = torch.amp.GradScaler("{device}")\n').replace(
        "        loss.backward()\n        optimizer.step()\n",
        "        scaler.scale(loss).backward()\n        scaler.step(optimizer)\n        scaler.update()\n",
    )
    float32 = _run(source.replace(region, f'torch.autocast("{device}", enabled=False)'))["grads"]
    assert not _run(source)["grads"][0].any()  # underflowed in the float16 backward
    for right, recovered in zip(float32, _run(fixed)["grads"]):
        assert ((recovered - right).norm() / right.norm()).item() < 1e-2


def _run_recording(code: str) -> tuple[dict, list[str]]:
    namespace: dict = {"__name__": "__main__"}
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        exec(compile(code, "<script>", "exec"), namespace)
        namespace["result"] = namespace["run"]()
    return namespace, [str(w.message) for w in caught if issubclass(w.category, FutureWarning)]


@pytest.mark.parametrize("device", DEVICES)
def test_j_torch_amp_spellings_behave_as_the_deprecated_ones_without_their_warning(device):
    """torch 2.13 on CPU: the rewritten autocast (positional enabled/dtype become keywords), GradScaler and
    custom_fwd/custom_bwd configure exactly what the torch.cuda.amp / torch.cpu.amp spellings configured, compute
    the same values and gradients under CPU autocast, and emit no FutureWarning. Older torch is not executed here:
    the names and parameters written were read in the torch wheels' sources (torch.autocast(device_type, enabled,
    **kwargs) with dtype and cache_enabled in 1.10, torch.amp.GradScaler(device, ..., enabled) in 2.3, torch.amp.custom_fwd(fwd, *,
    device_type, cast_inputs) and custom_bwd(bwd, *, device_type) in 2.4), the first versions the fix is safe from.
    On CUDA both spellings also compute: the same float16 product, scaled by the same scale."""
    imported = """import torch
from torch.cuda.amp import GradScaler, autocast

scaler = GradScaler(enabled=True)


def run():
    with autocast(True, torch.float16) as region:
        return region


def compute(x):
    with autocast(True, torch.float16):
        y = x @ x
    return y, scaler.scale(y.float().sum())
"""
    pins = {"requirements.txt": "torch>=2.4\n"}
    found = lint_code(imported, select=["MPT502"], files=pins).diagnostics
    assert [(d.rule_id, d.line, d.column) for d in found] == [
        ("MPT502", 4, 10),
        ("MPT502", 8, 10),
        ("MPT502", 13, 10),
    ]
    fixed = _fixed(imported, "MPT502", files=pins)
    assert fixed == imported.replace("from torch.cuda.amp import GradScaler, autocast\n", "").replace(
        "GradScaler(enabled=True)", 'torch.amp.GradScaler("cuda", enabled=True)'
    ).replace("autocast(True, torch.float16)", 'torch.autocast("cuda", enabled=True, dtype=torch.float16)')
    (before, old_warnings), (after, new_warnings) = _run_recording(imported), _run_recording(fixed)
    assert old_warnings and new_warnings == []
    config = ("device", "fast_dtype", "_cache_enabled")  # _enabled: off on both, CUDA being absent
    assert [getattr(before["result"], name) for name in config] == [getattr(after["result"], name) for name in config]
    assert [before["result"].device, before["result"].fast_dtype] == ["cuda", torch.float16]
    assert vars(before["scaler"]) == vars(after["scaler"])  # the deprecated class builds the new one's state
    # what cannot run without CUDA: every argument of the old spellings is a parameter of the new ones, by name
    old_scaler, new_scaler = (
        inspect.signature(c).parameters for c in (torch.cuda.amp.GradScaler, torch.amp.GradScaler)
    )
    assert list(new_scaler) == ["device", *old_scaler]
    old_region, new_region = (inspect.signature(c).parameters for c in (torch.cuda.amp.autocast, torch.autocast))
    assert list(old_region) == ["enabled", "dtype", "cache_enabled"] and set(old_region) < set(new_region)
    assert before["scaler"]._device == "cuda"
    if device == "cuda":
        x = torch.linspace(-1, 1, 64, device="cuda").reshape(8, 8)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", FutureWarning)
            (y_before, scaled_before), (y_after, scaled_after) = before["compute"](x), after["compute"](x)
        assert y_before.dtype == y_after.dtype == torch.float16 and torch.equal(y_after, y_before)
        assert (
            torch.equal(scaled_after, scaled_before) and scaled_after.item() == 65536.0 * y_after.float().sum().item()
        )

    functions = """import torch


class Scale(torch.autograd.Function):
    @staticmethod
    @torch.cuda.amp.custom_fwd(cast_inputs=torch.float32)
    def forward(ctx, x):
        return x * 2

    @staticmethod
    @torch.cuda.amp.custom_bwd
    def backward(ctx, grad):
        return grad * 2


def run():
    x = torch.linspace(-3, 3, 12, requires_grad=True)
    with torch.cpu.amp.autocast():
        y = torch.nn.functional.linear(x[None, :], torch.eye(12))
        out = Scale.apply(y)
    out.sum().backward()
    return out, x.grad
"""
    found = lint_code(functions, select=["MPT502"], files=pins).diagnostics
    assert [(d.rule_id, d.line, d.column) for d in found] == [("MPT502", 6, 6), ("MPT502", 11, 6), ("MPT502", 18, 10)]
    fixed = _fixed(functions, "MPT502", files=pins)
    assert fixed == functions.replace(
        "torch.cuda.amp.custom_fwd(cast_inputs", 'torch.amp.custom_fwd(device_type="cuda", cast_inputs'
    ).replace("@torch.cuda.amp.custom_bwd", '@torch.amp.custom_bwd(device_type="cuda")').replace(
        "torch.cpu.amp.autocast()", 'torch.autocast("cpu")'
    )
    (before, old_warnings), (after, new_warnings) = _run_recording(functions), _run_recording(fixed)
    assert old_warnings and new_warnings == []
    (out_before, grad_before), (out_after, grad_after) = before["result"], after["result"]
    assert out_before.dtype == out_after.dtype == torch.bfloat16  # CPU autocast ran the linear in bfloat16
    assert torch.equal(out_after, out_before) and torch.equal(grad_after, grad_before)


# Binary cross-entropy of a sigmoid bound on an earlier line of a CUDA float16 region; DEVICE where model and data are.
_BCE = """import torch
import torch.nn.functional as F

torch.manual_seed(0)
device = "{device}"
model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 1)).to(device)
optimizer = torch.optim.SGD(model.parameters(), lr=0.5)
x = torch.randn(256, 16).to(device)
y = (x[:, :1] + x[:, 1:2] > 0).float()


def train_step():
    optimizer.zero_grad()
    with torch.autocast("cuda", dtype=torch.float16):
        p = torch.sigmoid(model(x))
        loss = F.binary_cross_entropy(p, y)
    loss.backward()
    optimizer.step()
    return loss.item(), p


losses = []
for step in range(20):
    loss, probabilities = train_step()
    losses.append(loss)
"""


@pytest.mark.parametrize("device", DEVICES)
def test_k_bce_under_cuda_autocast_raises_and_the_logits_form_trains(device):
    """On CUDA the original raises at its first step (PyTorch bans binary cross-entropy under CUDA autocast); the
    fixed script trains, its float16 losses within 1% of float32's, and still reads the probabilities. On the CPU the
    CUDA region does not apply: the fixed script's losses are the original's to float32 rounding."""
    source = _BCE.format(device=device)
    found = lint_code(source, select=["MPT104"]).diagnostics
    assert [(d.rule_id, d.line, d.column) for d in found] == [("MPT104", 16, 16)]
    fixed = _fixed(source, "MPT104", unsafe=True)
    assert fixed == source.replace(
        "        p = torch.sigmoid(model(x))\n", "        logits = model(x)\n        p = torch.sigmoid(logits)\n"
    ).replace("F.binary_cross_entropy(p, y)", "F.binary_cross_entropy_with_logits(logits, y)")
    float32 = _run(
        source.replace('torch.autocast("cuda", dtype=torch.float16)', 'torch.autocast("cuda", enabled=False)')
    )
    after = _run(fixed)
    assert after["losses"][-1] < 0.5 * after["losses"][0]  # it trains
    if device == "cpu":
        assert after["losses"] == pytest.approx(_run(source)["losses"], rel=1e-5)
        assert after["losses"] == pytest.approx(float32["losses"], rel=1e-5)
        return
    with pytest.raises(RuntimeError, match="unsafe to autocast"):
        _run(source)
    assert after["probabilities"].dtype == torch.float16  # the region ran in float16
    assert after["losses"] == pytest.approx(float32["losses"], rel=1e-2)
