"""Caches under ``.mplint_cache/`` in each project root, keyed so that stale entries cannot be hit.

- ``facts.json``: each file's contribution to the project facts, by path and content hash.
- ``results-<key>.json``: each file's diagnostics, by path and content hash, where the key
  covers mplint's own code and rule catalog, the active rules, the fix settings and the
  project facts (a policy set in another file changes every result of the project).

JSON rather than pickle, so a tampered cache cannot run code. A cache that cannot be
read or written is ignored: results are then computed, never wrong.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import os
import sys
from collections.abc import Iterator
from pathlib import Path

from mplint import __version__
from mplint.diagnostics import Diagnostic, Edit, FixSafety, ImportSpec, Related, Severity
from mplint.engine.summaries import FunctionSummary, Summary
from mplint.project.extract import FileFacts, ImportRecord, PolicySite
from mplint.project.facts import ProgramLink, ProjectFacts, ProjectSummary
from mplint.project.generation import Generation
from mplint.project.writer import write_atomic

CACHE_DIR = ".mplint_cache"
_FORMAT = "v2"


def content_hash(data: bytes) -> str:
    return hashlib.blake2b(data, digest_size=16).hexdigest()


@functools.lru_cache(maxsize=1)
def code_fingerprint() -> str:
    """mplint's own sources and catalog, and the Python that parses the files (what is a syntax error, and the
    facts read off its tree): upgrading either invalidates every entry. A file counts by its path, size and
    modification time, the test CPython's own bytecode cache makes of a source (reading and hashing the package's
    1.6 MB instead was a tenth of the first diagnostics an editor waits for)."""
    from mplint.catalog import catalog_dir

    digest = hashlib.blake2b(f"{__version__} {sys.version}".encode(), digest_size=16)
    package = Path(__file__).resolve().parent.parent  # the whole mplint package
    for folder, suffix in ((package, ".py"), (catalog_dir(), ".yaml")):
        for path, stat in sorted(_files(folder, suffix)):
            digest.update(f"{path} {stat.st_size} {stat.st_mtime_ns}\n".encode())
    return digest.hexdigest()


def _files(folder: Path, suffix: str) -> Iterator[tuple[str, os.stat_result]]:
    with os.scandir(folder) as entries:
        for entry in entries:
            if entry.is_dir(follow_symlinks=False):
                if entry.name != "__pycache__":
                    yield from _files(Path(entry.path), suffix)
            elif entry.name.endswith(suffix):
                yield entry.path, entry.stat()


def settings_key(*parts: object) -> str:
    digest = hashlib.blake2b(code_fingerprint().encode(), digest_size=16)
    for part in parts:
        digest.update(repr(part).encode())
    return digest.hexdigest()


_DIAGNOSTIC_FIELDS = tuple(f.name for f in dataclasses.fields(Diagnostic))


def _diagnostic_to_json(d: Diagnostic) -> dict:
    """Plain JSON values, equal to what the cache file holds for the same diagnostic (so an unchanged
    result does not mark the cache for writing)."""
    data = {name: getattr(d, name) for name in _DIAGNOSTIC_FIELDS}
    data["severity"] = d.severity.value
    data["fix_safety"] = d.fix_safety.value
    data["edits"] = [
        {"line": e.line, "column": e.column, "end_line": e.end_line, "end_column": e.end_column, "text": e.text}
        for e in d.edits
    ]
    data["related"] = [[r.path, r.line, r.message, r.cell] for r in d.related]
    data["imports"] = [[i.module, i.obj, i.asname] for i in d.imports]
    return data


def _diagnostic_from_json(data: dict) -> Diagnostic:
    data = dict(data)
    data["severity"] = Severity(data["severity"])
    data["fix_safety"] = FixSafety(data["fix_safety"])
    data["edits"] = tuple(Edit(**e) for e in data.get("edits", ()))
    data["related"] = tuple(Related(*r) for r in data.get("related", ()))
    data["imports"] = tuple(ImportSpec(*i) for i in data.get("imports", ()))
    return Diagnostic(**data)


def _facts_to_json(facts: FileFacts) -> dict:
    raw = dataclasses.asdict(facts)
    raw["keras_imports"] = sorted(facts.keras_imports)
    raw["policies"] = [dataclasses.astuple(p) for p in facts.policies]
    raw["imports"] = [dataclasses.astuple(i) for i in facts.imports]
    return raw


def _facts_from_json(raw: dict) -> FileFacts:
    fields = {**raw, "keras_imports": set(raw["keras_imports"])}
    fields["policies"] = [PolicySite(*p) for p in raw["policies"]]
    fields["imports"] = [ImportRecord(*i) for i in raw["imports"]]
    fields["version_bounds"] = [tuple(b) for b in raw["version_bounds"]]
    fields["trainer_settings"] = [tuple(s) for s in raw.get("trainer_settings", ())]
    fields["summaries"] = {
        name: {kind: Summary(*entry) for kind, entry in by_kind.items()} for name, by_kind in raw["summaries"].items()
    }
    return FileFacts(**fields)


class _Store:
    """One JSON file of entries keyed by ``path:digest``; only entries seen in this run are kept.

    ``limit``: a store kept in memory across runs (``_shared``) and never saved; it holds at most this many
    entries, the oldest going first."""

    def __init__(self, path: Path | None, limit: int | None = None):
        self.path = path
        self.limit = limit
        self.entries: dict[str, object] = {}
        self.live: set[str] = set()
        self.dirty = False
        if path is not None:
            try:
                loaded = json.loads(path.read_text(encoding="utf-8"))
                if isinstance(loaded, dict) and loaded.get("code") == code_fingerprint():
                    self.entries = loaded["entries"]
            except (OSError, ValueError, KeyError, TypeError):
                self.entries = {}

    def get(self, key: str):
        if self.path is None:
            return None
        if self.limit is None:
            self.live.add(key)
        return self.entries.get(key)

    def put(self, key: str, value) -> None:
        if self.path is not None:
            if self.limit is not None:
                if self.entries.get(key) != value:
                    self.entries[key] = value
                    self.dirty = True
                while len(self.entries) > self.limit:
                    del self.entries[next(iter(self.entries))]
                return
            self.live.add(key)
            if self.entries.get(key) != value:  # a run that changed nothing writes nothing
                self.entries[key] = value
                self.dirty = True

    def save(self) -> None:
        if self.path is None or not (self.dirty or set(self.entries) - self.live):
            return
        entries = {k: v for k, v in self.entries.items() if k in self.live}
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            ignore = self.path.parent.parent / ".gitignore"
            if not ignore.exists():
                ignore.write_text("# created by mplint\n*\n")
            data = json.dumps({"code": code_fingerprint(), "entries": entries}, separators=(",", ":")).encode()
            if self.path.exists():
                write_atomic(self.path, data)
            else:
                self.path.write_bytes(data)
        except OSError:
            pass  # read-only tree: results stay correct, just uncached

    def merge_into_disk(self) -> None:
        """A shared store's new entries added to its file as it is on disk now (entries other runs wrote since
        are kept): entries are keyed by content digests, so whichever run wrote them, none is ever wrong."""
        if self.path is None or not self.dirty:
            return
        on_disk = _Store(self.path)
        for key, value in self.entries.items():
            on_disk.entries.pop(key, None)  # put again below, as the newest
            on_disk.put(key, value)
        on_disk.live = set(
            list(on_disk.entries)[-SHARED_LIMIT:]
        )  # bounded: an editor never runs the pruning command line
        on_disk.save()
        self.dirty = False


def persist_shared() -> None:
    """Write what the editor's checks found (the read-only runs' stores) into the projects' caches, for the next
    server or command line run to reuse: the language server calls it once the editor is idle after a save,
    and at shutdown."""
    for store in list(_SHARED.values()):
        store.merge_into_disk()


def _module_facts_to_json(facts: ProjectFacts) -> dict:
    return {
        "policies": [dataclasses.astuple(p) for p in facts.policies],
        "generation": dataclasses.astuple(facts.generation),
        "tpu_sites": [list(s) for s in facts.tpu_sites],
        "keras_namespaces": sorted(facts.keras_namespaces),
        "policy_from_config": facts.policy_from_config,
        "links": [[link.entry, list(link.via)] for link in facts.links],
        "library_context": facts.library_context,
        "distribution": facts.distribution,
        "path": facts.path,
        "test_module": facts.test_module,
        "trained_names": sorted(facts.trained_names),
        "torch_pin": None if facts.torch_pin is None else _torch_pin_to_json(facts.torch_pin),
        "trainer_pins": [_stack_to_json(t) for t in facts.trainer_pins],
        "uncalled": sorted(facts.uncalled),
        "patching_imports": sorted(facts.patching_imports),
        "run_lines": [list(pair) for pair in facts.run_lines],
    }


def _module_facts_from_json(raw: dict, reexports: dict, roles: dict) -> ProjectFacts:
    return ProjectFacts(
        summaries=roles,
        policies=tuple(PolicySite(*p) for p in raw["policies"]),
        generation=Generation(*raw["generation"]),
        tpu_sites=tuple(tuple(s) for s in raw["tpu_sites"]),
        reexports=reexports,
        keras_namespaces=frozenset(raw["keras_namespaces"]),
        policy_from_config=raw["policy_from_config"],
        links=tuple(ProgramLink(entry, tuple(via)) for entry, via in raw["links"]),
        library_context=raw["library_context"],
        distribution=raw.get("distribution", ""),
        path=raw["path"],
        test_module=raw["test_module"],
        trained_names=frozenset(raw["trained_names"]),
        torch_pin=None if raw.get("torch_pin") is None else _torch_pin_from_json(raw["torch_pin"]),
        trainer_pins=tuple(_stack_from_json(t) for t in raw.get("trainer_pins", ())),
        uncalled=frozenset(raw.get("uncalled", ())),
        patching_imports=frozenset(raw.get("patching_imports", ())),
        run_lines=tuple((name, line) for name, line in raw.get("run_lines", ())),
    )


def _torch_pin_to_json(target) -> list:
    dated = list(target.dated) if target.dated else None
    return [None if v is None else str(v) for v in (target.minimum, target.newest)] + [target.source, dated]


def _torch_pin_from_json(raw: list):
    """Only projects that pin torch read one back: packaging is imported for them alone."""
    from packaging.version import Version

    from mplint.project.torch_target import TorchTarget

    minimum, newest, source, dated = raw
    return TorchTarget(
        True,
        None if minimum is None else Version(minimum),
        None if newest is None else Version(newest),
        source,
        tuple(dated) if dated else None,
    )


def _stack_to_json(target) -> list:
    return [target.stack] + [None if v is None else str(v) for v in (target.minimum, target.newest)] + [target.source]


def _stack_from_json(raw: list):
    from packaging.version import Version

    from mplint.project.trainer_target import StackTarget

    stack, minimum, newest, source = raw
    return StackTarget(
        stack, True, None if minimum is None else Version(minimum), None if newest is None else Version(newest), source
    )


_SHARED: dict[Path, _Store] = {}  # the stores of read-only runs, by file: one process's runs share them
SHARED_LIMIT = 4096  # entries each shared store keeps (an editor's every version of a file adds some)


def _shared(path: Path | None, read_only: bool) -> _Store:
    """A read-only run's store is loaded once per process and kept in memory: the language server checks a
    buffer on every pause in typing, and the files it has not changed keep their facts from the last check.
    Entries are keyed by content digests, so a store read long ago is never wrong, only less complete."""
    if path is None or not read_only:
        return _Store(path)
    store = _SHARED.get(path)
    if store is None:
        store = _SHARED[path] = _Store(path, SHARED_LIMIT)
    return store


class ProjectCache:
    def __init__(self, root: Path, enabled: bool, read_only: bool = False):
        """``read_only``: a run that checks an editor's buffer reads what earlier runs stored and writes
        nothing to disk (its file's content is not on disk, and it sees too few files to keep the others'
        entries); what it finds stays in this process's memory for the next such run."""
        self.folder = root / CACHE_DIR / _FORMAT if enabled else None
        self.read_only = read_only
        self._facts = _shared(self.folder / "facts.json" if self.folder else None, read_only)
        self._model = _shared(self.folder / "modules.json" if self.folder else None, read_only)
        self._results: _Store | None = None

    def module_facts(self, key: str):
        """The facts of every module and the project summary, as computed for the same files and settings."""
        raw = self._model.get(key)
        if raw is None:
            return None
        try:
            reexports = dict(raw["reexports"])
            roles = {
                name: {role: FunctionSummary(*entry) for role, entry in by_role.items()}
                for name, by_role in raw["summaries"].items()
            }
            by_display = {path: _module_facts_from_json(f, reexports, roles) for path, f in raw["modules"].items()}
            s = raw["summary"]
            return by_display, ProjectSummary(
                Path(s["root"]), s["files"], s["programs"], s["generation"], s.get("reached", {})
            )
        except (KeyError, TypeError, ValueError):
            return None

    def store_module_facts(self, key: str, by_display: dict[str, ProjectFacts], summary) -> None:
        if self.folder is None:
            return
        first = next(iter(by_display.values()), None)
        self._model.put(
            key,
            {
                "reexports": first.reexports if first else {},
                "summaries": {
                    name: {role: list(entry) for role, entry in by_role.items()}
                    for name, by_role in first.summaries.items()
                }
                if first
                else {},
                "modules": {path: _module_facts_to_json(f) for path, f in by_display.items()},
                "summary": {
                    "root": str(summary.root),
                    "files": summary.files,
                    "programs": summary.programs,
                    "generation": summary.generation,
                    "reached": summary.reached,
                },
            },
        )

    def facts(self, path: str, digest: str) -> FileFacts | None:
        raw = self._facts.get(f"{path}:{digest}")
        try:
            return _facts_from_json(raw) if raw is not None else None
        except (KeyError, TypeError, ValueError):  # an entry of another shape: extract again
            return None

    def store_facts(self, path: str, digest: str, facts: FileFacts) -> None:
        if self.folder is None:
            return  # no cache: nothing to serialise (a thousand files' facts are half a second of it)
        self._facts.put(f"{path}:{digest}", _facts_to_json(facts))

    def use_settings(self, key: str) -> None:
        self._results = _shared(self.folder / f"results-{key}.json" if self.folder else None, self.read_only)

    def result(self, path: str, digest: str) -> list[Diagnostic] | None:
        raw = self._results.get(f"{path}:{digest}") if self._results else None
        return [_diagnostic_from_json(d) for d in raw] if raw is not None else None

    def store_result(self, path: str, digest: str, diagnostics: list[Diagnostic]) -> None:
        if self._results is not None:
            self._results.put(f"{path}:{digest}", [_diagnostic_to_json(d) for d in diagnostics])

    def save(self) -> None:
        if self.read_only:
            return
        self._facts.save()
        self._model.save()
        if self._results is not None:
            self._results.save()
            if self.folder is not None:  # results files of other settings go stale; keep the newest few
                files = sorted(self.folder.glob("results-*.json"), key=lambda p: p.stat().st_mtime, reverse=True)
                for old in files[8:]:
                    old.unlink(missing_ok=True)
