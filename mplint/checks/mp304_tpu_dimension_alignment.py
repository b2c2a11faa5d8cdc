"""MP304: feature dimensions and batch sizes that waste a TPU's 128x128 matrix units (off by default)."""

from __future__ import annotations

import libcst as cst

from mplint.analysis.layer_sizes import batch_sizes, hidden_sizes, rounding_hint, sets_batch_size, sizes_layers
from mplint.engine.rule import Rule

TPU_TILE = 128


class TpuDimensionAlignment(Rule):
    id = "MP304"
    program_choice = True
    triggers = (b"Dense", b"Conv", b"LSTM", b"GRU", b"Embedding", b"MultiHeadAttention", b"batch")

    @classmethod
    def candidate(cls, code) -> bool:
        return sizes_layers(code, TPU_TILE) or sets_batch_size(code, TPU_TILE)

    @classmethod
    def active_for(cls, facts) -> bool:
        return facts.uses_tpu

    def visit_Module(self, node: cst.Module) -> None:
        for size in [*hidden_sizes(self.context), *batch_sizes(self.context)]:
            if size.value % TPU_TILE:
                self.report(
                    size.expr,
                    f"{size.what} is {size.value}, not a multiple of {TPU_TILE}: this project runs on TPUs, whose "
                    f"matrix units pad every dimension to {TPU_TILE}; {rounding_hint(size, TPU_TILE)}",
                )
