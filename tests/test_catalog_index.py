"""Rule selection reads only the head of each rule file; it must agree with the whole catalog."""

from __future__ import annotations

import subprocess
import sys

from mplint.catalog import load_catalog, rule_keys


def test_rule_keys_agree_with_the_catalog():
    """What a check reads of each rule file without the YAML parser is what the parser reads."""
    read = [
        (k.id, k.name, k.default_enabled, k.severity, k.generations, k.fix_title, k.fix_safety) for k in rule_keys()
    ]
    assert read == [
        (m.id, m.name, m.default_enabled, m.severity, m.generations, m.fix.splitlines()[0], m.fix_safety)
        for m in load_catalog().values()
    ]


def test_a_check_reads_no_rule_prose(tmp_path):
    """A finding, its fix's description included, comes from the rule files' heads: the YAML parser, the
    prose and the examples wait for a rule's documentation (the language server loads them when idle)."""
    (tmp_path / "model.py").write_text(
        "import keras\nkeras.mixed_precision.set_global_policy('mixed_float16')\n"
        "model = keras.Sequential([keras.layers.Dense(10, activation='softmax')])\n"
    )
    code = (
        "import sys; from mplint.cli import main; code = main(['--no-cache', '--show-fixes', '.']); "
        "print(code, 'yaml' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, check=True)
    assert '= help: Add `dtype="float32"` to the softmax output layer' in out.stdout
    assert out.stdout.splitlines()[-1] == "1 False"


def test_version_and_selection_import_no_parser():
    code = (
        "import sys; from mplint.cli import _check_parser; from mplint.engine.registry import select; "
        "select(None, ['MP3']); print(sorted(m for m in ('yaml', 'libcst', 'rich', 'pathspec') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout == "[]\n"


def test_a_run_answered_from_the_cache_imports_no_parser(tmp_path):
    (tmp_path / "pkg").mkdir()
    (tmp_path / "requirements.txt").write_text("tensorflow>=2.16\n")
    for n in range(3):
        (tmp_path / "pkg" / f"m{n}.py").write_text("import keras\nmodel = keras.Sequential([keras.layers.Dense(10)])\n")
    code = (
        "import sys; from mplint.cli import main; main(['--exit-zero', '.']); "
        "print(sorted(m for m in ('yaml', 'libcst', 'rich', 'pathspec', 'multiprocessing', 'tomllib') if m in sys.modules))"
    )
    first = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, check=True)
    assert "libcst" in first.stdout  # the cold run parsed the files
    warm = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, check=True)
    assert warm.stdout.splitlines()[-1] == "[]"
