"""What mplint promises about CUDA, checked on the machine it runs on, in one command (``bench/gpu/check``).

    bench/gpu/check                  # on a machine with a CUDA GPU: at most five minutes
    bench/gpu/check --device cpu     # the same checks on the CPU: the CUDA fixtures run with "cuda" read as "cpu"

1. Each CUDA verify fixture (fixtures/verify/cuda_*.py) through ``mplint verify FILE --fix``: the rules it fixes,
   its exit code and its verdict, against EXPECTED for the device.
2. The device-parametrized executed proofs: pytest on PROOF_FILES, the tests with a ``[cpu]`` or ``[cuda]``
   parameter (on the CPU only the ``[cpu]`` ones), every one of them passing, none skipped on its own device.
3. The PyTorch example of docs/runtime.md, run as a script: the dtype it picks for the device, and its steps.
4. ``mplint verify --benchmark`` on a small and a large MLP (bench/gpu/mlp.py) beside the same step timed without
   mplint (CUDA events, bench/gpu/mlp.py --time): each ms/step and the speed-up within 10% of the uninstrumented
   figure. Judged on CUDA only: a CPU shared with other work times too unevenly.

Writes bench/results/gpu-DATE.md (``gpu-DATE-cpu.md`` with ``--device cpu``; ``--out`` names another folder): the
device, driver, torch and each result. Exits 0 when every check holds, 1 otherwise. It runs in a checkout of the
repository (its fixtures, tests, docs and this folder) and runs that checkout's mplint; the machine needs torch,
mplint's requirements and pytest, nothing else (CONTRIBUTING.md, "Checking on a GPU machine").
"""

from __future__ import annotations

import argparse
import concurrent.futures
import json
import os
import platform
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ElementTree
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))  # the checkout's mplint, as `python -m mplint` in ROOT runs it
FIXTURES = ROOT / "fixtures" / "verify"
MLP = ROOT / "bench" / "gpu" / "mlp.py"
PROOF_FILES = ("tests/test_torch_executed.py", "tests/test_torch_runtime.py")
BUDGET_S = 300.0  # on a GPU machine
TOLERANCE = 0.10  # --benchmark against the uninstrumented timing

VERIFIED = "verified: the fixed script is no worse and shows no MP802/MP803/MP804"
REPAIRED = "verified repair: the original crashed with RuntimeError: value cannot be converted to type c10::Half"
# fixture -> device -> (exit code, rules fixed, start of the verdict): what the catalog's rules predict. On the CPU
# MPT201 offers no fix for an unpinned script (torch.amp.GradScaler("cpu") came in torch 2.3), so the underflow stays.
EXPECTED = {
    "cuda_masked_fill.py": {"cuda": (0, ["MPT601"], REPAIRED), "cpu": (0, ["MPT601"], REPAIRED)},
    "cuda_clip_before_unscale.py": {"cuda": (0, ["MPT204"], VERIFIED), "cpu": (0, ["MPT204"], VERIFIED)},
    "cuda_float16_no_scaler.py": {
        "cuda": (0, ["MPT201"], VERIFIED),
        "cpu": (1, [], "nothing fixed: mplint --fix changed nothing, and the run shows MP804"),
    },
    "cuda_bfloat16.py": {"cuda": (0, ["MPT206"], VERIFIED), "cpu": (0, ["MPT206"], VERIFIED)},
    "cuda_two_optimizers.py": {"cuda": (0, ["MPT202"], VERIFIED), "cpu": (0, ["MPT202"], VERIFIED)},
}
NEEDS_CAPABILITY = {"cuda_bfloat16.py": (8, 0)}  # bfloat16 autocast on CUDA

