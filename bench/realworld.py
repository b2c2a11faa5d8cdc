"""Real-world precision check: mplint on pinned open-source TensorFlow/Keras and PyTorch packages.

    python bench/realworld.py                    # check every package, compare with the snapshot
    python bench/realworld.py --package trax     # one package (repeatable)
    python bench/realworld.py --update           # record new findings as `unreviewed`
    python bench/realworld.py --json             # machine-readable report
    python bench/realworld.py --repos --mirror DIR [--paths]   # pinned git repositories (bench/realworld_repos.py)

Each package is a pinned wheel (wheels hold the sources, tests included), or a pinned sdist where the
project publishes no pure-Python wheel (deepspeed), downloaded once with ``pip download`` into a cache
outside the repository (``--cache``, ``$MPLINT_REALWORLD_CACHE``, default ``~/.cache/mplint-realworld``)
and unpacked there (an sdist's top folder is the package root); the installed Keras' ``src`` folder is
copied there too. After the first run everything works offline.

mplint runs on each unpacked tree as a user would (``mplint . --format json --no-cache`` from the
package root), from the checkout this script lives in. Its findings are compared with the reviewed
snapshot ``bench/realworld/snapshot.yaml``, where every finding has a verdict (tp/fp) and a reason:

- NEW findings are not in the snapshot and need review;
- VANISHED findings are in the snapshot but no longer reported;
- precision = tp / (tp + fp) over current findings that have a verdict, per rule, package, framework
  (TensorFlow/Keras or PyTorch packages) and overall.

``--update`` adds new findings with verdict ``unreviewed`` and marks vanished ones ``status: vanished``
(kept, with their verdicts, as the record of what the rules used to report).

With ``--repos`` the check runs on whole git repositories at pinned commits instead (see
``realworld_repos.py``): findings as above, and every fix ``--fix --unsafe-fixes`` applies with a verdict
(right/harmful/no-op), recall on planted defects and, with ``--paths``, path independence.

Exit codes: 0 every current finding (and applied fix) is reviewed; 1 some are unreviewed; 2 a package or
repository could not be fetched or checked (the others still are).
"""

from __future__ import annotations

import argparse
import hashlib
import importlib.metadata
import importlib.util
import json
import os
import resource
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
import zipfile
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(Path(__file__).resolve().parent))
import realworld_repos as repos  # noqa: E402  (a sibling module of this script)

SNAPSHOT = REPO / "bench" / "realworld" / "snapshot.yaml"
KERAS_SRC = "keras-src"
TENSORFLOW, PYTORCH = "tensorflow", "pytorch"
VERDICTS = ("tp", "fp", "unreviewed")
STATUSES = ("current", "vanished")


@dataclass(frozen=True)
class Package:
    name: str
    version: str
    sha256: str  # of the wheel pip picks for the platform below (or of the sdist): the reviewed sources, byte for byte
    framework: str = TENSORFLOW
    sdist: bool = False  # a source archive (.tar.gz) instead of a wheel


