"""What the trainer stacks' precision settings mean in each of their versions, each row with where it was read.

Read from the sources at release tags (``git show TAG:path``): Lightning-AI/pytorch-lightning (tags 1.4.0-2.6.0),
huggingface/accelerate (v0.1.0-v1.14.0), microsoft/DeepSpeed (v0.3.0-v0.16.4); transformers from its PyPI wheels
(4.9.0-4.14.0: the repository is too large to fetch), ``transformers/training_args.py``.

A stack's target range is read from the project's pins as torch's is (``mplint.project.trainer_target``); ``SAMPLES``
are the releases a specifier is tested against there, each stack's minor versions up to the newest read.
"""

from __future__ import annotations

from typing import NamedTuple


class Stack(NamedTuple):
    label: str  # as messages name it
    distributions: tuple[str, ...]  # the PyPI names that install it (normalized: lower case, "-")
    samples: tuple[str, ...]  # its minor releases, oldest first


def _minors(major: int, first: int, last: int) -> tuple[str, ...]:
    return tuple(f"{major}.{minor}.0" for minor in range(first, last + 1))


STACKS = {
    "transformers": Stack("transformers", ("transformers",), (*_minors(3, 0, 5), *_minors(4, 0, 57), "5.0.0")),
    "accelerate": Stack("Accelerate", ("accelerate",), (*_minors(0, 1, 34), *_minors(1, 0, 14))),
    # ``lightning`` ships ``lightning.pytorch`` from 1.8.0 (src/lightning at tag 1.8.0) with the same version numbers
    "lightning": Stack(
        "Lightning",
        ("lightning", "pytorch-lightning", "lightning-fabric"),
        (*_minors(0, 7, 10), *_minors(1, 0, 9), *_minors(2, 0, 6)),
    ),
    "deepspeed": Stack("DeepSpeed", ("deepspeed",), _minors(0, 3, 18)),
}


def stack_of(distribution: str) -> str | None:
    """The stack a distribution name installs (``pytorch_lightning`` -> ``lightning``), None for any other."""
    name = distribution.lower().replace("_", "-")
    return next((key for key, stack in STACKS.items() if name in stack.distributions), None)


# The configuring classes, by stack: (first package of the import path, class name) -> the keywords read.
CONFIGURING = {
    "transformers": ({"transformers"}, {"TrainingArguments", "Seq2SeqTrainingArguments"}, ("fp16", "bf16")),
    "accelerate": ({"accelerate"}, {"Accelerator"}, ("mixed_precision", "fp16")),
    "lightning": (
        {"lightning", "pytorch_lightning", "lightning_fabric"},
        {"Trainer", "Fabric"},
        ("precision", "accelerator"),
    ),
    "fsdp": ({"torch"}, {"MixedPrecision"}, ("param_dtype",)),
}


def configuring(callee: str) -> tuple[str, str] | None:
    """(stack, class name) of a configuring call by its import path (``lightning.pytorch.Trainer``), else None."""
    first, last = callee.split(".", 1)[0], callee.rsplit(".", 1)[-1]
    return next(
        (
            (stack, last)
            for stack, (packages, classes, _) in CONFIGURING.items()
            if first in packages and last in classes
        ),
        None,
    )


class Meaning(NamedTuple):
    since: str | None  # the first release with this meaning (None: every release read)
    until: str | None  # the first release without it (None: still in the newest read)
    meaning: str
    source: str


_PL = "Lightning-AI/pytorch-lightning"
_PL_1_9 = f"{_PL} 1.9.0 src/pytorch_lightning/trainer/connectors/accelerator_connector.py"
_PL_2_0 = f"{_PL} 2.0.0-2.6.0 src/lightning/fabric/plugins/precision/precision.py"
_PL_2_1 = f"{_PL} 2.1.0-2.6.0 src/lightning/fabric/plugins/precision/precision.py"
_ACC = "huggingface/accelerate"
_DS = "microsoft/DeepSpeed"
_TF = "transformers wheels 4.9.0-4.14.0 from PyPI, transformers/training_args.py"

