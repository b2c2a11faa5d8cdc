"""``mplint server``: the language server (LSP over standard input and output).

It speaks LSP with plain JSON (``rpc``): answering ``initialize`` needs nothing heavy, and the
checker (libcst, the rules, the project's facts) is imported and warmed on a worker thread
meanwhile. Every check runs on that one worker, in order; what a check found is kept per
document, so code actions (their quick fixes' edits too), hover and pulled diagnostics are
answered from the last check while the document is unchanged, without running again.

Diagnostics are pushed when a file or notebook is opened, changed (after a short pause in
typing) and saved, unless the client pulls them (``textDocument/diagnostic``; notebooks are
pushed either way). Configuration is read afresh by every check, so a change to
pyproject.toml or .mplint.yaml (``workspace/didChangeWatchedFiles``), to the editor's
settings (``workspace/didChangeConfiguration``) or a saved file (its policy may govern
others) only has to check the open documents again.
"""

from __future__ import annotations

import itertools
import queue
import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass, field

from mplint import __version__
from mplint.server import rpc
from mplint.server.documents import Buffer, CheckFailed, Settings
from mplint.server.positions import Codec, choose
from mplint.server.workspace import Workspace, fs_path

DEBOUNCE_S = 0.3  # a change is checked once typing pauses this long
IDLE_S = 1.0  # the worker does what can wait once nothing has been asked of it for this long
WATCHED = (
    "**/pyproject.toml",
    "**/.mplint.yaml",
    "**/.mplint.yml",
    "**/setup.cfg",
    "**/setup.py",
    "**/requirements*.txt",
)
SOURCES = ("**/*.py", "**/*.ipynb")  # watched for files added or removed (the project's files are kept between checks)
CREATED_OR_DELETED = 1 | 4  # LSP's WatchKind
COMMANDS = ("mplint.applyAutofix", "mplint.explainRule")


@dataclass
class Checked:
    """The last check of a buffer: what it was run on, what it found, and those findings in LSP form per URI."""

    id: int
    buffer: Buffer
    generation: int  # the server's configuration generation it was checked under
    facts: int  # the version of the project facts it was checked with (``FactsMemo.version``)
    result: object  # FileResult
    config: object  # the project's Config
    found: dict[str, list[dict]]
    with_imports: dict[tuple, dict[str, str] | None] = field(default_factory=dict)  # see ``Server.import_texts``


def _get(mapping, *path, default=None):
    for name in path:
        if not isinstance(mapping, dict) or name not in mapping:
            return default
        mapping = mapping[name]
    return mapping