# Pinned wheels. Platform wheels (lingvo, tensorflow-addons) are fetched for one fixed platform so that
# every machine unpacks the same file; their Python sources do not depend on it anyway.
PACKAGES = [
    Package("tf-models-official", "2.20.0", "0bf173f9ea83e1a83f983b35fe515e9d9bfd294b27538f6e8806afeb5a069150"),
    Package("tensorflow-addons", "0.23.0", "591b1c38cfe170727746a60983157ecbdef6a7062dfea8988558e1ab885b513a"),
    Package("tensorflow-recommenders", "0.7.7", "f20c098879a7e3c4343ea5bc257adf80e6cb63ca139e53ffab46f8eb617915db"),
    Package("tf-keras", "2.21.0", "f858bf3d97f892304e7fbcf5eb0942ed91674e27204f940a85de8c93cf07fe62"),
    Package("keras-tuner", "1.4.8", "53034e71608051a17c7f764f282e1e54b52c4d69c05a30f1e8891c8e5ea7739f"),
    Package("lingvo", "0.14.2", "b68550dbe15a72f6acdb6ec5633d0a24ed4e92f57435a7ddc208142906875b97"),
    Package("trax", "1.4.1", "5884c010ceaffca5148fe702321ac8f336bc5ca9bdc88d2247a9e04f3deba281"),
    Package("t5", "0.9.4", "53e40efdfc4d8f614cd8d38301e39d5c146f9d5fd66b6823d9c181b60370b2b5"),
    Package("mesh-tensorflow", "0.1.21", "747d46696ad260ae59a566fc1726749b99080973b07aae098be5714931a3ad80"),
    Package("dm-sonnet", "2.0.2", "4c2364cc9ed5f1d9754e00e52a59b8b4fb5194c109b66390f33c44a9c5a34b89"),
    Package("tensorflow-similarity", "0.17.1", "da5d27a699a8bc12d6292a01f39c9529d22700d95b8607bdec69c91168718331"),
    Package(
        "tensorflow-model-optimization", "0.8.1", "182e5807ed12768984f9708c6f7dbc090e4678d265fdebdb50ee7e12620ae33a"
    ),
    # PyTorch packages (the MPT rules). deepspeed publishes only an sdist.
    Package("timm", "1.0.31", "5bd50f7d0fe6d09bf9285ac2523234a1b7e6bf075c0be3e7aed09139fcb617c7", PYTORCH),
    Package("accelerate", "1.15.0", "97eacca0b73e45cb867dbf8c5d5d4dc32219544300e0c8992c7334dc2ef33cec", PYTORCH),
    Package("pytorch-lightning", "2.6.6", "71f95c7b22f25c4f91cc659e1734bcdc6c69c8b66543f2ed2d78dbe29ce2f167", PYTORCH),
    Package("ultralytics", "8.4.190", "bd309728efa168af64d39040136828edd2dbcb4aeceb4510bdff4f3ca0ea01b8", PYTORCH),
    Package("fastai", "2.8.12", "50474575768679ba7352bebd0fdf8e7d2c4ddc10242455bec79a19c964f03fd0", PYTORCH),
    Package("transformers", "5.23.0", "018e82fd07490ad5bb58414f65e31576033dc7f36bed10c574843f69b90991bf", PYTORCH),
    Package("diffusers", "0.42.1", "9154faa704ce00e0b77f568e0d64786064368528aab5fc14eeea92f87d788014", PYTORCH),
    Package("pytorch-ignite", "0.5.5", "9a397b0899968612efd00ac75bad64f20a9a91a8244f37bdcb8888af61455cf9", PYTORCH),
    Package(
        "deepspeed", "0.19.8", "9e491abd0827ea5c389dd702e15e11e13d83d904bac4a20d6c2a4cb37207a9af", PYTORCH, sdist=True
    ),
]
PLATFORM_ARGS = [
    "--only-binary=:all:",
    "--platform",
    "manylinux2014_x86_64",
    "--python-version",
    "3.11",
    "--implementation",
    "cp",
    "--abi",
    "cp311",
    "--abi",
    "none",
]
PACKAGE_NAMES = [p.name for p in PACKAGES] + [KERAS_SRC]
REPOSITORY_NAMES = [r.name for r in repos.REPOSITORIES]
FRAMEWORKS = {**{p.name: p.framework for p in PACKAGES}, KERAS_SRC: TENSORFLOW}


class FetchError(Exception):
    pass


# ---------------------------------------------------------------------------------------------- fetching


def default_cache() -> Path:
    return Path(os.environ.get("MPLINT_REALWORLD_CACHE") or Path.home() / ".cache" / "mplint-realworld")


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def archive_in(folder: Path, package: Package) -> Path | None:
    # Wheels normalise the name to underscores; sdists are named either way depending on the build backend.
    stems = {f"{package.name.replace('-', sep)}-{package.version}".lower() for sep in "_-"}
    if package.sdist:
        found = [p for p in folder.glob("*.tar.gz") if p.name.lower()[: -len(".tar.gz")] in stems]
    else:
        found = [p for p in folder.glob("*.whl") if any(p.name.lower().startswith(stem + "-") for stem in stems)]
    return found[0] if found else None


