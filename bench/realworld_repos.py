"""Whole git repositories for the real-world check (``python bench/realworld.py --repos``).

Each repository is pinned to a commit and materialised once into the cache folder (``repos/<owner+name>-<commit>``)
from a local mirror (``--mirror DIR`` holding ``<owner+name>/repo``, ``<owner+name>.git`` or ``<owner+name>``, bare or
not) or else by ``git clone --bare`` from ``--remote`` (default GitHub); after that everything runs offline. Blobs a
mirror lacks (snapshot stores leave out files of several MiB: data, videos) are left out of the tree and listed.

Per repository the check runs, from the repository root as a maintainer would:

- ``mplint . --format json --no-cache`` (the findings and the cold time);
- ``mplint . --fix --unsafe-fixes`` on a copy: every applied fix, with the text each edit replaced, for review;
- with ``--paths``: ``mplint <folder>`` for each top-level folder and ``mplint <file>`` for a seeded sample of files
  and for each file holding a root finding; a file whose findings (rule, line, column, message) differ from the root
  run is a path-independence failure
  (``--cached-facts``: these runs share a facts cache, see ``mplint_cached_facts.py``; the root run stays cold).

The snapshot holds a verdict and a reason for every finding (tp/fp) and every applied fix (right/harmful/no-op),
the planted defects (known bugs found by reading the code, each with ``why``: recall is the share reported), and the
path-independence differences.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import random
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path

TENSORFLOW, PYTORCH = "tensorflow", "pytorch"
FIX_VERDICTS = ("right", "harmful", "no-op", "unreviewed")
LINTED_SUFFIXES = (".py", ".ipynb")
DEFAULT_REMOTE = "https://github.com/{name}.git"


@dataclass(frozen=True)
class Repository:
    name: str  # owner/name on GitHub
    commit: str  # the reviewed commit
    layout: str  # the kind of layout it stands for

    @property
    def slug(self) -> str:
        return self.name.replace("/", "+")


REPOSITORIES = [
    # monorepos: many programs, each folder with its own container or requirements
    Repository("mlcommons/training", "aa344c7fb900e82ed19fb94aebfed50c63ab2204", "monorepo"),
    Repository("microsoft/DeepSpeedExamples", "83757d9c937daabd1089a08051061706cb73900d", "monorepo"),
    # container monorepos: per-submitter folders, each run in an NGC (or vendor) image its Dockerfile names
    Repository("mlcommons/training_results_v0.7", "0a8a85a209c8e45b661596c382cc20f4e32fd2fe", "container monorepo"),
    Repository("mlcommons/training_results_v0.6", "f312518c2d6107eec983750eed23950f1f0c8a0e", "container monorepo"),
    Repository("IntelAI/models", "02a1c5317a74782ff23d39473e31f6bd2024bf81", "container monorepo"),
    Repository("mlcommons/training_results_v1.1", "ebe92f81f7a69255a3b0a907595d8be623d75ec6", "container monorepo"),
    # example collections: every file its own program
    Repository("pytorch/examples", "77f55b912142e11fcfdf5b530231fb9c52f181e8", "examples"),
    Repository("google-research/bert", "eedf5716ce1268e56f0a50264a88cafad334ac61", "examples"),
    Repository("google-research/albert", "b772393d3dae115b493258ce8e37c17b2cc62100", "examples"),
    Repository("fchollet/deep-learning-with-python-notebooks", "dea84a4e12cc3bb3cb61ce952a0168bca113d315", "notebooks"),
    Repository("ageron/handson-ml3", "e3f3f9e66d58cfa1d068a498433063a1d3fba9ef", "notebooks"),
    # libraries with tools, benchmarks and conversion scripts beside them
    Repository("keras-team/keras", "3422977a5e38fb2f7709aaa9a08e47f0c43d0f60", "library"),
    Repository("keras-team/keras-rs", "812d35bf0cb2452e66433e52880eb892a99bb8c9", "library"),
    Repository("keras-team/tf-keras", "dd0a7237b9b24132dba3f491f3c84b0094ab796e", "library"),
    Repository("NVIDIA/OpenSeq2Seq", "8681d381ed404fde516e2c1b823de5a213c59aba", "library"),
    Repository("tensorflow/tensor2tensor", "bafdc1b67730430d38d6ab802cbd51f9d053ba2e", "library"),
    Repository("NVIDIA-Merlin/models", "eb1e54196a64a70950b2a7e7744d2150e052d53e", "library"),
    Repository("facebookresearch/fairseq", "3d262bb25690e4eb2e7d3c1309b1e9c406ca4b99", "library"),
    Repository("mindee/doctr", "8a88feaf7ff5140e5f4c5c860cb9414dda128656", "library"),
    Repository("horovod/horovod", "2626dc87a3a8eb8fb7d2216198ce45bce0f9e65a", "library"),
    Repository("NVIDIA/Megatron-LM", "d98e8a64ddf34856e74b24714e3bedb2f5a39553", "library"),
    # PyTorch training code with apex, torch.cuda.amp, GradScaler, gradient accumulation
    Repository("karpathy/nanoGPT", "3adf61e154c3fe3fca428ad6bc3818b27a3b8291", "training"),
    Repository("facebookresearch/detectron2", "02b5c4e295e990042a714712c21dc79b731e8833", "training"),
    Repository("NVIDIA/apex", "6424da3b4faa6c8f062da4a48c424fff3f02d42d", "training"),
    Repository("facebookresearch/ConvNeXt", "048efcea897d999aed302f2639b6270aedf8d4c8", "training"),
    Repository("ultralytics/yolov5", "5081342f04fb287fc2e5f2b5a4e06752b7937b1c", "training"),
    Repository("facebookresearch/deit", "7e160fe43f0252d17191b71cbb5826254114ea5b", "training"),
]


class RepoError(Exception):
    pass


ENGINE = "engine"  # MP0xx: a file that cannot be read or parsed, fixes that did not settle, a crashed rule


def framework_of(rule: str) -> str:
    return PYTORCH if rule.startswith("MPT") else ENGINE if rule.startswith("MP0") else TENSORFLOW


# ---------------------------------------------------------------------------------------------- materialising


def git(git_dir: Path, *args: str, stdin: bytes | None = None) -> bytes:
    proc = subprocess.run(["git", "--git-dir", str(git_dir), *args], input=stdin, capture_output=True)
    if proc.returncode:
        raise RepoError(f"git {' '.join(args[:2])} failed: {proc.stderr.decode(errors='replace').strip()[-300:]}")
    return proc.stdout


def git_dir_of(path: Path) -> Path | None:
    for candidate in (path / ".git", path):
        if (candidate / "objects").is_dir() and (candidate / "HEAD").exists():
            return candidate
    return None


def mirrored(repo: Repository, mirror: Path | None) -> Path | None:
    if mirror is None:
        return None
    for place in (mirror / repo.slug / "repo", mirror / f"{repo.slug}.git", mirror / repo.slug):
        found = git_dir_of(place)
        if found:
            return found
    return None


def cloned(repo: Repository, cache: Path, remote: str) -> Path:
    target = cache / "git" / f"{repo.slug}.git"
    if not git_dir_of(target):
        target.parent.mkdir(parents=True, exist_ok=True)
        proc = subprocess.run(
            ["git", "clone", "--bare", "--quiet", remote.format(name=repo.name), str(target)],
            capture_output=True,
            text=True,
        )
        if proc.returncode:
            raise RepoError(f"git clone failed: {proc.stderr.strip()[-300:]}")
    return target


def has_commit(git_dir: Path, commit: str) -> bool:
    return (
        subprocess.run(
            ["git", "--git-dir", str(git_dir), "cat-file", "-e", f"{commit}^{{commit}}"], capture_output=True
        ).returncode
        == 0
    )


def missing_blobs(git_dir: Path, commit: str) -> list[str]:
    """Paths of the commit whose content the git directory lacks (a mirror that leaves out large files)."""
    listing = git(git_dir, "ls-tree", "-r", "-z", commit).split(b"\0")
    blobs: dict[bytes, list[str]] = defaultdict(list)  # one blob may lie at several paths
    for line in filter(None, listing):
        meta, path = line.split(b"\t", 1)
        _, kind, object_id = meta.split()
        if kind == b"blob":
            blobs[object_id].append(path.decode())
    if not blobs:
        return []
    answer = git(git_dir, "cat-file", "--batch-check=%(objectname) %(objecttype)", stdin=b"\n".join(blobs) + b"\n")
    return sorted(p for line in answer.splitlines() if line.endswith(b" missing") for p in blobs[line.split()[0]])


def materialise(
    repo: Repository, cache: Path, mirror: Path | None = None, remote: str = DEFAULT_REMOTE
) -> tuple[Path, list[str]]:
    """The repository's tree at its commit (cached), and the paths left out because their blobs are absent."""
    tree = cache / "repos" / f"{repo.slug}-{repo.commit[:12]}"
    skipped_list = tree.parent / f"{tree.name}.skipped"
    if tree.is_dir():
        return tree, skipped_list.read_text().splitlines() if skipped_list.exists() else []
    git_dir = mirrored(repo, mirror) or cloned(repo, cache, remote)
    if not has_commit(git_dir, repo.commit):
        git(git_dir, "fetch", "--quiet", "origin", repo.commit)
    skipped = missing_blobs(git_dir, repo.commit)
    archive = git(
        git_dir, "archive", "--format=tar", repo.commit, "--", ".", *(f":(exclude,literal){p}" for p in skipped)
    )
    tree.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=tree.name + ".", dir=tree.parent))
    try:
        with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
            members = [m for m in tar.getmembers() if m.isfile() or m.isdir()]  # no links out of the tree
            tar.extractall(staging, members=members, filter="data")
        staging.rename(tree)
    finally:
        if staging.exists():
            shutil.rmtree(staging)
    skipped_list.write_text("".join(p + "\n" for p in skipped))
    return tree, skipped


