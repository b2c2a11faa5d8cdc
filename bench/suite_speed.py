"""The whole test suite's time, two commits back to back on this machine: how much faster the suite got.

    python bench/suite_speed.py --before f1e1bec            # that commit, then this checkout's HEAD
    python bench/suite_speed.py --before f1e1bec --after HEAD~3 --rounds 2

Each commit is checked out into a temporary worktree and its suite run there as its own ``pyproject.toml`` says
(``python -m pytest -q``; the ``addopts`` of that commit: one process or one worker per core), with the worktree
first on ``PYTHONPATH`` so that it tests its own code. The figures are wall time and CPU time (the suite's process
and every process it started), and the pytest summary line. With ``--rounds 2`` or more the commits take turns,
so that a machine whose speed drifts weighs on both. The table goes to ``bench/results/suite-<time>.md``.

The suite must have its test install in place (``pip install -e ".[test]"``); nothing is downloaded.
"""

from __future__ import annotations

import argparse
import os
import re
import resource
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
SUMMARY = re.compile(r"^=*\s*(.*\b(?:passed|failed)\b.*) in [\d.]+s", re.MULTILINE)


def run_suite(worktree: Path, timeout: int) -> dict:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(worktree), os.environ.get("PYTHONPATH")]))}
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider"],
        cwd=worktree,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    wall = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    found = SUMMARY.findall(done.stdout)
    failed = [line.split(" - ")[0] for line in done.stdout.splitlines() if line.startswith(("FAILED ", "ERROR "))]
    return {
        "wall": wall,
        "cpu": cpu,
        "summary": found[-1] if found else f"exit status {done.returncode}",
        "failed": failed,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--before", required=True, help="the earlier commit")
    parser.add_argument("--after", default="HEAD", help="the later commit (default: HEAD)")
    parser.add_argument("--rounds", type=int, default=1, help="runs of each, taking turns (default: 1)")
    parser.add_argument("--timeout", type=int, default=3600, help="seconds allowed to one suite run")
    args = parser.parse_args()
    revisions = {}
    for name in (args.before, args.after):
        revisions[name] = subprocess.run(
            ["git", "rev-parse", "--short", name], cwd=REPO, capture_output=True, text=True, check=True
        ).stdout.strip()
    results: dict[str, list[dict]] = {name: [] for name in revisions}
    with tempfile.TemporaryDirectory(prefix="mplint-suite-") as scratch:
        os.chmod(scratch, 0o755)  # the isolation tests run the worktree's code as another user
        trees = {}
        for name, revision in revisions.items():
            trees[name] = Path(scratch) / revision
            subprocess.run(
                ["git", "worktree", "add", "--detach", str(trees[name]), revision],
                cwd=REPO,
                capture_output=True,
                check=True,
            )
        try:
            for round_ in range(args.rounds):
                for name in revisions:
                    result = run_suite(trees[name], args.timeout)
                    results[name].append(result)
                    print(
                        f"round {round_ + 1} {revisions[name]}: {result['wall']:.0f} s wall, {result['cpu']:.0f} s CPU, "
                        f"{result['summary']}",
                        *result["failed"],
                        sep="\n  ",
                        flush=True,
                    )
        finally:
            for tree in trees.values():
                subprocess.run(["git", "worktree", "remove", "--force", str(tree)], cwd=REPO, capture_output=True)
    before, after = (min(r["wall"] for r in results[name]) for name in revisions)
    stamp = datetime.now(timezone.utc).strftime("%Y%m%d-%H%M")
    lines = [
        f"# The test suite, {args.before} against {args.after} ({stamp} UTC)",
        "",
        f"`python bench/suite_speed.py --before {args.before} --after {args.after} --rounds {args.rounds}` on "
        f"{os.cpu_count()} cores, Python {sys.version.split()[0]}. Fastest wall time of each: "
        f"**{before / after:.2f}x** faster.",
        "",
        "| commit | round | wall s | CPU s | pytest |",
        "|---|---:|---:|---:|---|",
    ]
    for name, revision in revisions.items():
        for number, result in enumerate(results[name], 1):
            failed = "".join(f"<br>{test}" for test in result["failed"])
            lines.append(
                f"| {revision} | {number} | {result['wall']:.0f} | {result['cpu']:.0f} | {result['summary']}{failed} |"
            )
    out = REPO / "bench" / "results" / f"suite-{stamp}.md"
    out.write_text("\n".join(lines) + "\n", encoding="utf-8")
    print(f"{before / after:.2f}x; wrote {out.relative_to(REPO)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
