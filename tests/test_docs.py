"""The documentation stays usable: links resolve, snippets parse, the documented config is accepted, and no page
tells a user to install mplint from a package index it is not published on."""

from __future__ import annotations

import re

import pytest
import tomllib
import yaml
from conftest import REPO
from markdown_it import MarkdownIt

from mplint.project.config import load_file

PAGES = [REPO / "README.md", REPO / "CONTRIBUTING.md", *sorted((REPO / "docs").glob("*.md"))]
_MD = MarkdownIt()


def _tokens(page):
    return _MD.parse(page.read_text(encoding="utf-8"))


def _fences(page, info: str) -> list[str]:
    return [t.content for t in _tokens(page) if t.type == "fence" and t.info == info]


def _slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.lower()).replace(" ", "-")


def _anchors(page) -> set[str]:
    tokens = _tokens(page)
    return {_slug(tokens[i + 1].content) for i, t in enumerate(tokens) if t.type == "heading_open"}


def _links(page) -> list[str]:
    return [
        child.attrs["href"]
        for t in _tokens(page)
        if t.type == "inline"
        for child in t.children or []
        if child.type == "link_open"
    ]


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.relative_to(REPO).as_posix())
def test_relative_links_reach_a_file_and_heading(page):
    broken = []
    for href in _links(page):
        if re.match(r"[a-z]+:", href):
            continue
        path, _, anchor = href.partition("#")
        target = (page.parent / path).resolve() if path else page
        if not target.exists() or (anchor and anchor not in _anchors(target)):
            broken.append(href)
    assert broken == []


def test_the_readme_links_every_docs_page():
    linked = {(REPO / href).resolve() for href in _links(REPO / "README.md")}
    assert [p.name for p in sorted((REPO / "docs").glob("*.md")) if p.resolve() not in linked] == []


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.relative_to(REPO).as_posix())
def test_snippets_parse(page):
    for block in _fences(page, "yaml"):
        assert isinstance(yaml.safe_load(block), dict), block
    for block in _fences(page, "toml"):
        tomllib.loads(block)
    for block in _fences(page, "python"):
        compile(block, str(page), "exec")


_UNPUBLISHED = re.compile(r"pip install\s+[\"']?mplint(\[[\w,]+\])?[\"']?(?!\s*@)(?=\s|$|`)")


def test_no_page_installs_mplint_from_a_package_index():
    texts = {p.relative_to(REPO).as_posix(): p.read_text(encoding="utf-8") for p in PAGES}
    texts |= {p.relative_to(REPO).as_posix(): p.read_text(encoding="utf-8") for p in (REPO / "mplint").rglob("*.py")}
    assert _UNPUBLISHED.search("run `pip install mplint` first") and _UNPUBLISHED.search(
        'pip install "mplint[runtime]"'
    )
    assert not _UNPUBLISHED.search('python -m pip install "mplint @ git+https://example.org/mplint.git@main"')
    assert [name for name, text in texts.items() if _UNPUBLISHED.search(text) or "<URL" in text] == []


def test_the_documented_configuration_is_accepted(tmp_path):
    [block] = _fences(REPO / "docs" / "configuration.md", "toml")
    (tmp_path / "pyproject.toml").write_text(block)
    config = load_file(tmp_path / "pyproject.toml")
    assert (config.select, config.ignore, config.extend_select) == (["MP"], ["MP302"], ["MP304"])
    assert config.per_file_ignores == {"tests/*": ["MP101", "MP102"]}
    assert (config.keras, config.policy, config.unsafe_fixes) == (3, "mixed_float16", False)


def test_the_workflows_install_mplint_from_git():
    workflows = [yaml.safe_load(block) for block in _fences(REPO / "docs" / "ci.md", "yaml") if "jobs:" in block]
    assert len(workflows) == 2
    for workflow in workflows:
        runs = [step["run"] for step in workflow["jobs"]["mplint"]["steps"] if "run" in step]
        assert runs[0] == 'python -m pip install "mplint @ git+${{ vars.MPLINT_GIT }}"'
        assert runs[1].startswith("mplint --format ")