# ---------------------------------------------------------------------------------------------- linting

CACHED_FACTS = Path(__file__).resolve().parent / "mplint_cached_facts.py"


def mplint(cwd: Path, *args: str, repo_root: Path, cached_facts: bool = False) -> dict:
    """``mplint ARGS`` from ``cwd``, cold; ``cached_facts``: facts from ``.mplint_cache/``, no cached results."""
    env = dict(
        os.environ,
        PYTHONPATH=os.pathsep.join(filter(None, [str(repo_root), os.environ.get("PYTHONPATH")])),
        MPLINT_NO_PROGRESS="1",
    )
    start = [sys.executable, str(CACHED_FACTS)] if cached_facts else [sys.executable, "-m", "mplint"]
    cmd = [*start, *args, "--format", "json", *([] if cached_facts else ["--no-cache"]), "--exit-zero"]
    proc = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True)
    if proc.returncode:
        raise RepoError(f"mplint {' '.join(args)} exited {proc.returncode}: {proc.stderr.strip()[-500:]}")
    return json.loads(proc.stdout)


def where(diagnostic: dict) -> str:
    path = diagnostic["path"]
    return f"{path}:cell {diagnostic['cell']}" if diagnostic.get("cell") is not None else path


def finding_of(diagnostic: dict, repo: str) -> dict:
    return {
        "package": repo,
        "path": where(diagnostic),
        "rule": diagnostic["rule"],
        "line": diagnostic["start"]["line"],
        "col": diagnostic["start"]["column"],
        "message": diagnostic["message"],
    }


