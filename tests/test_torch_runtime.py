"""mplint.runtime for PyTorch, executed on CPU with torch 2.13 and with older torch API spellings simulated.

An older torch is simulated by its version (``torch.__version__``) and by the missing names (``torch.amp.autocast``
before 1.12, ``torch.autocast`` before 1.10, ``torch.amp.GradScaler`` before 2.3, as mplint.knowledge dates them):
either alone must choose the older spelling. CPU autocast runs the torch 2.13 and the simulated 1.11 spellings;
the CUDA-only ``torch.cuda.amp`` spellings of 1.6-1.9 are constructed, not run. A machine without CUDA is simulated
where a test needs one (``torch.cuda.is_available`` patched); the documented example also runs on CUDA where the
machine has it.
"""

from __future__ import annotations

import logging
import re
import subprocess
import sys
import warnings

import pytest

torch = pytest.importorskip(
    "torch",
    reason="torch is not installed: these tests execute mplint.runtime with PyTorch on CPU (see docs/install.md)",
)

from conftest import devices  # noqa: E402
from torch import nn  # noqa: E402
from torch.nn import functional as F  # noqa: E402

from mplint.runtime import torch_precision  # noqa: E402
from mplint.runtime.policy import Hardware  # noqa: E402
from mplint.runtime.torch_precision import Scaler, Spelling, TorchPrecision, check_model, choose  # noqa: E402

pytestmark = pytest.mark.torch
DEVICES = devices(torch)

CPU_FLOAT32 = "no CUDA GPU: float32 on CPU unless asked (reduced precision is rarely faster there)"
NEW = Spelling("torch.amp.autocast", "torch.amp.GradScaler")


def simulate(monkeypatch, version: str | None, *missing: str) -> None:
    if version is not None:
        monkeypatch.setattr(torch, "__version__", version)
    for name in missing:
        owner, attribute = name.rsplit(".", 1)
        monkeypatch.delattr(torch.amp if owner == "torch.amp" else torch, attribute)


OLDER = {  # torch version -> the names it lacks
    "1.9.0": ("torch.amp.autocast", "torch.autocast", "torch.amp.GradScaler"),
    "1.11.0": ("torch.amp.autocast", "torch.amp.GradScaler"),
    "2.2.1": ("torch.amp.GradScaler",),
}


@pytest.fixture
def gpu(monkeypatch):
    """Pretend the CUDA device is this GPU (choose() only reads it; nothing runs on it)."""

    def use(name: str, capability: tuple[int, int]) -> None:
        monkeypatch.setattr(
            torch_precision, "detect_hardware", lambda torch, device_type: Hardware("GPU", name, capability)
        )

    return use


