"""From recorded runs to metrics, MP8xx findings, the before/after table and the JSON document.

A run trains one or more *units*: an optimizer inside one training loop (a ``fit()`` or a custom
loop). A GAN's loop has two units, one per optimizer, each with its own steps, loss, loss-scale
history and trained model. Time is measured per training iteration of a loop: all its optimizers
once."""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, field

from mplint.knowledge.dtypes import REDUCED_DTYPES
from mplint.verify.runner import RunResult

UNDERFLOW_LIMIT = 0.05  # MP804
COLLAPSE_FACTOR = 256.0  # MP803: last scale <= first / 256
BLOCKING = ("MP802", "MP803", "MP804", "MPT202", "MPT204")
UPDATE_FACTOR = 64.0  # a first update this many times off the float32 reference's is the loss scale left in
WARMUP_STEPS = 2


@dataclass
class UnitMetrics:
    unit: str
    loop: str
    optimizer: str
    model: str | None
    steps: int
    final_loss: float | None
    non_finite_steps: int
    skipped_steps: int
    scale_history: list
    underflow: float | None
    ms_per_iteration: float | None
    ms_spread: tuple | None  # (fastest, slowest) iteration after warm-up
    update_ratio: float | None = None  # first update's norm / the float32 reference's (PyTorch)

    @property
    def scale_first(self):
        return self.scale_history[0] if self.scale_history else None

    @property
    def scale_last(self):
        return self.scale_history[-1] if self.scale_history else None


@dataclass
class Metrics:
    policy: str | None
    status: str
    crash: dict | None
    units: list = field(default_factory=list)  # UnitMetrics
    model_outputs: dict = field(default_factory=dict)  # model name -> output dtypes
    findings: list = field(default_factory=list)  # {"rule", "message"}
    autocast_ops: str | None = None  # PyTorch: the dtype each op ran in under autocast

    @property
    def main(self) -> UnitMetrics | None:
        return max(self.units, key=lambda u: u.steps) if self.units else None

    @property
    def steps(self) -> int:
        return max((u.steps for u in self.units), default=0)

    @property
    def non_finite_steps(self) -> int:
        return sum(u.non_finite_steps for u in self.units)

    @property
    def skipped_steps(self) -> int:
        return sum(u.skipped_steps for u in self.units)

    @property
    def output_dtype(self) -> str:
        main = self.main
        if main is not None and main.model in self.model_outputs:
            return ", ".join(self.model_outputs[main.model]) or "n/a"
        return next((", ".join(d) for d in self.model_outputs.values() if d), "n/a")

    @property
    def ms_per_step(self) -> float | None:
        return self.main.ms_per_iteration if self.main else None

    def to_dict(self) -> dict:
        main = self.main
        units = []
        for u in self.units:
            d = dict(vars(u))
            d.update(scale_first=u.scale_first, scale_last=u.scale_last)
            units.append(d)
        return {
            "policy": self.policy,
            "status": self.status,
            "crash": self.crash,
            "output_dtype": self.output_dtype,
            "steps": self.steps,
            "final_loss": main.final_loss if main else None,
            "non_finite_steps": self.non_finite_steps,
            "skipped_steps": self.skipped_steps,
            "scale_first": main.scale_first if main else None,
            "scale_last": main.scale_last if main else None,
            "underflow": main.underflow if main else None,
            "ms_per_step": self.ms_per_step,
            "units": units,
            "model_outputs": self.model_outputs,
            "findings": self.findings,
            "autocast_ops": self.autocast_ops,
        }


def _finite(x) -> bool:
    return x is not None and math.isfinite(x)


def iteration_times(times: list[float]) -> list[float]:
    """Milliseconds between consecutive steps of one optimizer, warm-up steps left out."""
    gaps = [(b - a) * 1000.0 for a, b in zip(times, times[1:])]
    return gaps[WARMUP_STEPS:] if len(gaps) > WARMUP_STEPS else gaps


def ms_per_step(times: list[float]) -> float | None:
    gaps = iteration_times(times)
    return statistics.median(gaps) if gaps else None


