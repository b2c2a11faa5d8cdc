"""Language-server latency: ``mplint server`` and ``ruff server`` driven with the same LSP messages, in one run.

    python bench/lsp.py                     # 5 sessions per server
    python bench/lsp.py --repeats 3 --ruff /path/to/ruff
    git archive <commit> | tar -x -C /tmp/mplint-<commit> && python bench/lsp.py --before /tmp/mplint-<commit>

Both servers get a small project (the ``keras3_classifier`` fixture and a generated ``layers.py`` of
about 300 lines) and the same client: plain JSON-RPC over standard input and output, no client
library in the way. Each session measures, from the client's side:

- initialize: from starting the process to the ``initialize`` answer;
- open: from ``didOpen`` of ``layers.py`` to its first published diagnostics (also from the start);
- edit: from a ``didChange`` (one line added) to the diagnostics published for it; mplint waits for
  typing to pause (``DEBOUNCE_S``) before checking, so its figure is also given less that pause;
- code action: ``textDocument/codeAction`` over the whole file with the published diagnostics, the
  client resolving edits (as VS Code does); then ``codeAction/resolve`` of the first quick fix;
- hover on the first finding, and a pulled ``textDocument/diagnostic`` (a second session in pull mode:
  the first pull after opening, and a pull after an edit).
- first diagnostics of a never-checked project's file opened 0.5 s after ``initialize`` was answered (an editor
  that starts the server with the workspace, then the user opens a file), from ``didOpen``;
- first diagnostics again from the start, of a server opened on the project after the pull session ended
  (what a server keeps on disk, in mplint's case the project's ``.mplint_cache/``, is there);
- the server's CPU time (all its threads, from the kernel's scheduler statistics) from its start to the
  first diagnostics, and for an edit (from the ``didChange`` to the diagnostics it gets): on a shared machine
  the latencies include waiting for a core, these figures much less so. Edits come 1.5 s apart, as after a
  pause in typing.

mplint's code is compiled to bytecode first, as installing it does. Each figure is the median over the sessions, in milliseconds. ``ruff`` is looked for on PATH unless
given; without it only mplint's column is filled. Results go to bench/results/lsp-*.md and .json.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import queue
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from datetime import datetime, timezone
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
RESULTS = REPO / "bench" / "results"
TIMEOUT = 120

HEADER = (
    'import os\nimport keras\nfrom keras import layers\n\nkeras.mixed_precision.set_global_policy("mixed_float16")\n'
)
BLOCK = """

def block_{i}(x, units={units}):
    h = layers.Dense(units, activation="relu")(x)
    h = layers.Dropout(0.1)(h)
    h = layers.LayerNormalization()(h)
    for _ in range(2):
        h = h + layers.Dense(units)(h)
    return h
