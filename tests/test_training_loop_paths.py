"""MPT202 and MPT204 on correct training loops real repositories have (silent), and their fixes where the loop
is wrong: exact findings, exact fixed text, and the fixed loop executed on CPU with real PyTorch.

A fix never deletes the only ``scaler.update()`` of a path: one ``update()`` goes after every step of the
scaler (after the ``if`` whose branches each step, after the ``for opt in optimizers:`` loop).
"""

from __future__ import annotations

import warnings

import pytest
import torch  # the test extra pins a CPU build

from mplint.testing import lint_code

pytestmark = pytest.mark.torch

LOOP_RULES = ["MPT201", "MPT202", "MPT203", "MPT204"]

_HEAD = """import torch

def train(model, optimizers, g_opt, d_opt, loader, flag):
    scaler = torch.amp.GradScaler("cuda")
    for x in loader:
        with torch.autocast("cuda"):
            loss = model(x).sum()
        scaler.scale(loss).backward()
"""

SILENT = {
    "gradient-accumulation": """import torch

def train(model, optimizer, loader, accumulate=4):
    scaler = torch.amp.GradScaler("cuda")
    for i, (x, y) in enumerate(loader):
        with torch.autocast("cuda"):
            loss = model(x).sum() / accumulate
        scaler.scale(loss).backward()
        if (i + 1) % accumulate == 0:
            scaler.unscale_(optimizer)
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            scaler.step(optimizer)
            scaler.update()
            optimizer.zero_grad()
""",
    "accumulation-over-micro-batches": """import torch

def train(model, optimizer, batches, scaler):
    for chunk in batches:
        for x in chunk:
            with torch.autocast("cuda"):
                loss = model(x).sum()
            scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()
        optimizer.zero_grad()
""",
    "one-step-per-branch": _HEAD
    + """        if flag:
            scaler.step(g_opt)
        else:
            scaler.step(d_opt)
        scaler.update()
""",
    "gan-one-scaler-per-model": """import torch

def train(gen, disc, g_opt, d_opt, loader):
    scaler_g = torch.amp.GradScaler("cuda")
    scaler_d = torch.amp.GradScaler("cuda")
    for x in loader:
        with torch.autocast("cuda"):
            d_loss = disc(x).mean() - disc(gen(x).detach()).mean()
            g_loss = -disc(gen(x)).mean()
        scaler_d.scale(d_loss).backward(retain_graph=True)
        scaler_g.scale(g_loss).backward()
        scaler_d.step(d_opt)
        scaler_d.update()
        scaler_g.step(g_opt)
        scaler_g.update()
""",
    "several-optimizers-one-update": _HEAD
    + """        scaler.step(g_opt)
        scaler.step(d_opt)
        scaler.update()
""",
    "optimizers-in-a-loop": _HEAD
    + """        for opt in optimizers:
            scaler.unscale_(opt)
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        for opt in optimizers:
            scaler.step(opt)
        scaler.update()
""",
    "unscale-in-a-helper": """import torch

def unscale_all(grad_scaler, opts):
    for o in opts:
        grad_scaler.unscale_(o)

def train(model, optimizer, loader, scaler):
    for x in loader:
        with torch.autocast("cuda"):
            loss = model(x).sum()
        scaler.scale(loss).backward()
        unscale_all(scaler, [optimizer])
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        scaler.step(optimizer)
        scaler.update()
""",
    "backend-chosen-by-string": """import torch
from apex import amp

class Trainer:
    def training_step(self, loss):
        if self.fp16_backend == "amp":
            self.scaler.scale(loss).backward()
        elif self.fp16_backend == "apex":
            with amp.scale_loss(loss, self.optimizer) as scaled_loss:
                scaled_loss.backward()
        else:
            loss.backward()
        if self.fp16_backend == "amp":
            self.scaler.unscale_(self.optimizer)
        if self.fp16_backend == "apex":
            torch.nn.utils.clip_grad_norm_(amp.master_params(self.optimizer), 1.0)
        else:
            torch.nn.utils.clip_grad_norm_(self.model.parameters(), 1.0)
        if self.fp16_backend == "amp":
            self.scaler.step(self.optimizer)
            self.scaler.update()
        else:
            self.optimizer.step()
""",
    "apex-clip-after-scale-loss-block": """import torch
from apex import amp

def train(model, optimizer, loader, scaler, use_apex):
    for x in loader:
        loss = model(x).sum()
        if use_apex:
            with amp.scale_loss(loss, optimizer) as scaled_loss:
                scaled_loss.backward()
            torch.nn.utils.clip_grad_norm_(amp.master_params(optimizer), 1.0)
            optimizer.step()
        else:
            scaler.scale(loss).backward()
            scaler.unscale_(optimizer)
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            scaler.step(optimizer)
            scaler.update()
""",
}