def source_of(tree: Path, diagnostic: dict) -> str:
    path = tree / diagnostic["path"]
    if diagnostic.get("cell") is None:
        return path.read_text(encoding="utf-8")
    cell = json.loads(path.read_text(encoding="utf-8"))["cells"][diagnostic["cell"] - 1]["source"]
    return "".join(cell) if isinstance(cell, list) else cell


def text_between(source: str, start: dict, end: dict) -> str:
    lines = source.splitlines(keepends=True)

    def offset(position: dict) -> int:
        return sum(len(line) for line in lines[: position["line"] - 1]) + position["column"] - 1

    return source[offset(start) : offset(end)]


def fix_of(diagnostic: dict, repo: str, tree: Path, applied: bool) -> dict:
    """A fix as reviewable text: what each edit replaced and with what (imports it added are not edits)."""
    source = source_of(tree, diagnostic)
    edits = [
        {"line": e["start"]["line"], "before": text_between(source, e["start"], e["end"]), "after": e["text"]}
        for e in diagnostic["fix"]["edits"]
    ]
    return {**finding_of(diagnostic, repo), "safety": diagnostic["fix"]["safety"], "applied": applied, "edits": edits}


def fix_key(fix: dict) -> tuple:
    """Where and what: a fix whose edits change needs a new review, so its text is part of the key."""
    digest = hashlib.sha256(json.dumps(fix["edits"], sort_keys=True).encode()).hexdigest()[:12]
    return fix["package"], fix["path"], fix["rule"], fix["line"], fix["col"], digest


