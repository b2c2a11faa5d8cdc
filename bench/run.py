"""Time mplint against its peers on the same files, in one run, on this machine.

    python bench/run.py                 # full benchmark (several minutes)
    python bench/run.py --quick         # one repeat, smaller synthetic corpus

Corpora (all offline):
- keras_src: the installed keras package's ``src`` folder, test files excluded;
- synthetic 1x/4x/16x: mixed-precision-heavy files generated from ``fixtures/``;
- timm: the sources of the timm 1.0.31 wheel (PyTorch models, training utilities), fetched once with
  ``pip download`` into ``$MPLINT_BENCH_CACHE`` (default ``~/.cache/mplint-bench``), offline afterwards.

``--corpora keras_src,timm`` runs some of them; only a run of all of them updates ``latest.md``.

Tools: mplint cold (``--no-cache``), mplint warm (cache filled, nothing changed),
``mplint --fix`` on a fresh copy, ``fixit lint`` (default rules) and
``ruff check --no-cache`` as peers. Startup: ``python -X importtime`` of
``mplint --version`` and of a warm run on a 100-file tree, against a budget of
what each may import, and that warm run against ``ruff check --no-cache`` (both
printing text); the interpreter's own start (``python -c pass``) is given beside
it, as the floor of any Python tool. Each figure is the median of the repeats;
CPU time and peak RSS (largest single process) come from getrusage of the
children. Results go to bench/results/ as Markdown and JSON.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
RESULTS = REPO / "bench" / "results"


def keras_src() -> Path:
    import importlib.util

    spec = importlib.util.find_spec("keras")
    if spec is None or not spec.submodule_search_locations:
        sys.exit("keras is not installed: pip install keras")
    return Path(list(spec.submodule_search_locations)[0]) / "src"


def copy_keras(dest: Path) -> Path:
    src = keras_src()
    target = dest / "keras_src"
    shutil.copytree(src, target, ignore=shutil.ignore_patterns("*_test.py", "__pycache__", "testing"))
    return target


TIMM = ("timm", "1.0.31")


def copy_timm(dest: Path) -> Path:
    """timm's package folder from its pinned wheel (downloaded once into the cache)."""
    import zipfile

    name, version = TIMM
    cache = Path(os.environ.get("MPLINT_BENCH_CACHE", Path.home() / ".cache" / "mplint-bench"))
    cache.mkdir(parents=True, exist_ok=True)
    wheels = sorted(cache.glob(f"{name}-{version}-*.whl"))
    if not wheels:
        subprocess.run(
            [sys.executable, "-m", "pip", "download", "--no-deps", "--quiet", "-d", str(cache), f"{name}=={version}"],
            check=True,
        )
        wheels = sorted(cache.glob(f"{name}-{version}-*.whl"))
    target = dest / "timm_src"
    with zipfile.ZipFile(wheels[0]) as wheel:
        wheel.extractall(target, [m for m in wheel.namelist() if m.startswith(f"{name}/")])
    return target


def synthetic(dest: Path, files: int, seed: int = 0) -> Path:
    """``files`` variants of the fixture scripts: renamed, wrapped, reordered, commented."""
    rng = random.Random(seed)
    sources = [p.read_text(encoding="utf-8") for p in sorted((REPO / "fixtures").rglob("*.py"))]
    target = dest / f"synthetic_{files}"
    for i in range(files):
        text = sources[i % len(sources)]
        if rng.random() < 0.3:
            text = f"# generated variant {i}\n" + text
        if rng.random() < 0.3:
            text = text.replace("model", f"model_{i}")
        package = target / f"pkg{i // 100}"
        package.mkdir(parents=True, exist_ok=True)
        (package / f"mod_{i}.py").write_text(text, encoding="utf-8")
    (target / "requirements.txt").write_text("tensorflow>=2.16\n")
    return target


def lines_in(folder: Path) -> tuple[int, int]:
    files = list(folder.rglob("*.py"))
    return len(files), sum(p.read_bytes().count(b"\n") for p in files)


# Runs one command and reports the peak RSS of its process tree alone (a fresh parent per measurement:
# RUSAGE_CHILDREN's maximum would otherwise carry over from earlier, bigger tools).
_WRAPPER = (
    "import resource, subprocess, sys; rc = subprocess.run(sys.argv[1:]).returncode; "
    "sys.stderr.write('\\nRSS_KB=%d\\n' % resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss); sys.exit(rc)"
)


