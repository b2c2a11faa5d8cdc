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
    assert (b["unit"], b["model"], b["steps"], a["steps"]) == (
        "loop at torch_clip_before_unscale.py:13 / SGD",
        "Sequential",
        4,
        4,
    )
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
    assert before["crash"] == {
        "error": "RuntimeError: value cannot be converted to type c10::Half without overflow",
        "file": "torch_masked_fill.py",
        "line": 17,
        "source": "scores = scores.masked_fill(mask, -1e9)",
    }
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
        "    opt.zero_grad()\n    scaler.scale(loss).backward()\n    scaler.step(opt)\n    scaler.update()\n"
    )
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


ATTENTION = """import torch

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
"""


def test_each_op_under_autocast_is_reported_with_the_dtype_it_ran_in(capsys, tmp_path):
    script = tmp_path / "attention.py"
    script.write_text(ATTENTION)
    code = main([str(script), "--steps", "2"])
    out = capsys.readouterr().out
    assert code == 0
    # the third region runs before the third optimizer step ends the loop; views, detach and
    # randn (no tensor input) are left out; casts are autocast's own: the Linear's weight, bias and
    # its float32 input (layer_norm stays float32 under bfloat16 CPU autocast), then .float()
    assert (
        "run: ops under autocast (output dtype): each of 3 autocast regions: _to_copy x3 bfloat16, "
        "bmm x2 bfloat16, _softmax x1 bfloat16, _to_copy x1 float32, addmm x1 bfloat16, mean x1 float32, "
        "native_layer_norm x1 float32, pow x1 float32\n"
    ) in out
    assert "float32 reference: ops under autocast" not in out  # autocast is off there


def test_autocast_regions_that_differ_are_added_up():
    from mplint.verify.report import autocast_ops

    regions = [
        {"regions": 2, "ops": [["addmm", "float16", 2], ["_softmax", "float32", 1]]},
        {"regions": 1, "ops": [["addmm", "float16", 1]]},
    ]
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
        "    optimizer.zero_grad()\n    scaler.scale(loss).backward()\n    scaler.step(optimizer)\n    scaler.update()\n"
    )
    code = main([str(script), "--steps", "2"])
    out = capsys.readouterr().out
    assert code == 0
    assert (
        "note: GradScaler('cuda') was turned off by torch: no cuda device here, so it did not run\n"
        "note: autocast(device_type='cuda') was turned off by torch: no cuda device here, so it did not run\n"
    ) in out
    assert "ops under autocast" not in out  # no autocast region ran


# --- one step cap per training loop ------------------------------------------------------------


def units_of(doc, run="run"):
    return [(u["unit"], u["model"], u["steps"]) for u in doc["runs"][run]["metrics"]["units"]]


TWO_LOOPS = """import torch

torch.manual_seed(0)
encoder = torch.nn.Linear(8, 4)
head = torch.nn.Linear(4, 1)
pretrain = torch.optim.SGD(encoder.parameters(), lr=0.1)
x = torch.randn(64, 8)
for epoch in range(100):
    for i in range(0, 64, 16):
        loss = encoder(x[i:i + 16]).pow(2).mean()
        pretrain.zero_grad()
        loss.backward()
        pretrain.step()
finetune = torch.optim.Adam(head.parameters(), lr=0.01)
for step in range(1000):
    with torch.autocast("cpu", dtype=torch.bfloat16):
        loss = head(encoder(x[:16])).float().pow(2).mean()
    finetune.zero_grad()
    loss.backward()
    finetune.step()
"""


def test_two_loops_with_two_optimizers_each_get_the_cap_and_the_script_goes_on(capsys, tmp_path):
    script = tmp_path / "two_loops.py"
    script.write_text(TWO_LOOPS)
    # the epoch loop (line 8) around the batch loop is the training loop; it ends after 3 steps and the
    # fine-tuning loop (line 15) runs its own 3; the script then runs to its end
    code, doc = verify_json(capsys, script, "--steps", "3")
    assert code == 0
    assert (
        units_of(doc)
        == units_of(doc, "float32 reference")
        == [("loop at two_loops.py:8 / SGD", "Linear", 3), ("loop at two_loops.py:15 / Adam", "Linear #2", 3)]
    )
    assert doc["runs"]["run"]["status"] == "completed"  # not stopped: it ran past both loops
    assert doc["events"]["loop_stops"] == []


ONE_OPTIMIZER_TWICE = """import torch

torch.manual_seed(0)
model = torch.nn.Linear(8, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
x = torch.randn(16, 8)


def train(epochs):
    for epoch in range(epochs):
        loss = model(x).pow(2).mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()


train(100)
for group in optimizer.param_groups:
    group["lr"] = 0.01
train(100)
"""