def applied_fixes(repo: str, tree: Path, repo_root: Path) -> list[dict]:
    """What ``--fix --unsafe-fixes`` did on a copy: the fixes it applied, and those it offered but left unapplied
    (in a file whose fixes did not settle, MP001, or that failed to apply), which a user of ``--diff`` still sees."""
    with tempfile.TemporaryDirectory(prefix="mplint-fix-") as scratch:
        copy = Path(scratch) / "tree"
        shutil.copytree(tree, copy, symlinks=True)
        report = mplint(copy, ".", "--fix", "--unsafe-fixes", repo_root=repo_root)
    fixed = [fix_of(d, repo, tree, True) for d in report.get("fixed") or [] if d.get("fix")]
    left = [fix_of(d, repo, tree, False) for d in report["diagnostics"] if d.get("fix") and d["fix"]["edits"]]
    return fixed + left


def lintable_files(tree: Path) -> list[str]:
    found = []
    for path in sorted(tree.rglob("*")):
        relative = path.relative_to(tree)
        if path.suffix in LINTED_SUFFIXES and path.is_file() and not any(p.startswith(".") for p in relative.parts):
            found.append(relative.as_posix())
    return found


def path_runs(tree: Path, sample: int, seed: int) -> list[str]:
    """Each top-level folder holding lintable files, then a seeded sample of single files."""
    files = lintable_files(tree)
    folders = sorted({f.split("/", 1)[0] for f in files if "/" in f})
    return [f"{folder}/" for folder in folders] + sorted(random.Random(seed).sample(files, min(sample, len(files))))


def by_file(diagnostics: list[dict]) -> dict[str, set]:
    files: dict[str, set] = defaultdict(set)
    for d in diagnostics:
        files[where(d)].add((d["rule"], d["start"]["line"], d["start"]["column"], d["message"]))
    return files


def path_differences(repo: str, root: list[dict], run: str, diagnostics: list[dict]) -> list[dict]:
    """Files under ``run`` whose findings differ between ``mplint .`` and ``mplint <run>``."""
    root_files, run_files = by_file(root), by_file(diagnostics)

    def inside(path: str) -> bool:
        plain = path.split(":cell ", 1)[0]
        return plain.startswith(run) if run.endswith("/") else plain == run

    differences = []
    for path in sorted({p for p in root_files if inside(p)} | set(run_files)):
        only_root = sorted(root_files.get(path, set()) - run_files.get(path, set()))
        only_run = sorted(run_files.get(path, set()) - root_files.get(path, set()))
        if only_root or only_run:
            differences.append(
                {
                    "package": repo,
                    "run": run,
                    "path": path,
                    "only_root": [list(x) for x in only_root],
                    "only_run": [list(x) for x in only_run],
                }
            )
    return differences


@dataclass
class RepoRun:
    name: str
    commit: str = ""
    files: int = 0
    wall_s: float = 0.0
    findings: list[dict] = field(default_factory=list)
    fixes: list[dict] = field(default_factory=list)
    path_checked: int = 0  # runs compared with the root run (0: not checked this time)
    path_differences: list[dict] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    error: str = ""


def check_repository(
    repo: Repository,
    cache: Path,
    mirror: Path | None,
    remote: str,
    repo_root: Path,
    paths: bool = False,
    sample: int = 50,
    seed: int = 0,
    cached_facts: bool = False,
) -> RepoRun:
    run = RepoRun(repo.name, repo.commit)
    try:
        tree, run.skipped = materialise(repo, cache, mirror, remote)
        start = time.perf_counter()
        report = mplint(tree, ".", repo_root=repo_root)
        run.wall_s = time.perf_counter() - start
        run.files = report["summary"]["files"]
        run.findings = [finding_of(d, repo.name) for d in report["diagnostics"]]
        run.fixes = applied_fixes(repo.name, tree, repo_root)
        if paths:
            run.path_checked, run.path_differences = check_paths(
                repo.name, tree, report["diagnostics"], repo_root, sample, seed, cached_facts
            )
    except (RepoError, OSError, ValueError, tarfile.TarError) as exc:
        run.error = str(exc)
    return run