"""
FOOTER = '\n\nmodel = keras.Sequential([layers.Dense(64), layers.Dense(10, activation="softmax")])\n'


def project(dest: Path) -> Path:
    """The small project both servers open: a fixture and a file of about 300 lines."""
    root = dest / "project"
    shutil.copytree(REPO / "fixtures" / "keras3_classifier", root)
    (root / "layers.py").write_text(HEADER + "".join(BLOCK.format(i=i, units=32 + 8 * i) for i in range(32)) + FOOTER)
    return root


class Client:
    """An editor's side of one session: messages in and out, each received one stamped with its arrival."""

    def __init__(self, command: list[str], root: Path):
        self.started = time.perf_counter()
        self.process = subprocess.Popen(
            command,
            cwd=root,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            env={**os.environ, "PYTHONPATH": str(REPO)},
        )
        self.failed: dict | None = None  # the error of the last request answered with one
        self.inbox: queue.Queue = queue.Queue()
        self.ids = iter(range(1, 1_000_000))
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        stream = self.process.stdout
        while True:
            length = None
            while True:
                line = stream.readline()
                if not line:
                    return
                if not line.strip():
                    break
                name, _, value = line.decode().partition(":")
                if name.lower() == "content-length":
                    length = int(value)
            self.inbox.put((time.perf_counter(), json.loads(stream.read(length))))

    def send(self, message: dict) -> float:
        body = json.dumps({"jsonrpc": "2.0", **message}).encode()
        self.process.stdin.write(b"Content-Length: %d\r\n\r\n%s" % (len(body), body))
        self.process.stdin.flush()
        return time.perf_counter()

    def cpu(self) -> float:
        """Seconds of CPU the server's live threads have run (Linux scheduler statistics, nanoseconds): unlike the
        latencies, barely moved by other load on the machine. ``nan`` where there are none."""
        try:
            tasks = Path(f"/proc/{self.process.pid}/task")
            return sum(int((t / "schedstat").read_text().split()[0]) for t in tasks.iterdir()) / 1e9
        except (OSError, ValueError, IndexError):
            return float("nan")

    def notify(self, method: str, params) -> float:
        return self.send({"method": method, "params": params})

    def request(self, method: str, params) -> tuple[float, dict]:
        """Send a request and wait for its answer: (seconds taken, the answer's result)."""
        id_ = next(self.ids)
        sent = self.send({"id": id_, "method": method, "params": params})
        at, message = self.wait(lambda m: m.get("id") == id_ and "method" not in m)
        self.failed = message.get("error")
        return at - sent, message.get("result")

    def wait(self, wanted) -> tuple[float, dict]:
        """The next message ``wanted`` accepts (the server's own requests are answered with null)."""
        deadline = time.perf_counter() + TIMEOUT
        while True:
            at, message = self.inbox.get(timeout=max(deadline - time.perf_counter(), 0.01))
            if "method" in message and "id" in message:
                self.send({"id": message["id"], "result": None})
            if wanted(message):
                return at, message

    def published(self, uri: str) -> tuple[float, list]:
        at, message = self.wait(
            lambda m: m.get("method") == "textDocument/publishDiagnostics" and m["params"]["uri"] == uri
        )
        return at, message["params"]["diagnostics"]

    def close(self) -> None:
        try:
            self.request("shutdown", None)
            self.notify("exit", None)
            self.process.wait(timeout=10)
        except Exception:
            self.process.kill()


def capabilities(pull: bool) -> dict:
    text = {
        "codeAction": {
            "codeActionLiteralSupport": {"codeActionKind": {"valueSet": ["quickfix", "source"]}},
            "resolveSupport": {"properties": ["edit"]},
            "dataSupport": True,
        },
        "hover": {"contentFormat": ["markdown", "plaintext"]},
        "publishDiagnostics": {"relatedInformation": True},
    }
    if pull:
        text["diagnostic"] = {"dynamicRegistration": False}
    return {"textDocument": text, "workspace": {"configuration": False}, "general": {"positionEncodings": ["utf-16"]}}


def start(command: list[str], root: Path, pull: bool) -> tuple[Client, float]:
    client = Client(command, root)
    took, _ = client.request(
        "initialize",
        {
            "processId": os.getpid(),
            "rootUri": root.as_uri(),
            "workspaceFolders": [{"uri": root.as_uri(), "name": "project"}],
            "capabilities": capabilities(pull),
        },
    )
    client.notify("initialized", {})
    return client, time.perf_counter() - client.started


def open_file(client: Client, path: Path) -> tuple[str, str, float]:
    uri, text = path.as_uri(), path.read_text()
    sent = client.notify(
        "textDocument/didOpen", {"textDocument": {"uri": uri, "languageId": "python", "version": 1, "text": text}}
    )
    return uri, text, sent


def edit(client: Client, uri: str, version: int) -> float:
    """One line added near the top, as typing a line and pausing would send it."""
    at = {"line": 4, "character": 0}
    return client.notify(
        "textDocument/didChange",
        {
            "textDocument": {"uri": uri, "version": version},
            "contentChanges": [{"range": {"start": at, "end": at}, "text": f"x{version} = {version}\n"}],
        },
    )


