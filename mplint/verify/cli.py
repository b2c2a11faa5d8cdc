"""``mplint verify SCRIPT [-- ARGS]``: run a training script briefly, instrumented, and report.

With ``--fix`` the original and a copy fixed by ``mplint --fix`` both run, whatever the original
did: a fixed copy that runs where the original crashed is a verified repair.

Exit codes:
  0  verified: with --fix, fixes were applied and the fixed copy runs, no worse than the original
     (or where the original crashed) and without MP802/MP803/MP804; without --fix, the run shows none
  1  problems: the run (with --fix: the fixed copy) shows MP802/MP803/MP804
  2  could not verify: the script runs neither before nor after the fixes (crash, bad arguments,
     timeout, out of memory, nothing recorded), mplint --fix failed, mplint's own instrumentation
     failed, or the script cannot be given a private view of the file system here (see --no-isolation)
  3  worse: the original ran and the fixed copy crashes or has more NaN/Inf, skipped steps or underflow
  4  nothing fixed: --fix changed nothing and the run is clean, so nothing was verified
"""

from __future__ import annotations

import argparse
import ast
import dataclasses
import json
import os
import sys
import tempfile
from pathlib import Path

from mplint.knowledge.keras_backends import BACKENDS, DEFAULT_BACKEND, install_command
from mplint.verify import failures, report, runner
from mplint.verify.runner import RunOptions, RunResult, detect_keras, fix_copy, isolation_problem

EXIT_OK, EXIT_PROBLEMS, EXIT_UNVERIFIED, EXIT_WORSE, EXIT_NOTHING_FIXED = 0, 1, 2, 3, 4


class InstrumentationFailed(Exception):
    """A run ended because mplint's own code raised (failures.py): nothing about the script can be said."""

    def __init__(self, run: RunResult):
        super().__init__(run.detail)
        self.run = run


def run_script(label: str, script: Path, argv: list[str], options: RunOptions, text: Path | None = None) -> RunResult:
    run = runner.run_script(label, script, argv, options, text)
    if run.status == failures.STATUS:
        raise InstrumentationFailed(run)
    return run


def _instrumentation_error(run: RunResult, script: Path) -> dict:
    return {
        "run": run.label,
        "status": run.status,
        "detail": run.detail,
        "stderr_tail": run.stderr_tail,
        "message": f"could not verify {script.name}: mplint's instrumentation failed in the {run.label} run: "
        f"{run.detail}; this is an error in mplint, not in {script.name}",
    }


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="mplint verify",
        description="Run a training script for a few capped steps "
        "under instrumentation and report what mixed precision does to it.",
        epilog="Arguments after '--' are passed to the script.",
    )
    p.add_argument("script", type=Path)
    p.add_argument("--fix", action="store_true", help="also run a copy fixed by 'mplint --fix' and compare")
    p.add_argument("--benchmark", action="store_true", help="time the mixed policy against float32")
    p.add_argument("--steps", type=int, default=20, help="optimizer steps per run (default 20)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--timeout", type=float, default=300.0, help="seconds allowed per run (default 300)")
    p.add_argument(
        "--memory-limit",
        type=int,
        metavar="MB",
        help="cap the script's address space (RLIMIT_AS) at MB megabytes; running out is reported, "
        "not a pass (default: no cap)",
    )
    p.add_argument("--keras", type=int, choices=(2, 3), help="Keras generation of the script (default: detected)")
    p.add_argument("--format", choices=("text", "json"), default="text")
    p.add_argument(
        "--no-isolation",
        action="store_true",
        help="where the system gives no private view of the file system (Linux namespaces), run anyway: "
        "only Python-level writes outside the scratch folder are redirected, C-level writers "
        "(TensorFlow's file system, HDF5, torch.save, subprocesses) reach your files",
    )
    p.add_argument(
        "--cold-start",
        action="store_true",
        help="start every run in a fresh interpreter that imports the framework again (by default the runs are "
        "forks of one interpreter that imported it once, where that is as faithful: see docs/verify.md)",
    )
    return p


def detect_framework(script: Path) -> str:
    """ "torch" for a script that imports torch and neither TensorFlow nor Keras, else "keras"."""
    try:
        tree = ast.parse(script.read_text(encoding="utf-8", errors="replace"))
    except SyntaxError:
        return "keras"
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names.add(node.module.split(".")[0])
    return "torch" if "torch" in names and not names & {"tensorflow", "keras", "tf_keras"} else "keras"