def check_paths(
    repo: str, tree: Path, root: list[dict], repo_root: Path, sample: int, seed: int, cached_facts: bool
) -> tuple[int, list[dict]]:
    """Each path run compared with the (cold) root run: the folders and the sample, then each file holding a root
    finding on its own (a sample rarely holds one, and they are the findings a narrower run could lose). With
    ``cached_facts`` the runs share a facts cache in a copy of the tree (the materialised tree stays as it is)."""
    targets = path_runs(tree, sample, seed)
    targets += sorted({d["path"] for d in root} - set(targets))
    runs, differences = 0, []
    with tempfile.TemporaryDirectory(prefix="mplint-paths-") as scratch:
        where = tree
        if cached_facts:
            where = Path(scratch) / "tree"
            shutil.copytree(tree, where, symlinks=True)
        for target in targets:
            diagnostics = mplint(where, target, repo_root=repo_root, cached_facts=cached_facts)["diagnostics"]
            found = path_differences(repo, root, target, diagnostics)
            differences += found
            runs += 1
            print(f"  mplint {target}: {len(found)} files differ", file=sys.stderr, flush=True)
    return runs, differences


# ---------------------------------------------------------------------------------------------- review tables


def compare_fixes(
    fixes: list[dict], recorded: list[dict], repos: set[str]
) -> tuple[list[tuple[dict, str]], list[dict]]:
    """Every applied fix with its recorded verdict ('unreviewed' when new), and recorded fixes no longer applied."""
    entries = {fix_key(e): e for e in recorded if e["package"] in repos}
    now = {fix_key(f): f for f in fixes}
    verdicts = [(f, (entries.get(k) or {}).get("verdict") or "unreviewed") for k, f in now.items()]
    vanished = [e for k, e in entries.items() if k not in now and e.get("status", "current") == "current"]
    return verdicts, vanished


def updated_fixes(recorded: list[dict], fixes: list[dict], repos: set[str]) -> list[dict]:
    now = {fix_key(f): f for f in fixes}
    result = []
    for entry in recorded:
        k = fix_key(entry)
        if entry["package"] in repos:
            current = now.pop(k, None)
            entry = dict(entry, status="current" if current else "vanished")
            if current:  # same edits, same verdict; the label and message are today's
                entry.update(safety=current["safety"], message=current["message"], applied=current["applied"])
        result.append(entry)
    return result + [dict(f, verdict="unreviewed", reason="", status="current") for f in now.values()]


def plant_found(plant: dict, findings: list[dict]) -> bool:
    return any(
        f["package"] == plant["package"]
        and f["path"] == plant["path"]
        and f["rule"] == plant["rule"]
        and f["line"] == plant["line"]
        for f in findings
    )


COLUMNS = [
    "findings",
    "tp",
    "fp",
    "unreviewed",
    "precision",
    "fixes",
    "right",
    "harmful",
    "no-op",
    "fix_unreviewed",
    "fix_correct",
    "plants",
    "found",
    "recall",
]


def review_table(
    finding_verdicts: list[tuple[dict, str]],
    fix_verdicts: list[tuple[dict, str]],
    plants: list[tuple[dict, bool]],
    group: str,
) -> list[dict]:
    """Rows per ``group`` (package, rule or framework) and "all": precision, fix correctness, recall."""

    def group_of(item: dict) -> str:
        return framework_of(item["rule"]) if group == "framework" else item[group]

    counts: dict[str, Counter] = defaultdict(Counter)
    for item, verdict in finding_verdicts:
        for name in (group_of(item), "all"):
            counts[name]["findings"] += 1
            counts[name][verdict] += 1
    for item, verdict in fix_verdicts:
        for name in (group_of(item), "all"):
            counts[name]["fixes"] += 1
            counts[name]["fix_unreviewed" if verdict == "unreviewed" else verdict] += 1
    for plant, found in plants:
        for name in (group_of(plant), "all"):
            counts[name]["plants"] += 1
            counts[name]["found"] += found

    def ratio(part: int, whole: int) -> float | None:
        return round(part / whole, 3) if whole else None

    rows = []
    for name in sorted(counts, key=lambda n: (n == "all", n)):
        c = counts[name]
        row = {group: name, **{column: c[column] for column in COLUMNS}}
        row["precision"] = ratio(c["tp"], c["tp"] + c["fp"])
        row["fix_correct"] = ratio(c["right"], c["right"] + c["harmful"] + c["no-op"])
        row["recall"] = ratio(c["found"], c["plants"])
        rows.append(row)
    return rows


