"""MPT704: Lightning's precision spelled as before 2.0 (``16``, ``"16"``, ``"bf16"``) on a range with Lightning 2.x."""

from __future__ import annotations

from mplint.checks.trainers._lightning import LightningRule
from mplint.checks.trainers.config import TrainerConfig
from mplint.diagnostics import Fix, FixSafety
from mplint.knowledge.trainer_versions import LIGHTNING_ALIASES, LIGHTNING_UNIFIED


class LegacyTrainerPrecision(LightningRule):
    id = "MPT704"

    def visit_Module(self, node) -> None:
        target = self.context.facts.trainer_target("lightning")
        if not target.admits_from(LIGHTNING_UNIFIED):
            return  # Lightning 1.x alone: the old spelling is its only one
        for config in TrainerConfig.of(self.context).of_stack("lightning"):
            value = config.values.get("precision")
            if value is None or isinstance(value.value, bool) or str(value.value) not in LIGHTNING_ALIASES:
                continue
            new = LIGHTNING_ALIASES[str(value.value)]
            written = self.code(value.written)
            where = (
                ""
                if _is_argument(config, value)
                else f" ({'a flag' if value.from_flag else 'a variable'}'s value that `{self.code(config.call.func)}` reads)"
            )
            self.report(
                value.written,
                f"`precision={written}`{where} is Lightning's spelling before {LIGHTNING_UNIFIED}; from "
                f'{LIGHTNING_UNIFIED} it is `"{new}"` and the old one warns that it is supported only for historical '
                f"reasons (target {target.described})",
                self._fix(config, value, new, target.at_least(LIGHTNING_UNIFIED)),
            )

    def _fix(self, config, value, new: str, holds: bool) -> Fix | None:
        """The new spelling, where every release of the range has it and the literal is the argument itself (a
        variable or a flag's default may feed other code)."""
        if not holds or not _is_argument(config, value):
            return None
        return Fix({value.written: self.quoted(new)}, FixSafety.UNSAFE)


def _is_argument(config, value) -> bool:
    return any(arg.value is value.written for arg in config.call.args)