def detect_backend(script: Path, environ=None) -> tuple[str, str]:
    """Keras 3's backend for the script, and where it came from: the script's own ``os.environ["KERAS_BACKEND"] =``
    (or ``setdefault``, where the environment has none), the environment's KERAS_BACKEND, the ``backend`` of
    ``keras.json`` (in KERAS_HOME, else ~/.keras), else Keras's default, TensorFlow. The run gets it as its
    KERAS_BACKEND (its own KERAS_HOME is a scratch folder)."""
    environ = os.environ if environ is None else environ
    chosen = environ.get("KERAS_BACKEND", "").strip()
    assigned, default = _script_backend(script)
    if assigned:
        return assigned, "set by the script"
    if chosen:
        return chosen, f"KERAS_BACKEND={chosen}"
    if default:
        return default, "set by the script"
    home = Path(environ.get("KERAS_HOME") or Path(environ.get("HOME") or Path.home(), ".keras"))
    try:
        configured = json.loads((home / "keras.json").read_text(encoding="utf-8")).get("backend")
    except (OSError, ValueError, AttributeError):
        configured = None
    if isinstance(configured, str) and configured:
        return configured, f"{home / 'keras.json'}"
    return DEFAULT_BACKEND, "Keras's default"


def _script_backend(script: Path) -> tuple[str | None, str | None]:
    """The backend the script assigns to ``os.environ["KERAS_BACKEND"]``, and the one it sets by default."""
    try:
        tree = ast.parse(script.read_text(encoding="utf-8", errors="replace"))
    except (SyntaxError, ValueError):
        return None, None
    assigned = default = None
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant) and isinstance(node.value.value, str):
            for target in node.targets:
                if isinstance(target, ast.Subscript) and _is_backend_key(target.slice) and _is_environ(target.value):
                    assigned = node.value.value
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr == "setdefault"
            and _is_environ(node.func.value)
            and len(node.args) == 2
            and _is_backend_key(node.args[0])
            and isinstance(node.args[1], ast.Constant)
            and isinstance(node.args[1].value, str)
        ):
            default = node.args[1].value
    return assigned, default


def _is_environ(node) -> bool:
    """``os.environ`` or ``environ``."""
    return (isinstance(node, ast.Attribute) and node.attr == "environ") or (
        isinstance(node, ast.Name) and node.id == "environ"
    )


def _is_backend_key(node) -> bool:
    return isinstance(node, ast.Constant) and node.value == "KERAS_BACKEND"


def missing_runtime(keras: int, framework: str = "keras", backend: tuple[str, str] | None = None) -> str | None:
    """What the instrumented run would fail to import here, as one line saying what to install."""
    from mplint.runtime.install_hints import RUNTIME_EXTRA, TORCH, missing

    if framework == "torch":
        if not missing(("torch",)):
            return None
        return f"mplint verify runs this script with PyTorch, and torch is not installed in this environment: {TORCH}"
    name, source = backend or (DEFAULT_BACKEND, "Keras's default")
    if keras == 3 and name != DEFAULT_BACKEND:
        if name not in BACKENDS:
            return f"Keras 3 has no backend {name!r} ({source}): choose one of {', '.join(BACKENDS)}"
        absent = missing(("keras", name))
        if not absent:
            return None
        return (
            f"mplint verify runs the script with Keras 3 on the {name} backend ({source}), and {', '.join(absent)} "
            f"{'is' if len(absent) == 1 else 'are'} not installed in this environment: install "
            f"{'it' if len(absent) == 1 else 'them'}: {install_command(absent)}"
        )
    absent = missing(("numpy", "tensorflow", "tf_keras" if keras == 2 else "keras"))
    if not absent:
        return None
    return (
        f"mplint verify runs the script with TensorFlow, and {', '.join(absent)} "
        f"{'is' if len(absent) == 1 else 'are'} not installed in this environment: {RUNTIME_EXTRA}"
    )