def download(package: Package, downloads: Path) -> Path:
    archive = archive_in(downloads, package)
    if archive is None:
        downloads.mkdir(parents=True, exist_ok=True)
        # For an sdist pip also prepares its metadata (runs its build backend in an isolated environment) once.
        kind = ["--no-binary=:all:"] if package.sdist else PLATFORM_ARGS
        cmd = [
            sys.executable,
            "-m",
            "pip",
            "download",
            "--no-deps",
            "--quiet",
            *kind,
            "--dest",
            str(downloads),
            f"{package.name}=={package.version}",
        ]
        proc = subprocess.run(cmd, capture_output=True, text=True)
        archive = archive_in(downloads, package)
        if proc.returncode or archive is None:
            raise FetchError(f"pip download failed: {proc.stderr.strip().splitlines()[-1:] or proc.returncode}")
    digest = sha256_of(archive)
    if digest != package.sha256:
        raise FetchError(f"{archive.name} has sha256 {digest}, the snapshot was reviewed on {package.sha256}")
    return archive


def unpack(archive: Path, tree: Path) -> None:
    # Unpack beside the final folder and rename, so an interrupted run never leaves half a tree.
    staging = Path(tempfile.mkdtemp(prefix=tree.name + ".", dir=tree.parent))
    try:
        if archive.name.endswith(".tar.gz"):
            root = unpack_sdist(archive, staging)
        else:
            with zipfile.ZipFile(archive) as wheel:
                wheel.extractall(staging)
            root = staging
        root.rename(tree)
    finally:
        if staging.exists():
            shutil.rmtree(staging)


def unpack_sdist(archive: Path, staging: Path) -> Path:
    """Extract a source archive; its single top folder (``name-version/``) is the package root."""
    try:
        with tarfile.open(archive, "r:gz") as sdist:
            # Plain files and folders only, inside the staging folder: an sdist is not trusted to do more.
            members = [m for m in sdist.getmembers() if m.isfile() or m.isdir()]
            root = staging.resolve()
            for member in members:
                target = (root / member.name).resolve()
                if target != root and root not in target.parents:
                    raise FetchError(f"{archive.name}: {member.name} is outside the archive's folder")
            if hasattr(tarfile, "data_filter"):
                sdist.extractall(staging, members=members, filter="data")
            else:  # Python < 3.11.4: the paths were checked above
                sdist.extractall(staging, members=members)
    except tarfile.TarError as exc:
        raise FetchError(f"{archive.name}: {exc}") from None
    tops = list(staging.iterdir())
    if len(tops) != 1 or not tops[0].is_dir():
        raise FetchError(f"{archive.name}: expected one top folder, found {sorted(p.name for p in tops)}")
    return tops[0]


def fetch(package: Package, cache: Path) -> Path:
    tree = cache / "trees" / f"{package.name}-{package.version}"
    if not tree.is_dir():
        tree.parent.mkdir(parents=True, exist_ok=True)
        unpack(download(package, cache / "downloads"), tree)
    return tree


def keras_version() -> str:
    try:
        return importlib.metadata.version("keras")
    except importlib.metadata.PackageNotFoundError:
        raise FetchError("keras is not installed") from None


def fetch_keras_src(cache: Path) -> Path:
    """A copy of the installed Keras' src folder (find_spec does not import Keras, which needs a backend)."""
    tree = cache / "trees" / f"{KERAS_SRC}-{keras_version()}"
    if not tree.is_dir():
        spec = importlib.util.find_spec("keras")
        source = Path(next(iter(spec.submodule_search_locations))) / "src"
        tree.parent.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(prefix=tree.name + ".", dir=tree.parent)) / "src"
        shutil.copytree(source, staging, ignore=shutil.ignore_patterns("__pycache__"))
        staging.rename(tree)
        staging.parent.rmdir()
    return tree


def package_version(name: str) -> str:
    return keras_version() if name == KERAS_SRC else next(p.version for p in PACKAGES if p.name == name)


# ---------------------------------------------------------------------------------------------- checking