# name -> device -> bench/gpu/mlp.py's sizes. The small one is MNIST-sized; the large one keeps an H100 busy.
MODELS = {
    "small": {
        "cuda": {"inputs": 784, "width": 512, "layers": 3, "classes": 10, "batch": 128},
        "cpu": {"inputs": 64, "width": 64, "layers": 2, "classes": 8, "batch": 32},
    },
    "large": {
        "cuda": {"inputs": 4096, "width": 8192, "layers": 3, "classes": 4096, "batch": 4096},
        "cpu": {"inputs": 256, "width": 512, "layers": 3, "classes": 64, "batch": 256},
    },
}


@dataclass
class Section:
    title: str
    lines: list = field(default_factory=list)
    failures: list = field(default_factory=list)
    seconds: float = 0.0


def arguments(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="bench/gpu/check", description=__doc__.splitlines()[0])
    p.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    p.add_argument("--out", type=Path, default=ROOT / "bench" / "results", help="folder of the results file")
    p.add_argument("--fixture", action="append", help="only this CUDA fixture (repeatable; default: all)")
    p.add_argument("--steps", type=int, default=10, help="mplint verify --steps for the fixtures (default 10)")
    p.add_argument("--proofs", default=None, help="pytest -k expression for the proofs (default: the device's)")
    p.add_argument("--bench-steps", type=int, default=None, help="steps per timed run (default 30 on CUDA, 12 on CPU)")
    p.add_argument("--models", default="small,large", help="the benchmark's models (default small,large)")
    p.add_argument("--jobs", type=int, default=min(4, os.cpu_count() or 1), help="fixtures verified at once")
    return p.parse_args(argv)


def run(command: list, timeout: float = 600.0, env: dict | None = None, cwd: Path = ROOT):
    return subprocess.run(
        [str(part) for part in command], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout
    )


def tail(text: str, lines: int = 8) -> str:
    return "\n".join(text.strip().splitlines()[-lines:])


def environment(device: str) -> tuple[dict, tuple | None]:
    import torch

    import mplint

    found = {
        "torch": f"{torch.__version__} (CUDA {torch.version.cuda or 'none'})",
        "python": platform.python_version(),
        "mplint": f"{mplint.__version__} ({Path(mplint.__file__).parent})",
    }
    commit = run(["git", "rev-parse", "--short", "HEAD"]) if (ROOT / ".git").exists() and shutil.which("git") else None
    if commit is not None and commit.returncode == 0:
        found["checkout"] = commit.stdout.strip()
    capability = None
    if device == "cuda":
        if not torch.cuda.is_available():
            raise SystemExit("bench/gpu/check: torch sees no CUDA device here (run it with --device cpu)")
        capability = torch.cuda.get_device_capability(0)
        found["device"] = f"{torch.cuda.get_device_name(0)}, compute capability {capability[0]}.{capability[1]}"
        smi = (
            run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"])
            if shutil.which("nvidia-smi")
            else None
        )
        found["driver"] = smi.stdout.strip().splitlines()[0] if smi is not None and smi.stdout.strip() else "unknown"
    else:
        found["device"] = f"CPU ({platform.processor() or platform.machine()}, {os.cpu_count()} cores)"
        found["driver"] = "n/a"
    return found, capability


def cpu_env() -> dict:
    """``--device cpu``: no GPU seen, even on a machine with one, and one thread per process (the runs share the
    cores, and torch's spinning threads slow each other down by orders of magnitude)."""
    return dict(os.environ, CUDA_VISIBLE_DEVICES="", OMP_NUM_THREADS="1")


# --- 1. the CUDA verify fixtures ------------------------------------------------------------------------------------


def verify_fixture(name: str, args, isolation: list, scratch: Path) -> tuple[str, dict | None, str]:
    """(name, the JSON report or None, what went wrong)."""
    path = FIXTURES / name
    if args.device == "cpu":  # the same script on the CPU
        folder = scratch / name.removesuffix(".py")
        folder.mkdir()
        path = folder / name
        path.write_text((FIXTURES / name).read_text().replace('"cuda"', '"cpu"'))
    done = run(
        [
            sys.executable,
            "-m",
            "mplint",
            "verify",
            path,
            "--fix",
            "--steps",
            args.steps,
            "--format",
            "json",
            *isolation,
        ],
        env=cpu_env() if args.device == "cpu" else None,
    )
    try:
        return name, json.loads(done.stdout), ""
    except json.JSONDecodeError:
        return name, None, f"exit {done.returncode}: {tail(done.stderr or done.stdout)}"