def test_one_optimizer_in_two_loops_through_one_function_gets_a_cap_per_call(capsys, tmp_path):
    script = tmp_path / "twice.py"
    script.write_text(ONE_OPTIMIZER_TWICE)
    code, doc = verify_json(capsys, script, "--steps", "2")
    assert code == 0
    assert units_of(doc) == [
        ("loop at twice.py:10 via twice.py:17 / SGD", "Linear", 2),
        ("loop at twice.py:10 via twice.py:20 / SGD", "Linear", 2),
    ]
    assert doc["runs"]["run"]["status"] == "completed"


GAN = """import torch

torch.manual_seed(0)
generator = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh())
discriminator = torch.nn.Sequential(torch.nn.Linear(8, 1))
opt_g = torch.optim.Adam(generator.parameters(), lr=1e-3)
opt_d = torch.optim.Adam(discriminator.parameters(), lr=1e-3)
real = torch.randn(16, 8)
for step in range(1000):
    fake = generator(torch.randn(16, 4))
    d_loss = discriminator(fake.detach()).mean() - discriminator(real).mean()
    opt_d.zero_grad()
    d_loss.backward()
    opt_d.step()
    g_loss = -discriminator(fake).mean()
    opt_g.zero_grad()
    g_loss.backward()
    opt_g.step()
"""


def test_a_gan_loop_stepping_two_optimizers_per_iteration_is_one_loop(capsys, tmp_path):
    script = tmp_path / "gan.py"
    script.write_text(GAN)
    code, doc = verify_json(capsys, script, "--steps", "3")
    assert code == 0
    # the discriminator's step comes first in each iteration: its Adam is the loop's first unit
    assert units_of(doc) == [
        ("loop at gan.py:9 / Adam", "Sequential #2", 3),
        ("loop at gan.py:9 / Adam #2", "Sequential", 3),
    ]
    assert doc["runs"]["run"]["status"] == "completed"


TRAINER = (
    "def fit(model, optimizer, x, steps):\n"
    "    for step in range(steps):\n"
    "        loss = model(x).pow(2).mean()\n"
    "        optimizer.zero_grad()\n        loss.backward()\n        optimizer.step()\n"
)
SCRIPT_AFTER_TRAINER = (
    "model = torch.nn.Linear(8, 1)\noptimizer = torch.optim.SGD(model.parameters(), lr=0.1)\n"
    "x = torch.randn(16, 8)\nfit(model, optimizer, x, 1000)\n"
    "scaler = torch.amp.GradScaler('cpu')\nscheduler = torch.optim.lr_scheduler.StepLR(optimizer, 10)\n"
    "for step in range(1000):\n"
    "    loss = model(x).pow(2).mean()\n    optimizer.zero_grad()\n    scaler.scale(loss).backward()\n"
    "    scaler.step(optimizer)\n    scaler.update()\n    scheduler.step()\n"
)


def test_the_loop_of_a_trainer_module_beside_the_script_is_capped_and_the_script_goes_on(capsys, tmp_path):
    (tmp_path / "trainer.py").write_text(TRAINER)  # imports nothing: the optimizer is passed in
    script = tmp_path / "train.py"
    script.write_text("import torch\nfrom trainer import fit\n\n" + SCRIPT_AFTER_TRAINER)
    code, doc = verify_json(capsys, script, "--steps", "3")
    assert code == 0
    assert units_of(doc) == [("loop at trainer.py:2 / SGD", "Linear", 3), ("loop at train.py:10 / SGD", "Linear", 3)]
    assert doc["runs"]["run"]["status"] == "completed"


def test_a_loop_the_script_cannot_end_stops_the_run_and_names_the_loops_that_did_not_run(capsys, tmp_path):
    library = tmp_path / "library"  # outside the script's folder, as an installed trainer would be
    library.mkdir()
    (library / "trainer.py").write_text(TRAINER)
    (tmp_path / "project").mkdir()
    script = tmp_path / "project" / "train.py"
    script.write_text(
        f"import sys\nsys.path.insert(0, {str(library)!r})\nimport torch\nfrom trainer import fit\n"
        + SCRIPT_AFTER_TRAINER.replace("fit(model", "\nfit(model")
    )
    code = main([str(script), "--steps", "3"])
    out = capsys.readouterr().out
    assert code == 0
    # the run ends at the library loop's cap, before the script's own loop (the scheduler's step is not
    # an optimizer's)
    assert (
        "note: stopped after 3 steps of the loop in the call at train.py:9; the script has a further training "
        "loop at train.py:12 that did not run\n"
    ) in out
    rows = [[cell.strip() for cell in line.split("│")[1:-1]] for line in out.splitlines() if line.startswith("│")]
    assert ["status", "step-cap", "step-cap"] in rows
    assert ["loop in the call at train.py:9 / SGD", "trains Linear", "trains Linear"] in rows
    assert ["steps", "3", "3"] in rows


