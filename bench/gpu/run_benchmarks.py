"""Run ``mplint verify --benchmark`` over the verify fixtures and write the results.

Usage (on a GPU machine): ``python bench/gpu/run_benchmarks.py [--steps 50] [--out bench/gpu/results.json]``.
Writes one JSON document with the device name and, per fixture, median ms/step under the mixed
policy and float32 and the speed-up; prints a rich table.
"""

from __future__ import annotations

import argparse
import io
import json
import platform
import subprocess
import sys
from contextlib import redirect_stdout
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ("fit_softmax.py", "underflow_loop.py", "mask_nan.py", "keras2_fit.py")


def device_name() -> str:
    try:
        out = subprocess.run(
            ["nvidia-smi", "--query-gpu=name,compute_cap", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=30,
        ).stdout.strip()
        return out.splitlines()[0] if out else f"CPU ({platform.processor() or platform.machine()})"
    except (OSError, subprocess.TimeoutExpired):
        return f"CPU ({platform.processor() or platform.machine()})"


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=50)
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "gpu" / "results.json")
    args = parser.parse_args()
    sys.path.insert(0, str(ROOT))
    from rich.console import Console
    from rich.table import Table

    from mplint.verify.cli import main as verify

    results = {"device": device_name(), "steps": args.steps, "fixtures": {}}
    for name in FIXTURES:
        buffer = io.StringIO()
        with redirect_stdout(buffer):
            code = verify(
                [
                    str(ROOT / "fixtures" / "verify" / name),
                    "--benchmark",
                    "--steps",
                    str(args.steps),
                    "--format",
                    "json",
                ]
            )
        doc = json.loads(buffer.getvalue())
        results["fixtures"][name] = {
            "exit_code": code,
            **(doc.get("benchmark") or {"error": doc.get("error")}),
            "findings": doc.get("findings", []),
        }
    args.out.write_text(json.dumps(results, indent=2) + "\n", encoding="utf-8")
    table = Table(title=f"mplint verify --benchmark on {results['device']} ({args.steps} steps)")
    for column in ("fixture", "policy", "mixed ms/step", "float32 ms/step", "speed-up"):
        table.add_column(column)
    for name, r in results["fixtures"].items():
        fmt = lambda x: f"{x:.2f}" if isinstance(x, (int, float)) else "n/a"  # noqa: E731
        table.add_row(
            name,
            str(r.get("policy")),
            fmt(r.get("mixed_ms_per_step")),
            fmt(r.get("float32_ms_per_step")),
            f"{r['speedup']:.2f}x" if r.get("speedup") else "n/a",
        )
    Console().print(table)
    print(f"written to {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
