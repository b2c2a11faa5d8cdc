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


GENERAL = """\
import torch
from torch import nn


class AutoShape(nn.Module):
    def forward(self, x):
        with torch.cuda.amp.autocast():
            return x


class Net(nn.Module):
    def forward(self, x):
        with torch.cuda.amp.autocast():
            return x


def check_amp(model):
    return AutoShape()(model)


def self_test():
    return check_amp(None)


def build():
    return Net()
"""


def test_what_only_uncalled_code_names_is_uncalled_too(tmp_path, capsys):
    # self_test is named by nothing; check_amp only by self_test; AutoShape only by check_amp. Net's forward runs
    # through nn.Module.__call__ though no code names it: a derived class's methods run once the class is named.
    write_files(
        tmp_path,
        {
            ".git/HEAD": "",
            "requirements.txt": "torch>=2.4\n",
            "general.py": GENERAL,
            "train.py": "from general import build\n\nbuild()(1)\n",
        },
    )
    assert project_facts(tmp_path)["general.py"].uncalled == frozenset({"AutoShape.forward", "check_amp", "self_test"})
    code, found = lint_json(capsys, "--no-cache", "--select", "MPT502", str(tmp_path))
    assert (code, [(rule, line) for rule, line, _, _ in found]) == (1, [("MPT502", 13)])


def test_a_module_nothing_imports_beside_a_script_is_dead_a_lone_one_is_not(tmp_path, capsys):
    # a stale copy beside the folder's scripts never runs; a module in a folder without scripts may be its users'
    write_files(
        tmp_path,
        {
            ".git/HEAD": "",
            "requirements.txt": "torch>=2.4\n",
            "run/infer.py": "import torch\n\nprint(torch.ones(1))\n",
            "run/model.py": HELPERS,
            "lib/model.py": HELPERS,
        },
    )
    facts = project_facts(tmp_path)
    assert facts["run/model.py"].uncalled == frozenset(
        {"autocast_context", "legacy_scaler", "Trainer.step", "Trainer.old_step", "Trainer.__enter__"}
    )
    assert facts["lib/model.py"].uncalled == frozenset()
    code, found = lint_json(capsys, "--no-cache", "--select", "MPT502", str(tmp_path))
    assert lint_json(capsys, "--no-cache", "--select", "MPT502", str(tmp_path / "run")) == (0, [])
    code, found = lint_json(capsys, "--no-cache", "--select", "MPT502", str(tmp_path / "lib"))
    assert (code, [line for _, line, _, _ in found]) == (1, [5, 9, 14, 18, 22])


UNREACHABLE = """\
import torch
from apex import amp


def setup(model, optimizer, graphs):
    if graphs:
        assert False, "code path not tested with cuda graphs"
        model, optimizer = amp.initialize(model, optimizer, opt_level="O2")
    else:
        model, optimizer = amp.initialize(model, optimizer, opt_level="O1")
    return model, optimizer


def old(model):
    raise NotImplementedError
    with torch.cuda.amp.autocast():
        return model(1)


setup(torch.nn.Linear(2, 2).cuda(), None, False)
old(None)
"""


def test_version_rules_are_silent_after_a_statement_that_always_leaves_its_block(tmp_path, capsys):
    # after `assert False, "..."` and `raise`, nothing in the block runs; the other arm's initialize does
    write_files(tmp_path, {".git/HEAD": "", "requirements.txt": "torch>=2.4\n", "train.py": UNREACHABLE})
    code, found = lint_json(capsys, "--no-cache", "--select", "MPT501,MPT502", str(tmp_path))
    assert (code, [(rule, line) for rule, line, _, _ in found]) == (1, [("MPT501", 10)])


def test_modules_no_program_reaches_in_a_tree_whose_programs_run_are_dead(tmp_path, capsys):
    # vendor/bert's run_pretraining.py imports modeling.py; common/utils.py and common/old.py (which only utils
    # imports) are reached by nothing. lib/ has no program: a module there may be its users'.
    write_files(
        tmp_path,
        {
            ".git/HEAD": "",
            "requirements.txt": "torch>=2.4\n",
            "vendor/bert/run_pretraining.py": "import torch\nfrom modeling import step\n\nstep(torch.ones(1))\n",
            "vendor/bert/modeling.py": "import torch\n\n\ndef step(x):\n    with torch.cuda.amp.autocast():\n        return x\n",
            "vendor/common/utils.py": "from old import legacy\n\n\ndef helper():\n    return legacy()\n",
            "vendor/common/old.py": HELPERS,
            "lib/amp.py": HELPERS,
        },
    )
    facts = project_facts(tmp_path)
    assert facts["vendor/common/utils.py"].uncalled == frozenset({"helper"})
    assert facts["vendor/common/old.py"].uncalled == frozenset(
        {"autocast_context", "legacy_scaler", "Trainer.step", "Trainer.old_step", "Trainer.__enter__"}
    )
    assert facts["lib/amp.py"].uncalled == frozenset()
    assert lint_json(capsys, "--no-cache", "--select", "MPT502", str(tmp_path / "vendor" / "common")) == (0, [])
    code, found = lint_json(capsys, "--no-cache", "--select", "MPT502", str(tmp_path / "vendor" / "bert"))
    assert (code, [line for _, line, _, _ in found]) == (1, [5])


