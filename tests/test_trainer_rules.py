"""The trainer-stack rules (MPT703, MPT704): how the precision a trainer runs with is read (call arguments,
variables bound once, parameters' defaults, argparse flags), and the edges where they stay silent."""

from __future__ import annotations

import pytest

from mplint.testing import check_code, lint_code


def _found(code: str, select=("MPT703", "MPT704")) -> list[tuple]:
    return [(d.rule_id, d.line, d.column) for d in check_code(code, select=list(select)).diagnostics]


def test_a_store_true_flag_is_no_precision_and_a_dest_names_the_flag():
    code = (
        "import argparse\n"
        "import lightning as L\n"
        "p = argparse.ArgumentParser()\n"
        "p.add_argument('--half', action='store_true')\n"
        "p.add_argument('-p', '--prec', dest='precision', default='bf16')\n"
        "args = p.parse_args()\n"
        "L.Trainer(precision=args.half)\n"
        "L.Trainer(precision=args.precision)\n"
    )
    assert _found(code) == [("MPT704", 5, 58)]


def test_a_parameter_default_is_read_and_never_edited():
    code = "import lightning as L\n\ndef fit(precision='bf16'):\n    return L.Trainer(precision=precision)\n"
    outcome = lint_code(
        code, files={"requirements.txt": "lightning>=2.0\n"}, select=["MPT704"], fix=True, unsafe_fixes=True
    )
    assert [(d.rule_id, d.line, d.column) for d in outcome.diagnostics] == [("MPT704", 3, 19)]
    assert not outcome.written


@pytest.mark.parametrize(
    "binding",
    [
        "PRECISION = 16\nif FAST:\n    PRECISION = '16-mixed'\n",  # bound twice: depends on the path
        "from config import PRECISION\n",  # another module's value
    ],
)
def test_a_value_known_only_at_run_time_is_not_reported(binding):
    code = f"import lightning as L\nFAST = True\n{binding}L.Trainer(accelerator='tpu', precision=PRECISION)\n"
    assert _found(code) == []


def test_keyword_unpacking_and_other_trainers_are_not_read():
    code = (
        "import lightning as L\n"
        "from transformers import Trainer as HFTrainer\n"
        "L.Trainer(**{'precision': 16})\n"
        "HFTrainer(precision=16)\n"
    )
    assert _found(code) == []


def test_fabric_and_lightning_fabric_are_read():
    code = "from lightning_fabric import Fabric\nfabric = Fabric(accelerator='tpu', precision='16')\n"
    assert _found(code) == [("MPT703", 2, 46), ("MPT704", 2, 46)]


def test_a_scaler_step_after_an_unscaled_backward_asserts_as_mpt702_says():
    """What MPT702's message says of the prepared optimizer's step, on the installed torch (CPU)."""
    import torch

    model = torch.nn.Linear(2, 2)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    scaler = torch.amp.GradScaler("cpu")
    model(torch.randn(3, 2)).sum().backward()
    with pytest.raises(AssertionError, match="Attempted step but _scale is None"):
        scaler.step(optimizer)