def test_mplint_runtime_imports_without_torch():
    code = (
        "import sys; sys.modules['torch'] = None\n"
        "import mplint.runtime, mplint.runtime.torch_precision\n"
        "print(sorted(mplint.runtime.torch_precision.__all__))"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert result.stdout == "['Scaler', 'Spelling', 'TorchPrecision', 'check_model', 'choose']\n"


def test_choose_auto_without_cuda_is_float32_on_cpu_with_the_reason_logged(caplog, monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)  # a machine without CUDA
    with caplog.at_level(logging.INFO, logger="mplint.runtime"):
        precision = choose()
    assert (precision.dtype, precision.device_type, precision.reason) == ("float32", "cpu", CPU_FLOAT32)
    assert precision.spelling == NEW and precision.torch_version == "2.13.0"
    assert [(f.rule_id, f.message) for f in precision.findings] == [
        ("MP801", f"float16/bfloat16 autocast not enabled: {CPU_FLOAT32}")
    ]
    assert [(r.levelname, r.getMessage()) for r in caplog.records] == [
        ("WARNING", f"MP801 float16/bfloat16 autocast not enabled: {CPU_FLOAT32}"),
        ("INFO", f"mplint.runtime: torch float32 on cpu ({CPU_FLOAT32})"),
    ]
    assert precision.grad_scaler() is None and not precision.scaling


def test_choose_auto_with_cuda_picks_the_gpu(gpu, monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    gpu("NVIDIA H200", (9, 0))
    precision = choose()
    assert (precision.device_type, precision.dtype, precision.reason) == (
        "cuda",
        "bfloat16",
        "NVIDIA H200 (compute capability 9.0) computes in bfloat16: float32's range, no loss scaling",
    )


def test_choose_explicit_on_cpu():
    bfloat16 = choose("bfloat16", device="cpu")
    assert (bfloat16.dtype, bfloat16.reason, bfloat16.findings) == ("bfloat16", "requested", ())
    float16 = choose("float16", device="cpu")
    assert (float16.dtype, float16.reason) == ("float16", "requested")
    assert [(f.rule_id, f.message) for f in float16.findings] == [
        ("MP801", "float16 autocast on CPU without Tensor Cores: expect no speed-up")
    ]
    with pytest.raises(ValueError, match="dtype must be one of auto, float32, float16, bfloat16, not 'half'"):
        choose("half")


@pytest.mark.parametrize(
    ("name", "capability", "dtype", "reason"),
    [
        (
            "NVIDIA H100",
            (9, 0),
            "bfloat16",
            "NVIDIA H100 (compute capability 9.0) computes in bfloat16: float32's range, no loss scaling",
        ),
        (
            "NVIDIA A100",
            (8, 0),
            "bfloat16",
            "NVIDIA A100 (compute capability 8.0) computes in bfloat16: float32's range, no loss scaling",
        ),
        (
            "Tesla V100",
            (7, 0),
            "float16",
            "Tesla V100 (compute capability 7.0) has Tensor Cores and no bfloat16: float16 with loss scaling",
        ),
        ("Tesla P100", (6, 0), "float32", "Tesla P100 (compute capability 6.0) has no Tensor Cores (needs 7.0)"),
    ],
)
def test_choose_auto_on_gpus(gpu, name, capability, dtype, reason):
    gpu(name, capability)
    precision = choose(device="cuda")
    assert (precision.dtype, precision.reason, precision.scaling) == (dtype, reason, dtype == "float16")
    assert [f.rule_id for f in precision.findings] == (["MP801"] if dtype == "float32" else [])


def test_choose_auto_on_an_a100_with_torch_1_9_is_float16(gpu, monkeypatch):
    gpu("NVIDIA A100", (8, 0))
    simulate(monkeypatch, "1.9.0", *OLDER["1.9.0"])
    precision = choose(device="cuda")
    assert (precision.dtype, precision.reason) == (
        "float16",
        "NVIDIA A100 (compute capability 8.0) has Tensor Cores and no bfloat16 autocast before torch 1.10: "
        "float16 with loss scaling",
    )


@pytest.mark.parametrize("how", ["version", "names", "both"])
@pytest.mark.parametrize(
    ("version", "cpu", "cuda"),
    [
        ("1.9.0", Spelling(None, None), Spelling("torch.cuda.amp.autocast", "torch.cuda.amp.GradScaler")),
        ("1.11.0", Spelling("torch.autocast", None), Spelling("torch.autocast", "torch.cuda.amp.GradScaler")),
        ("2.2.1", Spelling("torch.amp.autocast", None), Spelling("torch.amp.autocast", "torch.cuda.amp.GradScaler")),
    ],
)
def test_spelling_of_older_torch_by_version_or_by_missing_names(monkeypatch, how, version, cpu, cuda):
    assert (torch_precision.spelling(torch, "cpu"), torch_precision.spelling(torch, "cuda")) == (NEW, NEW)
    simulate(monkeypatch, version if how != "names" else None, *(OLDER[version] if how != "version" else ()))
    assert (torch_precision.spelling(torch, "cpu"), torch_precision.spelling(torch, "cuda")) == (cpu, cuda)


@pytest.mark.parametrize(
    ("version", "dtype", "reason"),
    [
        ("1.9.0", "bfloat16", "bfloat16 asked, but torch 1.9.0 has no autocast for cpu (torch.autocast came in 1.10)"),
        ("1.9.0", "float16", "float16 asked, but torch 1.9.0 has no autocast for cpu (torch.autocast came in 1.10)"),
        (
            "2.2.1",
            "float16",
            "float16 asked, but torch 2.2.1 has no GradScaler for cpu (torch.amp.GradScaler(device) came in 2.3)",
        ),
    ],
)
def test_explicit_dtype_this_torch_cannot_run_on_cpu_falls_back_to_float32(monkeypatch, caplog, version, dtype, reason):
    simulate(monkeypatch, version, *OLDER[version])
    with caplog.at_level(logging.WARNING, logger="mplint.runtime"):
        precision = choose(dtype, device="cpu")
    assert (precision.dtype, precision.reason) == ("float32", reason)
    assert [r.getMessage() for r in caplog.records] == [f"mplint.runtime: {reason}"]


def test_cuda_spellings_are_the_objects_made(gpu, monkeypatch):
    """torch 2.13: torch.amp.autocast("cuda") and torch.amp.GradScaler("cuda"); a simulated 1.9: torch.cuda.amp's."""
    gpu("Tesla V100", (7, 0))
    warnings.simplefilter("ignore")  # CUDA is not available here: both disable themselves, saying so
    new = choose(device="cuda")
    assert type(new.autocast()) is torch.amp.autocast and new.autocast().device == "cuda"
    assert type(new.grad_scaler()) is torch.amp.GradScaler and new.grad_scaler()._device == "cuda"
    simulate(monkeypatch, "1.9.0", *OLDER["1.9.0"])
    old = choose(device="cuda")
    assert (old.dtype, old.spelling) == ("float16", Spelling("torch.cuda.amp.autocast", "torch.cuda.amp.GradScaler"))
    assert type(old.autocast()) is torch.cuda.amp.autocast
    assert type(old.grad_scaler(init_scale=1024.0)) is torch.cuda.amp.GradScaler


@pytest.mark.parametrize("version", [None, "1.11.0"], ids=["torch.amp.autocast", "torch.autocast"])
def test_cpu_autocast_computes_in_the_dtype_chosen(monkeypatch, version):
    if version:
        simulate(monkeypatch, version, *OLDER[version])
    precision = choose("bfloat16", device="cpu")
    assert precision.spelling.autocast == ("torch.autocast" if version else "torch.amp.autocast")
    layer = nn.Linear(4, 8)
    with precision.autocast():
        out = layer(torch.ones(2, 4))
    assert out.dtype == torch.bfloat16 and layer.weight.dtype == torch.float32
    with choose("float32", device="cpu").autocast():
        assert layer(torch.ones(2, 4)).dtype == torch.float32


# --- Scaler: one loop for every dtype, the update a float32 step makes ---


def _model():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4))