def test_an_unpacked_wheels_modules_are_its_users_not_dead(tmp_path, capsys):
    # timm's layout: a wheel's RECORD ships the package; a module of it with a __main__ block runs torch, but the
    # rest is there for the package's users, whatever no program of the tree reaches.
    write_files(
        tmp_path,
        {
            "requirements.txt": "torch>=2.4\n",
            "ampkit-1.0.dist-info/RECORD": "ampkit/__init__.py,,\nampkit/cuda.py,,\nampkit/bench.py,,\n",
            "ampkit/__init__.py": "",
            "ampkit/cuda.py": HELPERS,
            "ampkit/bench.py": "import torch\n\nif __name__ == '__main__':\n    print(torch.ones(1))\n",
        },
    )
    facts = project_facts(tmp_path)
    assert facts["ampkit/cuda.py"].uncalled == frozenset()
    code, found = lint_json(capsys, "--no-cache", "--select", "MPT502", str(tmp_path))
    assert (code, [line for _, line, _, _ in found]) == (1, [5, 9, 14, 18, 22])


PERFORMANCE = """\
import tensorflow as tf

OPTIMIZER_CLASS = tf.keras.mixed_precision.experimental.LossScaleOptimizer


def configure_optimizer(optimizer):
    return tf.keras.mixed_precision.experimental.LossScaleOptimizer(optimizer, "dynamic")
"""


def test_a_sibling_copy_no_program_reaches_never_runs_though_its_names_are_used(tmp_path, capsys):
    # A submission's two benchmarks each carry a copy of one library: resnet's training script imports its copy;
    # nothing imports bert's, whose configure_optimizer is named (by resnet) but never runs. A module an unresolved
    # import's dotted path may name (bert/ put on sys.path at run time: `from tools import loader`) may run.
    write_files(
        tmp_path,
        {
            ".git/HEAD": "",
            "requirements.txt": "tensorflow==2.5.0\n",
            "sub/resnet/train.py": "import tensorflow as tf\nfrom common import performance\n\n"
            "performance.configure_optimizer(tf.keras.optimizers.SGD())\n",
            "sub/resnet/common/performance.py": PERFORMANCE,
            "sub/bert/run.py": "import tensorflow as tf\nimport modeling\n\nmodeling.build()\n",
            "sub/bert/modeling.py": "def build():\n    return 1\n",
            "sub/bert/common/performance.py": PERFORMANCE,
            "sub/bert/tools/loader.py": PERFORMANCE,
            "sub/bert/scripts/convert.py": "import tensorflow as tf\nfrom tools import loader\n\nloader.go()\n",
        },
    )
    facts = project_facts(tmp_path)
    assert facts["sub/bert/common/performance.py"].never_runs
    assert facts["sub/bert/common/performance.py"].uncalled == frozenset({"configure_optimizer"})
    assert not facts["sub/bert/tools/loader.py"].never_runs
    assert not facts["sub/resnet/common/performance.py"].never_runs
    assert lint_json(capsys, "--no-cache", "--select", "MP501", str(tmp_path / "sub/bert/common")) == (0, [])
    for folder in ("sub/resnet/common", "sub/bert/tools"):
        code, found = lint_json(capsys, "--no-cache", "--select", "MP501", str(tmp_path / folder))
        assert (code, [line for _, line, _, _ in found]) == (1, [3, 7, 7])  # the name, then its G1 signature


def test_where_running_code_loads_modules_by_computed_names_every_module_may_run(tmp_path):
    # a plugin registry: tasks/__init__.py imports each file of its folder by name; user folders come the same way
    files = {
        ".git/HEAD": "",
        "requirements.txt": "tensorflow==2.5.0\n",
        "sub/train.py": "import tensorflow as tf\nimport registry\n\nregistry.load('plugins.' + 'mine')\n",
        "sub/registry.py": "import importlib\n\n\ndef load(name):\n    return importlib.import_module(name)\n",
        "sub/plugins/mine.py": PERFORMANCE,
    }
    write_files(tmp_path, files)
    assert not project_facts(tmp_path)["sub/plugins/mine.py"].never_runs
    (tmp_path / "sub/registry.py").write_text("def load(name):\n    return name\n")
    assert project_facts(tmp_path)["sub/plugins/mine.py"].never_runs
