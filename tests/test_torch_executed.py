"""The MPT fixes executed on CPU with real PyTorch: what the findings claim is what torch does.

(a) MPT204: a clip before ``unscale_`` shrinks the update to about 1/scale of the right one; after
    ``--fix`` the update is the right one.
(b) MPT202: ``optimizer.step()`` after a scaled backward makes the update ``scale`` times too large;
    after ``--fix`` it is the right one.
(c) MPT601: ``masked_fill(mask, -1e9)`` (or ``-1e8``, ``-10000.0 * 1e5``) on float16 scores raises; after
    ``--fix`` the output is finite under float16 and bfloat16 autocast, and float32 results are bit-identical
    (the code's own value is kept wherever the dtype holds it, never ``finfo(torch.float32).min``).
(d) MPT501: the apex O1 fixture, migrated by ``--fix --unsafe-fixes``, trains on CPU (where the
    migrated autocast and GradScaler disable themselves) exactly as the apex script did in float32.
(e) MPT203: a second ``unscale_`` before ``step`` raises; after ``--fix`` the loop runs and updates as the loop
    written right does.
(f) MPT205: ``backward()`` inside the autocast region; after ``--fix`` (moved out) the weights are the same.
(g) MPT206: a GradScaler under bfloat16 autocast; after ``--fix`` (plain backward and step) the weights are the same.

CPU autocast runs float16 (``torch.autocast("cpu", dtype=torch.float16)``) and ``torch.amp.GradScaler("cpu")``
scales as on a GPU. Ratios and equalities are asserted, never timings.
"""

from __future__ import annotations

import contextlib
import sys
import types
import warnings
from pathlib import Path

import pytest

# The test extra installs torch==2.13.0, so CI runs these; an install without torch skips them, saying why.
torch = pytest.importorskip("torch", reason="torch is not installed: these tests execute the MPT fixes with PyTorch on CPU (see docs/install.md)")

from mplint.testing import lint_code

pytestmark = pytest.mark.torch

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "torch"
SCALE = 2.0 ** 16  # GradScaler's initial scale

# One training step of a small MLP under float16 CPU autocast and a GradScaler; STEP is filled in.
_SCRIPT = '''import torch

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
'''


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
    buggy = _SCRIPT.format(step=_step("scaler.scale(loss).backward()", clip, "scaler.step(optimizer)", "scaler.update()"))
    right = _SCRIPT.format(step=_step("scaler.scale(loss).backward()", "scaler.unscale_(optimizer)", clip,
                                      "scaler.step(optimizer)", "scaler.update()"))
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
    source = '''import torch
from torch import nn


class TwoMasks(nn.Module):
    def forward(self, scores, keys, queries):
        # -1e9, not finfo(float32).min: the two masks are added and min + min overflows to -inf
        masked = scores.masked_fill(keys, -1e9)
        penalty = torch.zeros_like(scores)
        penalty = penalty.masked_fill(queries, -1e9)
        return torch.softmax(masked + penalty, dim=-1)
'''
    found = lint_code(source, select=["MPT601"]).diagnostics
    assert [(d.rule_id, d.line, d.column) for d in found] == [("MPT601", 8, 43), ("MPT601", 10, 48)]
    fixed = _fixed(source, "MPT601")
    assert fixed == source.replace("(keys, -1e9)", "(keys, max(-1e9, torch.finfo(scores.dtype).min))").replace(
        "(queries, -1e9)", "(queries, max(-1e9, torch.finfo(penalty.dtype).min))")
    # the second sequence of the batch is all padding: both masks cover its whole score matrix
    lengths = torch.tensor([3, 0])
    padded = torch.arange(4)[None, :] >= lengths[:, None]
    scores, keys, queries = torch.randn(2, 4, 4), padded[:, None, :].expand(2, 4, 4), padded[:, :, None].expand(2, 4, 4)
    before = _run(source)["TwoMasks"]()(scores, keys, queries)
    after = _run(fixed)["TwoMasks"]()(scores, keys, queries)
    assert torch.isfinite(before).all() and torch.equal(after, before)
    float32_limit = source.replace("-1e9)", "torch.finfo(torch.float32).min)")
    assert torch.isnan(_run(float32_limit)["TwoMasks"]()(scores, keys, queries)).any()  # what writing the limit computes


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
    inside = _SCRIPT.format(step=_step("    scaler.scale(loss).backward()", "    scaler.step(optimizer)", "    scaler.update()"))
    right = _SCRIPT.format(step=_step("scaler.scale(loss).backward()", "scaler.step(optimizer)", "scaler.update()"))
    found = lint_code(inside, select=["MPT205"]).diagnostics
    assert [(d.rule_id, d.line, d.column) for d in found] == [("MPT205", 16, 9)]
    fixed = _fixed(inside, "MPT205")
    assert fixed == right
    assert all(map(torch.equal, _run(fixed)["weights"], _run(inside)["weights"]))


def test_g_grad_scaler_removed_under_bfloat16_computes_the_same_weights():
    bfloat16 = _SCRIPT.replace("dtype=torch.float16", "dtype=torch.bfloat16")
    scaled = bfloat16.format(step=_step("scaler.scale(loss).backward()", "scaler.step(optimizer)", "scaler.update()"))
    right = bfloat16.replace('scaler = torch.amp.GradScaler("cpu")\n', "").format(step=_step("loss.backward()", "optimizer.step()"))
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


def test_d_migrated_apex_script_trains_like_the_float32_original():
    source = (FIXTURES / "apex_o1.py").read_text()
    migrated = _fixed(source, "MPT501", unsafe=True, files={"requirements.txt": "torch>=2.4\n"})
    assert "from apex" not in migrated and "amp.initialize" not in migrated and 'scaler = torch.amp.GradScaler("cuda")' in migrated
    assert 'with torch.autocast("cuda"):' in migrated and "scaler.unscale_(optimizer)" in migrated
    with _apex_stub():
        original = _run(source)
    after = _run(migrated)  # no apex needed any more; CUDA autocast and scaler disable themselves on CPU
    assert not torch.cuda.is_available()
    assert after["final_loss"] == original["final_loss"]
    for before_param, after_param in zip(original["model"].parameters(), after["model"].parameters()):
        assert torch.equal(before_param, after_param)
    # the scaler's state replaces apex's (empty here: a CUDA GradScaler disables itself without CUDA)
    assert after["checkpoint"]["amp"] == after["scaler"].state_dict() == {}