@dataclass
class PackageRun:
    name: str
    version: str = ""
    findings: list[dict] = field(default_factory=list)
    files: int = 0
    wall_s: float = 0.0
    cpu_s: float = 0.0  # user + system time of mplint and its workers: steadier than wall time on a busy machine
    error: str = ""


def children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def run_mplint(tree: Path) -> tuple[dict, float, float]:
    env = dict(
        os.environ,
        PYTHONPATH=os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])),
        MPLINT_NO_PROGRESS="1",
    )
    cmd = [sys.executable, "-m", "mplint", ".", "--format", "json", "--no-cache", "--exit-zero"]
    cpu, start = children_cpu(), time.perf_counter()
    proc = subprocess.run(cmd, cwd=tree, env=env, capture_output=True, text=True)
    wall, cpu = time.perf_counter() - start, children_cpu() - cpu
    if proc.returncode:
        raise FetchError(f"mplint exited {proc.returncode}: {proc.stderr.strip()[-500:]}")
    return json.loads(proc.stdout), wall, cpu


def finding_from(diagnostic: dict, package: str) -> dict:
    path = diagnostic["path"]
    if diagnostic.get("cell") is not None:
        path = f"{path}:cell {diagnostic['cell']}"
    return {
        "package": package,
        "path": path,
        "rule": diagnostic["rule"],
        "line": diagnostic["start"]["line"],
        "col": diagnostic["start"]["column"],
        "message": diagnostic["message"],
    }


def check(name: str, cache: Path) -> PackageRun:
    run = PackageRun(name)
    try:
        run.version = package_version(name)
        tree = (
            fetch_keras_src(cache) if name == KERAS_SRC else fetch(next(p for p in PACKAGES if p.name == name), cache)
        )
        report, run.wall_s, run.cpu_s = run_mplint(tree)
    except (FetchError, OSError, ValueError) as exc:
        run.error = str(exc)
        return run
    run.files = report["summary"]["files"]
    run.findings = [finding_from(d, name) for d in report["diagnostics"]]
    for error in report.get("errors") or []:  # a path mplint could not read: the rest was still checked
        print(f"warning: {name}: {error}", file=sys.stderr)
    return run


# ---------------------------------------------------------------------------------------------- snapshot


def key(finding: dict) -> tuple:
    return finding["package"], finding["path"], finding["rule"], finding["line"], finding["col"]


SECTIONS = {
    "packages": dict,
    "repositories": dict,
    "findings": list,
    "fixes": list,
    "plants": list,
    "path_independence": dict,
}


def load_snapshot(path: Path) -> dict:
    data = (yaml.safe_load(path.read_text(encoding="utf-8")) or {}) if path.exists() else {}
    return {name: data.get(name) or kind() for name, kind in SECTIONS.items()}


SNAPSHOT_HEADER = """\
# Reviewed findings of `python bench/realworld.py` (see its docstring). One entry per finding:
#   package, path (relative to the package root), rule, line, col, message: as mplint reported it;
#   verdict: tp (a maintainer of the package would thank us) | fp | unreviewed;
#   reason: one line a maintainer would accept (for tp: the real defect);
#   status: current (reported by the latest --update) | vanished (no longer reported; kept as the record).
# A repository's findings name it (owner/name) as their package. Beside them:
#   fixes: every fix `mplint . --fix --unsafe-fixes` applied in a repository, each edit's replaced text and new
#     text; verdict: right (correct on every version the folder's environment admits) | harmful (breaks the code or
#     changes what it computes on a version it runs) | no-op | unreviewed; reason: why, with the evidence;
#   plants: known defects found by reading the code (why: what goes wrong); found when a current finding has the
#     same package, path, rule and line;
#   path_independence: per repository, the runs compared with `mplint .` and every file whose findings differed
#     (cached_facts: true when the path runs read their facts from a cache, --cached-facts).
"""


def write_snapshot(path: Path, snapshot: dict) -> None:
    for name in ("findings", "fixes", "plants"):
        snapshot[name].sort(key=lambda f: (f["package"], f["path"], f["line"], f.get("col", 0), f["rule"]))
    body = yaml.safe_dump(snapshot, sort_keys=False, allow_unicode=True, width=10_000)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(SNAPSHOT_HEADER + body, encoding="utf-8")