def _batch(n=8):
    generator = torch.Generator().manual_seed(1)
    return torch.randn(n, 8, generator=generator), torch.randn(n, 4, generator=generator) * 3


def _float32_update(max_norm=None):
    model = _model()
    before = [p.detach().clone() for p in model.parameters()]
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    x, y = _batch()
    F.mse_loss(model(x), y).backward()
    if max_norm is not None:
        assert float(nn.utils.clip_grad_norm_(model.parameters(), max_norm)) > 10 * max_norm  # the clip acts
    optimizer.step()
    return [p.detach() - b for p, b in zip(model.parameters(), before)]


def _relative_error(update, expected) -> float:
    """|update - expected| / |expected| over every parameter: the whole step, not its tiniest elements."""
    difference = sum(float((u - e).square().sum()) for u, e in zip(update, expected)) ** 0.5
    return difference / sum(float(e.square().sum()) for e in expected) ** 0.5


def _runtime_update(precision, max_norm=None, accumulation_steps=1):
    model = _model()
    before = [p.detach().clone() for p in model.parameters()]
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    scaler = precision.scaler(accumulation_steps=accumulation_steps)
    x, y = _batch()
    stepped, due, scales = [], [], []
    for xb, yb in zip(x.chunk(accumulation_steps), y.chunk(accumulation_steps)):
        with precision.autocast():
            loss = F.mse_loss(model(xb).float(), yb)
        due.append(scaler.backward(loss))
        scales.append(scaler.scale)
        stepped.append(scaler.step(optimizer, max_norm=max_norm))
    assert all(p.grad is None for p in model.parameters())  # zero_grad after the step
    return [p.detach() - b for p, b in zip(model.parameters(), before)], scaler, (stepped, due, scales)


@pytest.mark.quick  # torch installed and training: in the one-minute subset
@pytest.mark.parametrize(
    ("dtype", "version", "tolerance"),
    [
        ("float16", None, 3e-3),
        ("bfloat16", None, 2e-2),
        ("bfloat16", "1.11.0", 2e-2),
        ("float32", "1.9.0", 0.0),
    ],
    ids=["float16-torch.amp", "bfloat16-torch.amp", "bfloat16-torch.autocast", "float32-torch1.9"],
)
def test_scaler_step_with_clipping_is_the_float32_update(monkeypatch, dtype, version, tolerance):
    """Unscaled before the clip: a clip on float16-scaled gradients would make the update 65536x too small."""
    if version:
        simulate(monkeypatch, version, *OLDER[version])
    precision = choose(dtype, device="cpu")
    assert precision.dtype == dtype
    expected = _float32_update(max_norm=0.05)
    update, scaler, (stepped, _, scales) = _runtime_update(precision, max_norm=0.05)
    assert (stepped, scaler.steps, scaler.skipped) == ([True], 1, 0)
    assert scales == [65536.0 if dtype == "float16" else 1.0]
    assert _relative_error(update, expected) <= tolerance
    if dtype == "float32":
        assert all(torch.equal(got, want) for got, want in zip(update, expected))  # the wrapper adds nothing