def underflow_share(grads: list | None, reference: list | None) -> float | None:
    """Share of non-zero float32-reference gradient entries that are exactly zero in ``grads``."""
    if not grads or not reference or len(grads) != len(reference):
        return None
    if any(g.shape != r.shape for g, r in zip(grads, reference)):
        return None
    nonzero = sum(int((r != 0).sum()) for r in reference)
    lost = sum(int(((r != 0) & (g == 0)).sum()) for g, r in zip(grads, reference))
    return lost / nonzero if nonzero else 0.0


def _loop_clock(units: list[dict]) -> list[float]:
    """Iteration times of a loop: the gaps of its least frequent optimizer (a GAN whose critic steps
    five times per generator step iterates at the generator's pace)."""
    timed = [u for u in units if len(u["step_times"]) >= 2]
    if not timed:
        return []
    return iteration_times(min(timed, key=lambda u: len(u["step_times"]))["step_times"])


def _place(unit: dict, units: list[dict]) -> tuple[str, int]:
    """A unit's loop and its optimizer's order in that loop: the same unit in the float32 run, even
    when a fix wrapped the optimizer in a LossScaleOptimizer."""
    return unit["loop"], [u["unit"] for u in units if u["loop"] == unit["loop"]].index(unit["unit"])


def autocast_ops(regions: list[dict]) -> str | None:
    """One line on the ops torch autocast regions ran and the dtype of each op's output, most
    frequent first: per region when every region ran the same ops, else added up."""
    if not regions:
        return None
    count = sum(r["regions"] for r in regions)
    if len(regions) == 1:
        ops, head = regions[0]["ops"], f"each of {count} autocast region{'s' if count > 1 else ''}"
    else:
        totals: dict = {}
        for region in regions:
            for op, dtype, n in region["ops"]:
                totals[(op, dtype)] = totals.get((op, dtype), 0) + n * region["regions"]
        ops, head = [(op, dtype, n) for (op, dtype), n in totals.items()], f"{count} autocast regions in all"
    ordered = sorted(ops, key=lambda o: (-o[2], o[0], o[1]))
    return f"{head}: " + ", ".join(f"{op} x{n} {dtype}" for op, dtype, n in ordered)