def _failure(run: RunResult, script: Path) -> dict:
    lines = [line for line in run.stderr_tail.splitlines() if line.strip() and not line.startswith("script exited")]
    # a crash's detail is already its error line; the stderr's last line may be what follows it
    reason = run.detail + (
        f" ({lines[-1].strip()})" if lines and not run.crash and lines[-1].strip() not in run.detail else ""
    )
    return {
        "run": run.label,
        "status": run.status,
        "detail": run.detail,
        "stderr_tail": run.stderr_tail,
        "message": f"could not verify {script.name}: the {run.label} run {run.status}: {reason}",
    }


def _events(runs: list[RunResult]) -> dict:
    merged: dict[str, list] = {}
    for run in runs:
        for key, values in (run.records.get("events") or {}).items():
            merged.setdefault(key, [])
            merged[key].extend(v for v in values if v not in merged[key])
    return merged


def _emit(doc: dict, fmt: str, renderables=()) -> None:
    if fmt == "json":
        json.dump(doc, sys.stdout, indent=2, default=str)
        sys.stdout.write("\n")
        return
    from rich.console import Console

    console = Console(
        highlight=False, soft_wrap=True, emoji=False, markup=False, width=None if sys.stdout.isatty() else 160
    )  # script paths and messages are user text
    for item in renderables:
        console.print(item)
    if doc.get("error"):
        err = doc["error"]
        console.print(f"mplint verify: error: {err['message']}")
        if err.get("stderr_tail"):
            console.print("--- stderr (last lines) ---", markup=False)
            console.print(err["stderr_tail"], markup=False)
        return
    for label, run in doc.get("runs", {}).items():  # a --benchmark document has no runs, only findings
        if run["metrics"].get("autocast_ops"):
            console.print(f"{label}: ops under autocast (output dtype): {run['metrics']['autocast_ops']}", markup=False)
        for finding in run["metrics"]["findings"]:
            console.print(f"{label}: {finding['rule']} {finding['message']}", markup=False)
    events = doc.get("events", {})
    if events.get("datasets_replaced"):
        console.print(f"datasets replaced by synthetic data: {', '.join(events['datasets_replaced'])}")
    for stop in events.get("loop_stops", []):
        console.print(f"note: {stop}", markup=False)
    for off in events.get("turned_off", []):
        console.print(f"note: {off}", markup=False)
    for blocked in events.get("downloads_blocked", []):
        console.print(f"download blocked: {blocked}", markup=False)
    written = events.get("writes_redirected", [])
    if written:
        console.print(
            f"{len(written)} write(s) outside the scratch folder kept from your files: "
            f"{', '.join(written[:5])}{f' and {len(written) - 5} more' if len(written) > 5 else ''}",
            markup=False,
        )
    if doc.get("fixed_rules") is not None:
        console.print(f"fixes applied to the copy: {', '.join(doc['fixed_rules']) or 'none'}")
    if doc.get("summary"):
        console.print(doc["summary"], markup=False)
    console.print(doc["verdict"], markup=False)


def _describe(run: RunResult) -> str:
    if run.crash:
        return report.crash_text(run.crash)
    return f"{run.status}: {run.detail}" if run.detail else run.status


def _document(
    script: Path,
    options: RunOptions,
    runs: list[RunResult],
    reference: RunResult,
    fixed_rules,
    verdict: str,
    code: int,
    summary: str | None = None,
) -> tuple[dict, list]:
    columns = {run.label: report.metrics(run, reference) for run in runs}
    columns["float32 reference"] = report.metrics(reference)
    doc = {
        "script": str(script),
        "keras": options.keras,
        "framework": options.framework,
        "backend": options.backend if options.framework == "keras" else None,
        "steps": options.steps,
        "seed": options.seed,
        "runs": {
            label: {"metrics": m.to_dict(), "status": r.status}
            for (label, m), r in zip(columns.items(), [*runs, reference])
        },
        "events": _events([*runs, reference]),
        "fixed_rules": fixed_rules,
        "summary": summary,
        "verdict": verdict,
        "exit_code": code,
    }
    title = f"mplint verify {script.name}: at most {options.steps} steps per training loop, seed {options.seed}"
    return doc, [report.table(title, columns)]


def _verify_run(script: Path, script_args: list[str], options: RunOptions) -> tuple[dict, list]:
    run = run_script("run", script, script_args, options)
    if not run.ok:
        return {"error": _failure(run, script), "exit_code": EXIT_UNVERIFIED}, []
    reference = run_script("float32", script, script_args, dataclasses.replace(options, force_policy="float32"))
    if not reference.ok:
        return {"error": _failure(reference, script), "exit_code": EXIT_UNVERIFIED}, []
    problems = report.blocking(report.metrics(run, reference))
    code = EXIT_PROBLEMS if problems else EXIT_OK
    verdict = f"problems: {', '.join(problems)}" if problems else "no MP802/MP803/MP804 in the capped run"
    return _document(script, options, [run], reference, None, verdict, code)


