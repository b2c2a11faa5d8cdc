"""``mplint verify --fix`` with warm starts (the default) against ``--cold-start``, as a user runs it.

    python bench/verify_speed.py                 # two rounds over the bundled verify fixtures
    python bench/verify_speed.py --rounds 3 fixtures/verify/mask_nan.py

Each run is a new ``python -m mplint verify SCRIPT --fix --steps N --format json`` process (so a warm run pays
for starting its warm interpreter), the two modes taking turns so that a machine whose speed drifts weighs on
both. Both reports must agree (timings aside), or the benchmark fails. The table goes to
``bench/results/verify-<time>.md``. Needs the runtime install (TensorFlow; torch for the torch fixture).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

from mplint.verify.report import without_timings

REPO = Path(__file__).resolve().parent.parent
FIXTURES = [
    "fixtures/verify/fit_softmax.py",
    "fixtures/verify/underflow_loop.py",
    "fixtures/verify/torch_masked_fill.py",
]
MODES = {"warm": [], "cold": ["--cold-start"]}


def verify(script: str, steps: int, flags: list[str]) -> tuple[float, dict]:
    started = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-m", "mplint", "verify", script, "--fix", "--steps", str(steps), "--format", "json", *flags],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=False,
        env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"},
    )
    elapsed = time.perf_counter() - started
    try:
        return elapsed, json.loads(done.stdout)
    except json.JSONDecodeError:
        raise SystemExit(f"mplint verify {script} {' '.join(flags)} failed:\n{done.stderr[-2000:]}") from None


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("scripts", nargs="*", default=FIXTURES)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--steps", type=int, default=5)
    args = parser.parse_args()
    rows = []
    for script in args.scripts:
        times: dict[str, list[float]] = {mode: [] for mode in MODES}
        reports = {}
        for _ in range(args.rounds):
            for mode, flags in MODES.items():
                elapsed, report = verify(script, args.steps, flags)
                times[mode].append(elapsed)
                reports[mode] = without_timings(report)
        if reports["warm"] != reports["cold"]:
            raise SystemExit(f"{script}: the warm and cold reports differ")
        warm, cold = min(times["warm"]), min(times["cold"])
        rows.append(f"| `{script}` | {cold:.1f} | {warm:.1f} | {cold / warm:.2f}x | {reports['warm']['exit_code']} |")
        print(rows[-1], flush=True)
    stamp = datetime.now(timezone.utc).strftime("%Y%m%d-%H%M")
    from mplint.verify.warm import accelerator_visible

    device = (
        "an accelerator visible (warm starts unused: both columns start fresh)"
        if accelerator_visible()
        else "no accelerator visible"
    )
    lines = [
        f"# `mplint verify --fix`: warm starts against fresh interpreters ({stamp} UTC)",
        "",
        f"`python bench/verify_speed.py --rounds {args.rounds} --steps {args.steps}` on {os.cpu_count()} cores, "
        f"Python {sys.version.split()[0]}, {device}. Seconds of the whole command (fastest of "
        f"{args.rounds}); the reports of both modes are equal, timings aside.",
        "",
        "| script | --cold-start s | warm s | faster | exit code |",
        "|---|---:|---:|---:|---:|",
        *rows,
    ]
    out = REPO / "bench" / "results" / f"verify-{stamp}.md"
    out.write_text("\n".join(lines) + "\n", encoding="utf-8")
    print(f"wrote {out.relative_to(REPO)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
