"""Config files: where they are found, what they accept, and clear errors for what they do not."""

from __future__ import annotations

import pytest

from mplint.cli import main
from mplint.project.config import ConfigError, find_config, load_config


def write(path, text):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def test_pyproject_is_found_upward_and_parsed(tmp_path):
    write(
        tmp_path / "pyproject.toml",
        '[tool.mplint]\nselect = ["MP1"]\nkeras = 2\npolicy = "mixed_float16"\n'
        'per-file-ignores = {"tests/*" = ["MP101"]}\nunsafe-fixes = true\nextend-exclude = ["gen"]\n',
    )
    (tmp_path / "src" / "pkg").mkdir(parents=True)
    assert find_config(tmp_path / "src" / "pkg") == tmp_path / "pyproject.toml"
    config = load_config([tmp_path / "src" / "pkg"])
    assert (config.select, config.keras, config.policy, config.unsafe_fixes) == (["MP1"], 2, "mixed_float16", True)
    assert config.per_file_ignores == {"tests/*": ["MP101"]} and config.extend_exclude == ["gen"]
    assert config.root == tmp_path


def test_pyproject_without_section_is_skipped_for_yaml_above(tmp_path):
    write(tmp_path / ".mplint.yaml", "keras: 3\nignore: [MP102]\n")
    write(tmp_path / "sub" / "pyproject.toml", "[project]\nname = 'x'\n")
    config = load_config([tmp_path / "sub"])
    assert config.keras == 3 and config.ignore == ["MP102"] and config.root == tmp_path


@pytest.mark.parametrize(
    "text,message",
    [
        ("[tool.mplint]\nselct = ['MP1']\n", "unknown setting 'selct' (did you mean 'select'?)"),
        ("[tool.mplint]\nkeras = 4\n", "'keras' must be 2 or 3, got 4"),
        ("[tool.mplint]\npolicy = 'mixed_flaot16'\n", "(did you mean 'mixed_float16'?)"),
        ("[tool.mplint]\nselect = 'MP1'\n", "'select' must be a list of strings"),
        ("[tool.mplint]\nignore = ['MP999x']\n", "'ignore' names unknown rule 'MP999x'"),
        ("[tool.mplint]\nunsafe-fixes = 'yes'\n", "'unsafe-fixes' must be true or false"),
        ("[tool.mplint\n", "invalid TOML"),
    ],
)
def test_bad_pyproject_values_are_named(tmp_path, text, message):
    write(tmp_path / "pyproject.toml", text)
    with pytest.raises(ConfigError) as err:
        load_config([tmp_path])
    assert message in str(err.value) and str(tmp_path / "pyproject.toml") in str(err.value)


def test_yaml_config_cannot_run_code(tmp_path):
    write(tmp_path / ".mplint.yaml", "keras: !!python/object/apply:os.system ['echo pwned']\n")
    with pytest.raises(ConfigError, match="invalid YAML"):
        load_config([tmp_path])


def test_yaml_config_must_be_a_mapping(tmp_path):
    write(tmp_path / ".mplint.yaml", "- MP101\n")
    with pytest.raises(ConfigError, match="must be a table of settings"):
        load_config([tmp_path])


def test_config_error_exits_2_with_the_message(tmp_path, capsys, monkeypatch):
    write(tmp_path / ".mplint.yaml", "selectt: [MP1]\n")
    write(tmp_path / "a.py", "x = 1\n")
    monkeypatch.chdir(tmp_path)
    assert main(["."]) == 2
    assert "unknown setting 'selectt' (did you mean 'select'?)" in capsys.readouterr().err


def test_unknown_cli_selector_exits_2(tmp_path, capsys, monkeypatch):
    write(tmp_path / "a.py", "x = 1\n")
    monkeypatch.chdir(tmp_path)
    assert main(["--select", "MP9999", "."]) == 2
    assert "unknown rule selector 'MP9999'" in capsys.readouterr().err
