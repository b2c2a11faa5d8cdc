"""Editor buffers checked as the command line checks ``--stdin-filename``: same runner, same facts.

A buffer is a Python file or a notebook. A notebook arrives from the editor as cells
(LSP notebook sync); it is checked as the notebook JSON those cells make, and what
comes back (findings, fixed text) is handed out per cell. Every run goes through
``mplint.runner.run`` with the buffer as standard input and the project folder as
the paths read for project facts, exactly what ``mplint --stdin-filename`` does.
"""

from __future__ import annotations

import io
import json
import tokenize
from dataclasses import dataclass
from pathlib import Path

from mplint.diagnostics import Diagnostic, FileResult


@dataclass(frozen=True)
class Part:
    """One text the editor shows: a whole file, or one cell of a notebook."""

    uri: str
    text: str
    cell: int | None = None  # 1-based position in the notebook's cell list
    python: bool = True  # a code cell in Python (markdown and other languages are carried, not checked)


@dataclass(frozen=True)
class Buffer:
    path: Path  # the file on disk the buffer stands for (.py or .ipynb)
    parts: tuple[Part, ...]

    @property
    def is_notebook(self) -> bool:
        return self.parts[0].cell is not None if self.parts else self.path.suffix == ".ipynb"

    def source(self) -> bytes:
        """The bytes the runner reads: the file's text in its declared encoding, or notebook JSON."""
        if self.is_notebook:
            cells = [
                {"cell_type": "code" if p.python else "markdown", "metadata": {}, "source": p.text} for p in self.parts
            ]
            return json.dumps(
                {"cells": cells, "metadata": {"language_info": {"name": "python"}}, "nbformat": 4, "nbformat_minor": 5}
            ).encode("utf-8")
        text = self.parts[0].text
        data = text.encode("utf-8")
        try:
            encoding, _ = tokenize.detect_encoding(io.BytesIO(data).readline)
            return text.encode(encoding)
        except (SyntaxError, LookupError, UnicodeEncodeError):
            return data

    def part_of(self, d: Diagnostic) -> Part | None:
        if d.cell is None:
            return self.parts[0] if not self.is_notebook else None
        return next((p for p in self.parts if p.cell == d.cell), None)


@dataclass(frozen=True)
class Settings:
    """The editor's settings for mplint (``initializationOptions`` and ``workspace/didChangeConfiguration``),
    applied over the project's configuration as the command line's flags of the same names are."""

    select: tuple[str, ...] | None = None
    extend_select: tuple[str, ...] = ()
    ignore: tuple[str, ...] = ()
    unsafe_fixes: bool | None = None

    @classmethod
    def of(cls, raw) -> Settings:
        """From the client's JSON: ``{"select": [...], "extendSelect": [...], "ignore": [...], "unsafeFixes": bool}``,
        alone or under an ``"mplint"`` key; anything else is left at the project's configuration."""
        if isinstance(raw, dict) and isinstance(raw.get("mplint"), dict):
            raw = raw["mplint"]
        raw = raw if isinstance(raw, dict) else {}

        def codes(name):
            value = raw.get(name)
            return tuple(str(c) for c in value) if isinstance(value, list) else None

        unsafe = raw.get("unsafeFixes")
        return cls(
            codes("select"),
            codes("extendSelect") or (),
            codes("ignore") or (),
            unsafe if isinstance(unsafe, bool) else None,
        )


class CheckFailed(Exception):
    """The configuration or catalog is broken: the message says how (as the CLI's exit 2 would)."""


def project_folder(path: Path, workspace_folders: list[Path]) -> Path:
    """What a CLI run would be given: the file's marked project, else the workspace folder holding it."""
    from mplint.project.config import marked_root

    marked = marked_root(path.parent)
    if marked is not None:
        return marked
    holding = [w for w in workspace_folders if path.is_relative_to(w)]
    return max(holding, key=lambda w: len(w.parts)) if holding else path.parent


def check(buffer: Buffer, folder: Path, **options) -> FileResult:
    """The buffer checked (and fixed in memory with ``fix=True``) with its project's configuration and facts; the
    options are ``check_with_config``'s."""
    return check_with_config(buffer, folder, **options)[0]


def check_with_config(
    buffer: Buffer,
    folder: Path,
    *,
    fix: bool = False,
    unsafe: bool | None = None,
    select: list[str] | None = None,
    settings: Settings = Settings(),
    others: tuple[Buffer, ...] = (),
    warm=None,
):
    """The buffer's result and the configuration it was checked with (for the rules' documentation links).

    ``others``: the editor's other open buffers, read instead of their files (as if saved: what the command line
    would find once they are); ``warm``: the ``mplint.runner.Warm`` the server keeps between checks."""
    from mplint.project.discovery import display_path
    from mplint.runner import RunOptions

    if select is None and settings.select is not None:
        select = list(settings.select)
    # named as the folder's walk names the file: the same facts whichever open file is checked
    name = display_path(buffer.path, Path.cwd().resolve())
    options = RunOptions(
        paths=[folder],
        stdin=(Path(name), buffer.source()),
        fix=fix,
        unsafe_fixes=settings.unsafe_fixes if unsafe is None else unsafe,
        write=False,
        select=select,
        extend_select=list(settings.extend_select),
        ignore=list(settings.ignore),
        jobs=1,
        overlays={o.path: o.source() for o in others if o.path != buffer.path},
        warm=warm,
    )
    report = _run(options)
    return next(r for r in report.results if r.path == name), report.config


def warm_facts(folder: Path, settings: Settings, warm) -> None:
    """Read ``folder``'s project facts into ``warm`` and check nothing: no rule, no libcst is imported, so a
    document opened meanwhile is not kept waiting for them (its result may be in the project's cache)."""
    from mplint.runner import RunOptions

    _run(
        RunOptions(
            paths=[folder],
            stdin=(folder / "untitled.py", b""),
            facts_only=True,
            jobs=1,
            select=None if settings.select is None else list(settings.select),
            extend_select=list(settings.extend_select),
            ignore=list(settings.ignore),
            warm=warm,
        )
    )


def _run(options):
    """``mplint.runner.run``; a broken configuration or catalog is ``CheckFailed``."""
    from mplint.catalog import CatalogError
    from mplint.project.config import ConfigError
    from mplint.runner import run

    try:
        return run(options)
    except (ConfigError, CatalogError) as exc:
        raise CheckFailed(str(exc)) from exc


def fixed_texts(buffer: Buffer, result: FileResult) -> dict[str, str]:
    """URI -> new text of each part a fix run changed."""
    if result.fixed_source is None:
        return {}
    if buffer.is_notebook:
        cells = getattr(result, "fixed_cells", {})
        return {p.uri: cells[p.cell] for p in buffer.parts if p.cell in cells and cells[p.cell] != p.text}
    part = buffer.parts[0]
    data = result.fixed_source
    try:
        encoding, _ = tokenize.detect_encoding(io.BytesIO(data).readline)
        text = data.decode(encoding)
    except (SyntaxError, LookupError, UnicodeDecodeError):
        text = data.decode("utf-8", errors="replace")
    return {part.uri: text} if text != part.text else {}
