"""Each rule's documentation page: its Markdown (generated from ``rules/*.yaml`` into ``docs/rules/``) and its URL.

A page's URL is ``{base}/rules/{ID}.md``, where the base is the ``docs-url`` setting, else the project's
``[project.urls] Documentation``; without either it is the page file itself (``file://``), shipped in the wheel
as ``mplint/rule_docs/`` and in a checkout under ``docs/rules/``, so that every link resolves offline.
"""

from __future__ import annotations

import functools
from pathlib import Path

_PACKAGE_DIR = Path(__file__).resolve().parent
PAGES_DIRS = (_PACKAGE_DIR / "rule_docs", _PACKAGE_DIR.parent / "docs" / "rules")

SAFETY = {
    "safe": "Safe: keeps float32 behaviour identical; applied by `--fix`.",
    "unsafe": "Unsafe: may change results or checkpoints; applied only with `--fix --unsafe-fixes`.",
    "none": "No automatic fix: the message explains the change.",
}


@functools.cache
def project_docs_url() -> str | None:
    """``[project.urls] Documentation``: from pyproject.toml in a source checkout (the installed metadata of an
    editable install can be older), else from the installed package's metadata."""
    pyproject = _PACKAGE_DIR.parent / "pyproject.toml"
    if pyproject.is_file():
        import tomllib

        try:
            project = tomllib.loads(pyproject.read_text(encoding="utf-8")).get("project", {})
        except (OSError, tomllib.TOMLDecodeError):
            project = {}
        if project.get("name") == "mplint":
            return project.get("urls", {}).get("Documentation")
    from importlib import metadata

    try:
        entries = metadata.metadata("mplint").get_all("Project-URL") or []
    except metadata.PackageNotFoundError:
        return None
    for entry in entries:
        label, _, url = entry.partition(",")
        if label.strip().lower() == "documentation":
            return url.strip()
    return None


def pages_dir() -> Path:
    return next((d for d in PAGES_DIRS if d.is_dir()), PAGES_DIRS[-1])


def published_url(rule_id: str, docs_url: str | None = None) -> str | None:
    """The URL of a rule's page under ``docs_url`` (the config's ``docs-url``), else under the project's
    metadata; None without either."""
    base = docs_url or project_docs_url()
    return f"{base.rstrip('/')}/rules/{rule_id}.md" if base else None


def rule_url(rule_id: str, docs_url: str | None = None) -> str:
    """The URL of a rule's page: the published one, else the page file of this install (``file://``)."""
    return published_url(rule_id, docs_url) or (pages_dir() / f"{rule_id}.md").as_uri()


def _fence(code: str) -> list[str]:
    return ["```python", code, "```"]


def page(meta, source_note: bool = True) -> str:
    """A rule's page in Markdown: what, why, example, fix, fix safety, proof (when the YAML names one), details;
    ``source_note``: the closing comment that says which YAML file the page is generated from."""
    out = [
        f"# {meta.id} `{meta.name}`",
        "",
        meta.summary,
        "",
        "## What it does",
        "",
        meta.what,
        "",
        "## Why is this bad?",
        "",
        meta.why,
        "",
    ]
    if meta.example:
        out += ["## Example", "", *_fence(meta.example), ""]
        if meta.example_fixed:
            out += ["Use instead:", "", *_fence(meta.example_fixed), ""]
    out += ["## Fix", "", meta.fix, "", "## Fix safety", "", SAFETY[meta.fix_safety.value], ""]
    if meta.proof:
        out += ["## Proof", "", *(f"- {p}" for p in meta.proof), ""]
    generations = ", ".join(f"G{g}" for g in meta.generations) or "PyTorch (torch.amp, torch.cuda.amp, apex.amp)"
    out += [
        "## Details",
        "",
        f"- Applies to: {generations}",
        f"- Kind: {meta.kind}",
        f"- Severity: {meta.severity.value}",
        f"- Enabled by default: {'yes' if meta.default_enabled else 'no'}",
        "",
    ]
    if meta.references:
        out += ["## References", "", *(f"- <{r}>" for r in meta.references), ""]
    if source_note:
        out += [
            f"<!-- Generated from rules/{meta.source.name} by `mplint rules --pages docs/rules`: edit the YAML. -->"
        ]
    return "\n".join(out).rstrip("\n") + "\n"


