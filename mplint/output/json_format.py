"""Machine-readable output. The schema is versioned and documented in docs/json-format.md."""

from __future__ import annotations

import json
from collections import Counter
from typing import TextIO

from mplint import __version__
from mplint.output.common import sort_key

SCHEMA_VERSION = 2


def document(report) -> dict:
    remaining = sorted(report.remaining, key=sort_key)
    fixed = sorted((d for d in report.diagnostics if d.fixed), key=sort_key)
    return {
        "schema_version": SCHEMA_VERSION,
        "tool": {"name": "mplint", "version": __version__},
        "projects": [
            {
                "root": p.root.as_posix(),
                "files": p.files,
                "keras_generation": p.generation,
                "programs": [program for program in p.programs if program["policies"]],
            }
            for p in report.projects
        ],
        "diagnostics": [d.to_dict() for d in remaining],
        "fixed": [d.to_dict() for d in fixed],
        "errors": list(report.errors),
        "notices": list(report.notices),
        "summary": {
            "files": len(report.results),
            "diagnostics": len(remaining),
            "fixable": sum(1 for d in remaining if d.fixable),
            "fixed": report.fixed_count,
            "changed_on_disk": list(report.changed_on_disk),
            "by_rule": dict(sorted(Counter(d.rule_id for d in remaining).items())),
        },
    }


def render(report, stream: TextIO, **_) -> None:
    json.dump(document(report), stream, indent=2)
    stream.write("\n")
