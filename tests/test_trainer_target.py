"""The trainer stacks' ranges (transformers, Accelerate, Lightning, DeepSpeed) read from a project's pins, and the
table of what their precision settings mean per version (MPT701-MPT706 read both)."""

from __future__ import annotations

import pytest
from conftest import write_files
from packaging.version import Version

from mplint.knowledge.trainer_versions import ACCELERATE, DEEPSPEED, LIGHTNING, STACKS, TRANSFORMERS, stack_of
from mplint.project.build import project_facts
from mplint.project.trainer_target import TrainerTargets, unpinned


def _labels(root, path="train.py"):
    return [t.described for t in TrainerTargets().of(root / path)]


@pytest.mark.parametrize(
    "requirements,expected",
    [
        (
            "pytorch-lightning>=1.8,<2.1\n",
            ["Lightning 1.8-2.0, from requirements.txt pins pytorch-lightning<2.1,>=1.8"],
        ),
        ("lightning==2.2.1\n", ["Lightning 2.2, from requirements.txt pins lightning==2.2.1"]),
        ("pytorch_lightning>=2.0\n", ["Lightning >= 2.0, from requirements.txt pins pytorch_lightning>=2.0"]),
        (
            "deepspeed~=0.14.0\naccelerate<0.16\n",
            [
                "Accelerate <= 0.15, from requirements.txt pins accelerate<0.16",
                "DeepSpeed 0.14, from requirements.txt pins deepspeed~=0.14.0",
            ],
        ),
        ("transformers\n", ["any transformers, from requirements.txt names transformers"]),
        ("torch==2.4\n", []),
    ],
)
def test_stack_ranges_from_requirements(tmp_path, requirements, expected):
    write_files(tmp_path, {"requirements.txt": requirements, "train.py": "import torch\n"})
    assert _labels(tmp_path) == expected


def test_nearest_folder_that_names_the_stack_wins_and_a_root_stops_the_search(tmp_path):
    write_files(
        tmp_path,
        {
            "requirements.txt": "lightning>=2.1\n",
            "old/requirements.txt": "pytorch-lightning==1.9.5\n",
            "old/train.py": "",
            "other/sub/train.py": "",
            "project/pyproject.toml": "[project]\nname = 'p'\ndependencies = ['torch']\n",
            "project/train.py": "",
        },
    )
    assert _labels(tmp_path, "old/train.py") == ["Lightning 1.9, from requirements.txt pins pytorch-lightning==1.9.5"]
    assert _labels(tmp_path, "other/sub/train.py") == ["Lightning >= 2.1, from requirements.txt pins lightning>=2.1"]
    assert _labels(tmp_path, "project/train.py") == []


def test_an_unpinned_stack_is_every_release():
    open_range = unpinned("lightning")
    assert (open_range.label, open_range.described) == ("any Lightning", "any Lightning: no Lightning pin")
    assert open_range.admits_before("2.0") and open_range.admits_from("2.0") and not open_range.at_least("2.0")


def test_project_facts_carry_the_ranges(tmp_path):
    write_files(tmp_path, {"requirements.txt": "lightning>=2.0,<2.3\n", "train.py": "import lightning\n"})
    facts = project_facts(tmp_path)["train.py"]
    target = facts.trainer_target("lightning")
    assert (target.label, target.at_least("2.0"), target.admits_before("2.1"), target.admits_from("2.3")) == (
        "Lightning 2.0-2.2",
        True,
        True,
        False,
    )
    assert facts.trainer_target("deepspeed").label == "any DeepSpeed"


def test_stacks_and_meanings_are_well_formed():
    assert stack_of("PyTorch_Lightning") == "lightning" and stack_of("torch") is None
    for stack in STACKS.values():
        versions = [Version(v) for v in stack.samples]
        assert versions == sorted(versions)
    for table in (LIGHTNING, ACCELERATE, DEEPSPEED, TRANSFORMERS):
        for name, row in table.items():
            assert row.source and row.meaning, name
            if row.since and row.until:
                assert Version(row.since) < Version(row.until), name


def test_show_facts_names_the_trainer_stacks_their_ranges_and_the_precision_settings(tmp_path, capsys, monkeypatch):
    from mplint.cli import main

    write_files(
        tmp_path,
        {
            "requirements.txt": "lightning>=2.0,<2.3\naccelerate==0.30.1\n",
            "train.py": (
                "import lightning as L\n"
                "from accelerate import Accelerator\n"
                "from helpers import build\n"
                "PRECISION = 'bf16-mixed'\n"
                "trainer = L.Trainer(accelerator='tpu', precision=PRECISION, max_epochs=2)\n"
                "acc = Accelerator()\n"
            ),
            "helpers.py": "from transformers import TrainingArguments\n\ndef build():\n    return TrainingArguments('o', fp16=True)\n",
        },
    )
    monkeypatch.chdir(tmp_path)
    assert main(["--show-facts", "--no-cache", "."]) == 0
    out = capsys.readouterr().out
    start = out.index("    transformers:")
    assert out[start : out.index("  helpers.py:", start)] == (
        "    transformers: any transformers (no transformers pin)\n"
        "      TrainingArguments(fp16=True) at helpers.py:4\n"
        "    accelerate: Accelerate 0.30 (requirements.txt pins accelerate==0.30.1)\n"
        "    lightning: Lightning 2.0-2.2 (requirements.txt pins lightning<2.3,>=2.0)\n"
        "      Trainer(accelerator='tpu', precision=PRECISION) at train.py:5\n"
    )