def metrics(run: RunResult, reference: RunResult | None = None) -> Metrics:
    records = run.records
    units = records.get("units") or []
    ref_units = {
        _place(u, reference.records["units"]): i
        for i, u in enumerate((reference.records.get("units") or []) if reference else [])
    }
    m = Metrics(
        policy=records.get("policy"),
        status=run.status,
        crash=records.get("crash"),
        model_outputs={
            model["name"]: model["output_dtypes"] for model in records.get("models", []) if model.get("output_dtypes")
        },
        autocast_ops=autocast_ops(records.get("autocast_regions") or []),
    )
    for index, unit in enumerate(units):
        losses, finite_grads = unit["losses"], unit["finite_grads"]
        scales = [s for s in unit["loss_scale"] if s is not None]
        scaled = bool(scales)
        non_finite = sum(
            1
            for loss, ok in zip(losses, finite_grads)
            if (loss is not None and not math.isfinite(loss)) or (not ok and not scaled)
        )
        skipped = sum(1 for ok in finite_grads if not ok) if scaled else 0
        share = None
        place = _place(unit, units)
        if reference is not None and reference is not run and place in ref_units:
            share = underflow_share(run.first_grads.get(index), reference.first_grads.get(ref_units[place]))
        ratio = None
        if reference is not None and reference is not run and place in ref_units:
            ref_update = reference.records["units"][ref_units[place]].get("first_update")
            if unit.get("first_update") is not None and ref_update:
                ratio = unit["first_update"] / ref_update
        clock = _loop_clock([u for u in units if u["loop"] == unit["loop"]])
        u = UnitMetrics(
            unit=unit["unit"],
            loop=unit["loop"],
            optimizer=unit["optimizer"],
            model=unit.get("model"),
            steps=len(losses),
            final_loss=next((x for x in reversed(losses) if x is not None), None),
            non_finite_steps=non_finite,
            skipped_steps=skipped,
            scale_history=scales,
            underflow=share,
            ms_per_iteration=statistics.median(clock) if clock else None,
            ms_spread=(min(clock), max(clock)) if clock else None,
            update_ratio=ratio,
        )
        m.units.append(u)
        name = f"{u.model or u.optimizer} ({u.loop})" if len(units) > 1 else (u.model or u.optimizer)
        if non_finite:
            m.findings.append({"rule": "MP802", "message": f"{name}: NaN/Inf in {non_finite} of {len(losses)} steps"})
        if scaled and (scales[-1] <= scales[0] / COLLAPSE_FACTOR or (skipped >= 3 and skipped > len(losses) / 4)):
            m.findings.append(
                {
                    "rule": "MP803",
                    "message": f"{name}: loss scale {scales[0]:g} -> {scales[-1]:g}, {skipped} skipped steps",
                }
            )
        if ratio is not None and ratio > 0 and scaled and ratio <= 1 / UPDATE_FACTOR:
            m.findings.append(
                {
                    "rule": "MPT204",
                    "message": f"{name}: the first update is {_fmt_ratio(ratio)} of the float32 "
                    "reference's: gradients clipped while still multiplied by the loss scale",
                }
            )
        if ratio is not None and scaled and ratio >= UPDATE_FACTOR:
            m.findings.append(
                {
                    "rule": "MPT202",
                    "message": f"{name}: the first update is {_fmt_ratio(ratio)} the float32 "
                    "reference's: gradients applied still multiplied by the loss scale",
                }
            )
        if share is not None and share >= UNDERFLOW_LIMIT:
            m.findings.append(
                {"rule": "MP804", "message": f"{name}: {share:.0%} of non-zero float32 gradients are zero"}
            )
    for model in records.get("models", []):
        reduced = [d for d in model.get("output_dtypes", []) if d in REDUCED_DTYPES]
        if model.get("keras") == 0 and not set(model.get("parameter_dtypes", [])) & REDUCED_DTYPES:
            reduced = []  # a torch module under autocast: float16 outputs by design, its loss runs in float32
        if reduced:
            m.findings.append({"rule": "MP806", "message": f"{model['name']}: output observed as {', '.join(reduced)}"})
        for finding in model.get("model_findings", []):
            if finding["rule"] != "MP806":
                m.findings.append({"rule": finding["rule"], "message": f"{model['name']}: {finding['message']}"})
    return m


def without_timings(value):
    """A JSON report (or part of one) less its timings, the ``ms_*`` fields: what two runs of one script with one
    seed agree on (a warm and a fresh start, warm.py)."""
    if isinstance(value, dict):
        return {k: without_timings(v) for k, v in value.items() if not k.startswith("ms_")}
    if isinstance(value, list):
        return [without_timings(v) for v in value]
    return value


def _fmt_loss(x) -> str:
    return "n/a" if x is None else f"{x:.4g}"


def _fmt_scale(u: UnitMetrics) -> str:
    return "none" if u.scale_first is None else f"{u.scale_first:g} -> {u.scale_last:g}"


def _fmt_ratio(x) -> str:
    if x is None:
        return "n/a"
    return f"1/{1 / x:.0f}" if 0 < x < 0.5 else f"{x:.2f}x"


def _fmt_share(x) -> str:
    return "n/a" if x is None else f"{x:.1%}"


def _fmt_ms(x) -> str:
    return "n/a" if x is None else f"{x:.2f}"


def _fmt_iteration(u: UnitMetrics) -> str:
    if u.ms_per_iteration is None:
        return "n/a"
    low, high = u.ms_spread
    return f"{u.ms_per_iteration:.2f} ({low:.2f}-{high:.2f})"


def crash_text(crash: dict) -> str:
    where = f" at {crash['file']}:{crash['line']}" if crash.get("line") else ""
    source = f" ({crash['source']})" if crash.get("source") else ""
    return f"crashed with {crash['error']}{where}{source}"