def push_session(command: list[str], root: Path, edits: int) -> dict:
    client, initialize = start(command, root, pull=False)
    try:
        uri, text, sent = open_file(client, root / "layers.py")
        at, diagnostics = client.published(uri)
        row = {
            "initialize": initialize,
            "open": at - sent,
            "open_from_start": at - client.started,
            "cpu_open": client.cpu(),
            "diagnostics": len(diagnostics),
        }
        changes, cpu = [], []
        for version in range(2, 2 + edits):
            time.sleep(1.5)  # past mplint's idle work (it imports what fixing needs once nothing is asked for 1 s)
            before = client.cpu()
            sent = edit(client, uri, version)
            at, diagnostics = client.published(uri)
            changes.append(at - sent)
            cpu.append(client.cpu() - before)
        row["edit"] = statistics.median(changes)
        row["cpu_edit"] = statistics.median(cpu)
        whole = {"start": {"line": 0, "character": 0}, "end": {"line": 10_000, "character": 0}}
        row["code_action"], offered = client.request(
            "textDocument/codeAction",
            {"textDocument": {"uri": uri}, "range": whole, "context": {"diagnostics": diagnostics}},
        )
        fixes = [a for a in offered or [] if a.get("kind") == "quickfix" and "edit" not in a]
        if fixes:
            row["resolve"], _ = client.request("codeAction/resolve", fixes[0])
        if diagnostics:
            row["hover"], _ = client.request(
                "textDocument/hover", {"textDocument": {"uri": uri}, "position": diagnostics[0]["range"]["start"]}
            )
            if client.failed:
                del row["hover"]  # a server without hover
        return row
    finally:
        client.close()


def pull_session(command: list[str], root: Path) -> dict:
    client, _ = start(command, root, pull=True)
    try:
        uri, _, _ = open_file(client, root / "layers.py")
        row = {}
        row["pull_open"], report = client.request("textDocument/diagnostic", {"textDocument": {"uri": uri}})
        if client.failed:
            return {}  # a server that cannot be pulled from
        edit(client, uri, 2)
        row["pull_edit"], report = client.request("textDocument/diagnostic", {"textDocument": {"uri": uri}})
        row["pulled"] = len((report or {}).get("items", []))
        return row
    finally:
        client.close()


def reopen_session(command: list[str], root: Path) -> dict:
    """An editor opened again on a project checked before (by an earlier session or ``mplint``): its first
    diagnostics, from the process start."""
    client, _ = start(command, root, pull=False)
    try:
        uri, _, sent = open_file(client, root / "layers.py")
        at, _ = client.published(uri)
        return {"reopen_from_start": at - client.started, "cpu_reopen": client.cpu()}
    finally:
        client.close()


LATE_OPEN_S = 0.5


def late_open_session(command: list[str], root: Path) -> dict:
    """A project never checked, its file opened ``LATE_OPEN_S`` after the server answered ``initialize`` (an
    editor that starts the server with the workspace, then the user opens a file): from ``didOpen`` to its
    diagnostics."""
    client, _ = start(command, root, pull=False)
    try:
        time.sleep(LATE_OPEN_S)
        uri, _, sent = open_file(client, root / "layers.py")
        at, _ = client.published(uri)
        return {"late_open": at - sent}
    finally:
        client.close()


def servers(ruff: str | None, before: Path | None) -> dict[str, list[str]]:
    found = {"mplint": [sys.executable, "-m", "mplint", "server"]}
    if before:  # another checkout of mplint (e.g. ``git archive <commit> | tar -x -C DIR``), its code first on the path
        found[before.name] = [
            sys.executable,
            "-c",
            f"import sys; sys.path.insert(0, {str(before)!r}); from mplint.cli import main; sys.exit(main(['server']))",
        ]
    ruff = ruff or shutil.which("ruff")
    if ruff:
        found["ruff"] = [ruff, "server"]
    return found


def version(command: list[str]) -> str:
    if command[:2] == [sys.executable, "-c"]:
        return "mplint from " + command[2].split("'")[1]
    if command[0] == sys.executable:
        sys.path.insert(0, str(REPO))
        from mplint import __version__

        return f"mplint {__version__}"
    return subprocess.run([command[0], "--version"], capture_output=True, text=True).stdout.strip()


ROWS = [
    ("initialize", "initialize (start to answer)"),
    ("open", "first diagnostics after didOpen"),
    ("open_from_start", "first diagnostics from start"),
    ("reopen_from_start", "first diagnostics from start, the project checked before"),
    ("late_open", f"first diagnostics after didOpen, sent {LATE_OPEN_S:g} s after initialize"),
    ("edit", "diagnostics after an edit"),
    ("edit_after_pause", "... less mplint's typing pause"),
    ("code_action", "code actions (from the last check)"),
    ("resolve", "codeAction/resolve of a quick fix"),
    ("hover", "hover on a finding"),
    ("pull_open", "pulled diagnostics, first"),
    ("pull_edit", "pulled diagnostics after an edit"),
    ("cpu_open", "server CPU, start to first diagnostics"),
    ("cpu_reopen", "server CPU, start to first diagnostics, the project checked before"),
    ("cpu_edit", "server CPU for an edit (to its diagnostics)"),
]