def test_a_script_that_catches_the_end_of_its_loop_is_stopped_at_its_next_step(capsys, tmp_path):
    script = tmp_path / "swallow.py"
    script.write_text(
        "import torch\nmodel = torch.nn.Linear(8, 1)\noptimizer = torch.optim.SGD(model.parameters(), lr=0.1)\n"
        "for step in range(1000):\n    try:\n        loss = model(torch.randn(4, 8)).pow(2).mean()\n"
        "        optimizer.zero_grad()\n        loss.backward()\n        optimizer.step()\n"
        "    except BaseException:\n        pass\n"
    )
    code, doc = verify_json(capsys, script, "--steps", "2")
    assert code == 0
    assert units_of(doc) == [("loop at swallow.py:4 / SGD", "Linear", 2)]
    assert doc["runs"]["run"]["status"] == "step-cap"
    assert doc["events"]["loop_stops"] == [
        "the script caught the end of the loop at swallow.py:4 and went on: the run ended at its next step"
    ]


def test_training_loops_are_found_in_the_source_by_their_optimizer_steps():
    from mplint.verify.loops import not_run, training_loops

    source = (
        "for epoch in range(3):\n    for batch in data:\n        opt.step()\n        scheduler.step()\n"
        "def gan():\n    while True:\n        scaler.step(opt_d)\n        opt_g.step()\n"
        "optimizer.step()\nlr_scheduler.step()\nscaler.step()\n"
    )
    assert training_loops(source) == {1: {3}, 6: {7, 8}, 9: {9}}
    assert not_run(source, {3, 8}) == [9]


def test_a_failure_after_a_capped_loop_that_needs_what_the_loop_would_have_made_is_the_cap(capsys, tmp_path):
    script = tmp_path / "ckpt.py"
    script.write_text(
        "import torch\n\nmodel = torch.nn.Linear(8, 1)\noptimizer = torch.optim.SGD(model.parameters(), lr=0.1)\n"
        "for epoch in range(3):\n    for step in range(100):\n        loss = model(torch.randn(4, 8)).pow(2).mean()\n"
        "        optimizer.zero_grad()\n        loss.backward()\n        optimizer.step()\n"
        "    torch.save(model.state_dict(), 'best.pt')\n"
        "model.load_state_dict(torch.load('best.pt'))\n"
    )
    code = main([str(script), "--steps", "2"])
    out = capsys.readouterr().out
    assert code == 0
    # the epoch loop ended before its first torch.save: loading the checkpoint after it fails
    assert (
        "note: after the loop at ckpt.py:5 ended at its cap, the script stopped with FileNotFoundError: [Errno 2] "
        "No such file or directory: 'best.pt' at ckpt.py:12: what follows a capped loop may need what the rest "
        "of the loop would have made (a checkpoint), so the run counts as stopped at the cap\n"
    ) in out
    rows = [[cell.strip() for cell in line.split("│")[1:-1]] for line in out.splitlines() if line.startswith("│")]
    assert ["status", "step-cap", "step-cap"] in rows


def test_a_second_training_loop_that_crashes_is_a_crash_not_the_cap(capsys, tmp_path):
    script = tmp_path / "crash2.py"
    script.write_text(
        "import torch\n\nmodel = torch.nn.Linear(8, 8)\noptimizer = torch.optim.SGD(model.parameters(), lr=0.1)\n"
        "for step in range(100):\n    loss = model(torch.randn(4, 8)).pow(2).mean()\n"
        "    optimizer.zero_grad()\n    loss.backward()\n    optimizer.step()\n"
        "mask = torch.ones(4, 8, dtype=torch.bool)\n"
        "for step in range(100):\n    with torch.autocast('cpu', dtype=torch.float16):\n"
        "        scores = model(torch.randn(4, 8)).masked_fill(mask, -1e9)\n"
        "    loss = scores.float().pow(2).mean()\n"
        "    optimizer.zero_grad()\n    loss.backward()\n    optimizer.step()\n"
    )
    code, doc = verify_json(capsys, script, "--steps", "2")
    assert code == 2  # the first loop's cap let the second run: its float16 overflow is found, not hidden
    assert doc["error"]["message"] == (
        "could not verify crash2.py: the run run crashed: RuntimeError: value cannot be "
        "converted to type c10::Half without overflow"
    )


def test_a_fifth_training_loop_ends_the_run_with_a_note(capsys, tmp_path):
    script = tmp_path / "folds.py"
    script.write_text(
        "import torch\n\nmodel = torch.nn.Linear(8, 1)\noptimizer = torch.optim.SGD(model.parameters(), lr=0.1)\n\n\n"
        "def train():\n    for step in range(100):\n        loss = model(torch.randn(4, 8)).pow(2).mean()\n"
        "        optimizer.zero_grad()\n        loss.backward()\n        optimizer.step()\n\n\n"
        "train()\ntrain()\ntrain()\ntrain()\ntrain()\n"
    )
    code, doc = verify_json(capsys, script, "--steps", "1")
    assert code == 0
    assert [unit for unit, _, _ in units_of(doc)] == [
        f"loop at folds.py:8 via folds.py:{line} / SGD" for line in (15, 16, 17, 18)
    ]
    assert doc["runs"]["run"]["status"] == "step-cap"
    assert doc["events"]["loop_stops"] == ["stopped before training loop 5 (at most 4 are run)"]
