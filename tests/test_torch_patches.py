"""MPT502 in programs that import a package which replaces torch names on import (Intel Extension for PyTorch):
``torch.cpu.amp.GradScaler`` is then IPEX's own class, and ``torch.cpu.amp.autocast`` on torch < 2.2 IPEX's autocast,
which takes float16 where torch's own CPU autocast turns it off."""

from __future__ import annotations

import json

from mplint.knowledge.torch_patches import IPEX, PATCHES
from mplint.project.build import project_facts
from mplint.project.cache import _module_facts_from_json, _module_facts_to_json
from mplint.testing import lint_code

# The entry point imports IPEX only under a flag, inside a function; the helper module it calls never does.
MAIN = """import argparse

from train import train


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--ipex", action="store_true")
    parser.add_argument("--fp16", action="store_true")
    args = parser.parse_args()
    if args.ipex:
        import intel_extension_for_pytorch as ipex
    train(args)


if __name__ == "__main__":
    main()
"""

TRAIN = """import torch


def train(args):
    model = torch.nn.Linear(4, 4)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    scaler = torch.cpu.amp.GradScaler()
    x = torch.randn(2, 4)
    with torch.cpu.amp.autocast(enabled=args.fp16, dtype=torch.half if args.fp16 else torch.bfloat16):
        loss = model(x).sum()
    scaler.scale(loss).backward()
    scaler.step(optimizer)
    scaler.update()
    with torch.no_grad(), torch.cpu.amp.autocast(dtype=torch.bfloat16):
        return model(x)
"""

BFLOAT16_FIXED = TRAIN.replace(
    "torch.cpu.amp.autocast(dtype=torch.bfloat16)", 'torch.autocast("cpu", dtype=torch.bfloat16)'
)


def _findings(outcome) -> list[tuple[str, int, int, str]]:
    return [(d.rule_id, d.line, d.column, d.fix_safety.value) for d in outcome.diagnostics]


def test_the_facts_of_a_module_name_the_patching_package_its_program_imports(tmp_path):
    (tmp_path / "main.py").write_text(MAIN)
    (tmp_path / "train.py").write_text(TRAIN)
    (tmp_path / "other.py").write_text("import torch\n\nif __name__ == '__main__':\n    print(torch.ones(1))\n")
    facts = project_facts(tmp_path)
    assert (facts["train.py"].patching_imports, facts["main.py"].patching_imports) == ({IPEX}, {IPEX})
    assert facts["other.py"].patching_imports == frozenset()
    restored = _module_facts_from_json(json.loads(json.dumps(_module_facts_to_json(facts["train.py"]))), {}, {})
    assert restored == facts["train.py"]


def test_intel_extension_keeps_the_cpu_grad_scaler_and_a_float16_autocast():
    found = lint_code(TRAIN, path="train.py", files={"main.py": MAIN}, select=["MPT502"])
    assert _findings(found) == [("MPT502", 9, 10, "none"), ("MPT502", 14, 27, "safe")]
    assert found.diagnostics[0].message == (
        "`torch.cpu.amp.autocast` is deprecated since torch 2.4 (FutureWarning) (target any torch >= 1.6: no torch "
        "pin); no automatic fix: this program imports intel_extension_for_pytorch, whose releases for torch before "
        "2.2 replace it with an autocast that accepts float16 on the CPU, which torch's own CPU autocast of those "
        "releases turns off, and this call's dtype may be float16 (pin torch >= 2.2, or set `torch` in the config, "
        "for the fix)"
    )
    fixed = lint_code(TRAIN, path="train.py", files={"main.py": MAIN}, select=["MPT502"], fix=True, unsafe_fixes=True)
    assert fixed.fixed_code == BFLOAT16_FIXED  # the bfloat16 region alone: both spellings take it on every torch


def test_a_torch_pin_from_2_2_makes_the_float16_autocast_fix_safe_and_the_grad_scaler_stays_ipex():
    files = {"main.py": MAIN, "requirements.txt": "torch>=2.2\n"}
    found = lint_code(TRAIN, path="train.py", files=files, select=["MPT502"])
    assert _findings(found) == [("MPT502", 9, 10, "safe"), ("MPT502", 14, 27, "safe")]
    fixed = lint_code(TRAIN, path="train.py", files=files, select=["MPT502"], fix=True)
    assert fixed.fixed_code == BFLOAT16_FIXED.replace(
        "torch.cpu.amp.autocast(enabled=args.fp16,", 'torch.autocast("cpu", enabled=args.fp16,'
    )


def test_without_intel_extension_every_cpu_spelling_is_fixed_safely():
    plain = MAIN.replace("        import intel_extension_for_pytorch as ipex\n", "        print('no ipex')\n")
    found = lint_code(TRAIN, path="train.py", files={"main.py": plain}, select=["MPT502"])
    assert _findings(found) == [("MPT502", 7, 14, "safe"), ("MPT502", 9, 10, "safe"), ("MPT502", 14, 27, "safe")]
    assert found.diagnostics[0].message == (
        "`torch.cpu.amp.GradScaler` is deprecated since torch 2.4 (FutureWarning): write "
        '`torch.amp.GradScaler("cpu")` (target any torch >= 1.6: no torch pin); `torch.cpu.amp.GradScaler` itself '
        "needs torch >= 2.3, where `torch.amp.GradScaler` exists too"
    )
    fixed = lint_code(TRAIN, path="train.py", files={"main.py": plain}, select=["MPT502"], fix=True)
    assert fixed.fixed_code == BFLOAT16_FIXED.replace(
        "torch.cpu.amp.GradScaler()", 'torch.amp.GradScaler("cpu")'
    ).replace("torch.cpu.amp.autocast(enabled=args.fp16,", 'torch.autocast("cpu", enabled=args.fp16,')


def test_a_top_level_import_in_the_module_itself_counts():
    code = "import intel_extension_for_pytorch as ipex\n" + TRAIN
    found = lint_code(code, path="train.py", select=["MPT502"])
    assert _findings(found) == [("MPT502", 10, 10, "none"), ("MPT502", 15, 27, "safe")]


def test_each_patch_cites_the_file_that_makes_it_and_its_torch_span():
    spans = {p.name: (p.torch_from, p.torch_until) for p in PATCHES}
    assert spans == {"torch.cpu.amp.autocast": ("1.12", "2.2"), "torch.cpu.amp.GradScaler": ("2.0", None)}
    assert all(p.source.startswith("intel_extension_for_pytorch/cpu/autocast/_") for p in PATCHES)