def _verify_fix(script: Path, script_args: list[str], options: RunOptions) -> tuple[dict, list]:
    """Run the original and the fixed copy whatever the original did: a fix that repairs a crash is
    the one most worth proving."""
    before = run_script("before", script, script_args, options)
    with tempfile.TemporaryDirectory(prefix="mplint-fix-") as folder:
        copy, fixed_rules, error = fix_copy(script, options.keras, Path(folder))
        if error:
            failed = RunResult("after", "fix-failed", f"mplint --fix failed: {error}")
            return {"error": _failure(failed, script), "exit_code": EXIT_UNVERIFIED}, []
        after = run_script("after", script, script_args, options, text=copy) if fixed_rules else None
        # the float32 reference runs what runs: the original, else the fixed copy
        text = copy if after is not None and not before.ok and after.ok else None
        if before.ok or text is not None:
            reference = run_script(
                "float32", script, script_args, dataclasses.replace(options, force_policy="float32"), text=text
            )
    if after is None:
        if not before.ok:
            return {"error": _failure(before, script), "exit_code": EXIT_UNVERIFIED}, []
    elif not before.ok and not after.ok:
        err = _failure(after, script)
        err["message"] = (
            f"could not verify {script.name}: it runs neither before nor after the fixes "
            f"({', '.join(fixed_rules)}): before: {_describe(before)}; after: {_describe(after)}"
        )
        return {"error": err, "exit_code": EXIT_UNVERIFIED}, []
    if not reference.ok:
        return {"error": _failure(reference, script), "exit_code": EXIT_UNVERIFIED}, []
    if after is None:
        problems = report.blocking(report.metrics(before, reference))
        code = EXIT_PROBLEMS if problems else EXIT_NOTHING_FIXED
        verdict = (
            f"nothing fixed: mplint --fix changed nothing, and the run shows {', '.join(problems)}"
            if problems
            else "nothing to verify: mplint --fix changed nothing (no MP802/MP803/MP804 in the capped run)"
        )
        return _document(script, options, [before], reference, fixed_rules, verdict, code)
    runs = [before, after]
    summary = f"before: {'runs' if before.ok else _describe(before)}; after: {'runs' if after.ok else _describe(after)}"
    if not after.ok:  # the original ran: the fixes broke it
        verdict = f"worse: the fixed script no longer runs ({_describe(after)})"
        return _document(script, options, runs, reference, fixed_rules, verdict, EXIT_WORSE, summary)
    m_before, m_after = report.metrics(before, reference), report.metrics(after, reference)
    problems = report.blocking(m_after)
    if before.ok and not report.no_worse(m_before, m_after):
        code, verdict = (
            EXIT_WORSE,
            "worse: the fixed script has more NaN/Inf, skipped steps or underflow than the original",
        )
    elif problems:
        code, verdict = EXIT_PROBLEMS, f"not verified: the fixed script still shows {', '.join(problems)}"
    elif before.ok:
        code, verdict = EXIT_OK, "verified: the fixed script is no worse and shows no MP802/MP803/MP804"
    else:
        code, verdict = (
            EXIT_OK,
            f"verified repair: the original {_describe(before)}; the fixed script runs and shows no MP802/MP803/MP804",
        )
    return _document(script, options, runs, reference, fixed_rules, verdict, code, summary)


def _verify(args, script: Path, script_args: list[str], options: RunOptions) -> tuple[dict, list]:
    return (_verify_fix if args.fix else _verify_run)(script, script_args, options)


