"""The MPT family beyond its rule examples: the torch pin, PyTorch name resolution, the pre-filter, and the
separation of the PyTorch and Keras families on the fixtures."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from packaging.version import Version

from mplint.checks import all_rules
from mplint.engine.check import check_source
from mplint.engine.check_options import CheckOptions
from mplint.knowledge.apinames import canonical, torch_canonical
from mplint.project.build import project_facts
from mplint.project.cache import _module_facts_from_json, _module_facts_to_json
from mplint.project.facts import ProjectFacts
from mplint.project.torch_target import UNPINNED, TorchTarget, torch_target
from mplint.runner import RunOptions, run
from mplint.testing import copy_tree, lint_code

REPO = Path(__file__).resolve().parent.parent


@pytest.mark.parametrize(
    "name, text, minimum, at_least_24, admits_24",
    [
        ("requirements.txt", "numpy\ntorch>=2.4,<3  # cuda 12\n", "2.4.0", True, True),
        ("requirements-train.txt", "torch==2.1.2\n", "2.1.2", False, False),
        ("pyproject.toml", '[project]\nname = "x"\ndependencies = ["torch>=2.0"]\n', "2.0.0", False, True),
        ("pyproject.toml", '[tool.poetry.dependencies]\npython = "^3.10"\ntorch = "^2.5"\n', "2.5.0", True, True),
        ("setup.cfg", "[options]\ninstall_requires =\n    torch>=2.3.1\n    numpy\n", "2.3.1", False, True),
    ],
)
def test_torch_pins_are_read_with_real_parsers(tmp_path, name, text, minimum, at_least_24, admits_24):
    (tmp_path / name).write_text(text)
    target = torch_target(tmp_path / "train.py")
    assert target.pinned and target.minimum == Version(minimum)
    assert target.at_least("2.4") is at_least_24 and target.admits_from("2.4") is admits_24


def test_the_nearest_pin_counts_and_a_project_root_stops_the_search(tmp_path):
    (tmp_path / "requirements.txt").write_text("torch==2.1.0\n")
    nested = tmp_path / "src" / "pkg"
    nested.mkdir(parents=True)
    assert torch_target(nested / "model.py").minimum == Version("2.1.0")  # found two folders up
    project = tmp_path / "tools"
    project.mkdir()
    (project / "pyproject.toml").write_text('[project]\nname = "tools"\ndependencies = ["numpy"]\n')
    assert not torch_target(project / "run.py").pinned  # its own project does not pin torch
    unpinned = torch_target(project / "run.py")  # any supported torch: not only the newest
    assert (unpinned.at_least("2.4"), unpinned.admits_from("2.4"), unpinned.label) == (False, True, "any torch >= 1.6")


TRAIN = (
    "import torch\n\n"
    "def train(model, loader):\n"
    "    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)\n"
    "    for x, y in loader:\n"
    '        with torch.autocast("cuda", dtype=torch.float16):\n'
    "            loss = model(x).sum()\n"
    "        loss.backward()\n"
    "        optimizer.step()\n"
)


def test_a_modules_facts_carry_its_torch_pin_and_the_cache_keeps_it(tmp_path):
    pinned, unpinned = tmp_path / "pinned", tmp_path / "unpinned"
    for root in (pinned, unpinned):
        root.mkdir()
        (root / "pyproject.toml").write_text('[project]\nname = "x"\ndependencies = ["numpy"]\n')
        (root / "train.py").write_text(TRAIN)
    (pinned / "requirements.txt").write_text("torch>=2.4,<3\n")
    facts = project_facts(pinned)["train.py"]
    assert facts.torch_target == torch_target(pinned / "train.py") and facts.torch_target.minimum == Version("2.4")
    assert _module_facts_from_json(json.loads(json.dumps(_module_facts_to_json(facts))), {}, {}) == facts
    # no pin, but the code's own `torch.autocast` exists from torch 1.10 on: the range starts there
    by_code = project_facts(unpinned)["train.py"]
    assert by_code.torch_pin == TorchTarget(
        True, Version("1.10"), None, "train.py:6 uses torch.autocast, which torch 1.10 added"
    )
    assert _module_facts_from_json(json.loads(json.dumps(_module_facts_to_json(by_code))), {}, {}) == by_code
    (unpinned / "train.py").write_text(TRAIN.replace('torch.autocast("cuda", dtype=torch.float16)', "amp_context()"))
    bare = project_facts(unpinned)["train.py"]
    assert bare.torch_pin is None and bare.torch_target is UNPINNED
    assert _module_facts_from_json(json.loads(json.dumps(_module_facts_to_json(bare))), {}, {}) == bare


def test_the_torch_rules_read_the_target_from_the_facts_not_the_disk(tmp_path):
    (tmp_path / "requirements.txt").write_text("torch>=2.4\n")
    path = str(tmp_path / "train.py")
    rules = (all_rules()["MPT201"],)

    def advice(facts: ProjectFacts) -> str:
        [finding] = check_source(path, TRAIN.encode(), CheckOptions(rules, facts)).diagnostics
        return finding.message.rsplit("scale the loss with ", 1)[1]

    assert advice(ProjectFacts(torch_pin=torch_target(path))) == '`torch.amp.GradScaler("cuda")`'
    assert advice(ProjectFacts()) == "`torch.cuda.amp.GradScaler()`"  # the pin beside the file is not read


def test_torch_names_resolve_apart_from_keras():
    assert torch_canonical("torch.cuda.amp.GradScaler").path == "cuda.amp.GradScaler"
    assert torch_canonical("apex.amp.initialize").ns == "apex"
    assert torch_canonical("tensorflow.keras.layers.Dense") is None
    assert canonical("torch.where") is None  # the Keras rules never see PyTorch names


@pytest.mark.parametrize(
    "rule_id, source",
    [
        (
            "MPT204",
            "from torch.nn.utils import clip_grad_norm_ as clip\n\ndef step(m, opt, scaler, loss):\n"
            "    scaler.scale(loss).backward()\n    clip(m.parameters(), 1.0)\n    scaler.step(opt)\n    scaler.update()\n",
        ),
        ("MPT502", "import torch.cuda.amp as cuda_amp\n\nscaler = cuda_amp.GradScaler()\n"),
        ("MPT502", "from torch.cuda import amp\n\nwith amp.autocast():\n    pass\n"),
        ("MPT501", "import torch\nimport apex.amp as A\n\nmodel, opt = A.initialize(model, opt, opt_level='O2')\n"),
        (
            "MPT601",
            "import torch as T\n\nclass Attn(T.nn.Module):\n    def forward(self, s, m):\n"
            "        return T.where(m, s, T.finfo(T.float32).min)\n",
        ),
    ],
)
def test_the_prefilter_follows_torch_aliases(rule_id, source):
    options = CheckOptions(tuple(all_rules().values()), ProjectFacts())
    on = check_source("example.py", source.encode(), options)
    off = check_source("example.py", source.encode(), CheckOptions(options.rules, options.facts, prefilter=False))
    assert rule_id in {d.rule_id for d in on.diagnostics}
    assert sorted((d.rule_id, d.line, d.column) for d in on.diagnostics) == sorted(
        (d.rule_id, d.line, d.column) for d in off.diagnostics
    )


def test_the_families_stay_apart_on_the_fixtures(tmp_path):
    copy_tree(REPO / "fixtures", tmp_path / "fixtures")
    report = run(RunOptions([tmp_path / "fixtures"], cache=False, jobs=1, select=["MP"]))
    torch_files = {d.path for d in report.diagnostics if d.rule_id.startswith("MPT")}
    keras_files = {d.path for d in report.diagnostics if not d.rule_id.startswith("MPT") and d.rule_id[2] != "0"}
    # the PyTorch projects and verify scripts (CPU and CUDA)
    torch_fixtures = ("fixtures/torch/", "fixtures/verify/torch_", "fixtures/verify/cuda_")
    assert torch_files and all(any(t in p for t in torch_fixtures) for p in torch_files)
    assert keras_files and not any(any(t in p for t in torch_fixtures) for p in keras_files)


def test_the_torch_fixtures_report_exactly():
    def found(name: str) -> list[tuple[str, int, int, str]]:
        source = (REPO / "fixtures" / "torch" / name).read_text()
        result = lint_code(source, path=name, select=["MPT"], files={"requirements.txt": "torch>=2.4\n"})
        return [(d.rule_id, d.line, d.column, d.fix_safety.value) for d in result.diagnostics]

    assert found("classifier.py") == [
        ("MPT301", 14, 50, "unsafe"),  # Linear(784, 300): rounded with the next layer's input
        ("MPT301", 14, 82, "unsafe"),  # HIDDEN = 100 is only ever a layer size: the constant is rounded
        ("MPT502", 23, 10, "safe"),
        ("MPT205", 32, 13, "safe"),
        ("MPT204", 33, 9, "safe"),  # with MPT202 routing the step through the scaler in the same --fix
        ("MPT202", 34, 9, "safe"),
    ]
    assert found("apex_o1.py") == [("MPT501", 10, 20, "unsafe")]  # one finding per apex site
    assert found("attention.py") == [("MPT601", 20, 62, "safe")]


def test_one_apex_site_is_one_finding_with_the_other_uses_related():
    code = (
        'import torch\nfrom apex import amp\n\nmodel, optimizer = amp.initialize(model, optimizer, opt_level="O1")\n'
        "loss = model(x).sum()\nwith amp.scale_loss(loss, optimizer) as scaled_loss:\n    scaled_loss.backward()\n"
        "torch.nn.utils.clip_grad_norm_(amp.master_params(optimizer), 1.0)\noptimizer.step()\n"
    )
    found = lint_code(code, select=["MPT501"]).diagnostics
    assert [(d.rule_id, d.line, d.column, d.fix_safety.value) for d in found] == [("MPT501", 4, 20, "unsafe")]
    assert [(r.line, r.message.split(":")[0]) for r in found[0].related] == [
        (2, "apex's AMP is deprecated (apex warns since October 2022 and removed it in May 2025)"),
        (6, "`with amp.scale_loss(loss, optimizer) as scaled_loss"),
        (8, "`amp.master_params(optimizer)` -> the model's `parameters()`, after `scaler.unscale_(optimizer)`"),
    ]
    # a module that only backs up through apex (its initialize lives elsewhere): one finding at its first use
    helper = (
        "from apex import amp\n\ndef backward(loss, optimizer):\n    with amp.scale_loss(loss, optimizer) as scaled:\n"
        "        scaled.backward()\n"
    )
    found = lint_code("import torch\n" + helper, select=["MPT501"]).diagnostics
    assert [(d.line, d.column) for d in found] == [(5, 10)]
    assert [r.line for r in found[0].related] == [2]


APEX_TRAINING = """import torch
from apex import amp