class Server:
    def __init__(self, reader, writer):
        self.rpc = rpc.Connection(reader, writer)
        self.lock = threading.RLock()  # the workspace and the last checks, shared with the worker and timers
        self.codec = Codec()
        self.workspace = Workspace(self.codec)
        self.settings = Settings()
        self.capabilities: dict = {}
        self.generation = 0  # bumped when configuration may have changed: every check before it is stale
        self.checked: dict[str, Checked] = {}
        self.kept = None  # mplint.runner.Warm, made on the worker (importing the runner is not for initialize)
        self.published: dict[str, set[str]] = {}  # buffer key -> URIs that got diagnostics
        self.pending: dict[str, threading.Timer] = {}
        self.queued: set[str] = set()  # documents whose check is on the worker's queue
        self.ids = itertools.count(1)
        self.jobs: queue.Queue[tuple[Callable[[], None], object]] = queue.Queue()
        self.idle: list[Callable[[], None]] = []  # work for when no check or request has come for IDLE_S
        self.shutting_down = False
        threading.Thread(target=self._work, name="mplint-checks", daemon=True).start()

    # -- the loop ------------------------------------------------------------------------------

    def serve(self) -> int:
        handlers = {
            "initialize": self.initialize,
            "initialized": self.initialized,
            "shutdown": self.shutdown,
            "textDocument/didOpen": self.did_open,
            "textDocument/didChange": self.did_change,
            "textDocument/didSave": self.did_save,
            "textDocument/didClose": self.did_close,
            "notebookDocument/didOpen": self.notebook_open,
            "notebookDocument/didChange": self.notebook_change,
            "notebookDocument/didSave": self.did_save,
            "notebookDocument/didClose": self.notebook_close,
            "workspace/didChangeWatchedFiles": self.watched_changed,
            "workspace/didChangeConfiguration": self.configuration_changed,
            "workspace/didChangeWorkspaceFolders": self.folders_changed,
            "textDocument/codeAction": self.code_action,
            "codeAction/resolve": self.resolve,
            "textDocument/hover": self.hover,
            "textDocument/diagnostic": self.pull,
            "workspace/executeCommand": self.execute,
        }
        while True:
            message = self.rpc.read()
            if message is None:
                return 1
            method, id_ = message.get("method"), message.get("id")
            if method is None:
                self.rpc.answered(message)
            elif method == "exit":
                return 0 if self.shutting_down else 1
            elif method in handlers:
                try:
                    with self.lock:
                        handlers[method](message.get("params"), id_)
                except Exception as exc:  # a bad message must not end the server
                    self.log(f"mplint: {method} failed: {exc!r}")
                    if id_ is not None:
                        self.rpc.fail(id_, rpc.INTERNAL_ERROR, str(exc))
            elif id_ is not None:
                self.rpc.fail(id_, rpc.METHOD_NOT_FOUND, f"unhandled method {method}")

    def _work(self) -> None:
        quiet = IDLE_S  # how long to wait for a job before doing what can wait
        while True:
            try:
                job, id_ = self.jobs.get(timeout=quiet if self.idle else None)
                quiet = IDLE_S
            except queue.Empty:  # nothing asked for a while: do what can wait, one after another while quiet
                job, id_ = self.idle.pop(0), None
                quiet = 0
            try:
                job()
            except Exception as exc:  # the request it answers gets the error: the editor must not wait forever
                self.log(f"mplint: {exc!r}")
                if id_ is not None:
                    self.rpc.fail(id_, rpc.INTERNAL_ERROR, str(exc))

    def later(self, job: Callable[[], None], id_=None) -> None:
        """Run ``job`` on the worker, after the checks already asked for; ``id_``: the request it answers."""
        self.jobs.put((job, id_))

    def log(self, text: str, kind: int = 1) -> None:
        self.rpc.notify("window/logMessage", {"type": kind, "message": text})

    # -- lifecycle -----------------------------------------------------------------------------

    def initialize(self, params: dict, id_) -> None:
        self.capabilities = params.get("capabilities") or {}
        self.codec.encoding = choose(_get(self.capabilities, "general", "positionEncodings"))
        folders = [fs_path(f["uri"]) for f in params.get("workspaceFolders") or []]
        root = params.get("rootUri")
        if not folders and root:
            folders = [fs_path(root)]
        self.workspace.folders = [f for f in folders if f is not None]
        self.settings = Settings.of(params.get("initializationOptions"))
        self.later(self.warm)
        capabilities = {
            "positionEncoding": self.codec.encoding,
            "textDocumentSync": {"openClose": True, "change": 2, "save": True},
            "notebookDocumentSync": {
                "notebookSelector": [{"notebook": "*", "cells": [{"language": "python"}]}],
                "save": True,
            },
            "codeActionProvider": {
                "codeActionKinds": ["quickfix", "source.fixAll.mplint", "notebook.source.fixAll.mplint"],
                "resolveProvider": True,
            },
            "hoverProvider": True,
            "diagnosticProvider": {
                "identifier": "mplint",
                "interFileDependencies": True,
                "workspaceDiagnostics": False,
            },
            "executeCommandProvider": {"commands": list(COMMANDS)},
            "workspace": {"workspaceFolders": {"supported": True, "changeNotifications": True}},
        }
        self.rpc.respond(id_, {"capabilities": capabilities, "serverInfo": {"name": "mplint", "version": __version__}})

    def warm(self) -> None:
        """Build the first workspace folder's facts before the first document asks, then import the checker
        (libcst, the rules) behind the checks asked for meanwhile: a document whose result the project's cache
        holds (``mplint`` was run on it) is answered without waiting for the checker, and one opened later
        finds it ready. What fixing imports (for the first ``codeAction/resolve``) and the rules' prose (for
        hover) wait until the worker is idle."""
        from mplint.server.documents import warm_facts

        folder = self.workspace.folders[0] if self.workspace.folders else None
        if folder is not None and folder.is_dir():
            try:
                warm_facts(folder, self.settings, self.warmed())
            except CheckFailed:
                pass  # the first real check reports it
        self.later(self.warm_checker)
        self.idle += [self.warm_fixes, self.warm_catalog]

    @staticmethod
    def warm_checker() -> None:
        import libcst

        from mplint.checks import all_rules

        all_rules()
        libcst.parse_module("x = 1\n")  # the native parser's first call sets itself up

    @staticmethod
    def warm_fixes() -> None:
        from libcst.codemod.visitors import AddImportsVisitor  # noqa: F401  (imported by fixes that add imports)

        import mplint.engine.edits  # noqa: F401

    @staticmethod
    def warm_catalog() -> None:
        """The rules' prose and examples (the YAML parser): what a hover shows; no check needs it."""
        from mplint.catalog import load_catalog

        load_catalog()

    def initialized(self, params, id_) -> None:
        if _get(self.capabilities, "workspace", "didChangeWatchedFiles", "dynamicRegistration"):
            self.rpc.request(
                "client/registerCapability",
                {
                    "registrations": [
                        {
                            "id": "mplint-config",
                            "method": "workspace/didChangeWatchedFiles",
                            "registerOptions": {
                                "watchers": [{"globPattern": pattern} for pattern in WATCHED]
                                + [{"globPattern": pattern, "kind": CREATED_OR_DELETED} for pattern in SOURCES]
                            },
                        }
                    ]
                },
                lambda answer: None,
            )
        if _get(self.capabilities, "workspace", "configuration"):
            self.fetch_settings()

    def shutdown(self, params, id_) -> None:
        self.shutting_down = True

        def persisted() -> None:  # after the checks already asked for; shutting down succeeds either way
            try:
                self.persist()
            except Exception as exc:
                self.log(f"mplint: keeping the checks' results in .mplint_cache/ failed: {exc!r}")
            self.rpc.respond(id_, None)

        self.later(persisted, id_)

    @staticmethod
    def persist() -> None:
        """What the checks found and read, into the projects' ``.mplint_cache/``: the next server (or ``mplint``
        run) answers unchanged files from it without importing the checker."""
        from mplint.project.cache import persist_shared

        persist_shared()

    # -- documents -----------------------------------------------------------------------------

    @property
    def pulls(self) -> bool:
        """Whether the client pulls diagnostics of text documents (then only notebooks are pushed)."""
        return _get(self.capabilities, "textDocument", "diagnostic") is not None

    def pushed(self, key: str) -> bool:
        return key in self.workspace.notebooks or not self.pulls

    def did_open(self, params, id_) -> None:
        self.workspace.open_text(params["textDocument"])
        if self.pushed(params["textDocument"]["uri"]):
            self.lint_soon(params["textDocument"]["uri"])

    def did_change(self, params, id_) -> None:
        uri = params["textDocument"]["uri"]
        self.workspace.change_text(uri, params["contentChanges"])
        self.lint_later(self.workspace.key(uri))

    def did_save(self, params, id_) -> None:
        self.configuration_may_have_changed()  # a saved file's policy may govern the other open files
        if self.persist not in self.idle:  # a saved buffer's result is the file's: worth keeping, once idle
            self.idle.append(self.persist)

    def did_close(self, params, id_) -> None:
        uri = params["textDocument"]["uri"]
        if uri not in self.workspace.owner:
            buffer = self.workspace.buffer(uri)
            self.workspace.close_text(uri)
            self.forget(uri)
            self.closed(uri, buffer)

    def closed(self, uri: str, buffer: Buffer | None) -> None:
        """A document closed unsaved: the other open ones were checked with its buffer, now its file counts."""
        if buffer is None or not uri.startswith("file:") or not self.workspace.keys():
            return
        try:
            unsaved = buffer.is_notebook or buffer.path.read_bytes() != buffer.source()
        except OSError:
            unsaved = True
        if unsaved:
            self.configuration_may_have_changed()

    def notebook_open(self, params, id_) -> None:
        self.workspace.open_notebook(params["notebookDocument"], params.get("cellTextDocuments") or [])
        self.lint_soon(params["notebookDocument"]["uri"])

    def notebook_change(self, params, id_) -> None:
        uri = params["notebookDocument"]["uri"]
        self.workspace.change_notebook(uri, params.get("change") or {})
        self.lint_later(uri)

    def notebook_close(self, params, id_) -> None:
        uri = params["notebookDocument"]["uri"]
        buffer = self.workspace.buffer(uri)
        self.workspace.close_notebook(uri)
        self.forget(uri)
        self.closed(uri, buffer)

    def folders_changed(self, params, id_) -> None:
        event = params.get("event") or {}
        gone = {fs_path(f["uri"]) for f in event.get("removed") or []}
        added = [fs_path(f["uri"]) for f in event.get("added") or []]
        self.workspace.folders = [f for f in self.workspace.folders if f not in gone] + [f for f in added if f]
        self.configuration_may_have_changed()

    # -- configuration -------------------------------------------------------------------------

    def watched_changed(self, params, id_) -> None:
        self.configuration_may_have_changed()

    def configuration_changed(self, params, id_) -> None:
        settings = (params or {}).get("settings")
        if isinstance(settings, dict) and settings:
            self.use_settings(Settings.of(settings))
        elif _get(self.capabilities, "workspace", "configuration"):
            self.fetch_settings()  # the client sends nothing in the notification: ask for the section

    def fetch_settings(self) -> None:
        def answered(message: dict) -> None:
            result = message.get("result")
            if isinstance(result, list) and result and isinstance(result[0], dict):
                with self.lock:
                    self.use_settings(Settings.of(result[0]))

        self.rpc.request("workspace/configuration", {"items": [{"section": "mplint"}]}, answered)

    def use_settings(self, settings: Settings) -> None:
        if settings != self.settings:
            self.settings = settings
            self.configuration_may_have_changed()

    def configuration_may_have_changed(self) -> None:
        """Every last check is stale: check the pushed documents again, and ask a pulling client to pull."""
        self.generation += 1
        self.later(lambda: self.kept and self.kept.forget_configuration())  # before the checks asked for below
        for key in self.workspace.keys():
            if self.pushed(key):
                self.lint_soon(key)
        if self.pulls and _get(self.capabilities, "workspace", "diagnostics", "refreshSupport"):
            self.rpc.request("workspace/diagnostic/refresh", None, lambda answer: None)

    # -- checks --------------------------------------------------------------------------------

    def warmed(self):
        """What is kept between checks (made on first use, on the worker)."""
        if self.kept is None:
            from mplint.engine import statement_reuse
            from mplint.runner import Warm

            statement_reuse.enable()  # an edit's check parses only the statements it changed
            self.kept = Warm()
        return self.kept

    def facts_version(self) -> int:
        return self.kept.facts.version if self.kept is not None else 0

    def fresh(self, key: str) -> Checked | None:
        """The last check of ``key`` if the document, the configuration and the project's facts are as they were."""
        checked = self.checked.get(key)
        if (
            checked is None
            or checked.generation != self.generation
            or checked.facts != self.facts_version()
            or checked.buffer != self.workspace.buffer(key)
        ):
            return None
        return checked

    def context(self, key: str) -> dict:
        """What every check of ``key`` is run with besides the buffer: the other open buffers, what is kept."""
        with self.lock:
            others = self.others(key)
        return {"others": others, "warm": self.warmed()}

    def others(self, key: str) -> tuple[Buffer, ...]:
        """The open files and notebooks other than ``key``, as the checks of ``key`` read them (instead of the disk)."""
        return tuple(
            b
            for k in self.workspace.keys()
            if k != key and k.startswith("file:") and (b := self.workspace.buffer(k)) is not None
        )

    def ensure(self, key: str) -> Checked | None:
        """The buffer's check, run now (on the worker) unless the last one is fresh; ``None`` once it is closed."""
        from mplint.server import edits
        from mplint.server.documents import check_with_config, project_folder

        with self.lock:
            checked = self.fresh(key)
            buffer = self.workspace.buffer(key)
            generation, settings, others = self.generation, self.settings, self.others(key)
        if checked is not None or buffer is None:
            return checked
        folder = project_folder(buffer.path, self.workspace.folders)
        try:
            result, config = check_with_config(buffer, folder, settings=settings, others=others, warm=self.warmed())
        except CheckFailed as exc:
            self.rpc.notify("window/showMessage", {"type": 1, "message": f"mplint: {exc}"})
            return None
        found: dict[str, list[dict]] = {p.uri: [] for p in buffer.parts}
        for d in result.diagnostics:
            part = buffer.part_of(d)
            if part is not None and not d.fixed:
                found[part.uri].append(edits.to_lsp(self.codec, part.text, d, config.docs_url))
        checked = Checked(next(self.ids), buffer, generation, self.facts_version(), result, config, found)
        with self.lock:
            if key in self.workspace.keys():
                self.checked[key] = checked
                self.facts_changed(key, checked)
        if any(d["data"]["imports"] for ds in found.values() for d in ds) and self.prepare_fixes not in self.idle:
            self.idle.append(self.prepare_fixes)
        return checked

    def lint_soon(self, key: str) -> None:
        """Check ``key`` and publish on the worker, once however often it is asked for before the check starts."""
        with self.lock:
            if key in self.queued:
                return
            self.queued.add(key)
        self.later(lambda: self.lint(key))

    def lint(self, key: str) -> None:
        with self.lock:
            self.pending.pop(key, None)
            self.queued.discard(key)
        checked = self.ensure(key)
        if checked is None:
            return
        with self.lock:
            if key not in self.workspace.keys():
                return  # closed while it was checked
            found = dict(checked.found)
            for gone in self.published.get(key, set()) - set(found):
                found[gone] = []
            self.published[key] = {u for u, ds in found.items() if ds}
        for uri, diagnostics in found.items():
            self.rpc.notify("textDocument/publishDiagnostics", {"uri": uri, "diagnostics": diagnostics})

    def facts_changed(self, key: str, checked: Checked) -> None:
        """When ``key``'s check found the project's facts changed (an edit set a policy, say), the other open
        documents checked with the old facts are checked again (pushed), or the client asked to pull again."""
        stale = [k for k, c in self.checked.items() if k != key and c.facts < checked.facts]
        if not stale:
            return
        for other in stale:
            if self.pushed(other) and other not in self.pending:
                self.lint_soon(other)
        if self.pulls and _get(self.capabilities, "workspace", "diagnostics", "refreshSupport"):
            self.rpc.request("workspace/diagnostic/refresh", None, lambda answer: None)

    def lint_later(self, key: str) -> None:
        if not self.pushed(key):
            return  # the client pulls when it wants them
        if key in self.pending:
            self.pending[key].cancel()
        timer = threading.Timer(DEBOUNCE_S, lambda: self.lint_soon(key))
        timer.daemon = True
        self.pending[key] = timer
        timer.start()

    def forget(self, key: str) -> None:
        if key in self.pending:
            self.pending.pop(key).cancel()
        self.checked.pop(key, None)
        for uri in self.published.pop(key, set()):
            self.rpc.notify("textDocument/publishDiagnostics", {"uri": uri, "diagnostics": []})

    def answer_checked(self, id_, uri: str, answer: Callable[[Checked | None], object]) -> None:
        """Answer from the last check of ``uri``'s buffer: now if it is fresh, else after checking on the worker."""
        key = self.workspace.key(uri)
        checked = self.fresh(key)
        if checked is not None:
            self.rpc.respond(id_, answer(checked))
            return

        def job() -> None:
            checked = self.ensure(key)
            with self.lock:
                reply = answer(checked)
            self.rpc.respond(id_, reply)

        self.later(job, id_)

    # -- requests ------------------------------------------------------------------------------

    def pull(self, params, id_) -> None:
        uri, previous = params["textDocument"]["uri"], params.get("previousResultId")

        def answer(checked: Checked | None):
            if checked is None:
                return {"kind": "full", "items": []}
            if previous == str(checked.id):
                return {"kind": "unchanged", "resultId": previous}
            return {"kind": "full", "resultId": str(checked.id), "items": checked.found.get(uri, [])}

        self.answer_checked(id_, uri, answer)

    def hover(self, params, id_) -> None:
        from mplint.server import hover

        uri, at = params["textDocument"]["uri"], params["position"]
        self.answer_checked(
            id_, uri, lambda checked: checked and hover.of(checked.found.get(uri, []), at["line"], at["character"])
        )

    def code_action(self, params, id_) -> None:
        from mplint.server import actions

        uri, context = params["textDocument"]["uri"], params.get("context") or {}
        only = context.get("only")
        resolves = "edit" in (
            _get(self.capabilities, "textDocument", "codeAction", "resolveSupport", "properties") or []
        )

        def listed(checked: Checked | None) -> list[dict]:
            part = next((p for p in checked.buffer.parts if p.uri == uri), None) if checked else None
            if part is None or not part.python:
                return []
            found: list[dict | None] = []
            if actions.wants(only, actions.QUICK_FIX):
                for d in context.get("diagnostics") or []:
                    found.append(actions.fix_action(part, d))
                    found.append(actions.noqa_action(part, d))
            unsafe = (
                self.settings.unsafe_fixes if self.settings.unsafe_fixes is not None else checked.config.unsafe_fixes
            )
            if actions.wants(only, actions.FIX_ALL) and self.fixable(checked.found.get(uri, []), unsafe):
                found.append(actions.fix_all_action(part, actions.FIX_ALL))
            if (
                actions.wants(only, actions.NOTEBOOK_FIX_ALL)
                and checked.buffer.is_notebook
                and any(self.fixable(ds, unsafe) for ds in checked.found.values())
            ):
                found.append(actions.fix_all_action(part, actions.NOTEBOOK_FIX_ALL))
            offered = [a for a in found if a is not None]
            for a in offered:
                a["data"]["check"] = checked.id  # resolved against this check only
            return offered

        if resolves:
            self.answer_checked(id_, uri, listed)
            return

        def eager() -> None:  # a client that cannot resolve gets every edit now
            checked = self.ensure(self.workspace.key(uri))
            with self.lock:
                offered = listed(checked)
            self.rpc.respond(id_, [a for a in (self.resolved(a) for a in offered) if a.get("edit") is not None])

        self.later(eager, id_)

    @staticmethod
    def fixable(diagnostics: list[dict], unsafe: bool) -> bool:
        return any(
            d["data"]["edits"] and (d["data"]["safety"] == "safe" or (unsafe and d["data"]["safety"] == "unsafe"))
            for d in diagnostics
        )

    def resolve(self, params, id_) -> None:
        """A quick fix is resolved now from the last check when that check is the one it was listed from (and
        the imports its fix adds are known), or at once without an edit when the document changed since;
        anything else on the worker."""
        data = params.get("data") or {}
        if data.get("action") == "fix" and isinstance(data.get("uri"), str):
            key = self.workspace.key(data["uri"])
            last, checked = self.checked.get(key), self.fresh(key)
            if last is not None and "check" in data and last.buffer != self.workspace.buffer(key):
                self.rpc.respond(id_, params)  # listed for a text the editor no longer has: the client asks again
                return
            if (
                checked is not None
                and "check" in data
                and (data["check"] != checked.id or self.imports_known(checked, params))
            ):
                self.rpc.respond(id_, self.resolved(params, checked))
                return
        self.later(lambda: self.rpc.respond(id_, self.resolved(params)), id_)

    def resolved(self, action: dict, checked: Checked | None = None) -> dict:
        """``action`` with its edit; without one when none can be made (the document closed or changed so that
        the action no longer applies). ``checked``: the fresh last check of its document, else it is checked
        (on the worker) unless its last check is fresh."""
        from mplint.server import actions
        from mplint.server.documents import project_folder

        data = action.get("data") or {}
        if "edit" in action or data.get("action") not in ("fix", "noqa", "fixAll"):
            return action
        key = self.workspace.key(data["uri"])
        checked = checked or self.ensure(key)
        part = next((p for p in checked.buffer.parts if p.uri == data["uri"]), None) if checked else None
        if part is None or data.get("check", checked.id) != checked.id:
            return action  # the document changed since: the client asks again
        folder = project_folder(checked.buffer.path, self.workspace.folders)
        try:
            if data["action"] == "fix":
                d = action["diagnostics"][0]
                found = [other for ds in checked.found.values() for other in ds]
                fixed = self.import_texts(checked, actions.fix_imports(d))
                if fixed is None:  # the imports could not be placed from the text alone: fix with the rule
                    fixed = actions.fixed_by_rule(checked.buffer, d, folder, self.settings, **self.context(key))
                edit = actions.resolve_fix(checked.buffer, part, d, found, self.codec, fixed)
            elif data["action"] == "noqa":
                edit = actions.resolve_noqa(part, action["diagnostics"][0], checked.result, self.codec)
            else:
                edit = actions.resolve_fix_all(
                    checked.buffer, part, action["kind"], folder, self.codec, self.settings, **self.context(key)
                )
        except CheckFailed:
            edit = None
        return {**action, "edit": edit} if edit is not None else action

    @staticmethod
    def imports_known(checked: Checked, action: dict) -> bool:
        from mplint.server import actions

        imports = actions.fix_imports((action.get("diagnostics") or [{}])[0])
        return not imports or imports in checked.with_imports

    def import_texts(self, checked: Checked, imports: tuple) -> dict[str, str] | None:
        """What adding ``imports`` makes of the checked buffer's parts (``actions.with_imports``), computed
        once per check: by ``prepare_fixes`` while the editor is idle, else by the first resolve asking."""
        from mplint.server import actions

        if not imports:
            return {}
        with self.lock:
            if imports in checked.with_imports:
                return checked.with_imports[imports]
        texts = actions.with_imports(checked.buffer, checked.result, imports)
        with self.lock:
            checked.with_imports[imports] = texts
        return texts

    def prepare_fixes(self) -> None:
        """Idle work on the worker: the imports of each quick fix of the fresh last checks (placing them runs
        libcst's import codemod, tens of milliseconds), so that resolving the fix is a lookup."""
        from mplint.server import actions

        with self.lock:
            fresh = [c for key in list(self.checked) if (c := self.fresh(key)) is not None]
        for checked in fresh:
            for imports in {actions.fix_imports(d) for ds in checked.found.values() for d in ds} - {()}:
                self.import_texts(checked, imports)

    # -- commands ------------------------------------------------------------------------------

    def execute(self, params, id_) -> None:
        command, arguments = params.get("command"), params.get("arguments") or []
        first = arguments[0] if arguments else None
        if command == "mplint.explainRule":
            from mplint.server import commands

            rule = first.get("rule") if isinstance(first, dict) else first
            docs_url = next((c.config.docs_url for c in self.checked.values()), None)  # the project's docs-url
            page = commands.explain(rule, docs_url) if isinstance(rule, str) else None
            if page is None:
                self.rpc.fail(id_, rpc.INVALID_PARAMS, f"mplint.explainRule: unknown rule {rule!r}")
            else:
                self.rpc.respond(id_, page)
        elif command == "mplint.applyAutofix":
            uri = first.get("uri") if isinstance(first, dict) else first
            if not isinstance(uri, str) or self.workspace.buffer(self.workspace.key(uri)) is None:
                self.rpc.fail(id_, rpc.INVALID_PARAMS, f"mplint.applyAutofix: no open document {uri!r}")
                return
            self.later(lambda: self.apply_autofix(uri, id_), id_)
        else:
            self.rpc.fail(id_, rpc.INVALID_PARAMS, f"unknown command {command!r}")

    def apply_autofix(self, uri: str, id_) -> None:
        """Every safe fix of the document (of the whole notebook for a notebook or a cell), sent to the client as
        ``workspace/applyEdit``; the command is answered once the client has answered that (with ``null``)."""
        from mplint.server import actions
        from mplint.server.documents import project_folder

        key = self.workspace.key(uri)
        with self.lock:
            buffer = self.workspace.buffer(key)
        if buffer is None:
            self.rpc.respond(id_, None)
            return
        kind = actions.NOTEBOOK_FIX_ALL if buffer.is_notebook else actions.FIX_ALL
        folder = project_folder(buffer.path, self.workspace.folders)
        try:
            edit = actions.resolve_fix_all(
                buffer, buffer.parts[0], kind, folder, self.codec, self.settings, unsafe=False, **self.context(key)
            )
        except CheckFailed as exc:
            self.rpc.fail(id_, rpc.INTERNAL_ERROR, str(exc))
            return
        if edit is None:
            self.rpc.respond(id_, None)
            return
        self.rpc.request(
            "workspace/applyEdit",
            {"label": "mplint: apply safe fixes", "edit": edit},
            lambda answer: self.rpc.respond(id_, None),
        )


def main() -> int:
    server = Server(sys.stdin.buffer, sys.stdout.buffer)
    return server.serve()
