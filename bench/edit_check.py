"""The language server's check of an edited file, in-process: what an edit costs without the protocol around it.

    python bench/edit_check.py                          # this checkout
    python bench/edit_check.py --before /tmp/mplint-old  # and an earlier checkout, taking turns

The project is ``bench/lsp.py``'s (the ``keras3_classifier`` fixture and a generated ``layers.py`` of about
300 lines). Each session runs in a fresh interpreter as the server does: statement reuse on, the project's
facts and checker warm after a first check, then edits like ``bench/lsp.py``'s (a line ``xN = N`` added near
the top) checked one after another ("back to back") and then with ``--pause`` seconds between them, as after
a pause in typing. Each edit's figure is the CPU time of the check (``time.process_time``); the table gives
the median and the fastest over every session, in milliseconds. On a virtual machine a check that follows a
pause is often slower than the same check back to back (the CPU was idle); the gap is the machine's.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from datetime import datetime, timezone
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent

SESSION = r"""
import json, os, sys, time
from pathlib import Path
root = Path(sys.argv[1])
os.chdir(root)
import mplint.server.documents as documents
from mplint.engine import statement_reuse
from mplint.runner import Warm

statement_reuse.enable()
warm = Warm()
path = root / "layers.py"
text = path.read_text()


def check(text):
    part = documents.Part(uri=path.as_uri(), text=text)
    return documents.check_with_config(documents.Buffer(path=path, parts=(part,)), root, warm=warm)


check(text)
figures = {"back_to_back": [], "after_pause": []}
version = 1
for kind, pause in (("back_to_back", 0.0), ("after_pause", float(sys.argv[3]))):
    for _ in range(int(sys.argv[2])):
        version += 1
        lines = text.splitlines(keepends=True)
        lines.insert(4, f"x{version} = {version}\n")
        text = "".join(lines)
        time.sleep(pause)
        started = time.process_time()
        check(text)
        figures[kind].append(1000 * (time.process_time() - started))
print(json.dumps(figures))
"""


def session(checkout: Path, root: Path, edits: int, pause: float) -> dict:
    env = {**os.environ, "PYTHONPATH": str(checkout)}
    out = subprocess.run(
        [sys.executable, "-c", SESSION, str(root), str(edits), str(pause)],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return json.loads(out.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sessions", type=int, default=5)
    parser.add_argument("--edits", type=int, default=10, help="edits of each kind per session")
    parser.add_argument("--pause", type=float, default=1.5)
    parser.add_argument("--before", type=Path, help="an earlier mplint checkout, timed in turns with this one")
    args = parser.parse_args()
    sys.path.insert(0, str(REPO / "bench"))
    from lsp import project

    checkouts = {"this checkout": REPO}
    if args.before:
        checkouts["before"] = args.before.resolve()
    for checkout in checkouts.values():
        subprocess.run([sys.executable, "-m", "compileall", "-q", str(checkout / "mplint")], check=True)
    figures: dict[str, dict[str, list[float]]] = {n: {"back_to_back": [], "after_pause": []} for n in checkouts}
    for _ in range(args.sessions):
        for name, checkout in checkouts.items():
            with tempfile.TemporaryDirectory() as tmp:
                for kind, values in session(checkout, project(Path(tmp)), args.edits, args.pause).items():
                    figures[name][kind].extend(values)
    now = datetime.now(timezone.utc)
    lines = [
        f"# Edit checks in-process ({now:%Y-%m-%d %H:%M} UTC)\n",
        f"layers.py, CPU ms: {args.sessions} sessions x {args.edits} edits of each kind (checkouts taking turns),"
        f" pause {args.pause:g} s; load average {os.getloadavg()[0]:.1f}. Checkouts: "
        + ", ".join(f"{n} = {c}" for n, c in checkouts.items())
        + ".\n",
        "| | " + " | ".join(checkouts) + " |",
        "|---|" + "---:|" * len(checkouts),
    ]
    for kind, label in (("back_to_back", "back to back"), ("after_pause", "after a pause")):
        cells = [f"{statistics.median(figures[n][kind]):.0f} (fastest {min(figures[n][kind]):.0f})" for n in checkouts]
        lines.append(f"| {label}, median | " + " | ".join(cells) + " |")
    report = "\n".join(lines) + "\n"
    print(report)
    out = REPO / "bench" / "results" / f"edit-{now:%Y%m%d-%H%M}.md"
    out.write_text(report)
    print(f"written to {out.relative_to(REPO)}")


if __name__ == "__main__":
    main()
