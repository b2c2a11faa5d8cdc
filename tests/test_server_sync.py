"""The language server's bookkeeping: column encodings, LSP synchronization of editor documents, and the
project facts its checks keep in memory from one pause in typing to the next."""

from __future__ import annotations

from pathlib import Path

import mplint.project.build as build
from mplint.project import cache
from mplint.server.documents import Buffer, Part, check
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
    workspace.open_notebook(
        {"uri": notebook, "cells": [{"kind": 2, "document": cell(1)}, {"kind": 1, "document": cell(2)}]},
        [item(1, "import keras\n"), item(2, "# Title", "markdown")],
    )
    workspace.change_notebook(
        notebook,
        {
            "cells": {
                "structure": {
                    "array": {"start": 1, "deleteCount": 1, "cells": [{"kind": 2, "document": cell(3)}]},
                    "didOpen": [item(3, "model.fit()\n")],
                    "didClose": [{"uri": cell(2)}],
                },
                "textContent": [
                    {
                        "document": {"uri": cell(1), "version": 2},
                        "changes": [
                            {
                                "range": {"start": {"line": 1, "character": 0}, "end": {"line": 1, "character": 0}},
                                "text": "import numpy\n",
                            }
                        ],
                    }
                ],
            }
        },
    )
    buffer = workspace.buffer(workspace.key(cell(3)))
    assert buffer.path == tmp_path / "nb.ipynb"
    assert [(p.uri, p.text, p.cell, p.python) for p in buffer.parts] == [
        (cell(1), "import keras\nimport numpy\n", 1, True),
        (cell(3), "model.fit()\n", 2, True),
    ]
    assert cell(2) not in workspace.texts and workspace.keys() == [notebook]
    workspace.close_notebook(notebook)
    assert workspace.keys() == [] and workspace.texts == {}


def test_a_buffer_checked_again_extracts_only_its_own_facts(tmp_path: Path, monkeypatch):
    (tmp_path / ".mplint.yaml").write_text("{}\n")
    (tmp_path / "policy.py").write_text('import keras\n\nkeras.mixed_precision.set_global_policy("mixed_float16")\n')
    (tmp_path / "model.py").write_text("import policy\n")
    extracted = []
    real = build.extract_file_facts
    monkeypatch.setattr(
        build,
        "extract_file_facts",
        lambda code, display, module: extracted.append(Path(display).name) or real(code, display, module),
    )
    model = 'import policy\nimport keras\n\nmodel = keras.Sequential([keras.layers.Dense(10, activation="softmax")])\n'

    def codes(text: str) -> list[str]:
        buffer = Buffer(tmp_path / "model.py", (Part((tmp_path / "model.py").as_uri(), text),))
        return [d.rule_id for d in check(buffer, tmp_path).diagnostics]

    assert codes(model) == ["MP101"]  # the policy comes from policy.py's facts
    assert sorted(extracted) == ["model.py", "policy.py"]
    extracted.clear()
    assert codes(model.replace("(10,", "(12,")) == ["MP101"]
    assert extracted == ["model.py"]  # policy.py's facts are the ones the first check found
    assert not (tmp_path / cache.CACHE_DIR).exists()  # an editor's buffer writes nothing to disk


def test_the_memory_a_read_only_store_keeps_is_bounded(tmp_path: Path, monkeypatch):
    monkeypatch.setattr(cache, "SHARED_LIMIT", 2)
    monkeypatch.setattr(cache, "_SHARED", {})
    store = cache.ProjectCache(tmp_path, enabled=True, read_only=True)
    for n in range(3):
        store.store_facts(f"m{n}.py", "digest", build.extract_file_facts(b"import keras\n", f"m{n}.py", f"m{n}"))
    again = cache.ProjectCache(tmp_path, enabled=True, read_only=True)  # the next run of the same process
    assert [again.facts(f"m{n}.py", "digest") is not None for n in range(3)] == [False, True, True]
    assert cache.ProjectCache(tmp_path, enabled=True).facts("m2.py", "digest") is None  # a writing run reads the disk


def test_module_facts_are_built_again_only_when_a_files_facts_change(tmp_path: Path, monkeypatch):
    from mplint.runner import Warm

    monkeypatch.chdir(tmp_path)
    (tmp_path / ".mplint.yaml").write_text("{}\n")
    (tmp_path / "policy.py").write_text("import keras\n")
    model = 'import policy\nimport keras\n\nmodel = keras.Sequential([keras.layers.Dense(10, activation="softmax")])\n'
    (tmp_path / "model.py").write_text(model)
    built = []
    real = build._module_facts
    monkeypatch.setattr(build, "_module_facts", lambda *args: built.append(1) or real(*args))
    warm = Warm()

    def codes(text: str, policy: str | None = None) -> list[str]:
        buffer = Buffer(tmp_path / "model.py", (Part((tmp_path / "model.py").as_uri(), text),))
        others = () if policy is None else (Buffer(tmp_path / "policy.py", (Part("file:policy", policy),)),)
        return [d.rule_id for d in check(buffer, tmp_path, others=others, warm=warm).diagnostics]

    assert (codes(model), len(built), warm.facts.version) == ([], 1, 1)
    assert (codes(model.replace("(10,", "(12,")), len(built), warm.facts.version) == ([], 1, 1)  # same facts: kept
    assert (codes("x = 1\n" + model), len(built), warm.facts.version) == ([], 2, 1)  # a new name: built, same modules
    mixed = 'import keras\nkeras.mixed_precision.set_global_policy("mixed_float16")\n'
    assert (codes(model, policy=mixed), len(built), warm.facts.version) == (
        ["MP101"],
        3,
        2,
    )  # the unsaved buffer's policy
    assert (codes(model), warm.facts.version) == ([], 3)  # closed unsaved: the disk's text again
    warm.forget_configuration()
    (tmp_path / ".mplint.yaml").write_text("ignore: [MP101]\n")
    assert codes(model, policy=mixed) == []  # the configuration is read again once told it changed