@dataclass
class Comparison:
    new: list[dict]  # reported now, not in the snapshot
    vanished: list[dict]  # current in the snapshot, not reported now
    reappeared: list[dict]  # vanished in the snapshot, reported again (the old verdict applies)
    changed: list[tuple[dict, dict]]  # (snapshot entry, finding): same place and rule, different message
    verdicts: list[tuple[dict, str]]  # every current finding with its verdict


def compare(findings: list[dict], recorded: list[dict], packages: set[str]) -> Comparison:
    """Current findings of ``packages`` against the snapshot entries of those packages."""
    entries = {key(e): e for e in recorded if e["package"] in packages}
    now = {key(f): f for f in findings}
    result = Comparison([], [], [], [], [])
    for k, finding in now.items():
        entry = entries.get(k)
        if entry is None:
            result.new.append(finding)
            result.verdicts.append((finding, "unreviewed"))
            continue
        if entry.get("status", "current") == "vanished":
            result.reappeared.append(entry)
        if entry.get("message") != finding["message"]:
            result.changed.append((entry, finding))
        result.verdicts.append((finding, entry.get("verdict") or "unreviewed"))
    result.vanished = [e for k, e in entries.items() if k not in now and e.get("status", "current") == "current"]
    return result


def updated(recorded: list[dict], findings: list[dict], packages: set[str]) -> list[dict]:
    """The snapshot after a run of ``packages``: verdicts kept, new findings unreviewed, vanished ones marked."""
    now = {key(f): f for f in findings}
    result = []
    for entry in recorded:
        k = key(entry)
        if entry["package"] in packages:
            entry = dict(entry, status="current" if k in now else "vanished")
            if k in now:
                entry["message"] = now.pop(k)["message"]
        result.append(entry)
    result += [dict(f, verdict="unreviewed", reason="", status="current") for f in now.values()]
    return result


# ---------------------------------------------------------------------------------------------- report


def precision_table(verdicts: list[tuple[dict, str]], field_name: str) -> list[dict]:
    counts: dict[str, Counter] = defaultdict(Counter)
    for finding, verdict in verdicts:
        counts[finding[field_name]][verdict] += 1
        counts["all"][verdict] += 1
    rows = []
    for name in sorted(counts, key=lambda n: (n == "all", n)):
        c = counts[name]
        judged = c["tp"] + c["fp"]
        rows.append(
            {
                field_name: name,
                "tp": c["tp"],
                "fp": c["fp"],
                "unreviewed": c["unreviewed"],
                "precision": round(c["tp"] / judged, 3) if judged else None,
            }
        )
    return rows


def framework_table(verdicts: list[tuple[dict, str]]) -> list[dict]:
    """Precision over the TensorFlow/Keras packages (keras-src included) and over the PyTorch packages."""
    tagged = [
        (dict(finding, framework=FRAMEWORKS.get(finding["package"], "other")), verdict) for finding, verdict in verdicts
    ]
    return precision_table(tagged, "framework")


def format_table(rows: list[dict], columns: list[str]) -> list[str]:
    def cell(column, value):
        if value is None:
            return "-"
        return f"{value:.1%}" if column == "precision" else f"{value:.1f}" if isinstance(value, float) else str(value)

    text = [list(columns)] + [[cell(c, r.get(c)) for c in columns] for r in rows]
    widths = [max(len(row[i]) for row in text) for i in range(len(columns))]
    return [
        "  ".join(v.ljust(w) if i == 0 else v.rjust(w) for i, (v, w) in enumerate(zip(row, widths))) for row in text
    ]


def describe(finding: dict) -> str:
    text = f"{finding['package']}: {finding['path']}:{finding['line']}:{finding['col']}: {finding['rule']} {finding['message']}"
    return f"[{finding['verdict']}] {text}" if finding.get("verdict") else text