@pytest.mark.parametrize("dtype", ["float16", "float32"])
def test_scaler_accumulates_micro_batches_into_one_step(dtype):
    precision = choose(dtype, device="cpu")
    expected = _float32_update()
    update, scaler, (stepped, due, scales) = _runtime_update(precision, accumulation_steps=4)
    assert (stepped, due) == ([False, False, False, True], [False, False, False, True])
    assert scales == [65536.0 if dtype == "float16" else 1.0] * 4  # the scale is not updated between micro-batches
    assert (scaler.steps, scaler.skipped) == (1, 0)
    assert _relative_error(update, expected) <= (3e-3 if dtype == "float16" else 1e-6)


def test_scaler_skips_a_step_with_inf_gradients_and_halves_the_scale():
    precision = choose("float16", device="cpu")
    model = _model()
    before = [p.detach().clone() for p in model.parameters()]
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    scaler = precision.scaler()
    x, _ = _batch()
    with precision.autocast():
        loss = model(x).float().sum() * float("inf")
    scaler.backward(loss)
    assert scaler.step(optimizer, max_norm=1.0) is False
    assert (scaler.steps, scaler.skipped, scaler.scale) == (0, 1, 32768.0)
    assert all(torch.equal(p, b) for p, b in zip(model.parameters(), before))
    assert scaler.state_dict()["skipped"] == 1


def test_scaler_rejects_no_optimizer_and_bad_accumulation():
    with pytest.raises(ValueError, match="accumulation_steps must be at least 1, not 0"):
        Scaler(accumulation_steps=0)
    with pytest.raises(TypeError, match=r"step\(\) needs at least one optimizer"):
        Scaler().step()


# --- check_model: real tensors under autocast ---


class MaskScores(nn.Module):
    def forward(self, h, mask):
        return h + (1.0 - mask.to(h.dtype))[..., None] * -1e9  # the float16 mask overflows to -inf


class Tagger(nn.Module):
    def __init__(self, float32_output=False, fixed=False):
        super().__init__()
        width = 40 if fixed else 36
        self.embed = nn.Embedding(50, 24 if fixed else 20)
        self.hidden = nn.Linear(self.embed.embedding_dim, width)
        self.mask = MaskScores()
        self.head = nn.Linear(width, 10)  # the class count: never MP807
        self.float32_output, self.fixed = float32_output, fixed

    def forward(self, tokens, mask):
        h = torch.relu(self.hidden(self.embed(tokens)))
        if not self.fixed:
            h = self.mask(h, mask)
        eps = torch.finfo(h.dtype).eps if self.fixed else 1e-8
        logits = self.head(torch.log(h.clamp(min=0) + eps))
        return logits.float() if self.float32_output else logits


def _tokens():
    return torch.randint(0, 50, (2, 6), generator=torch.Generator().manual_seed(0)), torch.ones(2, 6)


def test_check_model_reports_outputs_sizes_and_constants_under_float16():
    lines = [f"{f.rule_id} {f.layer}: {f.message}" for f in check_model(Tagger(), *_tokens())]
    assert lines == [
        "MP806 head: model output is float16",
        "MP807 embed: Embedding embedding_dim 20 not a multiple of 8: no Tensor Cores under float16",
        "MP807 hidden: Linear out_features 36 not a multiple of 8: no Tensor Cores under float16",
        "MPT601 mask: `mul` with -1e+09 on a float16 tensor: -1e+09 overflows float16 (largest 65504): "
        "use torch.finfo(x.dtype).min/max",
        "MPT601 Tagger: `add` with 1e-08 on a float16 tensor: 1e-08 is 0 in float16: use an epsilon of the tensor's "
        "dtype (torch.finfo(x.dtype).eps)",
    ]