UNIT_ROWS = (
    ("steps", lambda u: str(u.steps)),
    ("final loss", lambda u: _fmt_loss(u.final_loss)),
    ("non-finite steps", lambda u: f"{u.non_finite_steps}/{u.steps}"),
    ("skipped steps", lambda u: str(u.skipped_steps)),
    ("loss scale first -> last", _fmt_scale),
    ("gradient underflow", lambda u: _fmt_share(u.underflow)),
    ("first update / float32 reference", lambda u: _fmt_ratio(u.update_ratio)),
    ("ms/iteration (fastest-slowest)", _fmt_iteration),
)


def _status(m: Metrics) -> str:
    if m.crash:
        return f"crashed at line {m.crash['line']}" if m.crash.get("line") else "crashed"
    return m.status


def _blocks(runs: list[Metrics]) -> list[tuple[str, list[UnitMetrics | None]]]:
    """One block of rows per unit, each run's in its column: units pair by their loop and their optimizer's order in
    it (``_place``), so an optimizer a fix wrapped (``Adam`` before, ``LossScaleOptimizer`` after) keeps one block.
    The block is named by the unit where every run names it alike, else by its loop (and the optimizer's order)."""
    places: dict[tuple[str, int], list[UnitMetrics | None]] = {}
    for column, m in enumerate(runs):
        seen: dict[str, int] = {}  # units met so far per loop
        for u in m.units:
            index = seen[u.loop] = seen.get(u.loop, -1) + 1
            places.setdefault((u.loop, index), [None] * len(runs))[column] = u
    per_loop = {loop: sum(1 for other, _ in places if other == loop) for loop, _ in places}
    blocks = []
    for (loop, index), cells in places.items():
        names = {u.unit for u in cells if u}
        if len(names) == 1:
            label = names.pop()
        else:
            label = loop if per_loop[loop] == 1 else f"{loop} / optimizer {index + 1}"
        blocks.append((label, cells))
    return blocks


def _trains(u: UnitMetrics | None, named: bool) -> str:
    if u is None:
        return "-"
    trains = f"trains {u.model or 'n/a'}"
    return f"{u.optimizer}, {trains}" if named else trains


def table(title: str, columns: dict[str, Metrics]):
    """Runs side by side; one block of rows per unit, headed by its loop, optimizer and trained model."""
    from rich.table import Table

    t = Table(title=title)
    t.add_column("")
    for name in columns:
        t.add_column(name)
    runs = list(columns.values())
    t.add_row("status", *(_status(m) for m in runs))
    t.add_row("policy", *(m.policy or "n/a" for m in runs))
    models = list(dict.fromkeys(name for m in runs for name in m.model_outputs))
    for model in models:
        t.add_row(f"output dtype: {model}", *(", ".join(m.model_outputs.get(model, [])) or "-" for m in runs))
    for label, cells in _blocks(runs):
        t.add_section()
        named = len({u.optimizer for u in cells if u}) > 1  # a fix wrapped or renamed the optimizer: say which is which
        t.add_row(label, *(_trains(u, named) for u in cells))
        for row, fmt in UNIT_ROWS:
            t.add_row(f"  {row}", *(fmt(u) if u else "-" for u in cells))
    t.add_section()
    t.add_row("findings", *(", ".join(sorted({f["rule"] for f in m.findings})) or "none" for m in runs))
    return t


def no_worse(before: Metrics, after: Metrics) -> bool:
    if after.non_finite_steps > before.non_finite_steps:
        return False
    if before.main and after.main and _finite(before.main.final_loss) and not _finite(after.main.final_loss):
        return False
    b_share = before.main.underflow if before.main else None
    a_share = after.main.underflow if after.main else None
    if b_share is not None and a_share is not None and a_share > b_share + 0.01:
        return False
    return after.skipped_steps <= max(before.skipped_steps, 2)


def blocking(m: Metrics) -> list[str]:
    return sorted({f["rule"] for f in m.findings if f["rule"] in BLOCKING})