def fixtures_section(args, capability, isolation: list) -> Section:
    section = Section(f"CUDA verify fixtures (`mplint verify FILE --fix --steps {args.steps}`)")
    names = args.fixture or sorted(EXPECTED)
    unknown = sorted(set(names) - set(EXPECTED))
    if unknown:
        section.failures.append(f"no expectation for {', '.join(unknown)}")
    names = [n for n in names if n in EXPECTED]
    skipped = {n for n in names if capability is not None and capability < NEEDS_CAPABILITY.get(n, (0, 0))}
    section.lines += ["| fixture | expected | exit | fixed | verdict | ok |", "|---|---|---|---|---|---|"]
    with tempfile.TemporaryDirectory(prefix="gpu-check-") as scratch:
        with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
            done = pool.map(lambda n: verify_fixture(n, args, isolation, Path(scratch)), sorted(set(names) - skipped))
            results = {name: (doc, error) for name, doc, error in done}
    for name in names:
        code, rules, verdict = EXPECTED[name][args.device]
        expected = f"exit {code}, fixes {', '.join(rules) or 'none'}"
        if name in skipped:
            need = "{}.{}".format(*NEEDS_CAPABILITY[name])
            section.lines.append(f"| {name} | {expected} | - | - | skipped: needs compute capability {need} | - |")
            continue
        doc, error = results[name]
        if doc is None:
            section.lines.append(f"| {name} | {expected} | - | - | {error.splitlines()[-1] if error else ''} | no |")
            section.failures.append(f"{name}: {error}")
            continue
        message = doc.get("verdict") or (doc.get("error") or {}).get("message", "")
        fixed = doc.get("fixed_rules") or []
        ok = doc["exit_code"] == code and fixed == rules and message.startswith(verdict)
        section.lines.append(
            f"| {name} | {expected} | {doc['exit_code']} | {', '.join(fixed) or 'none'} | {_cell(message)} | "
            f"{'yes' if ok else 'no'} |"
        )
        if not ok:
            section.failures.append(f"{name}: exit {doc['exit_code']}, fixed {fixed}: {message}")
    return section


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


# --- 2. the device-parametrized proofs -----------------------------------------------------------------------------


def proofs_section(args) -> Section:
    expression = args.proofs or ("cpu] or cuda]" if args.device == "cuda" else "cpu]")
    section = Section(f'Device-parametrized proofs (`pytest -k "{expression}" {" ".join(PROOF_FILES)}`)')
    with tempfile.TemporaryDirectory(prefix="gpu-check-") as scratch:
        report = Path(scratch) / "junit.xml"
        command = [sys.executable, "-m", "pytest", "-o", "addopts=", "-p", "no:cacheprovider", "-q", "-rs"]
        done = run(
            [*command, "--junitxml", report, "-k", expression, *PROOF_FILES],
            env=cpu_env() if args.device == "cpu" else None,
        )
        cases = _junit(report) if report.exists() else []
    if not cases:
        section.failures.append(f"pytest ran no test (exit {done.returncode}): {tail(done.stdout + done.stderr)}")
        return section
    section.lines += ["| test | outcome |", "|---|---|"]
    for name, outcome, detail in cases:
        section.lines.append(f"| {name} | {outcome}{f': {_cell(detail)}' if detail else ''} |")
        own_device = name.endswith(f"[{args.device}]")
        if outcome in ("failed", "error") or (outcome == "skipped" and own_device):
            section.failures.append(f"{name}: {outcome} {detail}")
    counts = {
        outcome: sum(1 for _, o, _ in cases if o == outcome) for outcome in ("passed", "failed", "error", "skipped")
    }
    section.lines.insert(0, ", ".join(f"{n} {outcome}" for outcome, n in counts.items() if n) + "\n")
    return section


