"""Launch the instrumented script in a subprocess and read back what it recorded."""

from __future__ import annotations

import dataclasses
import functools
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import mplint
from mplint.verify import isolate, warm

OK_STATUSES = ("completed", "step-cap")


@dataclass
class RunOptions:
    steps: int = 20
    seed: int = 0
    timeout: float = 300.0
    force_policy: str | None = None
    capture_grads: bool = True
    timing: bool = False  # --benchmark: the step timer alone (torch_hooks.py), nothing else that costs time
    keras: int = 3
    source_dir: str | None = None  # the original script's folder, for sibling imports of a copy
    memory_limit_mb: int | None = None  # address-space cap (RLIMIT_AS) of the instrumented process
    framework: str = "keras"  # or "torch"
    backend: str = "tensorflow"  # Keras 3's: "jax", "torch" (set as KERAS_BACKEND for the run) or "tensorflow"
    isolated: bool = True  # in a private view of the file system (isolate.py); else Python-level redirection
    warm: bool = True  # a fork of an interpreter that imported the framework once, where faithful (warm.py)


@dataclass
class RunResult:
    label: str
    # completed, step-cap, exited, crashed, out-of-memory, timeout, nothing-recorded, not-isolated,
    # instrumentation-failed (mplint's own code raised: failures.py)
    status: str
    detail: str = ""
    records: dict = field(default_factory=dict)
    first_grads: dict = field(default_factory=dict)  # unit index -> its first step's gradients
    stderr_tail: str = ""

    @property
    def ok(self) -> bool:
        return self.status in OK_STATUSES

    @property
    def crash(self) -> dict | None:
        return self.records.get("crash")


def detect_keras(script: Path) -> int:
    """The Keras the script targets, as the linter decides it for the script's program (config, pins, its
    own imports), or Keras 2 when this environment asks for legacy Keras."""
    from mplint.checks import all_rules
    from mplint.engine.summaries import load_with
    from mplint.project.build import project_facts
    from mplint.project.config import project_root
    from mplint.runtime.keras_generation import legacy_keras_requested

    if legacy_keras_requested():
        return 2
    load_with(all_rules)  # the summary kinds project facts read
    script = script.resolve()
    root = project_root(script.parent)
    facts = project_facts(root).get(script.relative_to(root.resolve()).as_posix())
    return 2 if facts is not None and facts.generation.value <= 2 else 3


def _tail(text: str, lines: int = 15) -> str:
    kept = [line for line in text.splitlines() if not re.match(r"^[IWE]\d{4} |^WARNING: All log messages", line)]
    return "\n".join(kept[-lines:])


def run_script(label: str, script: Path, argv: list[str], options: RunOptions, text: Path | None = None) -> RunResult:
    """Run ``script`` (or, with ``text``, that file under the script's name: a fixed copy) in a scratch
    copy of the script's folder, so that its sibling files are read at the same relative paths and
    whatever it writes there changes the copy only."""
    base = Path(tempfile.mkdtemp(prefix="mplint-verify-")).resolve()
    try:
        isolate.make_layout(base)
        return _run_in(base, label, script.resolve(), argv, options, text)
    except _WarmInterpreterLost:  # killed under the run (the OOM killer): the run again, fresh, in a new copy
        return run_script(label, script, argv, dataclasses.replace(options, warm=False), text)
    finally:
        isolate.remove_layout(base)


class _WarmInterpreterLost(Exception):
    pass


# Not copied with the script's folder: version control, caches and environments.
COPY_IGNORED = (
    ".git",
    ".hg",
    ".svn",
    "__pycache__",
    ".venv",
    "venv",
    "node_modules",
    ".tox",
    ".mypy_cache",
    ".pytest_cache",
    ".ipynb_checkpoints",
)
COPY_BUDGET_BYTES = 1 << 30
COPY_BUDGET_FILES = 20000


def copy_folder(source: Path, work: Path) -> list[str]:
    """Copy ``source`` into ``work`` within the byte and file budgets; returns what was left out."""
    left_out: list[str] = []
    budget = {"bytes": COPY_BUDGET_BYTES, "files": COPY_BUDGET_FILES}

    def ignore(folder: str, names: list[str]) -> set[str]:
        skipped = {n for n in names if n in COPY_IGNORED}
        for name in sorted(set(names) - skipped):
            path = os.path.join(folder, name)
            if os.path.isdir(path):
                if os.path.commonpath([path, work]) == path:  # holds the copy itself: a script in the temp folder
                    skipped.add(name)
                continue
            size = os.path.getsize(path) if os.path.exists(path) else 0
            if size > budget["bytes"] or budget["files"] <= 0:
                skipped.add(name)
                left_out.append(os.path.relpath(path, source))
                continue
            budget["bytes"] -= size
            budget["files"] -= 1
        return skipped

    try:
        shutil.copytree(source, work, ignore=ignore, ignore_dangling_symlinks=True, dirs_exist_ok=True)
    except shutil.Error as exc:  # unreadable files, symlink loops: run with what was copied
        left_out.extend(str(args[0]) for args in exc.args[0] if isinstance(args, tuple))
    return left_out