@pytest.mark.parametrize("name", sorted(SILENT))
def test_correct_training_loops_are_silent(name):
    assert lint_code(SILENT[name], select=LOOP_RULES).diagnostics == []


FIXED = {  # loop tail after _HEAD -> (findings: line, column, safety), fixed tail
    "update-inside-the-loop-over-optimizers": (
        """        for opt in optimizers:
            scaler.step(opt)
            scaler.update()
""",
        [(11, 13, "safe")],
        """        for opt in optimizers:
            scaler.step(opt)
        scaler.update()
""",
    ),
    "never-updated-loop-over-optimizers": (
        """        for opt in optimizers:
            scaler.step(opt)
""",
        [(10, 13, "safe")],
        """        for opt in optimizers:
            scaler.step(opt)
        scaler.update()
""",
    ),
    "never-updated-one-step-per-branch": (
        """        if flag:
            scaler.step(g_opt)
        else:
            scaler.step(d_opt)
""",
        [(10, 13, "none"), (12, 13, "safe")],
        """        if flag:
            scaler.step(g_opt)
        else:
            scaler.step(d_opt)
        scaler.update()
""",
    ),
    "bypassed-in-both-branches": (
        """        if flag:
            g_opt.step()
        else:
            d_opt.step()
""",
        [(10, 13, "safe"), (12, 13, "safe")],
        """        if flag:
            scaler.step(g_opt)
        else:
            scaler.step(d_opt)
        scaler.update()
""",
    ),
    "bypassed-after-accumulation": (
        """        if flag:
            g_opt.step()
            g_opt.zero_grad()
""",
        [(10, 13, "safe")],
        """        if flag:
            scaler.step(g_opt)
            scaler.update()
            g_opt.zero_grad()
""",
    ),
    "bypassed-in-a-loop-over-optimizers": (
        """        for opt in optimizers:
            opt.step()
""",
        [(10, 13, "safe")],
        """        for opt in optimizers:
            scaler.step(opt)
        scaler.update()
""",
    ),
}


@pytest.mark.parametrize("name", sorted(FIXED))
def test_mpt202_fixes_put_one_update_after_every_step_and_settle(name):
    tail, expected, fixed_tail = FIXED[name]
    found = lint_code(_HEAD + tail, select=LOOP_RULES).diagnostics
    assert [(d.rule_id, d.line, d.column, d.fix_safety.value) for d in found] == [("MPT202", *e) for e in expected]
    result = lint_code(_HEAD + tail, select=LOOP_RULES, fix=True)
    assert result.fixed_code == _HEAD + fixed_tail
    assert result.diagnostics == []  # settled (no MP001) and nothing left


def test_the_only_update_of_a_path_is_never_deleted():
    """The update() between two optimizers' steps has no later update() on its path: reported, no fix."""
    code = (
        "import torch\n\ndef step(encoder_opt, decoder_opt, scaler, loss, last):\n    scaler.scale(loss).backward()\n"
        "    scaler.step(encoder_opt)\n    scaler.update()\n    scaler.step(decoder_opt)\n    if last:\n"
        "        return\n    scaler.update()\n"
    )
    found = lint_code(code, select=["MPT202"]).diagnostics
    assert [(d.rule_id, d.line, d.column, d.fix_safety.value) for d in found] == [("MPT202", 6, 5, "none")]
    assert lint_code(code, select=["MPT202"], fix=True).fixed_code == code


# --- executed on CPU -------------------------------------------------------------------------------