LIGHTNING = {
    # 1.x: Trainer(precision=16 | 32 | 64 | "bf16") (_PRECISION_INPUT_STR = Literal["64", "32", "16", "bf16"])
    "precision=16": Meaning(None, None, "float16 AMP", _PL_1_9),
    "precision='bf16'": Meaning(
        "1.5", None, "bfloat16 AMP", f"{_PL} 1.5.0 pytorch_lightning/trainer/connectors/accelerator_connector.py"
    ),
    # 2.0: the unified names; 16/"16"/"bf16" still accepted, converted with a warning ("is supported for historical
    # reasons but its usage is discouraged", _convert_precision_to_unified_args in src/lightning/fabric/connector.py)
    "precision='16-mixed'": Meaning("2.0", None, "float16 AMP", _PL_2_0),
    "precision='bf16-mixed'": Meaning("2.0", None, "bfloat16 AMP", _PL_2_0),
    "precision='16-true'": Meaning("2.1", None, "pure float16", _PL_2_1),
    "precision='bf16-true'": Meaning("2.1", None, "pure bfloat16", _PL_2_1),
    # On TPUs: 1.5-2.0 replace float16 AMP with bfloat16 and warn ("AMP with fp16 is not supported on TPUs");
    # from 2.1 XLAPrecision accepts only "32-true", "16-true", "bf16-true" and raises ValueError for the rest.
    "tpu precision=16": Meaning(
        "1.5",
        "2.1",
        "bfloat16 with a warning",
        f"{_PL_1_9}; {_PL} 2.0.0 src/lightning/pytorch/trainer/connectors/accelerator_connector.py",
    ),
    "tpu precision='16-mixed'": Meaning(
        "2.1",
        None,
        "ValueError: not supported in XLA",
        f"{_PL} 2.1.0-2.6.0 src/lightning/fabric/plugins/precision/xla.py",
    ),
}

# The first Lightning with the unified precision names, and the spellings it converts (_PRECISION_INPUT_STR_ALIAS).
LIGHTNING_UNIFIED = "2.0"
LIGHTNING_ALIASES = {"16": "16-mixed", "bf16": "bf16-mixed"}
LIGHTNING_FLOAT16_AMP = frozenset({"16", "16-mixed"})
LIGHTNING_TPU_BFLOAT16 = "2.1"  # the first with XLAPrecision: "bf16-true" on TPUs

ACCELERATE = {
    "Accelerator(mixed_precision=)": Meaning(
        "0.6", None, "'no', 'fp16', 'bf16' ('fp8' later)", f"{_ACC} v0.6.0-v1.14.0 src/accelerate/accelerator.py"
    ),
    "Accelerator(fp16=)": Meaning(
        None,
        "0.16",
        "float16 AMP; deprecated from v0.7.0 ('fp16=True is deprecated. Use mixed_precision=\"fp16\" instead.')",
        f"{_ACC} v0.1.0-v0.15.0 src/accelerate/accelerator.py (absent from v0.16.0)",
    ),
    # backward: self.scaler.scale(loss).backward(); the prepared optimizer's step: self.scaler.step(self.optimizer)
    "accelerator.backward": Meaning(
        None,
        None,
        "scales the loss under fp16; the prepared optimizer's step unscales",
        f"{_ACC} v1.0.0 src/accelerate/accelerator.py (backward), src/accelerate/optimizer.py (step)",
    ),
}

DEEPSPEED = {
    # FP16_LOSS_SCALE_DEFAULT = 0; engine.dynamic_loss_scale(): ``self._config.loss_scale == 0``
    "fp16.loss_scale": Meaning(
        None,
        None,
        "0 (the default): dynamic; > 0: that fixed scale",
        f"{_DS} v0.3.0-v0.16.4 deepspeed/runtime/constants.py; v0.16.4 deepspeed/runtime/engine.py",
    ),
    "bf16": Meaning("0.6", None, "bfloat16 ('bfloat16' the older key)", f"{_DS} v0.6.0 deepspeed/runtime/constants.py"),
    "fp16+bf16": Meaning(
        "0.6",
        None,
        "AssertionError: 'bfloat16 and fp16 modes cannot be simultaneously enabled'",
        f"{_DS} v0.6.0-v0.16.4 deepspeed/runtime/config.py",
    ),
}
DEEPSPEED_FLOAT16_KEY = "fp16"
DEEPSPEED_BFLOAT16_KEYS = ("bf16", "bfloat16")

TRANSFORMERS = {
    "TrainingArguments(fp16=)": Meaning(None, None, "float16 AMP", _TF),
    "TrainingArguments(bf16=)": Meaning("4.13", None, "bfloat16 AMP", _TF + " (absent from 4.12.0)"),
    "fp16+bf16": Meaning("4.13", None, "ValueError: 'At most one of fp16 and bf16 can be True, but not both'", _TF),
}
