"""``mplint verify`` on PyTorch scripts (CPU, float16 autocast, ``GradScaler("cpu")``): real subprocesses."""

import json
import math
from pathlib import Path

import pytest

pytest.importorskip("torch")

from mplint.verify.cli import main  # noqa: E402

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "verify"


def verify_json(capsys, *argv):
    code = main([*map(str, argv), "--format", "json"])
    return code, json.loads(capsys.readouterr().out)


def test_clip_before_unscale_update_is_65536x_too_small_then_right(capsys):
    code, doc = verify_json(capsys, FIXTURES / "torch_clip_before_unscale.py", "--fix", "--steps", "4")
    assert code == 0
    assert doc["framework"] == "torch"
    assert doc["fixed_rules"] == ["MPT204"]
    before, after = (doc["runs"][r]["metrics"] for r in ("before", "after"))
    (b,), (a,) = before["units"], after["units"]
    assert (b["unit"], b["model"], b["steps"], a["steps"]) == ("custom loop #1 / SGD", "Sequential", 4, 4)
    assert round(math.log2(1 / b["update_ratio"])) == 16  # 65536x too small
    assert abs(a["update_ratio"] - 1.0) < 0.02
    assert b["scale_history"] == a["scale_history"] == [65536.0] * 4
    assert [f["rule"] for f in before["findings"]] == ["MPT204"]
    assert after["findings"] == []
    assert before["policy"] == "autocast float16"
    assert doc["runs"]["float32 reference"]["metrics"]["policy"] == "float32"
    assert doc["summary"] == "before: runs; after: runs"
    assert doc["verdict"] == "verified: the fixed script is no worse and shows no MP802/MP803/MP804"


def test_masked_fill_overflow_crash_is_repaired_by_the_fix(capsys):
    code, doc = verify_json(capsys, FIXTURES / "torch_masked_fill.py", "--fix", "--steps", "3")
    assert code == 0
    assert "MPT601" in doc["fixed_rules"]
    before, after = (doc["runs"][r]["metrics"] for r in ("before", "after"))
    assert before["crash"] == {"error": "RuntimeError: value cannot be converted to type c10::Half without overflow",
                               "file": "torch_masked_fill.py", "line": 17,
                               "source": "scores = scores.masked_fill(mask, -1e9)"}
    assert (after["steps"], after["non_finite_steps"]) == (3, 0)
    assert after["model_outputs"] == {"Attention": ["float16"]}
    assert doc["verdict"].startswith("verified repair: the original crashed with RuntimeError")


def test_gradscaler_skipped_steps_and_non_finite_loss_are_counted(capsys, tmp_path):
    script = tmp_path / "overflow.py"
    script.write_text(
        "import torch\nmodel = torch.nn.Linear(4, 1)\nopt = torch.optim.SGD(model.parameters(), lr=0.1)\n"
        "scaler = torch.amp.GradScaler('cpu')\n"
        "for i in range(100):\n"
        "    with torch.autocast('cpu', dtype=torch.float16):\n"
        "        loss = (model(torch.full((8, 4), 300.0)) ** 2).mean()\n"
        "    opt.zero_grad()\n    scaler.scale(loss).backward()\n    scaler.step(opt)\n    scaler.update()\n")
    code, doc = verify_json(capsys, script, "--steps", "3")
    (unit,) = doc["runs"]["run"]["metrics"]["units"]
    assert unit["steps"] == 3
    assert unit["skipped_steps"] == 3  # every scaled gradient overflows float16: the scaler skips the step
    assert unit["scale_history"] == [65536.0, 32768.0, 16384.0]  # the scale each step used
    assert code == 1 and doc["verdict"] == "problems: MP803"


def test_torch_hub_download_is_blocked_with_a_clear_message(capsys, tmp_path):
    script = tmp_path / "hub.py"
    script.write_text("import torch\ntorch.hub.load('pytorch/vision', 'resnet18')\n")
    code = main([str(script)])
    out = capsys.readouterr().out
    assert code == 2
    assert "DownloadBlocked: mplint verify: torch.hub.load of pytorch/vision blocked: the run is offline" in out


ATTENTION = '''import torch

torch.manual_seed(0)


class Attention(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.norm = torch.nn.LayerNorm(8)
        self.qkv = torch.nn.Linear(8, 24)

    def forward(self, x):
        q, k, v = self.qkv(self.norm(x)).chunk(3, dim=-1)
        return torch.softmax(q @ k.transpose(-2, -1), dim=-1) @ v


model = Attention()
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
for step in range(100):
    with torch.autocast("cpu", dtype=torch.bfloat16):
        loss = model(torch.randn(2, 4, 8)).float().pow(2).mean()
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
'''


def test_each_op_under_autocast_is_reported_with_the_dtype_it_ran_in(capsys, tmp_path):
    script = tmp_path / "attention.py"
    script.write_text(ATTENTION)
    code = main([str(script), "--steps", "2"])
    out = capsys.readouterr().out
    assert code == 0
    # the third region runs before the third optimizer step stops the script; views, detach and
    # randn (no tensor input) are left out; casts are autocast's own: the Linear's weight, bias and
    # its float32 input (layer_norm stays float32 under bfloat16 CPU autocast), then .float()
    assert ("run: ops under autocast (output dtype): each of 3 autocast regions: _to_copy x3 bfloat16, "
            "bmm x2 bfloat16, _softmax x1 bfloat16, _to_copy x1 float32, addmm x1 bfloat16, mean x1 float32, "
            "native_layer_norm x1 float32, pow x1 float32\n") in out
    assert "float32 reference: ops under autocast" not in out  # autocast is off there


def test_autocast_regions_that_differ_are_added_up():
    from mplint.verify.report import autocast_ops

    regions = [{"regions": 2, "ops": [["addmm", "float16", 2], ["_softmax", "float32", 1]]},
               {"regions": 1, "ops": [["addmm", "float16", 1]]}]
    assert autocast_ops(regions) == "3 autocast regions in all: addmm x5 float16, _softmax x2 float32"
    assert autocast_ops([{"regions": 1, "ops": [["mm", "bfloat16", 4]]}]) == "each of 1 autocast region: mm x4 bfloat16"
    assert autocast_ops([]) is None


@pytest.mark.skipif(__import__("torch").cuda.is_available(), reason="torch turns CUDA autocast off only without CUDA")
def test_cuda_autocast_and_scaler_that_torch_turns_off_on_cpu_are_named(capsys, tmp_path):
    script = tmp_path / "cuda_only.py"
    script.write_text(
        "import torch\nmodel = torch.nn.Linear(4, 1)\noptimizer = torch.optim.SGD(model.parameters(), lr=0.1)\n"
        "scaler = torch.cuda.amp.GradScaler()\n"
        "for step in range(10):\n"
        "    with torch.autocast('cuda', dtype=torch.float16):\n"
        "        loss = model(torch.randn(8, 4)).pow(2).mean()\n"
        "    optimizer.zero_grad()\n    scaler.scale(loss).backward()\n    scaler.step(optimizer)\n    scaler.update()\n")
    code = main([str(script), "--steps", "2"])
    out = capsys.readouterr().out
    assert code == 0
    assert ("note: GradScaler('cuda') was turned off by torch: no cuda device here, so it did not run\n"
            "note: autocast(device_type='cuda') was turned off by torch: no cuda device here, so it did not run\n") in out
    assert "ops under autocast" not in out  # no autocast region ran
