"""Rule pages and documentation links: docs/rules/ is what the catalog generates, and every output links each
finding to its rule's page (text with --show-fixes, SARIF helpUri, the language server's codeDescription)."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest

from mplint import rule_docs
from mplint.catalog import load_catalog
from mplint.cli import main
from mplint.project.config import ConfigError, load_file

pytestmark = pytest.mark.quick  # the one-minute subset: python3 -m pytest -m quick

REPO = Path(__file__).resolve().parent.parent
PAGES = REPO / "docs" / "rules"
SARIF_SCHEMA = json.loads((REPO / "tests" / "data" / "sarif-schema-2.1.0.json").read_text(encoding="utf-8"))
POLICY = 'import keras\nfrom keras import layers\n\nkeras.mixed_precision.set_global_policy("mixed_float16")\n'
MODEL = 'model = keras.Sequential([layers.Dense(64), layers.Dense(10, activation="softmax")])\n'


def test_committed_pages_are_the_generated_ones():
    """Regenerate with `mplint rules --pages docs/rules` after editing rules/*.yaml."""
    generated = rule_docs.pages(list(load_catalog().values()))
    committed = {p.name: p.read_text(encoding="utf-8") for p in PAGES.glob("*.md")}
    assert sorted(committed) == sorted(generated)
    assert [name for name in generated if committed[name] != generated[name]] == []


def test_a_page_has_every_section_and_its_code_parses():
    page = rule_docs.page(load_catalog()["MP101"])
    headings = [line for line in page.splitlines() if line.startswith("#")]
    assert headings == [
        "# MP101 `float16-softmax-output`",
        "## What it does",
        "## Why is this bad?",
        "## Example",
        "## Fix",
        "## Fix safety",
        "## Proof",
        "## Details",
        "## References",
    ]
    assert "Safe: keeps float32 behaviour identical; applied by `--fix`." in page
    for meta in load_catalog().values():
        for code in (meta.example, meta.example_fixed):
            compile(code, meta.id, "exec")


def test_a_proof_named_in_the_yaml_gets_its_section():
    meta = load_catalog()["MP101"]
    page = rule_docs.page(type(meta)(**{**meta.__dict__, "proof": ("tests/test_numerics.py::test_softmax",)}))
    assert "## Proof\n\n- tests/test_numerics.py::test_softmax\n\n## Details" in page


def test_the_generator_command_writes_the_pages_once(tmp_path, capsys):
    assert main(["rules", "--pages", str(tmp_path / "pages")]) == 0
    assert capsys.readouterr().out == f"Wrote {len(load_catalog()) + 1} pages in {(tmp_path / 'pages').as_posix()}.\n"
    assert {p.name: p.read_text() for p in (tmp_path / "pages").iterdir()} == {
        p.name: p.read_text() for p in PAGES.iterdir()
    }
    (tmp_path / "pages" / "MP999.md").write_text("a rule that is gone\n")
    assert main(["rules", "--pages", str(tmp_path / "pages")]) == 0
    assert capsys.readouterr().out == f"Wrote 0 pages in {(tmp_path / 'pages').as_posix()}.\n"
    assert not (tmp_path / "pages" / "MP999.md").exists()


def test_the_url_comes_from_config_then_project_metadata_then_the_page_file(monkeypatch):
    assert (
        rule_docs.rule_url("MP101", "https://docs.example.org/mplint/")
        == "https://docs.example.org/mplint/rules/MP101.md"
    )
    monkeypatch.setattr(rule_docs, "project_docs_url", lambda: "https://example.org/docs")
    assert rule_docs.rule_url("MP101") == "https://example.org/docs/rules/MP101.md"
    assert rule_docs.rule_url("MP101", "file:///srv/docs") == "file:///srv/docs/rules/MP101.md"
    monkeypatch.setattr(rule_docs, "project_docs_url", lambda: None)
    assert rule_docs.rule_url("MP101") == (PAGES / "MP101.md").as_uri()
    assert rule_docs.published_url("MP101") is None
    assert rule_docs.published_url("MP101", "https://x.test/d/") == "https://x.test/d/rules/MP101.md"


def test_project_metadata_url_is_read_from_pyproject(tmp_path, monkeypatch):
    (tmp_path / "pyproject.toml").write_text(
        '[project]\nname = "mplint"\n[project.urls]\nDocumentation = "https://x.test/d"\n'
    )
    monkeypatch.setattr(rule_docs, "_PACKAGE_DIR", tmp_path / "mplint")
    rule_docs.project_docs_url.cache_clear()
    try:
        assert rule_docs.project_docs_url() == "https://x.test/d"
    finally:
        rule_docs.project_docs_url.cache_clear()


def test_docs_url_setting_is_checked(tmp_path):
    (tmp_path / ".mplint.yaml").write_text("docs-url: https://docs.example.org/mplint\n")
    assert load_file(tmp_path / ".mplint.yaml").docs_url == "https://docs.example.org/mplint"
    (tmp_path / ".mplint.yaml").write_text("docs-url: docs/\n")
    with pytest.raises(ConfigError, match="'docs-url' must be an http\\(s\\):// or file:// URL, got 'docs/'"):
        load_file(tmp_path / ".mplint.yaml")


@pytest.fixture
def project(tmp_path, monkeypatch):
    (tmp_path / ".mplint.yaml").write_text("select: [MP101]\ndocs-url: https://docs.example.org/mplint\n")
    (tmp_path / "train.py").write_text(POLICY + MODEL)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("NO_COLOR", "1")
    monkeypatch.delenv("FORCE_COLOR", raising=False)
    return tmp_path


def test_text_output_links_each_finding_with_show_fixes(project, capsys):
    assert main(["--show-fixes", "train.py"]) == 1
    out = capsys.readouterr().out.splitlines()
    assert out[4:7] == [
        '  = help: Add `dtype="float32"` to the softmax output layer, or cast the logits of a softmax call to float32. (safe fix)',
        "  = docs: https://docs.example.org/mplint/rules/MP101.md",
        "",
    ]
    assert main(["train.py"]) == 1
    assert "= docs" not in capsys.readouterr().out


def test_sarif_embeds_each_rule_page_and_links_only_a_published_one(project, capsys, monkeypatch):
    """Code scanning shows a rule's ``help`` with each alert: the page itself, wherever the SARIF file is read. Its
    ``helpUri`` is there only under a documentation URL; the page file of this install (file:///...) is left out."""
    assert main(["--format", "sarif", "train.py"]) == 1
    doc = json.loads(capsys.readouterr().out)
    jsonschema.Draft4Validator(SARIF_SCHEMA).validate(doc)
    rules = doc["runs"][0]["tool"]["driver"]["rules"]
    assert [r["helpUri"] for r in rules] == [f"https://docs.example.org/mplint/rules/{r['id']}.md" for r in rules]
    catalog = load_catalog()
    pages = {r["id"]: rule_docs.page(catalog[r["id"]], source_note=False) for r in rules}
    assert [r["help"] for r in rules] == [{"text": pages[r["id"]], "markdown": pages[r["id"]]} for r in rules]
    mp101 = next(r["help"]["markdown"] for r in rules if r["id"] == "MP101")
    assert mp101.startswith("# MP101 `float16-softmax-output`\n\nA softmax that produces a model output computes in")
    assert mp101.endswith("\n") and "<!--" not in mp101 and "## Fix safety" in mp101
    monkeypatch.setattr(rule_docs, "project_docs_url", lambda: None)
    (project / ".mplint.yaml").write_text("select: [MP101]\n")
    assert main(["--format", "sarif", "train.py"]) == 1
    doc = json.loads(capsys.readouterr().out)
    jsonschema.Draft4Validator(SARIF_SCHEMA).validate(doc)
    rules = doc["runs"][0]["tool"]["driver"]["rules"]
    assert [r["id"] for r in rules if "helpUri" in r] == []
    assert [r["help"]["markdown"] for r in rules] == [
        rule_docs.page(catalog[r["id"]], source_note=False) for r in rules
    ]
    assert "file://" not in json.dumps(doc)