model, optimizer = amp.initialize(model, optimizer, opt_level="O2")
loss = model(x).sum()
with amp.scale_loss(loss, optimizer) as scaled_loss:
    scaled_loss.backward()
optimizer.step()
"""
APEX_STATUS = "apex warns since October 2022 and removed it in May 2025"


@pytest.mark.parametrize(
    "pins, autocast, scaler, target",
    [
        ({}, "torch.cuda.amp.autocast()", "torch.cuda.amp.GradScaler()", "any torch >= 1.6: no torch pin"),
        (
            {"requirements.txt": "torch>=1.10,<2.3\n"},
            'torch.autocast("cuda")',  # from 1.10
            "torch.cuda.amp.GradScaler()",  # torch.amp.GradScaler only from 2.3
            "torch 1.10-2.2, from requirements.txt pins torch<2.3,>=1.10",
        ),
        (
            {"requirements.txt": "torch>=2.3\n"},
            'torch.autocast("cuda")',
            'torch.amp.GradScaler("cuda")',
            "torch >= 2.3, from requirements.txt pins torch>=2.3",
        ),
    ],
)
def test_mpt501_spells_the_native_api_for_every_torch_of_the_target(pins, autocast, scaler, target):
    """The replacement exists on every torch the target admits, and the message names that range and its evidence."""
    found = lint_code(APEX_TRAINING, files=pins or None, select=["MPT501"]).diagnostics
    assert [(d.rule_id, d.line, d.column, d.message) for d in found] == [
        (
            "MPT501",
            4,
            20,
            '`amp.initialize(..., opt_level="O2")` is apex\'s deprecated AMP: keep model and optimizer, create '
            f"`scaler = {scaler}`, run the forward and loss under `{autocast}` (target {target})",
        )
    ]
    assert [r.message for r in found[0].related][:1] == [
        f"apex's AMP is deprecated ({APEX_STATUS}): use `{autocast}` and `{scaler}`"
    ]


def test_mpt501_inference_only_apex_needs_no_scaler():
    """A module that never calls backward() uses apex's AMP to cast for inference: autocast alone replaces it."""
    code = (
        "import torch\nfrom apex import amp\n\nmodel = amp.initialize(torch.load('m.pt').cuda(), opt_level='O2')\n"
        "with torch.no_grad():\n    print(model(torch.randn(2, 8, device='cuda')))\n"
    )
    found = lint_code(code, files={"requirements.txt": "torch>=2.4\n"}, select=["MPT501"]).diagnostics
    assert [(d.rule_id, d.line, d.column, d.message) for d in found] == [
        (
            "MPT501",
            4,
            9,
            '`amp.initialize(..., opt_level="O2")` is apex\'s deprecated AMP, and this module never trains the model '
            '(no optimizer, no `backward()`): drop it and run the forward under `torch.autocast("cuda")` (or '
            "`model.half()`, as it casts the model), which needs no GradScaler (target torch >= 2.4, from "
            "requirements.txt pins torch>=2.4); no automatic fix: `amp.initialize` is not `model, optimizer = "
            "amp.initialize(model, optimizer, ...)`",
        )
    ]
    assert [r.message for r in found[0].related] == [
        f'apex\'s AMP is deprecated ({APEX_STATUS}): use `torch.autocast("cuda")`'
    ]
    # An optimizer handed to amp.initialize is trained, by a backward in another module if not in this one.
    trained = code.replace("model = amp.initialize(", "model, optimizer = amp.initialize(").replace(
        "cuda(), opt_level", "cuda(), optimizer, opt_level"
    )
    found = lint_code(trained, files={"requirements.txt": "torch>=2.4\n"}, select=["MPT501"]).diagnostics
    assert [(d.line, d.message.split(" (target")[0]) for d in found] == [
        (
            4,
            '`amp.initialize(..., opt_level="O2")` is apex\'s deprecated AMP: keep model and optimizer, create '
            '`scaler = torch.amp.GradScaler("cuda")`, run the forward and loss under `torch.autocast("cuda")`',
        )
    ]


