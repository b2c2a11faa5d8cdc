"""The README stays true: its rule table is the catalog's, its test command is what CI runs."""

from __future__ import annotations

import re

from mplint.cli import rules_markdown
from conftest import REPO


def test_readme_rule_table_matches_the_catalog():
    readme = (REPO / "README.md").read_text()
    table = readme.split("<!-- rules-table:start -->\n", 1)[1].split("<!-- rules-table:end -->", 1)[0]
    assert table == rules_markdown()


def test_readme_quick_start_commands_are_what_ci_runs():
    readme = (REPO / "README.md").read_text()
    commands = re.findall(r"```bash\n(.+?)\n```", readme.split("## Quick start", 1)[1].split("##", 1)[0])
    assert commands == ['python3 -m pip install . && mplint fixtures/', 'python3 -m pip install -e ".[test]" && python3 -m pytest']
    ci = (REPO / ".ci" / "run").read_text()
    assert 'python3 -m pip install --quiet -e ".[test]"' in ci and ci.rstrip().endswith("python3 -m pytest")
    # the first command runs first (twice), so the suite meets the caches it leaves in fixtures/
    order = [ci.index(step) for step in ("pip install --quiet .\n", "mplint fixtures/", 'pip install --quiet -e ".[test]"')]
    assert order == sorted(order)
