"""A results cache keyed by file content, mplint's own code, the active rules, config and project facts.

One JSON file per (project, settings) under ``.mplint_cache/``; JSON rather than
pickle so a tampered cache cannot run code. Any change to a file's bytes, to
mplint (its modules or rule YAML), to the selected rules or settings, or to
the project facts (a policy set in another file) gives a different key.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import os
from pathlib import Path

from mplint import __version__
from mplint.diagnostics import Diagnostic, Edit, FixSafety, Severity
from mplint.facts import FileFacts, PolicySite
from mplint.writer import write_atomic

CACHE_DIR = ".mplint_cache"
_FORMAT = 1


def content_hash(data: bytes) -> str:
    return hashlib.blake2b(data, digest_size=16).hexdigest()


@functools.lru_cache(maxsize=1)
def code_fingerprint() -> str:
    """mplint's own sources and catalog: upgrading rules invalidates the cache."""
    from mplint.catalog import catalog_dir

    digest = hashlib.blake2b(__version__.encode(), digest_size=16)
    package = Path(__file__).resolve().parent
    for path in sorted([*package.rglob("*.py"), *catalog_dir().glob("*.yaml")]):
        digest.update(path.name.encode())
        digest.update(path.read_bytes())
    return digest.hexdigest()


def settings_key(*parts: object) -> str:
    digest = hashlib.blake2b(code_fingerprint().encode(), digest_size=16)
    for part in parts:
        digest.update(repr(part).encode())
    return digest.hexdigest()


def _diagnostic_to_json(d: Diagnostic) -> dict:
    data = dataclasses.asdict(d)
    data["severity"] = d.severity.value
    data["fix_safety"] = d.fix_safety.value
    return data


def _diagnostic_from_json(data: dict) -> Diagnostic:
    data = dict(data)
    data["severity"] = Severity(data["severity"])
    data["fix_safety"] = FixSafety(data["fix_safety"])
    data["edits"] = tuple(Edit(**e) for e in data.get("edits", ()))
    return Diagnostic(**data)


class Cache:
    """Facts and check results of one project for one set of settings."""

    def __init__(self, root: Path, key: str, enabled: bool = True):
        self.enabled = enabled
        self.path = root / CACHE_DIR / f"v{_FORMAT}" / f"{key}.json"
        self._facts: dict[str, dict] = {}
        self._results: dict[str, dict] = {}
        self._dirty = False
        if enabled:
            self._load()

    def _load(self) -> None:
        try:
            data = json.loads(self.path.read_text(encoding="utf-8"))
            self._facts, self._results = data["facts"], data["results"]
        except (OSError, ValueError, KeyError, TypeError):
            self._facts, self._results = {}, {}

    def facts(self, digest: str) -> FileFacts | None:
        raw = self._facts.get(digest) if self.enabled else None
        if raw is None:
            return None
        return FileFacts(
            path=raw["path"],
            policies=[PolicySite(**p) for p in raw["policies"]],
            keras_imports=set(raw["keras_imports"]),
            legacy_keras_env=raw["legacy_keras_env"],
            tpu_lines=list(raw["tpu_lines"]),
            reexports=dict(raw["reexports"]),
        )

    def store_facts(self, digest: str, facts: FileFacts) -> None:
        if self.enabled:
            raw = dataclasses.asdict(facts)
            raw["keras_imports"] = sorted(facts.keras_imports)
            self._facts[digest] = raw
            self._dirty = True

    def result(self, path: str, digest: str, facts_key: str) -> list[Diagnostic] | None:
        raw = self._results.get(f"{facts_key}:{path}:{digest}") if self.enabled else None
        return None if raw is None else [_diagnostic_from_json(d) for d in raw]

    def store_result(self, path: str, digest: str, facts_key: str, diagnostics: list[Diagnostic]) -> None:
        if self.enabled:
            self._results[f"{facts_key}:{path}:{digest}"] = [_diagnostic_to_json(d) for d in diagnostics]
            self._dirty = True

    def save(self, live: set[str]) -> None:
        """Write back, keeping only entries for content seen in this run."""
        if not (self.enabled and self._dirty):
            return
        self._facts = {k: v for k, v in self._facts.items() if k in live}
        self._results = {k: v for k, v in self._results.items() if k.rsplit(":", 1)[-1] in live}
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            gitignore = self.path.parent.parent / ".gitignore"
            if not gitignore.exists():
                gitignore.write_text("*\n")
            if not self.path.exists():
                self.path.write_text("{}")
            write_atomic(self.path, json.dumps({"facts": self._facts, "results": self._results}).encode())
        except OSError:
            pass  # a read-only tree still gets correct (uncached) results