CLIP_THEN_BYPASSED_STEP = """import torch

scaler = torch.cuda.amp.GradScaler()


def train(model, optimizer, loader):
    for x, y in loader:
        with torch.autocast("cuda"):
            loss = model(x, y)
        scaler.scale(loss).backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
"""


def test_the_unscale_before_a_clip_builds_on_the_step_routed_through_the_scaler():
    """MPT204 inserts ``unscale_`` only for a step that goes through the scaler; MPT202's fix of the same --fix
    routes the bypassed ``optimizer.step()`` there, so with both rules the check already counts it as fixable
    and one round fixes both. With MPT204 alone an unscale without ``scaler.step``/``update`` would raise on the
    next iteration: no fix."""
    alone = lint_code(CLIP_THEN_BYPASSED_STEP, select=["MPT204"], files={"requirements.txt": "torch>=2.4\n"})
    assert [(d.rule_id, d.line, d.fix_safety.value) for d in alone.diagnostics] == [("MPT204", 11, "none")]
    both = lint_code(CLIP_THEN_BYPASSED_STEP, select=["MPT202", "MPT204"], files={"requirements.txt": "torch>=2.4\n"})
    assert [(d.rule_id, d.line, d.fix_safety.value) for d in both.diagnostics] == [
        ("MPT204", 11, "safe"),
        ("MPT202", 12, "safe"),
    ]
    fixed = lint_code(
        CLIP_THEN_BYPASSED_STEP, select=["MPT202", "MPT204"], files={"requirements.txt": "torch>=2.4\n"}, fix=True
    )
    assert fixed.fixed_code == CLIP_THEN_BYPASSED_STEP.replace(
        "        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)\n        optimizer.step()\n",
        "        scaler.unscale_(optimizer)\n        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)\n"
        "        scaler.step(optimizer)\n        scaler.update()\n",
    )
    assert fixed.diagnostics == []