def interpreter_floor(repeats: int) -> float:
    """``python -c pass``: the start of any Python server, in milliseconds."""
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        subprocess.run([sys.executable, "-c", "pass"], check=True)
        times.append(time.perf_counter() - started)
    return statistics.median(times) * 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--edits", type=int, default=5)
    parser.add_argument("--ruff", help="the ruff binary (default: ruff on PATH)")
    parser.add_argument("--before", type=Path, help="a folder holding an earlier mplint checkout, timed beside")
    args = parser.parse_args()
    sys.path.insert(0, str(REPO))
    from mplint.server.app import DEBOUNCE_S

    commands = servers(args.ruff, args.before)
    import compileall

    for code in [REPO / "mplint", *([args.before / "mplint"] if args.before else [])]:
        compileall.compile_dir(
            code, quiet=1
        )  # bytecode, as an installed package has (even with PYTHONDONTWRITEBYTECODE)
    load_before = os.getloadavg()[0]
    floor = interpreter_floor(args.repeats)
    figures: dict[str, dict[str, float]] = {}
    counts: dict[str, dict] = {}
    sessions_of: dict[str, list[dict]] = {name: [] for name in commands}
    with tempfile.TemporaryDirectory() as tmp:
        root = project(Path(tmp))
        # Servers take turns within each repeat: a machine that slows down or speeds up during the run (shared
        # cores, clock changes) moves every server's figures alike instead of the last server's alone.
        for _ in range(args.repeats):
            for name, command in commands.items():
                row = {}
                for session, extra in ((push_session, (args.edits,)), (pull_session, ()), (late_open_session, ())):
                    (root / ".mplint_cache").exists() and shutil.rmtree(root / ".mplint_cache")  # cold
                    row.update(session(command, root, *extra))
                row.update(reopen_session(command, root))  # after the pull session, whatever it kept
                sessions_of[name].append(row)
        for name, sessions in sessions_of.items():
            keys = {k for s in sessions for k in s}
            figures[name] = {
                k: statistics.median(s[k] for s in sessions if k in s) * (1 if k in ("diagnostics", "pulled") else 1000)
                for k in keys
            }
            if name != "ruff":
                figures[name]["edit_after_pause"] = figures[name]["edit"] - DEBOUNCE_S * 1000
            counts[name] = {
                "diagnostics": figures[name].pop("diagnostics", 0),
                "pulled": figures[name].pop("pulled", 0),
            }
    names = list(figures)
    load = f"load average {load_before:.1f} at the start, {os.getloadavg()[0]:.1f} at the end"
    lines = [
        f"# Language-server latency ({datetime.now(timezone.utc):%Y-%m-%d %H:%M} UTC)",
        "",
        f"Machine: {platform.machine()}, {os.cpu_count()} cores ({load}), Python {platform.python_version()} "
        f"(`python -c pass`: {floor:.0f} ms). "
        f"Median of {args.repeats} sessions per server (servers taking turns in each repeat), milliseconds. Servers: "
        + ", ".join(version(c) for c in commands.values())
        + ". "
        f"mplint checks an edit after typing pauses {DEBOUNCE_S * 1000:.0f} ms.",
        "",
        "| | " + " | ".join(names) + " |",
        "|---|" + "---:|" * len(names),
    ]
    for key, label in ROWS:
        lines.append(
            f"| {label} | " + " | ".join(f"{figures[n][key]:.0f}" if key in figures[n] else "-" for n in names) + " |"
        )
    lines += [
        "",
        "Findings in layers.py: "
        + ", ".join(f"{n} {counts[n]['diagnostics']:.0f} pushed, {counts[n]['pulled']:.0f} pulled" for n in names)
        + ".",
    ]
    text = "\n".join(lines) + "\n"
    print(text)
    RESULTS.mkdir(parents=True, exist_ok=True)
    stamp = datetime.now(timezone.utc).strftime("%Y%m%d-%H%M")
    (RESULTS / f"lsp-{stamp}.md").write_text(text)
    (RESULTS / f"lsp-{stamp}.json").write_text(
        json.dumps(
            {"figures": figures, "counts": counts, "python_floor_ms": floor, "load": [load_before, os.getloadavg()[0]]},
            indent=2,
        )
    )
    (RESULTS / "lsp-latest.md").write_text(text)


if __name__ == "__main__":
    main()