def timed(cmd: list[str], cwd: Path) -> dict:
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, "-c", _WRAPPER, *cmd], cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
    )
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    stderr = proc.stderr.decode(errors="replace")
    rss = [int(line[7:]) for line in stderr.splitlines() if line.startswith("RSS_KB=")]
    return {
        "wall": wall,
        "cpu": (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime),
        "rss_mb": (rss[-1] if rss else 0) / 1024,  # KiB on Linux
        "rc": proc.returncode,
        "stderr": stderr[-500:],
    }


def measure(name: str, cmd: list[str], cwd: Path, repeats: int, prepare=None) -> dict:
    runs = []
    for _ in range(repeats):
        if prepare:
            prepare()
        runs.append(timed(cmd, cwd))
    return {
        "tool": name,
        "cmd": " ".join(cmd),
        "wall": statistics.median(r["wall"] for r in runs),
        "cpu": statistics.median(r["cpu"] for r in runs),
        "rss_mb": max(r["rss_mb"] for r in runs),
        "rc": runs[-1]["rc"],
        "stderr": runs[-1]["stderr"],
    }


def bench_corpus(label: str, folder: Path, repeats: int, peers: bool, jobs: int | None) -> list[dict]:
    mplint = [sys.executable, "-m", "mplint", "--exit-zero", "--format", "json", "--output-file", os.devnull]
    if jobs:
        mplint += ["--jobs", str(jobs)]
    cache = folder / ".mplint_cache"
    rows = [measure("mplint cold", [*mplint, "--no-cache", "."], folder, repeats, lambda: shutil.rmtree(cache, True))]
    subprocess.run([*mplint, "."], cwd=folder, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    rows.append(measure("mplint warm", [*mplint, "."], folder, repeats))
    scratch = folder.parent / f"{folder.name}_fix"

    def fresh_copy():
        shutil.rmtree(scratch, True)
        shutil.copytree(folder, scratch, ignore=shutil.ignore_patterns(".mplint_cache"))

    rows.append(measure("mplint --fix", [*mplint, "--no-cache", "--fix", "."], scratch, repeats, fresh_copy))
    shutil.rmtree(scratch, True)
    if peers:
        for peer, command in (
            ("fixit lint", ["fixit", "lint", "."]),
            ("ruff check --no-cache", ["ruff", "check", "--no-cache", "--exit-zero", "."]),
        ):
            if shutil.which(command[0]):
                rows.append(measure(peer, command, folder, repeats))
            else:  # a ratio against a peer needs the peer: say which row is missing, and why
                print(
                    f"{label}: no `{peer}` row: {command[0]} is not installed (pip install {command[0]})",
                    file=sys.stderr,
                )
    files, lines = lines_in(folder)
    for row in rows:
        row.update(corpus=label, files=files, lines=lines, lines_per_s=lines / row["wall"] if row["wall"] else 0.0)
    return rows


# What a command may import (python -X importtime, milliseconds of import beyond the interpreter's own)
# and which heavy modules it must not import at all.
IMPORT_BUDGET = {
    "version": (15.0, ("mplint.runner", "yaml", "rich", "libcst", "pathspec", "packaging", "tomllib")),
    "warm": (
        90.0,
        ("yaml", "rich", "libcst", "pathspec", "multiprocessing", "mplint.checks.mp101_float16_softmax_output"),
    ),
}


def import_profile(cmd: list[str], cwd: Path, baseline: frozenset[str] = frozenset()) -> dict:
    """Milliseconds spent importing: the top-level entries of -X importtime, less those in ``baseline``
    (what the interpreter imports for ``python -c pass``)."""
    proc = subprocess.run([sys.executable, "-X", "importtime", *cmd], cwd=cwd, capture_output=True, text=True)
    total, modules = 0, []
    for line in proc.stderr.splitlines():
        if not line.startswith("import time:") or "|" not in line:
            continue
        _, cumulative, name = line[len("import time:") :].split("|")
        if cumulative.strip().isdigit():
            modules.append(name.strip())
            if not name.startswith("  ") and name.strip() not in baseline:
                total += int(cumulative)
    return {"ms": total / 1000, "modules": modules}


def startup_budget(root: Path, repeats: int) -> dict:
    """Import budget of --version and a warm run, and a warm 100-file tree against ruff."""
    small = synthetic(root, 100)
    mplint = [sys.executable, "-m", "mplint", "--exit-zero", "--output-file", os.devnull]
    subprocess.run([*mplint, "."], cwd=small, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    out = {"interpreter": measure("python -c pass", [sys.executable, "-c", "pass"], small, repeats * 3)["wall"]}
    baseline = frozenset(import_profile(["-c", "pass"], small)["modules"])
    for label, cmd in (
        ("version", ["-m", "mplint", "--version"]),
        ("warm", ["-m", "mplint", "--exit-zero", "--output-file", os.devnull, "."]),
    ):
        profile = import_profile(cmd, small, baseline)
        budget, banned = IMPORT_BUDGET[label]
        out[f"{label}_imports_ms"] = profile["ms"]
        out[f"{label}_import_budget_ms"] = budget
        out[f"{label}_banned_imported"] = sorted(m for m in banned if m in profile["modules"])
    out["small_warm"] = measure("mplint warm (100 files)", [*mplint, "."], small, repeats * 3)["wall"]
    if shutil.which("ruff"):
        out["small_ruff"] = measure(
            "ruff (100 files)", ["ruff", "check", "--no-cache", "--exit-zero", "."], small, repeats * 3
        )["wall"]
    return out


def machine() -> str:
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return (
        f"{cpu}, {os.cpu_count()} cores, Python {platform.python_version()}, {platform.system()} {platform.release()}"
    )


def report(rows: list[dict], extra: dict) -> str:
    out = [f"# mplint benchmark, {extra['date']}", "", f"Machine: {extra['machine']}", ""]
    out.append("| corpus | files | lines | tool | median wall s | CPU s | peak RSS MB | lines/s | vs mplint cold |")
    out.append("|---|---|---|---|---|---|---|---|---|")
    for row in rows:
        cold = next(r for r in rows if r["corpus"] == row["corpus"] and r["tool"] == "mplint cold")
        ratio = row["wall"] / cold["wall"] if cold["wall"] else 0
        out.append(
            f"| {row['corpus']} | {row['files']} | {row['lines']} | {row['tool']} | {row['wall']:.2f} | {row['cpu']:.2f} "
            f"| {row['rss_mb']:.0f} | {row['lines_per_s']:.0f} | {ratio:.2f}x |"
        )
    out += ["", "## Targets", ""]
    for line in extra["targets"]:
        out.append(f"- {line}")
    return "\n".join(out) + "\n"


def targets(rows: list[dict], scaling: list[dict], jobs_rows: list[dict], startup: dict, imports: dict) -> list[str]:
    def get(corpus, tool):
        return next((r for r in rows if r["corpus"] == corpus and r["tool"] == tool), None)

    lines = []
    torch_cold, torch_fixit = get("timm", "mplint cold"), get("timm", "fixit lint")
    if torch_cold and torch_fixit:
        lines.append(
            f"cold check on timm (PyTorch) vs fixit lint: {torch_fixit['wall'] / torch_cold['wall']:.1f}x faster (target >= 20x)"
        )
    cold, warm = get("keras_src", "mplint cold"), get("keras_src", "mplint warm")
    fixit, ruff = get("keras_src", "fixit lint"), get("keras_src", "ruff check --no-cache")
    if cold and fixit:
        lines.append(
            f"cold check on keras_src vs fixit lint: {fixit['wall'] / cold['wall']:.1f}x faster (target >= 20x)"
        )
    if warm and ruff:
        lines.append(
            f"warm check vs ruff check --no-cache: {warm['wall'] / ruff['wall']:.2f}x ruff's time (target <= 3x)"
        )
    peak = max(r["rss_mb"] for r in rows if r["tool"].startswith("mplint"))
    lines.append(f"peak RSS of one mplint process: {peak:.0f} MB (target < 300 MB)")
    if len(scaling) >= 2:
        base = scaling[0]
        parts = [
            f"{r['files']} files: {r['wall']:.2f}s ({r['wall'] / base['wall'] / (r['files'] / base['files']):.2f} of linear)"
            for r in scaling
        ]
        lines.append("scaling (synthetic, cold): " + "; ".join(parts))
    if len(jobs_rows) == 2:
        lines.append(
            f"--jobs 2 vs --jobs 1 (keras_src, cold): {jobs_rows[0]['wall'] / jobs_rows[1]['wall']:.2f}x (target >= 1.6x)"
        )
    lines.append(
        f"`mplint --version`: {startup['version']:.3f}s; one small file: {startup['one_file']:.3f}s (target < 0.5 s)"
    )
    for label in ("version", "warm"):
        banned = imports[f"{label}_banned_imported"]
        lines.append(
            f"imports of {'`--version`' if label == 'version' else 'a warm run'}: {imports[f'{label}_imports_ms']:.0f} ms "
            f"(budget {imports[f'{label}_import_budget_ms']:.0f} ms){'; imports ' + ', '.join(banned) if banned else ''}"
        )
    if "small_ruff" in imports:
        lines.append(
            f"warm check, 100 files: {imports['small_warm']:.3f}s vs `ruff check --no-cache` {imports['small_ruff']:.3f}s: "
            f"{imports['small_warm'] / imports['small_ruff']:.2f}x ruff's time (target <= 3x; the interpreter alone "
            f"takes {imports['interpreter']:.3f}s)"
        )
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--quick", action="store_true", help="1 repeat, synthetic scales 1x and 4x only")
    parser.add_argument("--no-peers", action="store_true", help="skip fixit and ruff")
    parser.add_argument("--base-files", type=int, default=250, help="synthetic corpus size at 1x")
    parser.add_argument(
        "--corpora", default="keras_src,synthetic,timm", help="comma-separated: keras_src, synthetic, timm"
    )
    parser.add_argument(
        "--repo",
        type=Path,
        action="append",
        default=[],
        help="a whole repository to add rows for (copied first; repeatable), with its peers in the same run",
    )
    args = parser.parse_args()
    corpora = set(args.corpora.split(","))
    everything = corpora >= {"keras_src", "synthetic", "timm"}
    repeats = 1 if args.quick else args.repeats
    scales = (1, 4) if args.quick else (1, 4, 16)
    # Timings are of installed code: bytecode compiled as pip would (PYTHONDONTWRITEBYTECODE may be set).
    subprocess.run([sys.executable, "-m", "compileall", "-q", str(REPO / "mplint")], stdout=subprocess.DEVNULL)
    with tempfile.TemporaryDirectory(prefix="mplint-bench-") as tmp:
        root = Path(tmp)
        imports = startup_budget(root, repeats)
        rows, jobs_rows, scaling = [], [], []
        if "keras_src" in corpora:
            keras = copy_keras(root)
            rows += bench_corpus("keras_src", keras, repeats, not args.no_peers, None)
            jobs_rows = [
                measure(
                    f"mplint cold --jobs {j}",
                    [
                        sys.executable,
                        "-m",
                        "mplint",
                        "--exit-zero",
                        "--no-cache",
                        "--jobs",
                        str(j),
                        "--format",
                        "json",
                        "--output-file",
                        os.devnull,
                        ".",
                    ],
                    keras,
                    repeats,
                )
                for j in (1, 2)
            ]
        if "timm" in corpora:
            rows += bench_corpus("timm", copy_timm(root), repeats, not args.no_peers, None)
        for repo in args.repo:  # copied: the runs write a cache and a --fix copy beside it
            copy = root / "repos" / repo.resolve().name
            shutil.copytree(repo, copy, ignore=shutil.ignore_patterns(".git", ".mplint_cache"))
            rows += bench_corpus(repo.resolve().name, copy, repeats, not args.no_peers, None)
        for scale in scales if "synthetic" in corpora else ():
            folder = synthetic(root, args.base_files * scale)
            corpus_rows = bench_corpus(f"synthetic {scale}x", folder, repeats, scale == 1 and not args.no_peers, None)
            rows += corpus_rows
            scaling.append(corpus_rows[0])
        alone = root / "one_file"  # a project of its own: the corpora beside it are other projects' files
        alone.mkdir()
        (alone / "small.py").write_text("import keras\nx = keras.layers.Dense(8)\n")
        startup = {
            "version": measure("version", [sys.executable, "-m", "mplint", "--version"], alone, 5)["wall"],
            "one_file": measure(
                "one file", [sys.executable, "-m", "mplint", "--no-cache", "--exit-zero", "small.py"], alone, 5
            )["wall"],
        }
    extra = {"date": datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC"), "machine": machine()}
    extra["targets"] = targets(rows, scaling, jobs_rows, startup, imports)
    RESULTS.mkdir(parents=True, exist_ok=True)
    stamp = datetime.now(timezone.utc).strftime("%Y%m%d-%H%M")
    text = report(rows, extra)
    (RESULTS / f"{stamp}.md").write_text(text)
    (RESULTS / f"{stamp}.json").write_text(
        json.dumps({"rows": rows, "jobs": jobs_rows, "startup": startup, "imports": imports, **extra}, indent=2)
    )
    if everything:
        (RESULTS / "latest.md").write_text(text)
    print(text)
    for row in rows + jobs_rows:
        if row["rc"] not in (0, 1):
            print(
                f"warning: {row['tool']} on {row.get('corpus', 'keras_src')} exited {row['rc']}: {row['stderr']}",
                file=sys.stderr,
            )


if __name__ == "__main__":
    main()
