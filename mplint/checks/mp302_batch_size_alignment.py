"""MP302: batch sizes that are not multiples of 8 under a mixed policy."""

from __future__ import annotations

import re

import libcst as cst

from mplint.analysis.layer_sizes import (
    batch_sizes,
    policy_on_gpu,
    reduced_precision_on_gpu,
    rounding_fix,
    rounding_hint,
    sets_batch_size,
)
from mplint.engine.rule import Rule


class BatchSizeAlignment(Rule):
    id = "MP302"
    governed_by_policy = True
    program_choice = True
    triggers = (re.compile(rb"batch_size\s*=|\.(?:padded_)?batch\s*\("),)

    @classmethod
    def candidate(cls, code) -> bool:
        return sets_batch_size(code, 8)

    @classmethod
    def active_for(cls, facts) -> bool:
        return reduced_precision_on_gpu(facts)

    def visit_Module(self, node: cst.Module) -> None:
        policy, dtype = policy_on_gpu(self.context.facts)
        for size in batch_sizes(self.context):
            if size.value % 8 == 0:
                continue
            self.report(
                size.expr,
                f"{size.what} is {size.value}, not a multiple of 8: under {policy} "
                f"the batch dimension of every {dtype} matmul is misaligned for tensor cores; "
                f"{rounding_hint(size, 8)}",
                rounding_fix(self.context, size, 8, batch_sizes),
            )
