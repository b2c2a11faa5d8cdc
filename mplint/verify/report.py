"""From recorded runs to metrics, MP8xx findings, the before/after table and the JSON document."""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, field

from mplint.verify.runner import RunResult

UNDERFLOW_LIMIT = 0.05  # MP804
COLLAPSE_FACTOR = 256.0  # MP803: last scale <= first / 256
REDUCED = ("float16", "bfloat16")
BLOCKING = ("MP802", "MP803", "MP804")
WARMUP_STEPS = 2


@dataclass
class Metrics:
    policy: str | None
    output_dtype: str
    steps: int
    final_loss: float | None
    non_finite_steps: int
    skipped_steps: int
    scale_first: float | None
    scale_last: float | None
    underflow: float | None
    ms_per_step: float | None
    findings: list = field(default_factory=list)  # {"rule", "message"}

    def to_dict(self) -> dict:
        return dict(vars(self))


def _finite(x) -> bool:
    return x is not None and math.isfinite(x)


def ms_per_step(times: list[float]) -> float | None:
    gaps = [b - a for a, b in zip(times, times[1:])]
    if len(gaps) > WARMUP_STEPS:
        gaps = gaps[WARMUP_STEPS:]
    return statistics.median(gaps) * 1000.0 if gaps else None


def underflow_share(grads: list | None, reference: list | None) -> float | None:
    """Share of non-zero float32-reference gradient entries that are exactly zero in ``grads``."""
    if not grads or not reference or len(grads) != len(reference):
        return None
    if any(g.shape != r.shape for g, r in zip(grads, reference)):
        return None
    nonzero = sum(int((r != 0).sum()) for r in reference)
    lost = sum(int(((r != 0) & (g == 0)).sum()) for g, r in zip(grads, reference))
    return lost / nonzero if nonzero else 0.0


def metrics(run: RunResult, reference: RunResult | None = None) -> Metrics:
    model = run.model or {}
    losses = model.get("losses", [])
    finite_grads = model.get("finite_grads", [])
    scales = [s for s in model.get("loss_scale", []) if s is not None]
    scaled = bool(scales)
    non_finite = sum(1 for loss, ok in zip(losses, finite_grads) if (loss is not None and not math.isfinite(loss)) or (not ok and not scaled))
    skipped = sum(1 for ok in finite_grads if not ok) if scaled else 0
    share = underflow_share(run.first_grads, reference.first_grads) if reference is not None and reference is not run else None
    dtypes = model.get("output_dtypes", [])
    m = Metrics(
        policy=run.records.get("policy"), output_dtype=", ".join(dtypes) or "n/a", steps=len(losses),
        final_loss=next((x for x in reversed(losses) if x is not None), None), non_finite_steps=non_finite,
        skipped_steps=skipped, scale_first=scales[0] if scales else None, scale_last=scales[-1] if scales else None,
        underflow=share, ms_per_step=ms_per_step(model.get("step_times", [])),
    )
    name = model.get("name", "model")
    if non_finite:
        m.findings.append({"rule": "MP802", "message": f"{name}: NaN/Inf in {non_finite} of {len(losses)} steps"})
    if scaled and (scales[-1] <= scales[0] / COLLAPSE_FACTOR or (skipped >= 3 and skipped > len(losses) / 4)):
        m.findings.append({"rule": "MP803", "message": f"{name}: loss scale {scales[0]:g} -> {scales[-1]:g}, {skipped} skipped steps"})
    if share is not None and share >= UNDERFLOW_LIMIT:
        m.findings.append({"rule": "MP804", "message": f"{name}: {share:.0%} of non-zero float32 gradients are zero"})
    reduced = [d for d in dtypes if d in REDUCED]
    if reduced:
        m.findings.append({"rule": "MP806", "message": f"{name}: output observed as {', '.join(reduced)}"})
    for finding in model.get("model_findings", []):
        if finding["rule"] != "MP806":
            m.findings.append({"rule": finding["rule"], "message": f"{name}: {finding['message']}"})
    return m


def _fmt_loss(x) -> str:
    return "n/a" if x is None else f"{x:.4g}"


def _fmt_scale(m: Metrics) -> str:
    return "none" if m.scale_first is None else f"{m.scale_first:g} -> {m.scale_last:g}"


def _fmt_share(x) -> str:
    return "n/a" if x is None else f"{x:.1%}"


def _fmt_ms(x) -> str:
    return "n/a" if x is None else f"{x:.2f}"


ROWS = (
    ("policy", lambda m: m.policy or "n/a"),
    ("output dtype", lambda m: m.output_dtype),
    ("loss after N steps", lambda m: _fmt_loss(m.final_loss)),
    ("non-finite steps", lambda m: f"{m.non_finite_steps}/{m.steps}"),
    ("skipped steps", lambda m: str(m.skipped_steps)),
    ("loss scale first -> last", _fmt_scale),
    ("gradient underflow", lambda m: _fmt_share(m.underflow)),
    ("ms/step", lambda m: _fmt_ms(m.ms_per_step)),
    ("findings", lambda m: ", ".join(sorted({f["rule"] for f in m.findings})) or "none"),
)


def table(title: str, columns: dict[str, Metrics]):
    from rich.table import Table

    t = Table(title=title)
    t.add_column("")
    for name in columns:
        t.add_column(name)
    for label, fmt in ROWS:
        t.add_row(label.replace("N", str(max((m.steps for m in columns.values()), default=0))), *(fmt(m) for m in columns.values()))
    return t


def no_worse(before: Metrics, after: Metrics) -> bool:
    if after.non_finite_steps > before.non_finite_steps:
        return False
    if _finite(before.final_loss) and not _finite(after.final_loss):
        return False
    if before.underflow is not None and after.underflow is not None and after.underflow > before.underflow + 0.01:
        return False
    return after.skipped_steps <= max(before.skipped_steps, 2)


def blocking(m: Metrics) -> list[str]:
    return [f["rule"] for f in m.findings if f["rule"] in BLOCKING]