def vanished_by_verdict(vanished: list[dict]) -> dict[str, list[dict]]:
    """Lost true positives first: a fix that silences them is a regression, not progress."""
    return {
        title: [e for e in vanished if test(e.get("verdict"))]
        for title, test in (
            ("VANISHED TRUE POSITIVES (lost: regression?)", lambda v: v == "tp"),
            ("VANISHED FALSE POSITIVES (fixed)", lambda v: v == "fp"),
            ("VANISHED UNREVIEWED", lambda v: v not in ("tp", "fp")),
        )
    }


def change_sections(comparison: Comparison) -> list[str]:
    out = []
    sections = {
        "NEW (need review)": comparison.new,
        **vanished_by_verdict(comparison.vanished),
        "REAPPEARED (old verdict applies)": comparison.reappeared,
    }
    for title, items in sections.items():
        if items:
            out += [f"{title}: {len(items)}"] + [f"  {describe(f)}" for f in items] + [""]
    if comparison.changed:
        out += [f"MESSAGE CHANGED (check the reason still holds): {len(comparison.changed)}"]
        out += [f"  {describe(f)}\n    was: {e.get('message')}" for e, f in comparison.changed] + [""]
    return out


def text_report(runs: list[PackageRun], comparison: Comparison) -> list[str]:
    failed = [f"  {run.name}: {run.error}" for run in runs if run.error]
    out = [f"NOT CHECKED: {len(failed)}", *failed, ""] if failed else []
    out += change_sections(comparison)
    package_rows = {r["package"]: r for r in precision_table(comparison.verdicts, "package")}
    empty = {"tp": 0, "fp": 0, "unreviewed": 0, "precision": None}
    rows = [
        dict(
            package_rows.get(run.name, empty),
            package=run.name,
            version=run.version,
            files=run.files,
            cold_s=None if run.error else run.wall_s,
            cpu_s=None if run.error else run.cpu_s,
        )
        for run in runs
    ]
    rows.append(dict(package_rows.get("all", empty), package="all"))
    out += ["per package (cold `mplint --no-cache`: wall time, and CPU time of mplint and its workers):"]
    out += format_table(rows, ["package", "version", "files", "cold_s", "cpu_s", "tp", "fp", "unreviewed", "precision"])
    out += ["", "per rule:"] + format_table(
        precision_table(comparison.verdicts, "rule"), ["rule", "tp", "fp", "unreviewed", "precision"]
    )
    out += ["", "per framework:"] + format_table(
        framework_table(comparison.verdicts), ["framework", "tp", "fp", "unreviewed", "precision"]
    )
    unreviewed = sum(1 for _, v in comparison.verdicts if v == "unreviewed")
    out += ["", f"{len(comparison.verdicts)} current findings, {unreviewed} unreviewed (not counted in precision)"]
    return out


def json_report(runs: list[PackageRun], comparison: Comparison) -> dict:
    return {
        "packages": [
            {
                "name": r.name,
                "version": r.version,
                "framework": FRAMEWORKS.get(r.name),
                "files": r.files,
                "cold_wall_s": round(r.wall_s, 2),
                "cold_cpu_s": round(r.cpu_s, 2),
                "findings": len(r.findings),
                "error": r.error or None,
            }
            for r in runs
        ],
        "new": comparison.new,
        "vanished": comparison.vanished,
        "vanished_tp": sum(1 for e in comparison.vanished if e.get("verdict") == "tp"),
        "reappeared": comparison.reappeared,
        "message_changed": [{"finding": f, "was": e.get("message")} for e, f in comparison.changed],
        "precision": {
            "by_rule": precision_table(comparison.verdicts, "rule"),
            "by_package": precision_table(comparison.verdicts, "package"),
            "by_framework": framework_table(comparison.verdicts),
        },
        "unreviewed": sum(1 for _, v in comparison.verdicts if v == "unreviewed"),
    }