def _benchmark(args, script: Path, script_args: list[str], options: RunOptions) -> tuple[dict, list]:
    timed = dataclasses.replace(options, capture_grads=False, timing=True)
    mixed = run_script("mixed", script, script_args, timed)
    if not mixed.ok:
        return {"error": _failure(mixed, script), "exit_code": EXIT_UNVERIFIED}, []
    f32 = run_script("float32", script, script_args, dataclasses.replace(timed, force_policy="float32"))
    if not f32.ok:
        return {"error": _failure(f32, script), "exit_code": EXIT_UNVERIFIED}, []
    m_mixed, m_f32 = report.metrics(mixed), report.metrics(f32)
    findings = []
    speedup = None
    if m_mixed.ms_per_step and m_f32.ms_per_step:
        speedup = m_f32.ms_per_step / m_mixed.ms_per_step
    if m_mixed.policy in (None, "float32"):
        verdict = "the script does not set a mixed policy: nothing to compare"
    elif speedup is None:
        verdict = "too few steps to time (raise --steps)"
    elif speedup <= 1.0:
        findings.append(
            {
                "rule": "MP805",
                "message": f"{m_mixed.policy} is not faster than float32 here "
                f"({m_mixed.ms_per_step:.2f} vs {m_f32.ms_per_step:.2f} ms/step)",
            }
        )
        verdict = f"MP805 {findings[0]['message']}"
    else:
        verdict = f"{m_mixed.policy} is {speedup:.2f}x faster than float32 here"
    doc = {
        "script": str(script),
        "keras": options.keras,
        "backend": options.backend if options.framework == "keras" else None,
        "steps": options.steps,
        "seed": options.seed,
        "benchmark": {
            "policy": m_mixed.policy,
            "mixed_ms_per_step": m_mixed.ms_per_step,
            "float32_ms_per_step": m_f32.ms_per_step,
            "speedup": speedup,
            "device": mixed.records.get("device"),
        },
        "findings": findings,
        "verdict": verdict,
        "exit_code": EXIT_OK,
    }
    from rich.table import Table

    t = Table(
        title=f"mplint verify --benchmark {script.name}: median ms/step after {report.WARMUP_STEPS} warm-up steps"
    )
    for column in ("run", "policy", "ms/step", "speed-up"):
        t.add_column(column)
    t.add_row(
        "mixed", m_mixed.policy or "n/a", report._fmt_ms(m_mixed.ms_per_step), f"{speedup:.2f}x" if speedup else "n/a"
    )
    t.add_row("float32", "float32", report._fmt_ms(m_f32.ms_per_step), "1.00x")
    return doc, [t]


def main(argv: list[str]) -> int:
    argv = list(argv)
    script_args: list[str] = []
    if "--" in argv:
        cut = argv.index("--")
        argv, script_args = argv[:cut], argv[cut + 1 :]
    args = _parser().parse_args(argv)
    script: Path = args.script
    if not script.is_file():
        print(f"mplint verify: error: {script} is not a file", file=sys.stderr)
        return EXIT_UNVERIFIED
    if args.steps < 1:
        print("mplint verify: error: --steps must be at least 1", file=sys.stderr)
        return EXIT_UNVERIFIED
    if args.memory_limit is not None and args.memory_limit < 1:
        print("mplint verify: error: --memory-limit must be at least 1 (MB)", file=sys.stderr)
        return EXIT_UNVERIFIED
    if args.timeout <= 0:
        print("mplint verify: error: --timeout must be positive", file=sys.stderr)
        return EXIT_UNVERIFIED
    framework = detect_framework(script)
    keras = args.keras or (3 if framework == "torch" else detect_keras(script))
    backend = detect_backend(script) if framework == "keras" and keras == 3 else (DEFAULT_BACKEND, "")
    missing = missing_runtime(keras, framework, backend)
    if missing:
        print(f"mplint verify: error: {missing}", file=sys.stderr)
        return EXIT_UNVERIFIED
    refusal = None if args.no_isolation else isolation_problem()
    if refusal:
        print(f"mplint verify: error: {refusal}", file=sys.stderr)
        return EXIT_UNVERIFIED
    options = RunOptions(
        steps=args.steps,
        seed=args.seed,
        timeout=args.timeout,
        keras=keras,
        source_dir=str(script.resolve().parent),
        memory_limit_mb=args.memory_limit,
        framework=framework,
        backend=backend[0],
        isolated=not args.no_isolation,
        warm=not args.cold_start,
    )
    try:
        doc, renderables = (_benchmark if args.benchmark else _verify)(args, script, script_args, options)
    except InstrumentationFailed as failure:
        doc, renderables = {"error": _instrumentation_error(failure.run, script), "exit_code": EXIT_UNVERIFIED}, []
    _emit(doc, args.format, renderables)
    return doc["exit_code"]
