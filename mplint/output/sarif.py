"""SARIF 2.1.0 for code-scanning services (GitHub code scanning and others)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TextIO

from mplint import __version__
from mplint.catalog import load_catalog
from mplint.output.common import FileRegions, sort_key
from mplint.rule_docs import page, published_url

SCHEMA = "https://json.schemastore.org/sarif-2.1.0.json"
_LEVELS = {"error": "error", "warning": "warning", "info": "note"}


def _uri(path: str) -> str:
    return Path(path).as_posix()


def _rule(meta, docs_url: str | None) -> dict:
    """A rule's descriptor. Its page travels inside it (``help``: code scanning shows it with each alert); a link to
    the page only where it is published: the page file of mplint's own install means nothing on another machine."""
    text = page(meta, source_note=False)
    url = published_url(meta.id, docs_url)
    return {
        "id": meta.id,
        "name": meta.name,
        **({"helpUri": url} if url else {}),
        "shortDescription": {"text": meta.summary},
        "fullDescription": {"text": meta.what},
        "help": {"text": text, "markdown": text},
        "defaultConfiguration": {"level": _LEVELS[meta.severity.value], "enabled": meta.default_enabled},
        "properties": {"fixSafety": meta.fix_safety.value, "kind": meta.kind},
    }


def _result(d, index: dict[str, int], regions: FileRegions) -> dict:
    line, column, end_line, end_column = regions.region(d)  # in a notebook: the .ipynb file's JSON text
    region = {"startLine": line, "startColumn": column, "endLine": end_line, "endColumn": end_column}
    result = {
        "ruleId": d.rule_id,
        "ruleIndex": index[d.rule_id],
        "level": _LEVELS[d.severity.value],
        "message": {"text": d.message},
        "locations": [{"physicalLocation": {"artifactLocation": {"uri": _uri(d.path)}, "region": region}}],
    }
    if d.cell is not None:
        result["properties"] = {"cell": d.cell, "cellLine": d.line, "cellColumn": d.column}
    related = []
    set_at = (d.context or {}).get("set_at")
    if set_at:  # where the policy that makes this a defect is set
        related.append(
            (
                f"{d.context['policy']} set here"
                + (f" (program {d.context['program']})" if d.context.get("program") else ""),
                set_at["path"],
                set_at.get("cell"),
                set_at["line"],
            )
        )
    related.extend((r.message, r.path or d.path, r.cell, r.line) for r in d.related)  # the other end across a boundary
    if related:
        result["relatedLocations"] = [
            {
                "id": i,
                "message": {"text": text},
                "physicalLocation": {
                    "artifactLocation": {"uri": _uri(path)},
                    "region": {"startLine": regions.point(path, cell, line)[0]},
                },
                **({"properties": {"cell": cell, "cellLine": line}} if cell is not None else {}),
            }
            for i, (text, path, cell, line) in enumerate(related, 1)
        ]
    if (
        d.edits and d.cell is None
    ):  # a cell's edits are in cell positions; a replacement in the JSON text would need them escaped
        result["fixes"] = [
            {
                "description": {"text": f"{d.fix_description} ({d.fix_safety.value} fix)"},
                "artifactChanges": [
                    {
                        "artifactLocation": {"uri": _uri(d.path)},
                        "replacements": [
                            {
                                "deletedRegion": {
                                    "startLine": e.line,
                                    "startColumn": e.column,
                                    "endLine": e.end_line,
                                    "endColumn": e.end_column,
                                },
                                "insertedContent": {"text": e.text},
                            }
                            for e in d.edits
                        ],
                    }
                ],
            }
        ]
    return result


def document(report) -> dict:
    metas = list(load_catalog().values())
    index = {m.id: i for i, m in enumerate(metas)}
    regions = FileRegions(report)
    return {
        "$schema": SCHEMA,
        "version": "2.1.0",
        "runs": [
            {
                "tool": {
                    "driver": {
                        "name": "mplint",
                        "version": __version__,
                        "informationUri": "https://pypi.org/project/mplint/",
                        "rules": [_rule(m, report.config.docs_url) for m in metas],
                    }
                },
                "columnKind": "unicodeCodePoints",
                "results": [_result(d, index, regions) for d in sorted(report.remaining, key=sort_key)],
                "invocations": [
                    {
                        "executionSuccessful": not report.errors,
                        "toolExecutionNotifications": [
                            *({"level": "note", "message": {"text": n}} for n in report.notices),
                            *({"level": "error", "message": {"text": e}} for e in report.errors),
                        ],
                    }
                ],
            }
        ],
    }


def render(report, stream: TextIO, **_) -> None:
    json.dump(document(report), stream, indent=2)
    stream.write("\n")
