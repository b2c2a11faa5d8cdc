"""What an editor's read-only runs keep is merged into ``.mplint_cache/`` without losing other runs' entries."""

from __future__ import annotations

import json

from mplint.project import cache
from mplint.project.cache import ProjectCache, persist_shared


def _entries(path) -> dict:
    return json.loads(path.read_text())["entries"]


def test_persisting_an_editors_results_keeps_the_entries_another_run_wrote_since(tmp_path, monkeypatch):
    monkeypatch.setattr(cache, "_SHARED", {})
    command_line = ProjectCache(tmp_path, enabled=True)
    command_line.use_settings("k")
    command_line.store_result("train.py", "a-b", [])
    command_line.save()
    results = tmp_path / ".mplint_cache" / "v2" / "results-k.json"
    assert list(_entries(results)) == ["train.py:a-b"]

    editor = ProjectCache(tmp_path, enabled=True, read_only=True)  # loads the file as it is now
    editor.use_settings("k")
    editor.store_result("layers.py", "c-d", [])
    editor.save()  # a read-only run writes nothing itself
    assert list(_entries(results)) == ["train.py:a-b"]

    later = ProjectCache(tmp_path, enabled=True)  # another run writes after the editor read the file
    later.use_settings("k")
    later.store_result("train.py", "a-b", [])
    later.store_result("model.py", "e-f", [])
    later.save()
    persist_shared()
    assert sorted(_entries(results)) == ["layers.py:c-d", "model.py:e-f", "train.py:a-b"]
    modified = results.stat().st_mtime_ns
    persist_shared()  # nothing new: the file is not written again
    assert results.stat().st_mtime_ns == modified


def test_an_editor_run_without_a_cache_persists_nothing(tmp_path, monkeypatch):
    monkeypatch.setattr(cache, "_SHARED", {})
    editor = ProjectCache(tmp_path, enabled=False, read_only=True)
    editor.use_settings("k")
    editor.store_result("layers.py", "c-d", [])
    persist_shared()
    assert not (tmp_path / ".mplint_cache").exists()


def test_persisting_keeps_the_newest_entries_up_to_the_limit(tmp_path, monkeypatch):
    monkeypatch.setattr(cache, "_SHARED", {})
    monkeypatch.setattr(cache, "SHARED_LIMIT", 3)
    command_line = ProjectCache(tmp_path, enabled=True)
    command_line.use_settings("k")
    for name in ("a", "b", "c"):
        command_line.store_result(f"{name}.py", "1-1", [])
    command_line.save()
    editor = ProjectCache(tmp_path, enabled=True, read_only=True)
    editor.use_settings("k")
    editor.store_result("d.py", "1-1", [])
    editor.store_result("e.py", "1-1", [])
    persist_shared()
    results = tmp_path / ".mplint_cache" / "v2" / "results-k.json"
    assert list(_entries(results)) == ["c.py:1-1", "d.py:1-1", "e.py:1-1"]