def original_lines(original: Path, fixed: Path) -> dict[str, int]:
    """The original script's line for each line of its fixed copy that moved (a line a fix inserted takes the
    line before it), so that the fixed run names its loops as the original does."""
    import difflib

    try:
        before = original.read_text(encoding="utf-8", errors="replace").splitlines()
        after = fixed.read_text(encoding="utf-8", errors="replace").splitlines()
    except OSError:
        return {}
    found: dict[str, int] = {}
    for tag, i1, i2, j1, j2 in difflib.SequenceMatcher(None, before, after, autojunk=False).get_opcodes():
        for j in range(j1, j2):
            if tag == "equal":
                line = i1 + (j - j1) + 1
            elif tag == "replace":
                line = i1 + min(j - j1, i2 - i1 - 1) + 1
            else:  # inserted: the original line before the insertion
                line = max(i1, 1)
            if line != j + 1:
                found[str(j + 1)] = line
    return found


def _run_in(base: Path, label: str, script: Path, argv: list[str], options: RunOptions, text: Path | None) -> RunResult:
    scratch = base / "scratch"
    work, tmp = scratch / "work", scratch / "tmp"
    left_out = copy_folder(script.parent, work)
    tmp.mkdir()
    original, script = script, work / script.name
    if text is not None:
        shutil.copyfile(text, script)
    records = scratch / "records.json"
    config = {
        "script": str(script),
        "argv": argv,
        "steps": options.steps,
        "seed": options.seed,
        "scratch": str(scratch),
        "records": str(records),
        "force_policy": options.force_policy,
        "capture_grads": options.capture_grads,
        "timing": options.timing,
        "source_dir": options.source_dir,
        "isolated": options.isolated,
        "framework": options.framework,
        "backend": options.backend,
        "line_map": original_lines(original, text) if text is not None else {},
    }
    (scratch / "config.json").write_text(json.dumps(config), encoding="utf-8")
    env = dict(
        os.environ,
        PYTHONDONTWRITEBYTECODE="1",
        TMPDIR=str(tmp),
        KERAS_HOME=str(scratch / "keras_home"),
        PYTHONHASHSEED=str(options.seed),
        TF_CPP_MIN_LOG_LEVEL="2",
    )
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(Path(mplint.__file__).parent.parent), env.get("PYTHONPATH")]))
    if options.keras == 2:
        env["TF_USE_LEGACY_KERAS"] = "1"
    elif options.framework == "keras":
        env["KERAS_BACKEND"] = options.backend  # as the script or the user chose it (cli.detect_backend)
    limit = options.memory_limit_mb
    launched = _launch_warm(options, env, work, base, scratch) if options.warm else None
    if launched is None:
        command = [sys.executable, "-m", "mplint.verify.bootstrap", str(scratch / "config.json")]
        if options.isolated:
            command = [sys.executable, "-m", "mplint.verify.isolate", str(base), "--", *command]
        launched = _launch(command, work, env, options.timeout, limit, scratch)
    returncode, stderr, timed_out = launched
    refusal = scratch / "isolation-error.txt"
    if options.isolated and returncode == isolate.UNAVAILABLE and refusal.exists():
        return RunResult(label, "not-isolated", isolation_refusal(refusal.read_text(encoding="utf-8")))
    if timed_out:
        return RunResult(
            label, "timeout", f"no result after {options.timeout:g} s (--timeout)", stderr_tail=_tail(stderr)
        )
    if limit and _ran_out_of_memory(records, returncode, stderr):
        return RunResult(
            label,
            "out-of-memory",
            f"ran out of memory under --memory-limit {limit} MB (exit status {returncode})",
            stderr_tail=_tail(stderr),
        )
    if not records.exists():
        return RunResult(
            label, "crashed", f"the instrumented process died (status {returncode})", stderr_tail=_tail(stderr)
        )
    data = json.loads(records.read_text(encoding="utf-8"))
    if left_out:
        data.setdefault("events", {}).setdefault("notes", []).append(
            f"not copied into the scratch folder (budget or unreadable): {', '.join(left_out[:5])}"
            + (f" and {len(left_out) - 5} more" if len(left_out) > 5 else "")
        )
    if options.isolated:
        data.setdefault("events", {})["writes_redirected"] = isolate.writes_outside(base)
    result = RunResult(label, data["status"], data.get("detail", ""), data, stderr_tail=_tail(stderr))
    result.first_grads = _first_grads(records)
    if result.ok and not any(m.get("output_dtypes") for m in data.get("models", [])) and not data.get("steps"):
        result.status = "nothing-recorded"
        result.detail = "the script ran but no Keras model or torch module was called and no optimizer step ran"
    return result


