"""Per-file engine cost: CPU of one warm ``check_source`` of a file, as the language server re-checks a buffer.

    python bench/engine.py                              # this checkout
    git archive <commit> | tar -x -C /tmp/mplint-<commit> && python bench/engine.py --before /tmp/mplint-<commit>

The file is ``layers.py`` of bench/lsp.py's project (about 300 lines; the ``keras3_classifier``
fixture beside it) and each fixture's largest Python file. Each checkout runs in its own process:
it checks the file once through the command line (``--no-cache``: project facts, rule selection),
then times ``check_source`` with the options the runner built, which is the whole per-file engine
(pre-filters, both parses, rules, positions) and nothing of the project. Checkouts take turns
round by round, so a busy machine slows them alike; the figure is the median CPU time
(``time.process_time``) over all rounds, in milliseconds. Results go to bench/results/engine-*.md and .json.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
from datetime import datetime, timezone
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
RESULTS = REPO / "bench" / "results"

# Run in a child process with a checkout's code first on the path: argv = root, file, repeats.
WORKER = r"""
import io, json, sys, time, contextlib
sys.path.insert(0, sys.argv[1])
from mplint import runner
from mplint.cli import main
from mplint.engine.check import check_source
captured = []
check_all = runner._check_all
def spy(todo, jobs, progress):
    captured.extend(todo)
    return check_all(todo, jobs, progress)
runner._check_all = spy
with contextlib.redirect_stdout(io.StringIO()):
    try:
        main([sys.argv[2], "--no-cache", "--format", "json"])
    except SystemExit:
        pass
source, data, options = captured[0]
name, package = runner.module_name(source.path)
check_source(source.display, data, options, name, package)  # imports and first-use tables
times = []
for _ in range(int(sys.argv[3])):
    started = time.process_time()
    result = check_source(source.display, data, options, name, package)
    times.append(time.process_time() - started)
print(json.dumps({"times": times, "findings": len(result.diagnostics), "rules": len(options.rules)}))
"""


def files(root: Path) -> list[Path]:
    sys.path.insert(0, str(REPO / "bench"))
    from lsp import project

    out = [project(root) / "layers.py"]
    fixtures = REPO / "fixtures"
    largest = max((p for p in fixtures.rglob("*.py") if "torch" not in p.parts), key=lambda p: len(p.read_bytes()))
    out.append(largest)
    return out


def measure(code: Path, path: Path, repeats: int) -> dict:
    done = subprocess.run(
        [sys.executable, "-c", WORKER, str(code), str(path), str(repeats)],
        capture_output=True,
        text=True,
        check=True,
        cwd=path.parent,
    )
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--repeats", type=int, default=10, help="checks timed per round")
    parser.add_argument("--before", type=Path, action="append", default=[], help="an earlier checkout, timed beside")
    args = parser.parse_args()
    codes = {"mplint": REPO, **{before.name: before for before in args.before}}
    load_before = os.getloadavg()[0]
    figures: dict[str, dict[str, dict]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        targets = files(Path(tmp))
        labels = {p: p.name if p.name == "layers.py" else str(p.relative_to(REPO)) for p in targets}
        for path in targets:
            runs: dict[str, list[float]] = {name: [] for name in codes}
            seen: dict[str, dict] = {}
            for _ in range(args.rounds):
                for name, code in codes.items():
                    found = measure(code, path, args.repeats)
                    runs[name] += found["times"]
                    seen[name] = found
            lines = len(path.read_text().splitlines())
            figures[labels[path]] = {
                name: {
                    "median_ms": statistics.median(runs[name]) * 1000,
                    "min_ms": min(runs[name]) * 1000,
                    "lines": lines,
                    "findings": seen[name]["findings"],
                    "rules": seen[name]["rules"],
                }
                for name in codes
            }
    names = list(codes)
    load = f"load average {load_before:.1f} at the start, {os.getloadavg()[0]:.1f} at the end"
    text_lines = [
        f"# Per-file engine cost ({datetime.now(timezone.utc):%Y-%m-%d %H:%M} UTC)",
        "",
        f"Machine: {platform.machine()}, {os.cpu_count()} cores ({load}), Python {platform.python_version()}. "
        f"CPU time of one warm `check_source`, median (min) of {args.rounds} rounds x {args.repeats} checks, "
        "milliseconds; checkouts take turns each round. Checkouts: "
        + ", ".join(f"{n} ({c})" for n, c in codes.items())
        + ".",
        "",
        "| file | lines | findings | " + " | ".join(names) + " |",
        "|---|---:|---:|" + "---:|" * len(names),
    ]
    for label, per in figures.items():
        first = per[names[0]]
        text_lines.append(
            f"| {label} | {first['lines']} | "
            + " / ".join(str(per[n]["findings"]) for n in names)
            + " | "
            + " | ".join(f"{per[n]['median_ms']:.0f} ({per[n]['min_ms']:.0f})" for n in names)
            + " |"
        )
    text = "\n".join(text_lines) + "\n"
    print(text)
    RESULTS.mkdir(parents=True, exist_ok=True)
    stamp = datetime.now(timezone.utc).strftime("%Y%m%d-%H%M")
    (RESULTS / f"engine-{stamp}.md").write_text(text)
    (RESULTS / f"engine-{stamp}.json").write_text(
        json.dumps({"figures": figures, "load": [load_before, os.getloadavg()[0]]}, indent=2)
    )
    (RESULTS / "engine-latest.md").write_text(text)


if __name__ == "__main__":
    main()