# --- a loss module's name resolves in its own function ----------------------------------------------

_EVALUATE_AND_MAIN = """import torch
import torch.nn as nn


def evaluate(model, loader):
    loss_fn = nn.BCELoss()
    with torch.no_grad():
        return sum(loss_fn(torch.sigmoid(model(x)), y).item() for x, y in loader)


def main(model, loader, optimizer):
    loss_fn = nn.BCEWithLogitsLoss()
    scaler = torch.amp.GradScaler("cuda")
    for x, y in loader:
        with torch.autocast("cuda"):
            loss = loss_fn(model(x), y)
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()


if __name__ == "__main__":
    main(None, [], None)
"""

_TWO_MODULES_ONE_ATTRIBUTE = """import torch
import torch.nn as nn


class Discriminator(nn.Module):
    def __init__(self):
        super().__init__()
        self.loss_fn = nn.BCELoss()

    def training_step(self, x, y):
        with torch.autocast("cuda"):
            return self.loss_fn(torch.sigmoid(self.net(x)), y)


class Generator(nn.Module):
    def __init__(self):
        super().__init__()
        self.loss_fn = nn.BCEWithLogitsLoss()

    def training_step(self, x, y):
        with torch.autocast("cuda"):
            return self.loss_fn(self.net(x), y)
"""