def _first_grads(records: Path) -> dict:
    """Each unit's first-step gradients as the run saved them (recorder.save_grads): NumPy arrays, or CPU tensors
    where the run had no NumPy."""
    arrays: dict = {}
    npz, pt = Path(str(records) + ".grads.npz"), Path(str(records) + ".grads.pt")
    if npz.exists():
        import numpy as np

        with np.load(npz) as saved:
            arrays = {name: saved[name] for name in saved.files}
    elif pt.exists():
        import torch

        arrays = torch.load(pt, weights_only=True)
    grads: dict = {}
    for name, array in arrays.items():  # u<unit>_<index>
        unit, index = map(int, name[1:].split("_"))
        grads.setdefault(unit, {})[index] = array
    return {u: [g[i] for i in sorted(g)] for u, g in grads.items()}


@functools.cache
def isolation_problem() -> str | None:
    """Why scripts cannot run in a private view of the file system here, or None when they can (asked once a
    process: the answer is the machine's)."""
    if sys.platform != "linux":
        return isolation_refusal(f"it needs Linux mount namespaces, and this is {sys.platform}")
    base = Path(tempfile.mkdtemp(prefix="mplint-verify-")).resolve()
    try:
        isolate.make_layout(base)
        proc = subprocess.run(
            [sys.executable, "-m", "mplint.verify.isolate", str(base), "--", sys.executable, "-c", ""],
            cwd=base / "scratch",
            capture_output=True,
            text=True,
            env=dict(os.environ, PYTHONPATH=str(Path(mplint.__file__).parent.parent)),
        )
        refusal = base / "scratch" / "isolation-error.txt"
        if refusal.exists():
            return isolation_refusal(refusal.read_text(encoding="utf-8"))
        if proc.returncode != 0:
            return isolation_refusal(_tail(proc.stderr, 3) or f"exit status {proc.returncode}")
        return None
    finally:
        isolate.remove_layout(base)


def isolation_refusal(reason: str) -> str:
    return (
        f"the script cannot be given a private view of the file system here ({reason.strip()}), so its "
        "writes could reach your files; --no-isolation runs it anyway with writes redirected at the Python "
        "level only (open, os, shutil, Keras and TensorFlow saving), which C-level writers escape"
    )


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


def _launch(
    command: list[str], cwd: Path, env: dict, timeout: float, memory_limit_mb: int | None, scratch: Path
) -> tuple[int | None, str, bool]:
    """Run ``command`` in its own session; whatever it leaves behind (children included) is killed
    when it exits or times out. Output goes to files so that a lingering child holding the streams
    open cannot block the wait. Returns (exit status, stderr, timed out)."""
    out_path, err_path = scratch / "stdout.txt", scratch / "stderr.txt"
    with open(out_path, "wb") as out, open(err_path, "wb") as err:
        proc = subprocess.Popen(
            command,
            cwd=cwd,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=err,
            start_new_session=True,
            preexec_fn=_limit_memory(memory_limit_mb) if memory_limit_mb else None,
        )
        timed_out = False
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            timed_out = True
        finally:
            warm.kill_group(proc.pid)
            proc.wait()
    return proc.returncode, err_path.read_text(encoding="utf-8", errors="replace"), timed_out


def _launch_warm(
    options: RunOptions, env: dict, cwd: Path, base: Path, scratch: Path
) -> tuple[int | None, str, bool] | None:
    """The run as a fork of a warm interpreter (warm.py), as ``_launch`` returns it; None where a warm start
    cannot be had (the run then starts fresh)."""
    if not warm.usable(options.isolated, options.memory_limit_mb):
        return None
    out_path, err_path = scratch / "stdout.txt", scratch / "stderr.txt"
    request = {
        "base": str(base),
        "config": str(scratch / "config.json"),
        "cwd": str(cwd),
        "env": env,
        "stdout": str(out_path),
        "stderr": str(err_path),
    }
    module = warm.IMPORTS[warm.setting(options.framework, options.backend)]
    try:
        returncode, timed_out = warm.warm_for(module, env).run(request, options.timeout)
    except warm.WarmStartFailed:  # nothing ran: start it fresh
        warm.forget(module, env)
        return None
    if returncode is None:  # the warm interpreter itself went away during the run
        warm.forget(module, env)
        raise _WarmInterpreterLost
    stderr = err_path.read_text(encoding="utf-8", errors="replace") if err_path.exists() else ""
    return returncode, stderr, timed_out


def fix_copy(script: Path, keras: int, folder: Path) -> tuple[Path, list[str], str | None]:
    """Copy ``script`` into ``folder`` and run ``mplint --fix`` on the copy.

    Returns the copy, the rule IDs fixed, and an error message when mplint failed."""
    copy = folder / script.name
    shutil.copyfile(script, copy)
    proc = subprocess.run(
        [sys.executable, "-m", "mplint", "--fix", "--keras", str(keras), "--format", "json", str(copy)],
        capture_output=True,
        text=True,
        cwd=folder,
    )
    if proc.returncode not in (0, 1):
        return copy, [], _tail(proc.stderr or proc.stdout) or f"mplint --fix exited with status {proc.returncode}"
    try:
        fixed = list(dict.fromkeys(d["rule"] for d in json.loads(proc.stdout).get("fixed", [])))
    except (json.JSONDecodeError, AttributeError):
        fixed = []
    return copy, fixed, None
