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


# --- a test the loop never changes keeps its arm on every turn -------------------------------------

_PRECISION_ARMS = """import torch


def train(model, optimizer, loader, criterion, precision, accumulation_steps):
    scaler = torch.amp.GradScaler("cuda")
    for i, (x, y) in enumerate(loader):
{rebind}        if precision in ("fp16", "amp"):
            with torch.autocast("cuda"):
                loss = criterion(model(x), y)
            scaler.scale(loss).backward()
            if (i + 1) % accumulation_steps == 0:
                scaler.step(optimizer)
                scaler.update()
                optimizer.zero_grad()
        else:
            loss = criterion(model(x), y)
            loss.backward()
            if (i + 1) % accumulation_steps == 0:
                optimizer.step()
                optimizer.zero_grad()
"""

_CLIP_WITHOUT_ACCUMULATION = """import torch


def train(model, optimizer, loader, criterion, accumulation_steps):
    scaler = torch.amp.GradScaler("cuda")
    for i, (x, y) in enumerate(loader):
{rebind}        with torch.autocast("cuda"):
            loss = criterion(model(x), y) / accumulation_steps
        scaler.scale(loss).backward()
        if accumulation_steps <= 1:
            scaler.unscale_(optimizer)
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        if accumulation_steps <= 1 or (i + 1) % accumulation_steps == 0:
            scaler.step(optimizer)
            scaler.update()
            optimizer.zero_grad()
"""


def test_arms_of_a_test_the_loop_never_rebinds_are_exclusive_for_the_whole_loop():
    """``precision in (...)`` and ``accumulation_steps <= 1`` hold the same on every turn: a path takes one arm
    each turn, never the scaled arm on one turn and the float32 arm (or the other half of an ``or``) on the next."""
    for program in (_PRECISION_ARMS, _CLIP_WITHOUT_ACCUMULATION):
        assert lint_code(program.format(rebind=""), select=LOOP_RULES).diagnostics == []


def test_a_test_whose_names_the_loop_rebinds_is_read_anew_each_turn():
    """The same program where the loop assigns the tested name: the arms may alternate, and the scaled backward
    of one turn is still pending at the float32 step of the next."""
    found = lint_code(_PRECISION_ARMS.format(rebind="        precision = schedule[i]\n"), select=LOOP_RULES).diagnostics
    assert [(d.rule_id, d.line, d.column, d.message) for d in found] == [
        (
            "MPT202",
            20,
            17,
            "`optimizer.step()` after `scaler.scale(loss).backward()` applies gradients still multiplied by the loss "
            "scale and never skips a step with inf/NaN gradients: call `scaler.step(optimizer)`",
        )
    ]
    assert [(r.line, r.message) for r in found[0].related] == [
        (11, "`scaler.scale(loss).backward()` scales the loss whose gradients the step applies")
    ]


def test_an_assignment_between_two_tests_forgets_what_the_first_assumed():
    """``clip > 0`` and ``not clip > 0`` are exclusive arms, until ``clip`` is assigned between them."""
    code = """import torch


def step(model, optimizer, scaler, x, clip, schedule, log):
    with torch.autocast("cuda"):
        loss = model(x).sum()
    scaler.scale(loss).backward()
    if clip > 0:
        scaler.unscale_(optimizer)
        torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
    clip = schedule(clip)
    if not clip > 0:
        scaler.unscale_(optimizer)
        log(model)
    scaler.step(optimizer)
    scaler.update()
"""
    found = lint_code(code, select=LOOP_RULES).diagnostics
    assert [(d.rule_id, d.line, d.column) for d in found] == [("MPT203", 13, 9)]
    assert [(r.line, r.message) for r in found[0].related] == [(9, "`scaler.unscale_(optimizer)` unscales them first")]
    assert lint_code(code.replace("    clip = schedule(clip)\n", ""), select=LOOP_RULES).diagnostics == []


# --- steps and updates across the methods a loop calls -----------------------------------------------

_TRAINER_WITH_BASE = """import torch


class BaseTrainer:
    def __init__(self, model, optimizers):
        self.model = model
        self.optimizers = optimizers
        self.scaler = torch.amp.GradScaler("cuda")

    def _backward(self, loss):
        self.scaler.scale(loss).backward()


class Trainer(BaseTrainer):
    def _train_batch(self, x):
        with torch.autocast("cuda"):
            loss = self.model(x).mean()
        self._backward(loss)
        for optimizer in self.optimizers:
            self.scaler.step(optimizer)

    def fit(self, loader, epochs):
        for _ in range(epochs):
            for x in loader:
                self._train_batch(x)
                self.scaler.update()
"""

_TRAINER_FOUR_DEEP = """import torch


class Trainer:
    def __init__(self, model, optimizers):
        self.model = model
        self.optimizers = optimizers
        self.scaler = torch.amp.GradScaler("cuda")

    def _backward(self, loss):
        self.scaler.scale(loss).backward()

    def _train_batch(self, x):
        with torch.autocast("cuda"):
            loss = self.model(x).mean()
        self._backward(loss)
        for optimizer in self.optimizers:
            self.scaler.step(optimizer)

    def _train_epoch(self, loader):
        for x in loader:
            self._train_batch(x)
            self.scaler.update()

    def _run(self, loader):
        self._train_epoch(loader)

    def fit(self, loader, epochs):
        for _ in range(epochs):
            self._run(loader)
"""


