"""Dead code is not a finding of a version rule: a function or method of a project's helper module that nothing in
the project names breaks on no version."""

from __future__ import annotations

from conftest import lint_json, write_files

from mplint.project.build import project_facts

HELPERS = """\
import torch


def autocast_context():
    return torch.cuda.amp.autocast()


def legacy_scaler():
    return torch.cuda.amp.GradScaler()


class Trainer:
    def step(self):
        with torch.cuda.amp.autocast():
            pass

    def old_step(self):
        with torch.cuda.amp.autocast():
            pass

    def __enter__(self):
        return torch.cuda.amp.autocast()
"""

TRAIN = """\
from helpers import Trainer, autocast_context

with autocast_context():
    Trainer().step()
"""


def test_version_rules_are_silent_in_functions_nothing_names(tmp_path, capsys):
    write_files(
        tmp_path, {".git/HEAD": "", "requirements.txt": "torch>=2.4\n", "helpers.py": HELPERS, "train.py": TRAIN}
    )
    assert project_facts(tmp_path)["helpers.py"].uncalled == frozenset({"legacy_scaler", "Trainer.old_step"})
    code, found = lint_json(capsys, "--no-cache", "--select", "MPT502", str(tmp_path))
    # autocast_context, Trainer.step and the implicit __enter__ run; legacy_scaler and Trainer.old_step never do
    assert (code, [(rule, line) for rule, line, _, _ in found]) == (1, [("MPT502", 5), ("MPT502", 14), ("MPT502", 22)])


def test_an_entry_points_and_a_library_modules_functions_are_not_dead(tmp_path, capsys):
    # a script's functions may be run from a notebook, a library's by its users: only helpers the project imports
    write_files(
        tmp_path,
        {
            ".git/HEAD": "",
            "requirements.txt": "torch>=2.4\n",
            "script.py": HELPERS + "\nprint('ready')\n",
            "lib/__init__.py": "",
            "lib/amp.py": HELPERS,
        },
    )
    facts = project_facts(tmp_path)
    assert facts["script.py"].uncalled == facts["lib/amp.py"].uncalled == frozenset()
    code, found = lint_json(capsys, "--no-cache", "--select", "MPT502", str(tmp_path))
    assert code == 1 and len(found) == 10
