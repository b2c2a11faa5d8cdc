"""The language server's bookkeeping of editor documents: column encodings and LSP synchronization."""

from __future__ import annotations

from pathlib import Path

from mplint.server.positions import Codec, choose, lines_of
from mplint.server.workspace import Workspace

TEXT = 'x = "é😀"  # note\nmodel.fit()\n'


def test_columns_in_each_encoding():
    assert choose(None) == "utf-16"
    assert choose(["utf-16", "utf-8"]) == "utf-8"
    assert choose(["utf-32", "utf-8", "utf-16"]) == "utf-32"
    line = lines_of(TEXT)[0].rstrip("\n")
    after_emoji = line.index("😀") + 1  # code points
    assert [Codec(e).units(line[:after_emoji]) for e in ("utf-32", "utf-8", "utf-16")] == [7, 11, 8]
    assert [Codec(e).column(line, units) for e, units in (("utf-32", 7), ("utf-8", 11), ("utf-16", 8))] == [7, 7, 7]


def test_lines_break_where_lsp_breaks():
    assert lines_of("a\r\nb\x0cc\rd\n") == ["a\r\n", "b\x0cc\r", "d\n"]
    assert lines_of("") == [""]
    assert lines_of("end") == ["end"]


def test_incremental_changes_in_utf16():
    codec = Codec("utf-16")
    change = {"range": {"start": {"line": 0, "character": 6}, "end": {"line": 0, "character": 8}}, "text": "!"}
    assert codec.apply(TEXT, change) == 'x = "é!"  # note\nmodel.fit()\n'  # the emoji is two UTF-16 units
    at_end = {"range": {"start": {"line": 2, "character": 0}, "end": {"line": 2, "character": 0}}, "text": "more\n"}
    assert codec.apply(TEXT, at_end) == TEXT + "more\n"
    assert codec.apply(TEXT, {"text": "whole\n"}) == "whole\n"


def test_notebook_cells_follow_structure_and_text_changes(tmp_path: Path):
    workspace = Workspace(Codec())
    notebook = tmp_path.as_uri() + "/nb.ipynb"
    cell = lambda n: f"vscode-notebook-cell:nb.ipynb#{n}"  # noqa: E731
    item = lambda n, text, language="python": {"uri": cell(n), "languageId": language, "version": 1, "text": text}  # noqa: E731
    workspace.open_notebook({"uri": notebook, "cells": [{"kind": 2, "document": cell(1)}, {"kind": 1, "document": cell(2)}]},
                            [item(1, "import keras\n"), item(2, "# Title", "markdown")])
    workspace.change_notebook(notebook, {"cells": {
        "structure": {"array": {"start": 1, "deleteCount": 1, "cells": [{"kind": 2, "document": cell(3)}]},
                      "didOpen": [item(3, "model.fit()\n")], "didClose": [{"uri": cell(2)}]},
        "textContent": [{"document": {"uri": cell(1), "version": 2}, "changes": [
            {"range": {"start": {"line": 1, "character": 0}, "end": {"line": 1, "character": 0}}, "text": "import numpy\n"}]}]}})
    buffer = workspace.buffer(workspace.key(cell(3)))
    assert buffer.path == tmp_path / "nb.ipynb"
    assert [(p.uri, p.text, p.cell, p.python) for p in buffer.parts] == [
        (cell(1), "import keras\nimport numpy\n", 1, True), (cell(3), "model.fit()\n", 2, True)]
    assert cell(2) not in workspace.texts and workspace.keys() == [notebook]
    workspace.close_notebook(notebook)
    assert workspace.keys() == [] and workspace.texts == {}