def _junit(report: Path) -> list[tuple[str, str, str]]:
    cases = []
    for case in ElementTree.parse(report).iter("testcase"):
        name = f"{case.get('classname', '').rsplit('.', 1)[-1]}::{case.get('name')}"
        outcome, detail = "passed", ""
        for kind in ("failure", "error", "skipped"):
            found = case.find(kind)
            if found is not None:
                outcome = {"failure": "failed"}.get(kind, kind)
                detail = (found.get("message") or "").splitlines()[0][:200] if found.get("message") else ""
        cases.append((name, outcome, detail))
    return cases


# --- 3. the runtime example ----------------------------------------------------------------------------------------


def example_section(args, capability) -> Section:
    section = Section("The PyTorch example of docs/runtime.md")
    page = (ROOT / "docs" / "runtime.md").read_text(encoding="utf-8").split("## PyTorch", 1)[1]
    fences = dict(re.findall(r"```(python|console)\n(.*?)```", page, re.DOTALL))
    with tempfile.TemporaryDirectory(prefix="gpu-check-") as scratch:
        done = run(
            [sys.executable, "-c", fences["python"]], env=cpu_env() if args.device == "cpu" else None, cwd=Path(scratch)
        )
    printed = done.stdout
    section.lines += ["```console", printed.rstrip(), "```"]
    if done.returncode != 0:
        section.failures.append(f"exit {done.returncode}: {tail(done.stderr)}")
    elif args.device == "cpu":
        if printed != fences["console"]:
            section.failures.append("it printed other than the page shows")
    else:
        major = capability[0]
        dtype = "bfloat16" if major >= 8 else "float16" if major == 7 else "float32"
        lines = printed.splitlines()
        if not lines or not lines[0].startswith(f"{dtype} - ") or lines[-1] != "2 steps":
            section.failures.append(f"expected {dtype} on compute capability {major}.x and 2 steps")
    return section


# --- 4. --benchmark beside the uninstrumented timing --------------------------------------------------------------


def _sizes(name: str, device: str) -> list[str]:
    return [f"--{key}={value}" for key, value in MODELS[name][device].items()]


def benchmark_section(args, isolation: list) -> Section:
    steps = args.bench_steps or (30 if args.device == "cuda" else 12)
    section = Section(
        f"`mplint verify --benchmark --steps {steps}` beside the same step timed without mplint "
        f"({'CUDA events' if args.device == 'cuda' else 'the CPU clock'}), median ms/step after the warm-up steps"
    )
    judged = args.device == "cuda"
    section.lines += [
        "| model | run | verify --benchmark | uninstrumented | difference | ok |",
        "|---|---|---|---|---|---|",
    ]
    for name in [m for m in args.models.split(",") if m]:
        sizes = _sizes(name, args.device)
        shown = f"{name} ({', '.join(f'{k} {v}' for k, v in MODELS[name][args.device].items())})"
        verify = run(
            [
                sys.executable,
                "-m",
                "mplint",
                "verify",
                MLP,
                "--benchmark",
                "--steps",
                steps,
                "--format",
                "json",
                *isolation,
                "--",
                "--device",
                args.device,
                *sizes,
            ],
            env=cpu_env() if args.device == "cpu" else None,
        )
        timed = run(
            [sys.executable, MLP, "--time", "--device", args.device, "--steps", steps, *sizes],
            env=cpu_env() if args.device == "cpu" else None,
        )
        try:
            bench = json.loads(verify.stdout)["benchmark"]
            plain = json.loads(timed.stdout)
        except (json.JSONDecodeError, KeyError):
            section.failures.append(f"{name}: {tail(verify.stdout + verify.stderr + timed.stderr)}")
            section.lines.append(f"| {shown} | - | failed | - | - | no |")
            continue
        rows = [
            ("float16", bench["mixed_ms_per_step"], plain["float16"]["ms_per_step"], "ms"),
            ("float32", bench["float32_ms_per_step"], plain["float32"]["ms_per_step"], "ms"),
            ("speed-up", bench["speedup"], plain["speedup"], "x"),
        ]
        for label, instrumented, uninstrumented, unit in rows:
            difference = instrumented / uninstrumented - 1.0
            ok = abs(difference) <= TOLERANCE
            verdict = ("yes" if ok else "no") if judged else "not judged on CPU"
            section.lines.append(
                f"| {shown if label == 'float16' else ''} | {label} | {instrumented:.3f} {unit} | "
                f"{uninstrumented:.3f} {unit} | {difference:+.1%} | {verdict} |"
            )
            if judged and not ok:
                section.failures.append(f"{name} {label}: {difference:+.1%} off the uninstrumented timing")
        throughput = ", ".join(f"{label} {plain[label]['throughput_ms']:.3f} ms" for label in ("float16", "float32"))
        section.lines.append(f"| | back to back, uninstrumented | | {throughput} | | |")
    return section


