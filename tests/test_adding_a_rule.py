"""Adding a rule is its module in ``mplint/checks/`` and its YAML in ``rules/``, nothing else.

CONTRIBUTING's walkthrough, executed on a copy of the package: a new rule's two files are written and nothing of
mplint is edited; the registry finds the rule, the command line reports and fixes with it, ``mplint explain``
and the rule pages read its prose, and the rule-example tests run its examples once its snapshot is written.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent

RULE_MODULE = '''"""MP990: a demonstration rule, ``.half()`` on anything."""

from __future__ import annotations

import libcst as cst

from mplint.diagnostics import Fix, FixSafety
from mplint.engine.rule import Rule


class HalfCall(Rule):
    id = "MP990"
    triggers = (b"half",)

    @classmethod
    def candidate(cls, code) -> bool:
        return "half" in code.calls

    def visit_Call(self, node: cst.Call) -> None:
        func = node.func
        if isinstance(func, cst.Attribute) and func.attr.value == "half" and not node.args:
            new = node.with_changes(func=func.with_changes(attr=cst.Name("float")))
            self.report(node, "`.half()` makes a float16 copy", Fix({node: new}, FixSafety.SAFE))
'''

RULE_YAML = """id: MP990
name: demo-half-call
fix_safety: safe
severity: warning
summary: A demonstration rule, `.half()` calls.
what: |
  `x.half()` with no arguments.
why: |
  It shows what adding a rule takes.
fix: |
  Call `.float()` instead.
example: |
  y = x.half()
example_fixed: |
  y = x.float()
examples:
  flagged:
    - title: method-call
      code: |
        y = x.half() + 1
      expect: ["1:5"]
      fixed: |
        y = x.float() + 1
  clean:
    - code: |
        y = x.float()
        half = 2
"""


def _copy_project(root: Path) -> None:
    ignore = shutil.ignore_patterns("__pycache__", ".mplint_cache")
    for folder in ("mplint", "rules", "docs/rules", "tests/snapshots/rules"):
        shutil.copytree(REPO / folder, root / folder, ignore=ignore)
    for name in (
        "pyproject.toml",
        "README.md",
        "mplint.schema.json",
        "tests/conftest.py",
        "tests/proof_runs.py",
        "tests/test_rule_examples.py",
    ):
        shutil.copy2(REPO / name, root / name)


def _files(root: Path) -> set[str]:
    return {
        p.relative_to(root).as_posix()
        for p in root.rglob("*")
        if p.is_file() and "__pycache__" not in p.parts and ".mplint_cache" not in p.parts
    }


def test_a_new_rule_is_its_module_and_its_yaml(tmp_path):
    project = tmp_path / "project"
    _copy_project(project)
    before = _files(project)
    (project / "mplint/checks/mp990_demo_half_call.py").write_text(RULE_MODULE)
    (project / "rules/MP990.yaml").write_text(RULE_YAML)
    (project / "sample.py").write_text("import torch\n\nx = torch.ones(3)\ny = x.half() + 1\n")
    env = {**os.environ, "PYTHONPATH": str(project), "NO_COLOR": "1"}

    def run(*args: str, **extra_env: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            [sys.executable, *args], cwd=project, env={**env, **extra_env}, capture_output=True, text=True, timeout=300
        )

    found = run("-m", "mplint", "--no-cache", "--select", "MP990", "sample.py")
    assert found.returncode == 1, found.stderr
    assert found.stdout.splitlines()[0] == "sample.py:4:5: MP990 [*] `.half()` makes a float16 copy"

    fixed = run("-m", "mplint", "--no-cache", "--select", "MP990", "--fix", "sample.py")
    assert fixed.returncode == 0, fixed.stdout + fixed.stderr
    assert (project / "sample.py").read_text() == "import torch\n\nx = torch.ones(3)\ny = x.float() + 1\n"

    explained = run("-m", "mplint", "explain", "MP990")
    assert explained.returncode == 0
    assert "x.half() with no arguments." in explained.stdout and "Call .float() instead." in explained.stdout

    pages = run("-m", "mplint", "rules", "--pages", "docs/rules")
    assert pages.returncode == 0, pages.stderr
    assert "`x.half()` with no arguments." in (project / "docs/rules/MP990.md").read_text()
    readme = run("-m", "mplint", "rules", "--readme", "README.md")
    assert readme.returncode == 0, readme.stderr
    schema = run("-m", "mplint.project.config_schema")
    assert schema.returncode == 0, schema.stderr
    (project / "mplint.schema.json").write_text(schema.stdout)

    examples = ("-m", "pytest", "-q", "-p", "no:cacheprovider", "-o", "addopts=", "tests/test_rule_examples.py")
    unrecorded = run(*examples, "-k", "MP990")
    assert unrecorded.returncode == 1  # the flagged example's message is not recorded yet
    recorded = run(*examples, "-k", "MP990", MPLINT_UPDATE_SNAPSHOTS="1")
    assert recorded.returncode == 0, recorded.stdout
    passed = run(*examples, "-k", "MP990")
    assert passed.returncode == 0, passed.stdout
    assert " passed" in passed.stdout.splitlines()[-1]

    # Nothing of mplint was edited: the rule's two files, the sample, and what the tools generated from them.
    assert _files(project) - before == {
        "mplint/checks/mp990_demo_half_call.py",
        "rules/MP990.yaml",
        "sample.py",
        "docs/rules/MP990.md",
        "tests/snapshots/rules/MP990.txt",
    }
    changed = {name for name in before if (project / name).read_bytes() != (REPO / name).read_bytes()}
    assert changed == {"docs/rules/README.md", "README.md", "mplint.schema.json"}  # generated: they gain the rule

    def added(name: str) -> list[str]:
        return sorted(set((project / name).read_text().splitlines()) - set((REPO / name).read_text().splitlines()))

    assert added("docs/rules/README.md") == [
        "| [MP990](MP990.md) | `demo-half-call` | safe | A demonstration rule, `.half()` calls. |"
    ]
    assert added("README.md") == ["| MP990 | `demo-half-call` | safe | A demonstration rule, `.half()` calls. |"]
    selectors = {line.strip() for line in added("mplint.schema.json")}  # the ID, its prefixes, its name
    assert selectors == {'"MP9",', '"MP99",', '"MP990",', '"demo-half-call",'}
