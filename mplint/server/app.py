"""``mplint server``: the language server (LSP over standard input and output, with pygls).

Diagnostics are published when a Python file or a notebook is opened, changed (after a
short pause in typing) and saved. Configuration is read afresh by every check, so a
change to pyproject.toml or .mplint.yaml (``workspace/didChangeWatchedFiles``) only has
to re-check the open documents; so does saving any file, whose policy may govern others.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from urllib.parse import unquote

from lsprotocol import types
from pygls.lsp.server import LanguageServer
from pygls.uris import to_fs_path

from mplint import __version__
from mplint.server import actions, edits
from mplint.server.documents import Buffer, CheckFailed, Part, check, check_with_config, project_folder

DEBOUNCE_S = 0.3  # a change is checked once typing pauses this long
WATCHED = ("**/pyproject.toml", "**/.mplint.yaml", "**/.mplint.yml", "**/setup.cfg", "**/setup.py", "**/requirements*.txt")


class MplintServer(LanguageServer):
    def __init__(self):
        super().__init__(
            "mplint", __version__,
            text_document_sync_kind=types.TextDocumentSyncKind.Incremental,
            notebook_document_sync=types.NotebookDocumentSyncOptions(
                notebook_selector=[types.NotebookDocumentFilterWithCells(
                    cells=[types.NotebookCellLanguage(language="python")], notebook="*")],
                save=True,
            ),
        )
        self.pending: dict[str, asyncio.TimerHandle] = {}
        self.published: dict[str, set[str]] = {}  # buffer key -> URIs that got diagnostics

    # -- buffers -------------------------------------------------------------------------------

    def buffer(self, uri: str) -> Buffer | None:
        """The file or notebook an editor URI belongs to (a notebook cell's URI gives its notebook)."""
        notebook = self.workspace.get_notebook_document(cell_uri=uri) or self.workspace.get_notebook_document(notebook_uri=uri)
        if notebook is not None:
            parts = []
            for index, cell in enumerate(notebook.cells, start=1):
                document = self.workspace.get_text_document(cell.document)
                python = cell.kind == types.NotebookCellKind.Code and document.language_id in (None, "python")
                parts.append(Part(cell.document, document.source, index, python))
            return Buffer(self.path(notebook.uri, ".ipynb"), tuple(parts))
        if unquote(uri) not in self.workspace.text_documents:
            return None
        document = self.workspace.get_text_document(uri)
        return Buffer(self.path(uri, ".py"), (Part(uri, document.source),))

    def path(self, uri: str, suffix: str) -> Path:
        """The file a URI names; an unsaved buffer (``untitled:``) stands for a new file in the workspace."""
        path = to_fs_path(uri) if uri.startswith("file:") else None
        if path is None:
            root = self.workspace.root_path or "."
            return Path(root).resolve() / f"untitled{suffix}"
        return Path(path)

    def key(self, uri: str) -> str:
        notebook = self.workspace.get_notebook_document(cell_uri=uri)
        return notebook.uri if notebook is not None else uri

    def folder(self, buffer: Buffer) -> Path:
        folders = [Path(to_fs_path(f.uri)) for f in self.workspace.folders.values()]
        if not folders and self.workspace.root_path:
            folders = [Path(self.workspace.root_path)]
        return project_folder(buffer.path, folders)

    # -- diagnostics ---------------------------------------------------------------------------

    def lint(self, uri: str) -> None:
        key = self.key(uri)
        self.pending.pop(key, None)
        buffer = self.buffer(key)
        if buffer is None:
            return
        try:
            result, config = check_with_config(buffer, self.folder(buffer))
        except CheckFailed as exc:
            self.window_show_message(types.ShowMessageParams(types.MessageType.Error, f"mplint: {exc}"))
            return
        found: dict[str, list[types.Diagnostic]] = {p.uri: [] for p in buffer.parts}
        for d in result.diagnostics:
            part = buffer.part_of(d)
            if part is not None and not d.fixed:
                found[part.uri].append(edits.to_lsp(self.workspace.position_codec, part.text, d, config.docs_url))
        for gone in self.published.get(key, set()) - set(found):
            found[gone] = []
        for part_uri, diagnostics in found.items():
            self.text_document_publish_diagnostics(types.PublishDiagnosticsParams(part_uri, diagnostics))
        self.published[key] = {u for u, ds in found.items() if ds}

    def lint_later(self, uri: str) -> None:
        key = self.key(uri)
        if key in self.pending:
            self.pending[key].cancel()
        self.pending[key] = asyncio.get_running_loop().call_later(DEBOUNCE_S, self.lint, key)

    def lint_open(self) -> None:
        for uri in {*self.workspace.notebook_documents, *(u for u in self.workspace.text_documents
                                                          if self.workspace.get_notebook_document(cell_uri=u) is None)}:
            self.lint(uri)

    def forget(self, key: str) -> None:
        if key in self.pending:
            self.pending.pop(key).cancel()
        for uri in self.published.pop(key, set()):
            self.text_document_publish_diagnostics(types.PublishDiagnosticsParams(uri, []))

    # -- code actions --------------------------------------------------------------------------

    def code_actions(self, params: types.CodeActionParams) -> list[types.CodeAction]:
        uri = params.text_document.uri
        buffer = self.buffer(self.key(uri))
        if buffer is None:
            return []
        part = next((p for p in buffer.parts if p.uri == uri), None)
        if part is None or not part.python:
            return []
        folder, codec, only = self.folder(buffer), self.workspace.position_codec, params.context.only
        found: list[types.CodeAction | None] = []
        try:
            if actions.wants(only, types.CodeActionKind.QuickFix):
                mine = [d for d in params.context.diagnostics if d.source == "mplint"]
                result = check(buffer, folder) if mine else None
                for d in mine:
                    found.append(actions.fix_action(buffer, part, d, folder, codec))
                    found.append(actions.noqa_action(buffer, part, d, result, codec))
            if actions.wants(only, actions.FIX_ALL):
                found.append(actions.fix_all_action(buffer, folder, codec, part))
        except CheckFailed:
            return []
        return [a for a in found if a is not None]


SERVER = MplintServer()


@SERVER.feature(types.INITIALIZED)
async def _initialized(server: MplintServer, params: types.InitializedParams) -> None:
    watched = server.client_capabilities.workspace and server.client_capabilities.workspace.did_change_watched_files
    if watched and watched.dynamic_registration:
        options = types.DidChangeWatchedFilesRegistrationOptions(
            watchers=[types.FileSystemWatcher(glob_pattern=pattern) for pattern in WATCHED])
        await server.client_register_capability_async(types.RegistrationParams(
            registrations=[types.Registration("mplint-config", types.WORKSPACE_DID_CHANGE_WATCHED_FILES, options)]))


@SERVER.feature(types.TEXT_DOCUMENT_DID_OPEN)
def _did_open(server: MplintServer, params: types.DidOpenTextDocumentParams) -> None:
    server.lint(params.text_document.uri)


@SERVER.feature(types.TEXT_DOCUMENT_DID_CHANGE)
def _did_change(server: MplintServer, params: types.DidChangeTextDocumentParams) -> None:
    server.lint_later(params.text_document.uri)


@SERVER.feature(types.TEXT_DOCUMENT_DID_SAVE)
def _did_save(server: MplintServer, params: types.DidSaveTextDocumentParams) -> None:
    server.lint_open()  # a saved file's policy may govern the other open files


@SERVER.feature(types.TEXT_DOCUMENT_DID_CLOSE)
def _did_close(server: MplintServer, params: types.DidCloseTextDocumentParams) -> None:
    server.forget(params.text_document.uri)


@SERVER.feature(types.NOTEBOOK_DOCUMENT_DID_OPEN)
def _notebook_open(server: MplintServer, params: types.DidOpenNotebookDocumentParams) -> None:
    server.lint(params.notebook_document.uri)


@SERVER.feature(types.NOTEBOOK_DOCUMENT_DID_CHANGE)
def _notebook_change(server: MplintServer, params: types.DidChangeNotebookDocumentParams) -> None:
    server.lint_later(params.notebook_document.uri)


@SERVER.feature(types.NOTEBOOK_DOCUMENT_DID_SAVE)
def _notebook_save(server: MplintServer, params: types.DidSaveNotebookDocumentParams) -> None:
    server.lint_open()


@SERVER.feature(types.NOTEBOOK_DOCUMENT_DID_CLOSE)
def _notebook_close(server: MplintServer, params: types.DidCloseNotebookDocumentParams) -> None:
    server.forget(params.notebook_document.uri)


@SERVER.feature(types.WORKSPACE_DID_CHANGE_WATCHED_FILES)
def _watched_changed(server: MplintServer, params: types.DidChangeWatchedFilesParams) -> None:
    server.lint_open()  # every check reads the configuration afresh


@SERVER.feature(types.TEXT_DOCUMENT_CODE_ACTION, types.CodeActionOptions(
    code_action_kinds=[types.CodeActionKind.QuickFix, actions.FIX_ALL]))
def _code_action(server: MplintServer, params: types.CodeActionParams) -> list[types.CodeAction]:
    return server.code_actions(params)


def main() -> int:
    SERVER.start_io()
    return 0
