"""The JSON Schema of ``[tool.mplint]`` (and ``.mplint.yaml``), generated from the config's known keys.

Committed as ``mplint.schema.json`` for editor completion (as Ruff publishes ``ruff.schema.json``);
``python -m mplint.project.config_schema > mplint.schema.json`` regenerates it, and a test keeps it in step.
"""

from __future__ import annotations

import json

from mplint.project import config as cfg

_DESCRIPTIONS = {
    "select": "Rules to enable: IDs (MP101), prefixes (MP1, MPT) or names (float16-softmax-output). Default: every rule enabled by default.",
    "ignore": "Rules to disable, as in select.",
    "extend-select": "Rules to enable on top of select.",
    "per-file-ignores": "Glob (gitignore-style, relative to the project root) -> rules to disable in matching files.",
    "exclude": "Gitignore-style patterns of files and folders to skip; replaces the default excludes.",
    "extend-exclude": "Gitignore-style patterns to skip on top of exclude.",
    "respect-gitignore": "Skip files that .gitignore files ignore.",
    "force-exclude": "Apply exclude and extend-exclude to paths named on the command line too (pre-commit).",
    "keras": "Target Keras generation of every program (2 or 3); overrides dependency pins.",
    "target": "Target TensorFlow/Keras of every program; overrides dependency pins.",
    "policy": "The mixed-precision policy the code runs under (overrides what the code sets).",
    "unsafe-fixes": "Apply unsafe fixes with --fix (they may change results or checkpoints).",
    "docs-url": "Base URL of the documentation: a rule's page is {docs-url}/rules/MP101.md.",
}


def _rule_selector() -> dict:
    """Every selector the config accepts, upper case as written in the docs: ALL, each ID prefix
    (MP, MP1, MP10, MPT...), each ID and each name (selectors are case-insensitive; completion offers these)."""
    from mplint.catalog import rule_keys

    keys = rule_keys()
    prefixes = sorted({k.id[:n] for k in keys for n in range(1, len(k.id))})
    return {"type": "string", "enum": ["ALL", *prefixes, *(k.id for k in keys), *(k.name for k in keys)]}


def _value_schema(check) -> dict:
    from mplint.project.generation import TARGETS

    strings = {"type": "array", "items": {"type": "string"}}
    rules = {"type": "array", "items": _rule_selector()}
    return {
        cfg._rules: rules,
        cfg._str_list: strings,
        cfg._bool: {"type": "boolean"},
        cfg._keras: {"enum": [2, 3]},
        cfg._target: {"enum": list(TARGETS)},
        cfg._policy: {"enum": list(cfg.POLICIES)},
        cfg._per_file: {"type": "object", "additionalProperties": rules},
        cfg._url: {"type": "string", "format": "uri", "pattern": "^(https?|file)://"},
    }[check]


def schema() -> dict:
    return {
        "$schema": "http://json-schema.org/draft-07/schema#",
        "$id": "mplint.schema.json",
        "title": "mplint",
        "description": "Settings of mplint: [tool.mplint] in pyproject.toml, or .mplint.yaml.",
        "type": "object",
        "additionalProperties": False,
        "properties": {
            key: {"description": _DESCRIPTIONS[key], **_value_schema(check)} for key, (_, check) in cfg._KEYS.items()
        },
    }


def text() -> str:
    return json.dumps(schema(), indent=2) + "\n"


if __name__ == "__main__":
    import sys

    sys.stdout.write(text())