def test_a_loss_bound_in_another_function_is_not_the_one_called_under_autocast():
    """``loss_fn = nn.BCELoss()`` of ``evaluate()`` is not the ``loss_fn`` that ``main()`` binds to
    ``BCEWithLogitsLoss`` and calls under autocast."""
    assert lint_code(_EVALUATE_AND_MAIN, select=["MPT103", "MPT104"]).diagnostics == []
    # the same name bound once at the top of the module is the one every function reads
    shared = _EVALUATE_AND_MAIN.replace("    loss_fn = nn.BCELoss()\n", "").replace(
        "    loss_fn = nn.BCEWithLogitsLoss()\n", ""
    )
    shared = shared.replace("import torch.nn as nn\n", "import torch.nn as nn\n\nloss_fn = nn.BCELoss()\n")
    found = lint_code(shared, select=["MPT104"]).diagnostics
    assert [(d.rule_id, d.line, d.column, d.message) for d in found] == [
        (
            "MPT104",
            16,
            20,
            "`loss_fn` runs in a CUDA autocast region and raises RuntimeError whatever its inputs' dtype: PyTorch "
            "bans binary cross-entropy under CUDA autocast (its backward can make gradients float16 cannot hold); "
            "give the logits to `binary_cross_entropy_with_logits` (`BCEWithLogitsLoss`) instead of probabilities",
        )
    ]


def test_self_attributes_resolve_in_their_own_class():
    found = lint_code(_TWO_MODULES_ONE_ATTRIBUTE, select=["MPT104"]).diagnostics
    assert [(d.rule_id, d.line, d.column) for d in found] == [("MPT104", 12, 20)]


# --- an apex import nothing uses is dead code ---------------------------------------------------------