# ---------------------------------------------------------------------------------------------- main


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument(
        "--cache",
        type=Path,
        default=None,
        help="download cache (default: $MPLINT_REALWORLD_CACHE or ~/.cache/mplint-realworld)",
    )
    parser.add_argument("--package", action="append", choices=PACKAGE_NAMES, help="check only this package")
    parser.add_argument("--update", action="store_true", help="write new findings into the snapshot as unreviewed")
    parser.add_argument("--json", action="store_true", help="print the report as JSON")
    parser.add_argument("--repos", action="store_true", help="check the pinned git repositories instead of packages")
    parser.add_argument("--repo", action="append", choices=REPOSITORY_NAMES, help="check only this repository")
    parser.add_argument(
        "--mirror",
        type=Path,
        default=None,
        help="folder of local git copies (<owner+name>/repo, "
        "<owner+name>.git or <owner+name>); repositories not there are cloned from --remote",
    )
    parser.add_argument("--remote", default=repos.DEFAULT_REMOTE, help="clone URL template (default: %(default)s)")
    parser.add_argument(
        "--paths",
        action="store_true",
        help="also lint each top-level folder and a sample of "
        "single files and compare their findings with the root run",
    )
    parser.add_argument("--sample", type=int, default=50, help="single files per repository for --paths")
    parser.add_argument("--seed", type=int, default=0, help="seed of the --paths sample")
    parser.add_argument(
        "--cached-facts",
        action="store_true",
        help="with --paths: the path runs (not the root run) "
        "read the facts of unchanged files from a shared cache, every file is checked afresh "
        "(bench/mplint_cached_facts.py)",
    )
    parser.add_argument(
        "--recorded",
        action="store_true",
        help="with --repos: report the snapshot's last run "
        "(findings, fixes, cold times, path differences) without linting anything",
    )
    parser.add_argument("--snapshot", type=Path, default=SNAPSHOT, help=argparse.SUPPRESS)
    return parser.parse_args(argv)


def warn_version_drift(runs: list[PackageRun], snapshot: dict) -> None:
    # Only keras-src can drift (it follows the installed Keras); its findings then differ for reasons of its own.
    for run in runs:
        reviewed_on = snapshot["packages"].get(run.name)
        if run.version and reviewed_on and reviewed_on != run.version:
            print(
                f"warning: {run.name} {run.version} is checked, the snapshot was reviewed on {reviewed_on}",
                file=sys.stderr,
            )


def recorded_run(repo: repos.Repository, snapshot: dict) -> repos.RepoRun:
    """A repository's last run as the snapshot recorded it (``--recorded``: report without linting)."""
    entry = snapshot["repositories"].get(repo.name) or {}
    if entry.get("commit") != repo.commit:
        return repos.RepoRun(repo.name, repo.commit, error="not recorded at this commit (run with --update)")
    current = [f for f in snapshot["findings"] if f["package"] == repo.name and f.get("status", "current") == "current"]
    fixes = [f for f in snapshot["fixes"] if f["package"] == repo.name and f.get("status", "current") == "current"]
    return repos.RepoRun(
        repo.name,
        repo.commit,
        files=entry["files"],
        wall_s=entry["cold_s"],
        findings=[{k: f[k] for k in ("package", "path", "rule", "line", "col", "message")} for f in current],
        fixes=[{k: v for k, v in f.items() if k not in ("verdict", "reason", "status")} for f in fixes],
    )


