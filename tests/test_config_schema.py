"""mplint.schema.json, the published JSON Schema of [tool.mplint], stays in step with the config's keys and values."""

from __future__ import annotations

import json

import jsonschema
import pytest
import tomllib
from conftest import REPO
from markdown_it import MarkdownIt

from mplint.engine.registry import unknown_selectors
from mplint.project import config as cfg
from mplint.project.config import ConfigError, parse_config
from mplint.project.config_schema import schema, text

SCHEMA_FILE = REPO / "mplint.schema.json"
VALIDATOR = jsonschema.Draft7Validator(schema())


def test_the_committed_schema_is_the_generated_one():
    """Regenerate with `python -m mplint.project.config_schema > mplint.schema.json`."""
    assert SCHEMA_FILE.read_text(encoding="utf-8") == text()
    jsonschema.Draft7Validator.check_schema(json.loads(SCHEMA_FILE.read_text(encoding="utf-8")))


def test_every_config_key_is_in_the_schema():
    assert list(schema()["properties"]) == list(cfg._KEYS)
    assert all(p["description"] for p in schema()["properties"].values())


def test_the_documented_configuration_validates():
    tokens = MarkdownIt().parse((REPO / "docs" / "configuration.md").read_text(encoding="utf-8"))
    [block] = [t.content for t in tokens if t.type == "fence" and t.info == "toml"]
    VALIDATOR.validate(tomllib.loads(block)["tool"]["mplint"])


def test_rule_selectors_of_the_schema_are_those_the_config_accepts():
    selectors = schema()["properties"]["select"]["items"]["enum"]
    assert unknown_selectors(selectors) == []
    assert {"ALL", "MP", "MP1", "MP10", "MP101", "MPT", "MPT2", "float16-softmax-output"} <= set(selectors)
    assert unknown_selectors(["MP9", "MP1010"]) == ["MP9", "MP1010"] and not {"MP9", "MP1010"} & set(selectors)


@pytest.mark.parametrize(
    "settings",
    [
        {"selct": ["MP1"]},
        {"select": ["MP999"]},
        {"select": "MP101"},
        {"keras": 4},
        {"target": "keras4"},
        {"policy": "mixed_float8"},
        {"unsafe-fixes": "yes"},
        {"force-exclude": 1},
        {"per-file-ignores": {"tests/*": ["MP999"]}},
        {"docs-url": "docs/"},
    ],
)
def test_what_the_schema_rejects_the_config_rejects(settings, tmp_path):
    assert not VALIDATOR.is_valid(settings)
    with pytest.raises(ConfigError):
        parse_config(settings, "pyproject.toml", tmp_path)


def test_what_the_schema_accepts_the_config_accepts(tmp_path):
    settings = {
        "select": ["MP", "float16-softmax-output"],
        "ignore": ["MPT5"],
        "extend-select": ["MP304"],
        "per-file-ignores": {"tests/*": ["MP101"]},
        "exclude": ["build"],
        "extend-exclude": ["gen"],
        "respect-gitignore": False,
        "force-exclude": True,
        "keras": 2,
        "target": "tf2.3",
        "policy": "mixed_bfloat16",
        "unsafe-fixes": True,
        "docs-url": "https://docs.example.org/mplint",
    }
    assert set(settings) == set(cfg._KEYS)
    VALIDATOR.validate(settings)
    config = parse_config(settings, "pyproject.toml", tmp_path)
    assert (config.force_exclude, config.keras, config.docs_url) == (True, 2, "https://docs.example.org/mplint")
