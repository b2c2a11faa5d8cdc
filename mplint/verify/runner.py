"""Launch the instrumented script in a subprocess and read back what it recorded."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import mplint

OK_STATUSES = ("completed", "step-cap")


@dataclass
class RunOptions:
    steps: int = 20
    seed: int = 0
    timeout: float = 300.0
    force_policy: str | None = None
    capture_grads: bool = True
    keras: int = 3
    source_dir: str | None = None  # the original script's folder, for sibling imports of a copy
    memory_limit_mb: int | None = None  # address-space cap (RLIMIT_AS) of the instrumented process


@dataclass
class RunResult:
    label: str
    status: str  # completed, step-cap, exited, crashed, out-of-memory, timeout, nothing-recorded, internal-error
    detail: str = ""
    records: dict = field(default_factory=dict)
    first_grads: list | None = None
    stderr_tail: str = ""

    @property
    def ok(self) -> bool:
        return self.status in OK_STATUSES

    @property
    def model(self) -> dict | None:
        models = self.records.get("models") or []
        return models[0] if models else None


def detect_keras(script: Path) -> int:
    """The Keras the script targets, as the linter decides it for the script's program (config, pins, its
    own imports), or Keras 2 when this environment asks for legacy Keras."""
    from mplint.project.build import project_facts
    from mplint.project.config import project_root
    from mplint.runtime.keras_generation import legacy_keras_requested

    if legacy_keras_requested():
        return 2
    script = script.resolve()
    root = project_root(script.parent)
    facts = project_facts(root).get(script.relative_to(root.resolve()).as_posix())
    return 2 if facts is not None and facts.generation.value <= 2 else 3


def _tail(text: str, lines: int = 15) -> str:
    kept = [line for line in text.splitlines() if not re.match(r"^[IWE]\d{4} |^WARNING: All log messages", line)]
    return "\n".join(kept[-lines:])


def run_script(label: str, script: Path, argv: list[str], options: RunOptions) -> RunResult:
    scratch = Path(tempfile.mkdtemp(prefix="mplint-verify-")).resolve()
    try:
        return _run_in(scratch, label, script.resolve(), argv, options)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def _run_in(scratch: Path, label: str, script: Path, argv: list[str], options: RunOptions) -> RunResult:
    work, tmp = scratch / "work", scratch / "tmp"
    work.mkdir()
    tmp.mkdir()
    records = scratch / "records.json"
    config = {
        "script": str(script), "argv": argv, "steps": options.steps, "seed": options.seed,
        "scratch": str(scratch), "records": str(records), "force_policy": options.force_policy,
        "capture_grads": options.capture_grads, "source_dir": options.source_dir,
    }
    (scratch / "config.json").write_text(json.dumps(config), encoding="utf-8")
    env = dict(os.environ, PYTHONDONTWRITEBYTECODE="1", TMPDIR=str(tmp), KERAS_HOME=str(scratch / "keras_home"),
               PYTHONHASHSEED=str(options.seed), TF_CPP_MIN_LOG_LEVEL="2")
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(Path(mplint.__file__).parent.parent), env.get("PYTHONPATH")]))
    if options.keras == 2:
        env["TF_USE_LEGACY_KERAS"] = "1"
    command = [sys.executable, "-m", "mplint.verify.bootstrap", str(scratch / "config.json")]
    limit = options.memory_limit_mb
    returncode, stderr, timed_out = _launch(command, work, env, options.timeout, limit, scratch)
    if timed_out:
        return RunResult(label, "timeout", f"no result after {options.timeout:g} s (--timeout)", stderr_tail=_tail(stderr))
    if limit and _ran_out_of_memory(records, returncode, stderr):
        return RunResult(label, "out-of-memory", f"ran out of memory under --memory-limit {limit} MB "
                         f"(exit status {returncode})", stderr_tail=_tail(stderr))
    if not records.exists():
        return RunResult(label, "crashed", f"the instrumented process died (status {returncode})",
                         stderr_tail=_tail(stderr))
    data = json.loads(records.read_text(encoding="utf-8"))
    result = RunResult(label, data["status"], data.get("detail", ""), data, stderr_tail=_tail(stderr))
    grads = Path(str(records) + ".grads.npz")
    if grads.exists():
        import numpy as np

        with np.load(grads) as npz:
            result.first_grads = [npz[f"arr_{i}"] for i in range(len(npz.files))]
    if result.ok and not data.get("models") and not data.get("steps"):
        result.status = "nothing-recorded"
        result.detail = "the script ran but no Keras model was called and no optimizer step ran"
    return result


def _ran_out_of_memory(records: Path, returncode: int | None, stderr: str) -> bool:
    """Under a memory limit: the script died of MemoryError, or the process died without recording
    (killed by a signal, or a C++ allocation failure) after an allocation failed."""
    if records.exists():
        try:
            data = json.loads(records.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return True
        return data.get("status") == "crashed" and str(data.get("detail", "")).startswith("MemoryError")
    return "MemoryError" in stderr or "bad_alloc" in stderr or (returncode is not None and returncode < 0)


def _limit_memory(megabytes: int):
    def apply() -> None:  # runs in the child between fork and exec
        import resource

        cap = megabytes * 1024 * 1024
        resource.setrlimit(resource.RLIMIT_AS, (cap, cap))

    return apply


def _kill_group(pid: int) -> None:
    try:
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def _launch(command: list[str], cwd: Path, env: dict, timeout: float, memory_limit_mb: int | None,
            scratch: Path) -> tuple[int | None, str, bool]:
    """Run ``command`` in its own session; whatever it leaves behind (children included) is killed
    when it exits or times out. Output goes to files so that a lingering child holding the streams
    open cannot block the wait. Returns (exit status, stderr, timed out)."""
    out_path, err_path = scratch / "stdout.txt", scratch / "stderr.txt"
    with open(out_path, "wb") as out, open(err_path, "wb") as err:
        proc = subprocess.Popen(command, cwd=cwd, env=env, stdin=subprocess.DEVNULL, stdout=out, stderr=err,
                                start_new_session=True,
                                preexec_fn=_limit_memory(memory_limit_mb) if memory_limit_mb else None)
        timed_out = False
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            timed_out = True
        finally:
            _kill_group(proc.pid)
            proc.wait()
    return proc.returncode, err_path.read_text(encoding="utf-8", errors="replace"), timed_out


def fix_copy(script: Path, keras: int, folder: Path) -> tuple[Path, list[str], str | None]:
    """Copy ``script`` into ``folder`` and run ``mplint --fix`` on the copy.

    Returns the copy, the rule IDs fixed, and an error message when mplint failed."""
    copy = folder / script.name
    shutil.copyfile(script, copy)
    proc = subprocess.run([sys.executable, "-m", "mplint", "--fix", "--keras", str(keras), "--format", "json", str(copy)],
                          capture_output=True, text=True, cwd=folder)
    if proc.returncode not in (0, 1):
        return copy, [], _tail(proc.stderr or proc.stdout) or f"mplint --fix exited with status {proc.returncode}"
    try:
        fixed = [d["rule"] for d in json.loads(proc.stdout).get("fixed", [])]
    except (json.JSONDecodeError, AttributeError):
        fixed = []
    return copy, fixed, None
