"""First sight: lint repositories the check has never seen and write review packets for blind reviewers.

    python bench/first_sight.py --mirror DIR --out DIR owner/name@COMMIT [owner/name@COMMIT ...]

Per repository, from its root as a maintainer would (``../shared/first-sight.md`` is the procedure): ``mplint .
--format json --no-cache`` and ``mplint . --fix --unsafe-fixes`` on a copy. ``OUT/<owner+name>.md`` lists every
finding with its source lines and every fix hunk, numbered, with nothing of the rules' code: the packet a reviewer
reads beside the catalog and the repository. ``OUT/<owner+name>.json`` keeps the raw findings and fixes;
``OUT/verdicts.yaml`` (written once, then kept) is where the reviewers' verdicts go, and ``--table`` turns it into the
AFTER.md table (per rule TP/FP/UNSURE, FP causes, fixes right/wrong per safety).

The repositories are never added to the tuned check here: that happens after the review, by hand.
"""

from __future__ import annotations

import argparse
import json
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
    path, _, cell = finding["path"].partition(":cell ")  # a notebook's finding names its cell
    try:
        source = repos.source_of(tree, {"path": path, "cell": int(cell) if cell else None})
    except (OSError, ValueError, KeyError, IndexError):
        return ""
    lines = source.splitlines()
    first = max(1, finding["line"] - CONTEXT_LINES)
    last = min(len(lines), finding["line"] + CONTEXT_LINES)
    mark = lambda n: ">" if n == finding["line"] else " "  # noqa: E731
    return "\n".join(f"{mark(n)}{n:5} | {lines[n - 1]}" for n in range(first, last + 1))


def packet(repo: repos.Repository, tree: Path, findings: list[dict], fixes: list[dict]) -> str:
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
    for number, fix in enumerate(fixes, 1):
        out += [
            f"## X{number}: {fix['rule']} fix ({fix['safety']}, {'applied' if fix['applied'] else 'not applied'})"
            f" {fix['path']}:{fix['line']}",
            "",
        ]
        for edit in fix["edits"]:
            out += [f"line {edit['line']}:", "```diff"]
            out += [f"-{line}" for line in edit["before"].splitlines() or [""]]
            out += [f"+{line}" for line in edit["after"].splitlines() or [""]]
            out += ["```", ""]
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
        record = {"repository": repo.name, "commit": repo.commit, "files": report["summary"]["files"]}
        record |= {"skipped": skipped, "findings": findings, "fixes": fixes}
        (args.out / f"{repo.slug}.json").write_text(json.dumps(record, indent=1))
        (args.out / f"{repo.slug}.md").write_text(packet(repo, tree, findings, fixes))
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
    checks: Counter = (
        Counter()
    )  # the rules' findings alone: MP0xx are the engine's notices (a file that does not parse)
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