def index(metas) -> str:
    """docs/rules/README.md: every rule, linked to its page."""
    rows = [
        "# Rules",
        "",
        "One page per rule, generated from [`rules/`](../../rules/) "
        "(`mplint rules --pages docs/rules`); `mplint rule MP101` prints the same page at a terminal.",
        "",
        "| ID | name | fix | summary |",
        "|---|---|---|---|",
    ]
    rows += [f"| [{m.id}]({m.id}.md) | `{m.name}` | {m.fix_safety.value} | {m.summary} |" for m in metas]
    return "\n".join(rows) + "\n"


def pages(metas) -> dict[str, str]:
    """File name -> text of every page of the folder."""
    return {"README.md": index(metas), **{f"{m.id}.md": page(m) for m in metas}}


def write_pages(folder: Path, metas) -> list[Path]:
    """Write the pages (and remove pages of rules that are gone); the files written."""
    folder.mkdir(parents=True, exist_ok=True)
    wanted = pages(metas)
    for stale in folder.glob("MP*.md"):
        if stale.name not in wanted:
            stale.unlink()
    written = []
    for name, text in wanted.items():
        path = folder / name
        if not path.is_file() or path.read_text(encoding="utf-8") != text:
            path.write_text(text, encoding="utf-8")
            written.append(path)
    return written


# --- the README's generated sections ---------------------------------------------------------------------------


def rules_markdown() -> str:
    """The rule table as Markdown (the README's table is this text)."""
    from mplint.catalog import load_catalog

    rows = ["| ID | name | fix | summary |", "|---|---|---|---|"]
    for meta in load_catalog().values():
        note = "" if meta.default_enabled else " (off by default)"
        rows.append(f"| {meta.id} | `{meta.name}` | {meta.fix_safety.value} | {meta.summary}{note} |")
    return "\n".join(rows) + "\n"


def readme_section(readme: str, name: str) -> str:
    """The generated text between the README's ``<!-- name:start -->`` and ``<!-- name:end -->`` markers."""
    return readme.split(f"<!-- {name}:start -->\n", 1)[1].split(f"<!-- {name}:end -->", 1)[0]


def write_readme(path: Path) -> str:
    """Rewrite the README's generated sections (the rule table and the proofs of the safe fixes) and say what was
    done; ValueError where the README lacks a section's markers."""
    text = path.read_text(encoding="utf-8")
    new = text
    for name, generate in (("rules-table", rules_markdown), ("proofs", proofs_markdown)):
        start, end = f"<!-- {name}:start -->\n", f"<!-- {name}:end -->"
        if start not in new or end not in new.split(start, 1)[1]:
            raise ValueError(f"{path}: no `{start.strip()}` ... `{end}` markers")
        head, rest = new.split(start, 1)
        new = head + start + generate() + end + rest.split(end, 1)[1]
    if new != text:
        path.write_text(new, encoding="utf-8")
    return f"{'Rewrote' if new != text else 'Kept'} the rule table and proofs of {path.as_posix()}."


def proofs_markdown() -> str:
    """Each safe fix and the executed tests that prove it (the README's list is this text)."""
    from mplint.catalog import load_catalog
    from mplint.diagnostics import FixSafety

    rows = []
    for meta in load_catalog().values():
        if meta.fix_safety is FixSafety.SAFE and meta.proof:  # one lacking a proof: tests/test_rule_proofs.py
            rows.append(f"- {meta.id}: " + ", ".join(f"`{proof}`" for proof in meta.proof))
    return "\n".join(rows) + "\n"
