"""What the Lightning rules (MPT703, MPT704) share."""

from __future__ import annotations

import libcst as cst

from mplint.engine.rule import Rule


class LightningRule(Rule):
    triggers = (b"precision",)
    requires = (b"lightning",)  # lightning, pytorch_lightning, lightning_fabric

    @classmethod
    def candidate(cls, code) -> bool:
        return "precision" in code.keywords and ("Trainer" in code.calls or "Fabric" in code.calls)

    def code(self, node: cst.CSTNode) -> str:
        return self.context.module.code_for_node(node)

    def quoted(self, text: str) -> cst.SimpleString:
        return cst.SimpleString(f'"{text}"')