# --- the whole check -----------------------------------------------------------------------------------------------


def timed(function, *args) -> Section:
    start = time.monotonic()
    section = function(*args)
    section.seconds = time.monotonic() - start
    return section


def main(argv=None) -> int:
    args = arguments(argv)
    start = time.monotonic()
    found, capability = environment(args.device)
    from mplint.verify.runner import isolation_problem

    refusal = isolation_problem()
    isolation = ["--no-isolation"] if refusal else []
    with concurrent.futures.ThreadPoolExecutor(max_workers=3) as pool:  # the timings run after these, alone
        jobs = [
            pool.submit(timed, fixtures_section, args, capability, isolation),
            pool.submit(timed, proofs_section, args),
            pool.submit(timed, example_section, args, capability),
        ]
        sections = [job.result() for job in jobs]
    sections.append(timed(benchmark_section, args, isolation))
    seconds = time.monotonic() - start
    failures = [f"{s.title}: {failure}" for s in sections for failure in s.failures]
    if args.device == "cuda" and seconds > BUDGET_S:
        failures.append(f"took {seconds:.0f} s, over the {BUDGET_S:.0f} s budget")
    stamp = time.strftime("%Y%m%d-%H%M")
    args.out.mkdir(parents=True, exist_ok=True)
    path = args.out / (f"gpu-{stamp}.md" if args.device == "cuda" else f"gpu-{stamp}-cpu.md")
    text = [
        f"# bench/gpu/check on {found['device']} ({time.strftime('%Y-%m-%d %H:%M')})",
        "",
        *(f"- {key}: {value}" for key, value in found.items()),
        f"- command: `{shlex.join(['bench/gpu/check', *(sys.argv[1:] if argv is None else argv)])}`",
        f"- time: {seconds:.0f} s"
        + (f" (budget {BUDGET_S:.0f} s)" if args.device == "cuda" else "")
        + f"; isolation: {'none (' + refusal + ')' if refusal else 'a private view of the file system'}",
        f"- result: {'every check holds' if not failures else f'{len(failures)} failed'}",
        *(f"  - {failure}" for failure in failures),
    ]
    for section in sections:
        text += ["", f"## {section.title}", "", f"{section.seconds:.0f} s", "", *section.lines]
    path.write_text("\n".join(text) + "\n", encoding="utf-8")
    print(f"{'ok' if not failures else 'FAILED'}: {path}")
    for failure in failures:
        print(f"  {failure}")
    return 1 if failures else 0


if __name__ == "__main__":
    raise SystemExit(main())
