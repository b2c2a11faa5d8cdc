"""MPT703: float16 AMP asked of Lightning on TPUs, which run bfloat16."""

from __future__ import annotations

from mplint.checks.trainers._lightning import LightningRule
from mplint.checks.trainers.config import TrainerConfig
from mplint.diagnostics import Fix, FixSafety
from mplint.knowledge.trainer_versions import LIGHTNING_FLOAT16_AMP, LIGHTNING_TPU_BFLOAT16, LIGHTNING_UNIFIED


class Float16PrecisionOnTpu(LightningRule):
    id = "MPT703"

    @classmethod
    def candidate(cls, code) -> bool:
        return super().candidate(code) and "tpu" in code.argument_words | code.words

    def visit_Module(self, node) -> None:
        target = self.context.facts.trainer_target("lightning")
        for config in TrainerConfig.of(self.context).of_stack("lightning"):
            precision, accelerator = config.values.get("precision"), config.values.get("accelerator")
            if precision is None or accelerator is None or accelerator.value != "tpu":
                continue
            if isinstance(precision.value, bool) or str(precision.value) not in LIGHTNING_FLOAT16_AMP:
                continue
            newer = target.admits_from(LIGHTNING_TPU_BFLOAT16)
            older = target.admits_before(LIGHTNING_TPU_BFLOAT16)
            what = []
            if older:
                what.append(f"before {LIGHTNING_TPU_BFLOAT16} it runs bfloat16 instead, with a warning")
            if newer:
                what.append(f"from {LIGHTNING_TPU_BFLOAT16} the TPU precision plugin raises ValueError")
            self.report(
                precision.written,
                f"`precision={self.code(precision.written)}` asks for float16 AMP on a TPU "
                f"(`accelerator={self.code(accelerator.written)}`), which does not run it: TPUs compute in bfloat16; "
                f"{' and '.join(what)} (target {target.described})",
                self._fix(config, precision, target),
            )

    def _fix(self, config, precision, target) -> Fix | None:
        """The bfloat16 setting of the whole range, when it has one spelling: "bf16-true" from 2.1 (the XLA
        plugin's), "bf16-mixed" on 2.0, "bf16" on 1.x; the literal written in the call itself."""
        if not any(arg.value is precision.written for arg in config.call.args):
            return None
        if target.at_least(LIGHTNING_TPU_BFLOAT16):
            new = "bf16-true"
        elif target.at_least(LIGHTNING_UNIFIED) and not target.admits_from(LIGHTNING_TPU_BFLOAT16):
            new = "bf16-mixed"
        elif target.at_least("1.5") and not target.admits_from(LIGHTNING_UNIFIED):  # "bf16" from 1.5
            new = "bf16"
        else:
            return None
        return Fix({precision.written: self.quoted(new)}, FixSafety.UNSAFE)
