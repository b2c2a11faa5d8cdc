"""The README stays true: its rule table is the catalog's, its test command is what CI runs, and the output its
quick start shows is what `mplint fixtures/` prints (the reviewed snapshot of tests/test_fixture_snapshot.py)."""

from __future__ import annotations

import re

import pytest
from conftest import REPO
from markdown_it import MarkdownIt

from mplint.cli import main
from mplint.rule_docs import proofs_markdown, readme_section, rules_markdown

pytestmark = pytest.mark.quick  # the one-minute subset: python3 -m pytest -m quick

SNAPSHOT = REPO / "tests" / "snapshots" / "fixtures.txt"


def _quick_start_fences() -> list[tuple[str, str]]:
    """(info, content) of each fenced block of the README's "Quick start" section."""
    tokens = MarkdownIt().parse((REPO / "README.md").read_text())
    fences, inside = [], False
    for i, token in enumerate(tokens):
        if token.type == "heading_open" and token.tag == "h2":
            inside = tokens[i + 1].content == "Quick start"
        elif inside and token.type == "fence":
            fences.append((token.info, token.content))
    return fences


def test_readme_rule_table_matches_the_catalog():
    """Regenerate with `python -m mplint rules --readme README.md`."""
    assert readme_section((REPO / "README.md").read_text(), "rules-table") == rules_markdown()


def test_readme_lists_the_proof_of_every_safe_fix():
    listed = readme_section((REPO / "README.md").read_text(), "proofs")
    assert listed == proofs_markdown()
    assert "- MPT204: `tests/test_torch_executed.py::test_a_clip_before_unscale" in listed


def test_rules_readme_rewrites_only_the_generated_sections(tmp_path, capsys):
    readme = tmp_path / "README.md"
    stale = (
        "# Title\n\n<!-- rules-table:start -->\n| old |\n<!-- rules-table:end -->\n\nprose\n\n"
        "<!-- proofs:start -->\n- old\n<!-- proofs:end -->\ntail\n"
    )
    readme.write_text(stale)
    assert main(["rules", "--readme", str(readme)]) == 0
    assert readme.read_text() == (
        "# Title\n\n<!-- rules-table:start -->\n" + rules_markdown() + "<!-- rules-table:end -->\n\nprose\n\n"
        "<!-- proofs:start -->\n" + proofs_markdown() + "<!-- proofs:end -->\ntail\n"
    )
    assert capsys.readouterr().out == f"Rewrote the rule table and proofs of {readme.as_posix()}.\n"
    written = readme.stat().st_mtime_ns
    assert main(["rules", "--readme", str(readme)]) == 0
    assert capsys.readouterr().out == f"Kept the rule table and proofs of {readme.as_posix()}.\n"
    assert readme.stat().st_mtime_ns == written

    readme.write_text("# no markers\n")
    assert main(["rules", "--readme", str(readme)]) == 2
    assert readme.read_text() == "# no markers\n"
    assert "no `<!-- rules-table:start -->` ... `<!-- rules-table:end -->` markers" in capsys.readouterr().err


def test_readme_quick_start_commands_are_what_ci_runs():
    readme = (REPO / "README.md").read_text()
    commands = re.findall(r"```bash\n(.+?)\n```", readme.split("## Quick start", 1)[1].split("##", 1)[0])
    assert commands == [
        "python3 -m pip install . && mplint fixtures/",
        'python3 -m pip install -e ".[test]" && python3 -m pytest',
    ]
    assert [content.strip() for info, content in _quick_start_fences() if info == "bash"] == commands
    ci = (REPO / ".ci" / "run").read_text()
    assert 'python3 -m pip install --quiet -e ".[test]"' in ci and ci.rstrip().endswith("python3 -m pytest")
    # the first command runs first (twice), so the suite meets the caches it leaves in fixtures/
    order = [
        ci.index(step) for step in ("pip install --quiet .\n", "mplint fixtures/", 'pip install --quiet -e ".[test]"')
    ]
    assert order == sorted(order)


def _matches(shown: str, printed: str) -> bool:
    """A shown line is the printed one, or its beginning when the README cuts the message with " ..."."""
    return printed.startswith(shown[: -len(" ...")]) if shown.endswith(" ...") else printed == shown


def test_readme_quick_start_output_is_what_mplint_prints():
    [excerpt] = [content for info, content in _quick_start_fences() if info == "console"]
    printed = SNAPSHOT.read_text(encoding="utf-8").splitlines()
    *chunks, summary = excerpt.rstrip("\n").split("\n...\n")
    assert summary == printed[-1] and summary.startswith("Found ")
    assert len(chunks) >= 3
    for chunk in chunks:
        shown = chunk.splitlines()
        starts = [
            i
            for i in range(len(printed) - len(shown) + 1)
            if all(_matches(s, p) for s, p in zip(shown, printed[i : i + len(shown)]))
        ]
        assert starts, f"the README shows output mplint does not print:\n{chunk}"
    marks = {re.search(r": MPT?\d+( \[[*-]\])? ", chunk).group(1) for chunk in chunks}
    assert marks == {None, " [*]", " [-]"}  # every mark the README explains is shown


def test_readme_gives_the_quick_subset_before_the_whole_suite():
    """`python3 -m pytest -m quick` is named where the suite is, and it runs what an install needs: the command line
    on the fixtures and a training step on TensorFlow and on torch; CI still runs the whole suite (above)."""
    quick = "`python3 -m pytest -m quick`"
    for page in ("README.md", "docs/install.md"):
        assert quick in (REPO / page).read_text(encoding="utf-8"), page
    assert '"quick: ' in (REPO / "pyproject.toml").read_text()  # the marker is registered
    marking = sorted(p.name for p in (REPO / "tests").glob("test_*.py") if "pytest.mark.quick" in p.read_text())
    assert {"test_cli.py", "test_fixture_snapshot.py", "test_runtime.py", "test_torch_runtime.py"} <= set(marking)