def check_repositories(args: argparse.Namespace, cache: Path) -> int:
    runs = []
    recorded_snapshot = load_snapshot(args.snapshot) if args.recorded else None
    for repo in (r for r in repos.REPOSITORIES if not args.repo or r.name in args.repo):
        if recorded_snapshot is not None:
            runs.append(recorded_run(repo, recorded_snapshot))
            continue
        print(f"checking {repo.name} ...", file=sys.stderr, flush=True)
        run = repos.check_repository(
            repo, cache, args.mirror, args.remote, REPO, args.paths, args.sample, args.seed, args.cached_facts
        )
        if run.skipped:
            print(
                f"warning: {repo.name}: {len(run.skipped)} files the git copy lacks were left out: "
                f"{', '.join(run.skipped[:5])}{' ...' if len(run.skipped) > 5 else ''}",
                file=sys.stderr,
            )
        runs.append(run)
    checked = {r.name for r in runs if not r.error}
    findings = [f for r in runs if not r.error for f in r.findings]
    fixes = [f for r in runs if not r.error for f in r.fixes]
    snapshot = load_snapshot(args.snapshot)
    comparison = compare(findings, snapshot["findings"], checked)
    fix_verdicts, vanished_fixes = repos.compare_fixes(fixes, snapshot["fixes"], checked)
    plants = [(p, repos.plant_found(p, findings)) for p in snapshot["plants"] if p["package"] in checked]
    for run in runs:
        recorded = snapshot["path_independence"].get(run.name) or {}
        if not args.paths and recorded.get("commit") == run.commit:  # the last --paths run on this commit
            run.path_checked, run.path_differences = recorded["runs"], recorded["differences"]
        reviewed_on = (snapshot["repositories"].get(run.name) or {}).get("commit")
        if reviewed_on not in (None, run.commit):
            print(
                f"warning: {run.name} {run.commit[:12]} is checked, the snapshot was reviewed on {reviewed_on[:12]}",
                file=sys.stderr,
            )
    if args.update and not args.recorded:
        snapshot["findings"] = updated(snapshot["findings"], findings, checked)
        snapshot["fixes"] = repos.updated_fixes(snapshot["fixes"], fixes, checked)
        snapshot["repositories"].update(
            {r.name: {"commit": r.commit, "files": r.files, "cold_s": round(r.wall_s, 1)} for r in runs if not r.error}
        )
        if args.paths:
            snapshot["path_independence"].update(
                {
                    r.name: {
                        "commit": r.commit,
                        "runs": r.path_checked,
                        "sample": args.sample,
                        "seed": args.seed,
                        **({"cached_facts": True} if args.cached_facts else {}),
                        "differences": r.path_differences,
                    }
                    for r in runs
                    if not r.error
                }
            )
        write_snapshot(args.snapshot, snapshot)
    if args.json:
        print(
            json.dumps(
                {
                    "repositories": [
                        {
                            "name": r.name,
                            "commit": r.commit,
                            "files": r.files,
                            "cold_wall_s": round(r.wall_s, 2),
                            "findings": len(r.findings),
                            "fixes": len(r.fixes),
                            "skipped": r.skipped,
                            "path_runs": r.path_checked,
                            "path_differences": r.path_differences,
                            "error": r.error or None,
                        }
                        for r in runs
                    ],
                    "new": comparison.new,
                    "vanished": comparison.vanished,
                    "fixes_unreviewed": [f for f, v in fix_verdicts if v == "unreviewed"],
                    "fixes_vanished": vanished_fixes,
                    **{
                        f"by_{group}": repos.review_table(comparison.verdicts, fix_verdicts, plants, group)
                        for group in ("package", "rule", "framework")
                    },
                },
                indent=2,
            )
        )
    else:
        print(
            "\n".join(
                change_sections(comparison)
                + repos.repos_report(runs, comparison.verdicts, fix_verdicts, plants, vanished_fixes)
            )
        )
    if any(r.error for r in runs):
        return 2
    unreviewed = [v for _, v in comparison.verdicts + fix_verdicts if v == "unreviewed"]
    return 1 if unreviewed else 0


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    cache = (args.cache or default_cache()).expanduser()
    if args.repos:
        return check_repositories(args, cache)
    runs = []
    for name in args.package or PACKAGE_NAMES:
        print(f"checking {name} ...", file=sys.stderr, flush=True)
        runs.append(check(name, cache))
    checked = {r.name for r in runs if not r.error}
    findings = [f for r in runs if not r.error for f in r.findings]
    snapshot = load_snapshot(args.snapshot)
    warn_version_drift(runs, snapshot)
    comparison = compare(findings, snapshot["findings"], checked)
    if args.update:
        snapshot["findings"] = updated(snapshot["findings"], findings, checked)
        snapshot["packages"].update({r.name: r.version for r in runs if not r.error})
        write_snapshot(args.snapshot, snapshot)
    if args.json:
        print(json.dumps(json_report(runs, comparison), indent=2))
    else:
        print("\n".join(text_report(runs, comparison)))
    if any(r.error for r in runs):
        return 2
    return 1 if any(v == "unreviewed" for _, v in comparison.verdicts) else 0


if __name__ == "__main__":
    sys.exit(main())