_SCRIPT = """import torch

torch.manual_seed(0)
encoder = torch.nn.Linear(8, 16)
decoder = torch.nn.Linear(16, 2)
optimizers = [torch.optim.SGD(encoder.parameters(), lr=0.1), torch.optim.SGD(decoder.parameters(), lr=0.1)]
scaler = torch.amp.GradScaler("cpu", growth_interval=1)
x = torch.randn(32, 8)
before = [p.detach().clone() for p in decoder.parameters()]


def train_step(flag):
    with torch.autocast("cpu", dtype=torch.float16):
        loss = decoder(encoder(x)).float().pow(2).mean()
    scaler.scale(loss).backward()
{tail}

train_step(True)
moved = torch.cat([(p.detach() - b).flatten() for p, b in zip(decoder.parameters(), before)])
"""


def _run(code: str) -> dict:
    namespace: dict = {"__name__": "__main__"}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        exec(compile(code, "<script>", "exec"), namespace)
    return namespace


def test_executed_update_between_two_optimizers_halves_the_second_update_and_the_moved_update_restores_it():
    # growth_interval=1: each update() doubles the scale, so the decoder is unscaled with twice the scale
    buggy = _SCRIPT.format(tail="    for opt in optimizers:\n        scaler.step(opt)\n        scaler.update()\n")
    right = _SCRIPT.format(tail="    for opt in optimizers:\n        scaler.step(opt)\n    scaler.update()\n")
    found = lint_code(buggy, select=["MPT202"]).diagnostics
    assert [(d.rule_id, d.line, d.column) for d in found] == [("MPT202", 18, 9)]
    fixed = lint_code(buggy, select=["MPT202"], fix=True).fixed_code
    assert fixed == right
    wrong, good = _run(buggy)["moved"], _run(right)["moved"]
    assert (wrong.norm() / good.norm()).item() == pytest.approx(0.5, rel=1e-3)
    assert torch.equal(_run(fixed)["moved"], good)
    assert _run(fixed)["scaler"].get_scale() == 2.0**17  # updated once: the scale adapts


def test_executed_never_updated_scaler_raises_on_the_second_step_and_the_fix_after_the_branches_runs():
    tail = "    if flag:\n        scaler.step(optimizers[0])\n    else:\n        scaler.step(optimizers[1])\n"
    buggy = _SCRIPT.format(tail=tail) + "train_step(True)\n"
    fixed = lint_code(buggy, select=["MPT202"], fix=True).fixed_code
    assert fixed == _SCRIPT.format(tail=tail + "    scaler.update()\n") + "train_step(True)\n"
    with pytest.raises(RuntimeError, match="step\\(\\) has already been called since the last update\\(\\)"):
        _run(buggy)
    assert _run(fixed)["scaler"].get_scale() == 2.0**18  # two steps, two updates


def test_executed_gradient_accumulation_is_correct_as_written():
    """The silent accumulation loop: four scaled backwards, one step, one update: the same update as one
    float32 backward of the summed loss (up to float16 rounding), and the scale adapts."""
    code = """import torch

torch.manual_seed(0)
model = torch.nn.Linear(8, 2)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
scaler = torch.amp.GradScaler("cpu", growth_interval=1)
batches = [torch.randn(4, 8) for _ in range(4)]
start = [p.detach().clone() for p in model.parameters()]
for i, x in enumerate(batches):
    with torch.autocast("cpu", dtype=torch.float16):
        loss = model(x).float().pow(2).mean() / 4
    scaler.scale(loss).backward()
    if (i + 1) % 4 == 0:
        scaler.step(optimizer)
        scaler.update()
        optimizer.zero_grad()
"""
    assert lint_code(code, select=LOOP_RULES).diagnostics == []
    namespace = _run(code)
    reference = torch.nn.Linear(8, 2)
    with torch.no_grad():
        for p, s in zip(reference.parameters(), namespace["start"]):
            p.copy_(s)
    sum(reference(x).pow(2).mean() / 4 for x in namespace["batches"]).backward()
    for p, r, s in zip(namespace["model"].parameters(), reference.parameters(), namespace["start"]):
        assert torch.allclose(p.detach(), s - 0.1 * r.grad, atol=1e-3)
    assert namespace["scaler"].get_scale() == 2.0**17
