"""First sight: lint repositories the check has never seen and write review packets for blind reviewers.

    python bench/first_sight.py --mirror DIR --out DIR owner/name@COMMIT [owner/name@COMMIT ...]

Per repository, from its root as a maintainer would (``../shared/first-sight.md`` is the procedure): ``mplint .
--format json --no-cache``, ``mplint . --fix --unsafe-fixes`` on a copy, and ``mplint . --unsafe-fixes --diff``.
``OUT/<owner+name>.md`` lists every finding with its source lines and, per file, its fixes, numbered, with the
unified diff of the whole fixed file against the original (what ``--fix --unsafe-fixes`` writes, every fix round
included), with nothing of the rules' code: the packet a reviewer reads beside the catalog and the repository. ``OUT/<owner+name>.json`` keeps the raw findings and fixes;
``OUT/verdicts.yaml`` (written once, then kept) is where the reviewers' verdicts go, and ``--table`` turns it into the
AFTER.md table (per rule TP/FP/UNSURE, FP causes, fixes right/wrong per safety).

The repositories are never added to the tuned check here: that happens after the review, by hand.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from collections import Counter, defaultdict
from pathlib import Path

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))
import realworld_repos as repos  # noqa: E402

REPO_ROOT = Path(__file__).resolve().parent.parent
CONTEXT_LINES = 3


def repository_of(spec: str) -> repos.Repository:
    name, _, commit = spec.partition("@")
    if not commit or "/" not in name:
        raise SystemExit(f"first_sight: give repositories as owner/name@COMMIT, not {spec!r}")
    return repos.Repository(name, commit, "first sight")


def excerpt(tree: Path, finding: dict) -> str:
    try:
        source = repos.source_of(tree, {"path": finding["path"].split(":cell ")[0], "cell": finding.get("cell")})
    except (OSError, ValueError, KeyError, IndexError):
        return ""
    lines = source.splitlines()
    first = max(1, finding["line"] - CONTEXT_LINES)
    last = min(len(lines), finding["line"] + CONTEXT_LINES)
    mark = lambda n: ">" if n == finding["line"] else " "  # noqa: E731
    return "\n".join(f"{mark(n)}{n:5} | {lines[n - 1]}" for n in range(first, last + 1))


def fixed_diff(tree: Path) -> str:
    """What ``mplint . --fix --unsafe-fixes --diff`` prints from the tree's root: every file's fixed text against its
    original, after all fix rounds; nothing is written."""
    env = dict(
        os.environ,
        PYTHONPATH=os.pathsep.join(filter(None, [str(REPO_ROOT), os.environ.get("PYTHONPATH")])),
        MPLINT_NO_PROGRESS="1",
    )
    command = [sys.executable, "-m", "mplint", ".", "--fix", "--unsafe-fixes", "--diff", "--no-cache", "--exit-zero"]
    proc = subprocess.run(command, cwd=tree, env=env, capture_output=True, text=True)
    if proc.returncode:
        raise repos.RepoError(f"mplint --diff exited {proc.returncode}: {proc.stderr.strip()[-500:]}")
    return proc.stdout


def diffs_by_file(diff: str) -> dict[str, str]:
    """The unified diff split per file (a notebook's cells together, under the notebook's path), without the
    summary line that follows the hunks."""
    files: dict[str, list[str]] = {}
    current: list[str] | None = None
    lines = diff.splitlines()
    for index, line in enumerate(lines):
        following = lines[index + 1] if index + 1 < len(lines) else ""
        if line.startswith("--- ") and following.startswith("+++ "):
            label = line[4:].split("\t", 1)[0]
            path = label[2:] if label.startswith("a/") else label
            current = files.setdefault(path.split(":cell ", 1)[0], [])
        elif not line.startswith(("@@", " ", "+", "-", "\\")):
            current = None  # the summary after the hunks ("Would fix ...")
        if current is not None:
            current.append(line)
    return {path: "\n".join(text) for path, text in files.items()}


def packet(repo: repos.Repository, tree: Path, findings: list[dict], fixes: list[dict], diff: str) -> str:
    out = [f"# {repo.name} @ {repo.commit}", "", f"{len(findings)} findings, {len(fixes)} fixes.", ""]
    for number, finding in enumerate(findings, 1):
        out += [
            f"## F{number}: {finding['rule']} {finding['path']}:{finding['line']}:{finding['col']}",
            "",
            finding["message"],
            "",
            "```",
            excerpt(tree, finding),
            "```",
            "",
        ]
    per_file = diffs_by_file(diff)
    numbered: dict[str, list[tuple[int, dict]]] = defaultdict(list)
    for number, fix in enumerate(fixes, 1):
        numbered[fix["path"].split(":cell ", 1)[0]].append((number, fix))
    for path in sorted(numbered.keys() | per_file.keys()):
        out += [f"## {path}", ""]
        for number, fix in numbered.get(path, []):
            state = "applied" if fix["applied"] else "not applied"
            out.append(f"- X{number}: {fix['rule']} fix ({fix['safety']}, {state}) {fix['path']}:{fix['line']}")
        text = per_file.get(path)
        out += ["", "```diff", text, "```", ""] if text else ["", "(the fixed copy of this file is unchanged)", ""]
    return "\n".join(out)


def lint(args: argparse.Namespace) -> int:
    args.out.mkdir(parents=True, exist_ok=True)
    verdicts_path = args.out / "verdicts.yaml"
    verdicts = yaml.safe_load(verdicts_path.read_text()) if verdicts_path.exists() else None
    verdicts = verdicts or {"repositories": {}, "findings": [], "fixes": []}
    for spec in args.repositories:
        repo = repository_of(spec)
        print(f"first sight: {repo.name} ...", file=sys.stderr, flush=True)
        tree, skipped = repos.materialise(repo, args.cache, args.mirror)
        report = repos.mplint(tree, ".", repo_root=REPO_ROOT)
        findings = [repos.finding_of(d, repo.name) for d in report["diagnostics"]]
        fixes = repos.applied_fixes(repo.name, tree, REPO_ROOT)
        diff = fixed_diff(tree)
        record = {"repository": repo.name, "commit": repo.commit, "files": report["summary"]["files"]}
        record |= {"skipped": skipped, "findings": findings, "fixes": fixes}
        (args.out / f"{repo.slug}.json").write_text(json.dumps(record, indent=1))
        (args.out / f"{repo.slug}.md").write_text(packet(repo, tree, findings, fixes, diff))
        verdicts["repositories"][repo.name] = {"commit": repo.commit, "tree": str(tree)}
        print(f"  {len(findings)} findings, {len(fixes)} fixes -> {args.out / repo.slug}.md", file=sys.stderr)
    verdicts_path.write_text(yaml.safe_dump(verdicts, sort_keys=False))
    return 0


def table(verdicts_path: Path) -> str:
    """verdicts.yaml -> markdown: findings per rule, FP causes, fixes per safety."""
    data = yaml.safe_load(verdicts_path.read_text())
    per_rule: dict[str, Counter] = defaultdict(Counter)
    causes: Counter = Counter()
    for item in data["findings"]:
        per_rule[item["rule"]][item["verdict"]] += 1
        if item["verdict"] != "TP":
            causes[item.get("cause", "?")] += 1
    rows = ["| rule | TP | FP | UNSURE | precision |", "|---|---|---|---|---|"]
    total: Counter = Counter()
    for rule in sorted(per_rule):
        counts = per_rule[rule]
        total.update(counts)
        rows.append(f"| {rule} | {counts['TP']} | {counts['FP']} | {counts['UNSURE']} | {percent(counts)} |")
    rows.append(f"| **all** | {total['TP']} | {total['FP']} | {total['UNSURE']} | **{percent(total)}** |")
    # The rules' findings alone: MP0xx are the engine's notices (a file that does not parse).
    checks: Counter = Counter()
    for rule, counts in per_rule.items():
        if not rule.startswith("MP0"):
            checks.update(counts)
    rows.append(
        f"| **rules (no MP0xx)** | {checks['TP']} | {checks['FP']} | {checks['UNSURE']} | **{percent(checks)}** |"
    )
    rows += ["", "| FP/UNSURE cause | findings |", "|---|---|"]
    rows += [f"| {cause} | {n} |" for cause, n in causes.most_common()]
    fixes: dict[str, Counter] = defaultdict(Counter)
    for item in data["fixes"]:
        fixes[item["safety"]][item["fix_ok"]] += 1
    rows += ["", "| fixes | right | wrong |", "|---|---|---|"]
    rows += [f"| {safety} | {c['right']} | {c['wrong']} |" for safety, c in sorted(fixes.items())]
    return "\n".join(rows)


def percent(counts: Counter) -> str:
    judged = counts["TP"] + counts["FP"] + counts["UNSURE"]
    return f"{100 * counts['TP'] / judged:.0f}%" if judged else "-"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("repositories", nargs="*", help="owner/name@COMMIT")
    parser.add_argument("--mirror", type=Path, help="folder of local mirrors (<owner+name>/repo)")
    parser.add_argument("--cache", type=Path, default=Path("~/.cache/mplint-first-sight").expanduser())
    parser.add_argument("--out", type=Path, required=True, help="folder for the packets and verdicts.yaml")
    parser.add_argument("--table", action="store_true", help="print the table of OUT/verdicts.yaml")
    args = parser.parse_args(argv)
    if args.table:
        print(table(args.out / "verdicts.yaml"))
        return 0
    return lint(args)


if __name__ == "__main__":
    sys.exit(main())
