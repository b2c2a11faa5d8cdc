"""MPT103: a loss computed on float16 tensors outside autocast, where autocast would use float32."""

from __future__ import annotations

import libcst as cst

from mplint.analysis.constants import reaching_assignment
from mplint.analysis.torch_amp import BoundNames, TorchAmp, is_half_cast
from mplint.checks._torch_rule import TorchRule
from mplint.diagnostics import Fix, FixSafety
from mplint.engine.names import dotted

# Functions autocast runs in float32 (its "autocast to float32" list), as torch APIs.
_FLOAT32_OPS = frozenset(
    {
        *(
            f"nn.functional.{f}"
            for f in (
                "cross_entropy",
                "nll_loss",
                "mse_loss",
                "l1_loss",
                "smooth_l1_loss",
                "huber_loss",
                "kl_div",
                "binary_cross_entropy_with_logits",
                "softmax",
                "log_softmax",
                "softmin",
                "cosine_embedding_loss",
                "margin_ranking_loss",
                "poisson_nll_loss",
                "soft_margin_loss",
                "multilabel_soft_margin_loss",
                "layer_norm",
            )
        ),
        "log",
        "exp",
        "softmax",
        "log_softmax",
        "logsumexp",
        "pow",
        "sum",
        "prod",
        "cumsum",
        "norm",
        "dist",
    }
)
_LOSS_MODULES = (
    "CrossEntropyLoss",
    "NLLLoss",
    "MSELoss",
    "L1Loss",
    "SmoothL1Loss",
    "HuberLoss",
    "KLDivLoss",
    "BCEWithLogitsLoss",
    "CosineEmbeddingLoss",
    "MarginRankingLoss",
    "PoissonNLLLoss",
    "SoftMarginLoss",
)


class LossOutsideAutocastInFloat16(TorchRule):
    id = "MPT103"
    triggers = (b"half", b"float16")

    @classmethod
    def candidate(cls, code) -> bool:
        return code.imports_torch and ("half" in code.calls or "float16" in code.argument_words)

    def visit_Module(self, node: cst.Module) -> None:
        amp = self.context.analysis(TorchAmp.of)
        criteria = BoundNames(self.context, {f"nn.{m}" for m in _LOSS_MODULES})
        for call in self.context.nodes(cst.Call):
            name = self._float32_op(call, criteria)
            if (
                name is None
                or any(r.enabled is not False for r in amp.enclosing_regions(call))
                or any(a.keyword is not None and a.keyword.value == "dtype" for a in call.args)
            ):
                continue  # softmax(x, dtype=torch.float32) computes in float32
            for arg in call.args:
                value = arg.value
                if arg.keyword is not None and arg.keyword.value not in ("input", "target"):
                    continue
                if is_half_cast(self.context, amp, value) or self._reaching_half(amp, value, call):
                    self.report(
                        value,
                        f"`{name}` runs on the float16 tensor `{self.code(value)}` outside autocast (autocast would "
                        "run it in float32): exp/log/sums overflow or lose precision in float16; `.float()` it first",
                        Fix(
                            {
                                value: cst.parse_expression(
                                    f"({self.code(value)}).float()"
                                    if not isinstance(value, (cst.Name, cst.Attribute, cst.Call))
                                    else f"{self.code(value)}.float()"
                                )
                            },
                            FixSafety.SAFE,
                        ),
                    )

    def _float32_op(self, call: cst.Call, criteria: BoundNames) -> str | None:
        func = call.func
        found = self.context.names.torch_api(func, _FLOAT32_OPS)
        if found is not None and found.ns == "torch":
            return f"torch.{found.path}"
        text = dotted(func)
        return text if criteria.binds(func) else None

    def _reaching_half(self, amp: TorchAmp, value: cst.BaseExpression, call: cst.Call) -> bool:
        """Whether the last assignment of the name ``value`` that surely runs before ``call`` binds a float16 cast."""
        text = dotted(value)
        reaching = reaching_assignment(self.context, text, call) if text is not None else None
        return reaching is not None and is_half_cast(self.context, amp, reaching.value)
