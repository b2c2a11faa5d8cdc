"""MP301: hidden sizes that keep float16/bfloat16 matmuls and convolutions off tensor cores."""

from __future__ import annotations

import re

import libcst as cst

from mplint.analysis.layer_sizes import (
    hidden_sizes,
    policy_on_gpu,
    reduced_precision_on_gpu,
    rounding_fix,
    rounding_hint,
    sizes_layers,
)
from mplint.engine.rule import Rule

_LAYERS = rb"(?:Dense|Conv[123]D\w*|Convolution[123]D\w*|SeparableConv\w*|DepthwiseConv\w*|LSTM|GRU|Embedding|MultiHeadAttention)"
# A layer constructor call, or an import that may rename one (`from keras.layers import Dense as D`).
LAYER_TRIGGER = re.compile(rb"\b" + _LAYERS + rb"\s*\(|\bimport\b[^\n]*\b" + _LAYERS + rb"\b[^\n]*\bas\b")


class TensorCoreAlignment(Rule):
    id = "MP301"
    governed_by_policy = True
    program_choice = True
    triggers = (LAYER_TRIGGER,)

    @classmethod
    def candidate(cls, code) -> bool:
        return sizes_layers(code, 8)

    @classmethod
    def active_for(cls, facts) -> bool:
        # a test's layer sizes are fixtures: tensor-core throughput is not what it checks
        return reduced_precision_on_gpu(facts) and not facts.test_module

    def visit_Module(self, node: cst.Module) -> None:
        policy, dtype = policy_on_gpu(self.context.facts)
        for size in hidden_sizes(self.context):
            if size.value % 8 == 0:
                continue
            self.report(
                size.expr,
                f"{size.what} is {size.value}, not a multiple of 8: under {policy} "
                f"its {dtype} matmuls cannot use tensor cores fully; {rounding_hint(size, 8)}",
                rounding_fix(self.context, size, 8, hidden_sizes),
            )