def format_rows(rows: list[dict], columns: list[str]) -> list[str]:
    def cell(column: str, value) -> str:
        if value is None:
            return "-"
        if column in ("precision", "fix_correct", "recall"):
            return f"{value:.1%}"
        return f"{value:.1f}" if isinstance(value, float) else str(value)

    text = [list(columns)] + [[cell(c, r.get(c)) for c in columns] for r in rows]
    widths = [max(len(row[i]) for row in text) for i in range(len(columns))]
    return [
        "  ".join(v.ljust(w) if i == 0 else v.rjust(w) for i, (v, w) in enumerate(zip(row, widths))) for row in text
    ]


def describe_fix(fix: dict) -> str:
    edits = "; ".join(f"line {e['line']}: {e['before']!r} -> {e['after']!r}" for e in fix["edits"])
    state = fix["safety"] if fix.get("applied", True) else f"{fix['safety']}, not applied"
    return f"{fix['package']}: {fix['path']}:{fix['line']}:{fix['col']}: {fix['rule']} ({state}) {edits}"


def repos_report(
    runs: list[RepoRun],
    finding_verdicts: list[tuple[dict, str]],
    fix_verdicts: list[tuple[dict, str]],
    plants: list[tuple[dict, bool]],
    vanished_fixes: list[dict],
) -> list[str]:
    out = []
    failed = [f"  {r.name}: {r.error}" for r in runs if r.error]
    if failed:
        out += [f"NOT CHECKED: {len(failed)}", *failed, ""]
    new_fixes = [f for f, v in fix_verdicts if v == "unreviewed"]
    if new_fixes:
        out += [f"FIXES WITHOUT A VERDICT: {len(new_fixes)}"] + [f"  {describe_fix(f)}" for f in new_fixes] + [""]
    if vanished_fixes:
        out += (
            [f"FIXES NO LONGER APPLIED: {len(vanished_fixes)}"]
            + [f"  {describe_fix(f)}" for f in vanished_fixes]
            + [""]
        )
    missed = [p for p, found in plants if not found]
    if missed:
        out += [f"PLANTED DEFECTS NOT FOUND: {len(missed)}"]
        out += [f"  {p['package']}: {p['path']}:{p['line']}: {p['rule']} ({p['why']})" for p in missed] + [""]
    differences = [d for r in runs for d in r.path_differences]
    if differences:
        out += [f"PATH-DEPENDENT FINDINGS: {len(differences)} files"]
        for d in differences:
            out += [
                f"  {d['package']}: {d['path']} (`mplint {d['run']}` vs `mplint .`): "
                f"only in the root run {d['only_root']}, only in this run {d['only_run']}"
            ]
        out += [""]
    rows = {r["package"]: r for r in review_table(finding_verdicts, fix_verdicts, plants, "package")}
    table = []
    for run in runs:
        row = dict(
            rows.get(run.name) or {},
            package=run.name,
            commit=run.commit[:12],
            files=run.files,
            cold_s=None if run.error else run.wall_s,
            path_runs=run.path_checked or None,
            path_diffs=len(run.path_differences) if run.path_checked else None,
        )
        table.append(row)
    table.append(dict(rows.get("all") or {}, package="all"))
    per_repo = ["package", "commit", "files", "cold_s", *COLUMNS, "path_runs", "path_diffs"]
    out += ["per repository (cold `mplint . --no-cache`, wall s):"] + format_rows(table, per_repo)
    for group in ("rule", "framework"):
        out += ["", f"per {group}:"] + format_rows(
            review_table(finding_verdicts, fix_verdicts, plants, group), [group, *COLUMNS]
        )
    return out