def test_check_model_before_torch_2_reports_all_but_the_constants(monkeypatch):
    simulate(monkeypatch, "1.12.1", "torch.amp.GradScaler")
    model = Tagger()
    float16 = TorchPrecision(
        "float16", "cpu", "requested", Hardware("CPU", "CPU"), Spelling("torch.amp.autocast", None), "1.12.1"
    )
    found = [(f.rule_id, f.layer) for f in check_model(model, *_tokens(), precision=float16)]
    assert found == [("MP806", "head"), ("MP807", "embed"), ("MP807", "hidden")]  # the -1e9 and 1e-8 not seen
    assert all(not m._forward_hooks and not m._forward_pre_hooks for m in model.modules())  # removed again


def test_check_model_clean_model_and_bfloat16():
    assert check_model(Tagger(float32_output=True, fixed=True), *_tokens()) == []
    found = [
        (f.rule_id, f.layer) for f in check_model(Tagger(), *_tokens(), precision=choose("bfloat16", device="cpu"))
    ]
    assert found == [("MP806", "head"), ("MP807", "embed"), ("MP807", "hidden")]  # bfloat16 holds -1e9 and 1e-8


def test_check_model_masked_fill_that_raises_and_half_parameters():
    class Attention(nn.Module):
        def __init__(self):
            super().__init__()
            self.query = nn.Linear(16, 16)

        def forward(self, x):
            scores = self.query(x) @ x.transpose(-1, -2)
            return scores.masked_fill(torch.eye(x.shape[1], dtype=torch.bool), -1e9).softmax(-1)

    model = Attention()
    lines = [f"{f.rule_id} {f.layer}: {f.message}" for f in check_model(model, torch.randn(2, 4, 16))]
    assert lines == [
        "MPT601 Attention: `masked_fill` with -1e+09 on a float16 tensor: -1e+09 overflows float16 "
        "(largest 65504): use torch.finfo(x.dtype).min/max (raises: value cannot be converted to type "
        "c10::Half without overflow)"
    ]
    half = [(f.rule_id, f.layer) for f in check_model(nn.Linear(16, 16).half(), torch.randn(2, 16).half())]
    assert half == [("MP806", "Linear"), ("MPT101", "weight"), ("MPT101", "bias")]


def _documented_example() -> tuple[str, str]:
    """The PyTorch example of docs/runtime.md and the output the page shows."""
    from conftest import REPO

    page = (REPO / "docs" / "runtime.md").read_text().split("## PyTorch", 1)[1]
    fences = re.findall(r"```(python|console)\n(.*?)```", page, re.DOTALL)
    found = {kind: text for kind, text in fences}
    return found["python"], found["console"]


def run_documented_example() -> str:
    """What the example prints."""
    import contextlib
    import io

    code, _ = _documented_example()
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        exec(compile(code, "docs/runtime.md", "exec"), {"__name__": "__main__"})
    return printed.getvalue()


@pytest.mark.parametrize("device", DEVICES)
def test_the_documented_pytorch_example_prints_what_the_page_shows(device, monkeypatch):
    """Without CUDA, exactly what the page shows; on CUDA, the dtype the GPU computes in, trained on it."""
    if device == "cpu":
        monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
        assert run_documented_example() == _documented_example()[1]
        return
    first, *findings, steps = run_documented_example().splitlines()
    name = torch.cuda.get_device_name()
    major, minor = torch.cuda.get_device_capability()
    expected = choose()
    dtype = "bfloat16" if major >= 8 else "float16" if major == 7 else "float32"
    assert (expected.device_type, expected.dtype) == ("cuda", dtype)
    assert first == f"{expected.dtype} - {expected.reason}" and name in expected.reason and f"{major}.{minor}" in first
    assert findings == ["MP806 2 model output is float16"] and steps == "2 steps"


def test_check_model_every_output_head_is_a_class_count():
    class TwoHeads(nn.Module):
        def __init__(self):
            super().__init__()
            self.trunk = nn.Linear(16, 20)
            self.classes = nn.Linear(20, 10)
            self.boxes = nn.Linear(20, 12)

        def forward(self, x):
            h = self.trunk(x).relu()
            return {"classes": self.classes(h), "boxes": self.boxes(h).float()}

    lines = [f"{f.rule_id} {f.layer}: {f.message}" for f in check_model(TwoHeads(), torch.randn(2, 16))]
    assert lines == [
        "MP806 classes: model output is float16",
        "MP807 trunk: Linear out_features 20 not a multiple of 8: no Tensor Cores under float16",
    ]