_APEX_MONOREPO = {
    "maskrcnn/engine/trainer.py": "import torch\nfrom apex import amp\n\n\ndef do_train(model, loader):\n"
    "    for images, targets in loader:\n        model(images, targets)\n",
    "maskrcnn/layers/nms.py": "import torch\nfrom apex import amp\n\nfrom maskrcnn import _C\n\n"
    "nms = amp.float_function(_C.nms)\n",
    "tools/train_mlperf.py": "import torch\n\ntry:\n    from apex import amp\nexcept ImportError:\n"
    '    raise ImportError("Use APEX for multi-precision via apex.amp")\n\nfrom apex.parallel import '
    "DistributedDataParallel\n\n\ndef main(model):\n    return DistributedDataParallel(model)\n",
    "nhwc/cifar10_nhwc.py": "import torch\nfrom apex.fp16_utils import *\n\n\ndef build(net, optimizer):\n"
    "    net = network_to_half(net.cuda())\n    return net, FP16_Optimizer(optimizer, static_loss_scale=128.0)\n",
    "nhwc/mnist_nhwc.py": "import torch\nfrom apex.fp16_utils import *\n\n\ndef build(net):\n    return net.cuda()\n",
    "gnmt/train/fp_optimizers.py": "import torch\nimport apex.amp._amp_state\nfrom apex import amp, optimizers\n\n\n"
    "def build(params):\n    return optimizers.FusedAdam(params)\n",
}


def test_an_apex_import_nothing_uses_is_silent_and_a_use_the_migration_does_not_know_is_the_site(tmp_path):
    """The layout of a container monorepo's MaskRCNN, SSD and GNMT folders: apex imported in modules that never use
    it (a leftover, a ``try:`` that only checks apex is installed, ``amp`` beside the ``optimizers`` the module does
    use) is dead code, since apex's deprecation is in what runs; ``amp.float_function(...)`` and
    ``network_to_half`` through a star import are uses: the finding is there."""
    for path, text in _APEX_MONOREPO.items():
        (tmp_path / path).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / path).write_text(text)
    report = run(RunOptions(paths=[tmp_path], select=["MPT501"], cache=False, jobs=1))
    found = sorted(
        (Path(d.path).relative_to(tmp_path).as_posix(), d.line, d.column, d.message) for d in report.remaining
    )
    deprecated = "deprecated (apex warns since October 2022 and removed it in May 2025)"
    assert found == [
        (
            "maskrcnn/layers/nms.py",
            6,
            7,
            f"`amp.float_function` is part of apex's AMP, {deprecated}: use `torch.cuda.amp.autocast()` "
            "(target any torch >= 1.6: no torch pin)",
        ),
        (
            "nhwc/cifar10_nhwc.py",
            6,
            11,
            f"`network_to_half` of `apex.fp16_utils` is {deprecated}: keep the model float32 and run the forward "
            "under `torch.cuda.amp.autocast()` (or `model.half()`) (target any torch >= 1.6: no torch pin)",
        ),
    ]
    (nms,) = [d for d in report.remaining if d.path.endswith("nms.py")]
    assert [(r.line, r.message) for r in nms.related] == [
        (2, f"apex's AMP is {deprecated}: use `torch.cuda.amp.autocast()`")
    ]


def test_an_additive_mask_built_from_itself_is_reported_without_a_fix():
    # fairseq's layer: attn_mask may be bool (finfo raises) and float16's own limit added to float16 scores is -inf
    code = (
        "import torch\n\n\nclass Layer(torch.nn.Module):\n    def forward(self, x, attn_mask):\n"
        "        if attn_mask is not None:\n"
        "            attn_mask = attn_mask.masked_fill(attn_mask.to(torch.bool), -1e8)\n"
        "        return x + attn_mask\n"
    )
    found = lint_code(code, select=["MPT601"], files={"requirements.txt": "torch>=2.4\n"}).diagnostics
    assert [(d.rule_id, d.line, d.column, d.fix_safety.value) for d in found] == [("MPT601", 7, 73, "none")]
    assert found[0].message == (
        "`-1e8` is outside float16's range (largest finite value 65504) and `attn_mask` is float16 whenever the "
        "module runs under float16 autocast or `.half()`: masked_fill raises 'value cannot be converted to type "
        "at::Half without overflow', arithmetic gives inf and NaN; this builds an additive mask from itself, which "
        "may be bool and whose float16 limit added to float16 scores is -inf: bound it by the scores' dtype (-1e4 in "
        "float16); no automatic fix"
    )