@pytest.mark.parametrize("program", [_TRAINER_WITH_BASE, _TRAINER_FOUR_DEEP], ids=["base-class", "four-deep"])
def test_each_optimizer_stepped_in_a_method_and_one_update_in_the_callers_loop_is_silent(program):
    """PyTorch's multi-optimizer pattern (one scaled backward, ``scaler.step`` for each optimizer, one
    ``update()``) with the backward in a base class's method, or below the depth calls are followed to: the
    backward is followed into the base class; a call not followed leaves the scaler's state unknown, never a
    step of "the same backward" after the next update."""
    assert lint_code(program, select=LOOP_RULES).diagnostics == []


def test_an_update_between_two_steps_across_methods_names_both_steps():
    code = """import torch


class Trainer:
    def __init__(self, model, g_opt, d_opt):
        self.model = model
        self.g_opt = g_opt
        self.d_opt = d_opt
        self.scaler = torch.amp.GradScaler("cuda")

    def _finish_step(self):
        self.scaler.update()

    def _train_batch(self, x):
        with torch.autocast("cuda"):
            loss = self.model(x).mean()
        self.scaler.scale(loss).backward()
        self.scaler.step(self.g_opt)
        self._finish_step()
        self.scaler.step(self.d_opt)

    def fit(self, loader):
        for x in loader:
            self._train_batch(x)
            self._finish_step()
"""
    found = lint_code(code, select=LOOP_RULES).diagnostics
    assert [(d.rule_id, d.line, d.column, d.fix_safety.value, d.message) for d in found] == [
        (
            "MPT202",
            12,
            9,
            "none",
            "`self.scaler.update()` runs between two optimizer steps of one backward: the next step unscales with a "
            "scale its gradients were not made with; call `update()` once, after every optimizer stepped",
        )
    ]
    assert [(r.line, r.message) for r in found[0].related] == [
        (18, "`self.scaler.step(self.g_opt)` steps before the update"),
        (20, "`self.scaler.step(self.d_opt)` steps after it, on gradients of the same backward"),
    ]


def test_update_inside_a_loop_over_optimizers_names_the_step_of_each_turn():
    (update,) = lint_code(_HEAD + FIXED["update-inside-the-loop-over-optimizers"][0], select=LOOP_RULES).diagnostics
    assert [(r.line, r.message) for r in update.related] == [
        (10, "`scaler.step(opt)` steps one optimizer before the update and the next after it")
    ]


def test_every_path_finding_names_where_its_path_began():
    """The scaled backward of a bypassed step and of an early clip, the ``scaler.step`` that unscales gradients
    divided by hand again."""
    code = _HEAD + (
        "        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)\n"
        "        for p in model.parameters():\n"
        "            p.grad /= scaler.get_scale()\n"
        "        scaler.step(g_opt)\n"
        "        d_opt.step()\n"
        "        scaler.update()\n"
    )
    found = lint_code(code, select=LOOP_RULES).diagnostics
    assert [(d.rule_id, d.line, [(r.line, r.message) for r in d.related]) for d in found] == [
        ("MPT204", 9, [(8, "`scaler.scale(loss).backward()` scales the loss whose gradients are clipped")]),
        ("MPT203", 11, [(12, "`scaler.step(g_opt)` unscales them again")]),
        ("MPT202", 13, [(8, "`scaler.scale(loss).backward()` scales the loss whose gradients the step applies")]),
    ]


def test_a_missing_scaler_names_the_steps_that_run_without_it():
    code = """import torch


def train(model, optimizer, loader):
    for x in loader:
        with torch.autocast("cuda"):
            loss = model(x).sum()
        loss.backward()
        optimizer.step()
"""
    (found,) = lint_code(code, select=LOOP_RULES).diagnostics
    assert (found.rule_id, found.line, [(r.line, r.message) for r in found.related]) == (
        "MPT201",
        8,
        [(9, "`optimizer.step()` steps without a scaler")],
    )


def test_an_update_after_each_param_group_step_through_a_method_is_reported():
    """A ZeRO-style optimizer steps one param group at a time (``param_groups`` swapped in a method) and updates
    the scaler after each: the next group is unscaled with a scale its gradients were not made with. The
    backward is elsewhere; the steps of one ``step()`` call share it."""
    code = """import torch


class ZeroOptimizer:
    def __init__(self, optimizer, groups):
        self.optimizer = optimizer
        self.groups = groups
        self.grad_scaler = torch.amp.GradScaler("cuda")

    def _optimizer_step(self, group_no):
        original = self.optimizer.param_groups
        self.optimizer.param_groups = [original[group_no]]
        self.grad_scaler.step(self.optimizer)
        self.grad_scaler.update()
        self.optimizer.param_groups = original

    def step(self):
        for i, group in enumerate(self.groups):
            self._optimizer_step(i)
"""
    found = lint_code(code, select=LOOP_RULES).diagnostics
    assert [(d.rule_id, d.line, d.column, [(r.line, r.message) for r in d.related]) for d in found] == [
        (
            "MPT202",
            14,
            9,
            [
                (
                    13,
                    "`self.grad_scaler.step(self.optimizer)` steps one optimizer before the update and the next after it",
                )
            ],
        )
    ]


def test_a_backward_the_file_cannot_see_scaled_starts_a_new_backward():
    """``engine.backward(loss)`` scales elsewhere: the steps of the next turn are of another backward, and the
    one ``update()`` after the loop over optimizers is right."""
    code = """import torch


def train(engine, loader, optimizers, scaler):
    for x in loader:
        loss = engine(x)
        engine.backward(loss)
        for opt in optimizers:
            scaler.step(opt)
        scaler.update()
"""
    assert lint_code(code, select=LOOP_RULES).diagnostics == []
