"""``mplint server``: a real LSP session over standard input and output (pygls' client).

Each test starts the server as editors do (``python -m mplint server``), opens a file
or a notebook, waits for the published diagnostics, asks for code actions and applies
their edits as an editor would, then checks the exact text that results.
"""

from __future__ import annotations

import asyncio
import os
import sys
from pathlib import Path

import pytest

pytest.importorskip("pygls")
from lsprotocol import types  # noqa: E402
from pygls.lsp.client import LanguageClient  # noqa: E402
from pygls.uris import from_fs_path  # noqa: E402

REPO = Path(__file__).resolve().parent.parent
TIMEOUT = 60
POLICY = 'import keras\nfrom keras import layers\n\nkeras.mixed_precision.set_global_policy("mixed_float16")\n'
MODEL = 'model = keras.Sequential([layers.Dense(64), layers.Dense(10, activation="softmax")])\n'
FIXED_MODEL = 'model = keras.Sequential([layers.Dense(64), layers.Dense(10, activation="softmax", dtype="float32")])\n'


class Editor:
    """The editor's side: a pygls client that keeps the last diagnostics published for each URI."""

    def __init__(self, root: Path):
        self.root = root
        self.client = LanguageClient("mplint-tests", "1")
        self.published: asyncio.Queue = asyncio.Queue()

        @self.client.feature(types.TEXT_DOCUMENT_PUBLISH_DIAGNOSTICS)
        def published(params: types.PublishDiagnosticsParams) -> None:
            self.published.put_nowait(params)

        @self.client.feature(types.CLIENT_REGISTER_CAPABILITY)
        def register(params: types.RegistrationParams) -> None:
            self.registered.extend(params.registrations)

        self.registered: list[types.Registration] = []
        self.logged: list[str] = []  # window/logMessage texts (the server logs what failed)

        @self.client.feature(types.WINDOW_LOG_MESSAGE)
        def logged(params: types.LogMessageParams) -> None:
            self.logged.append(params.message)

        self.refreshes = 0  # workspace/diagnostic/refresh requests from the server
        self.section: dict = {}  # what the editor answers when asked for the "mplint" settings

        @self.client.feature(types.WORKSPACE_CONFIGURATION)
        def configuration(params: types.ConfigurationParams) -> list:
            return [self.section if item.section == "mplint" else None for item in params.items]

        @self.client.feature(types.WORKSPACE_DIAGNOSTIC_REFRESH)
        def refresh(params: None) -> None:
            self.refreshes += 1

    async def start(
        self,
        pull: bool = False,
        resolve: bool = False,
        settings: dict | None = None,
        encodings: list[str] | None = None,
        configuration: bool = False,
        server: tuple[str, ...] = ("-m", "mplint", "server"),
    ) -> types.InitializeResult:
        """``pull``: the editor pulls diagnostics (LSP 3.17); ``resolve``: it resolves code actions' edits;
        ``settings``: the ``initializationOptions``; ``encodings``: the position encodings it offers;
        ``configuration``: the server may ask for its settings (``workspace/configuration``: ``self.section``);
        ``server``: the interpreter's arguments that run the server."""
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
        await self.client.start_io(sys.executable, *server, env=env, cwd=self.root)
        capabilities = types.ClientCapabilities(
            workspace=types.WorkspaceClientCapabilities(
                did_change_watched_files=types.DidChangeWatchedFilesClientCapabilities(dynamic_registration=True),
                diagnostics=types.DiagnosticWorkspaceClientCapabilities(refresh_support=True) if pull else None,
                configuration=configuration,
            ),
            text_document=types.TextDocumentClientCapabilities(
                diagnostic=types.DiagnosticClientCapabilities() if pull else None,
                code_action=types.CodeActionClientCapabilities(
                    resolve_support=types.ClientCodeActionResolveOptions(properties=["edit"])
                )
                if resolve
                else None,
            ),
            notebook_document=types.NotebookDocumentClientCapabilities(
                synchronization=types.NotebookDocumentSyncClientCapabilities()
            ),
            general=types.GeneralClientCapabilities(position_encodings=encodings) if encodings else None,
        )
        folder = types.WorkspaceFolder(from_fs_path(str(self.root)), "project")
        result = await self.client.initialize_async(
            types.InitializeParams(
                capabilities=capabilities, workspace_folders=[folder], initialization_options=settings
            )
        )
        self.client.initialized(types.InitializedParams())
        return result

    async def stop(self) -> None:
        await self.client.shutdown_async(None)
        self.client.exit(None)
        await self.client.stop()

    async def diagnostics(self, uri: str) -> list[types.Diagnostic]:
        """The next diagnostics published for ``uri``."""
        while True:
            params = await asyncio.wait_for(self.published.get(), TIMEOUT)
            if params.uri == uri:
                return list(params.diagnostics)

    def open(self, path: Path, text: str) -> str:
        uri = from_fs_path(str(path))
        self.client.text_document_did_open(
            types.DidOpenTextDocumentParams(types.TextDocumentItem(uri=uri, language_id="python", version=1, text=text))
        )
        return uri

    async def actions(self, uri: str, diagnostics, only=None) -> list[types.CodeAction]:
        whole = types.Range(types.Position(0, 0), types.Position(10_000, 0))
        return await asyncio.wait_for(
            self.client.text_document_code_action_async(
                types.CodeActionParams(
                    text_document=types.TextDocumentIdentifier(uri),
                    range=whole,
                    context=types.CodeActionContext(diagnostics=diagnostics, only=only),
                )
            ),
            TIMEOUT,
        )


def apply(text: str, text_edits: list[types.TextEdit]) -> str:
    """What an editor does with an action's edits (ASCII text: columns are characters)."""
    lines = text.splitlines(keepends=True)

    def offset(p: types.Position) -> int:
        return sum(len(line) for line in lines[: p.line]) + p.character

    for e in sorted(text_edits, key=lambda e: (e.range.start.line, e.range.start.character), reverse=True):
        text = text[: offset(e.range.start)] + e.new_text + text[offset(e.range.end) :]
    return text


def session_with(**start):
    """Run ``test(editor, root)`` against a server started with ``start`` (see ``Editor.start``) in a fresh project."""

    def decorate(test):
        def run(tmp_path):
            (tmp_path / ".mplint.yaml").write_text("{}\n")

            async def main():
                editor = Editor(tmp_path)
                editor.started = await editor.start(**start)
                try:
                    await test(editor, tmp_path)
                finally:
                    await editor.stop()

            asyncio.run(main())

        run.__name__ = test.__name__
        return run

    return decorate


session = session_with()


@session
async def test_open_diagnose_fix_and_see_it_clear(editor: Editor, root: Path):
    text = POLICY + MODEL
    uri = editor.open(root / "train.py", text)
    [d] = await editor.diagnostics(uri)
    assert (d.code, d.source, d.severity) == ("MP101", "mplint", types.DiagnosticSeverity.Error)
    assert d.range == types.Range(types.Position(4, 44), types.Position(4, 82))
    assert d.code_description == types.CodeDescription(href=(REPO / "docs" / "rules" / "MP101.md").as_uri())
    titles = {a.title: a for a in await editor.actions(uri, [d])}
    fix = titles[
        'Fix MP101: Add `dtype="float32"` to the softmax output layer, or cast the logits of a softmax call to float32.'
    ]
    assert (fix.kind, fix.is_preferred) == (types.CodeActionKind.QuickFix, True)
    fixed = apply(text, fix.edit.changes[uri])
    assert fixed == POLICY + FIXED_MODEL
    editor.client.text_document_did_change(
        types.DidChangeTextDocumentParams(
            types.VersionedTextDocumentIdentifier(uri=uri, version=2),
            [types.TextDocumentContentChangeWholeDocument(text=fixed)],
        )
    )
    assert await editor.diagnostics(uri) == []


@session
async def test_the_rule_link_follows_the_docs_url_setting(editor: Editor, root: Path):
    (root / ".mplint.yaml").write_text("docs-url: https://docs.example.org/mplint\n")
    [d] = await editor.diagnostics(editor.open(root / "train.py", POLICY + MODEL))
    assert d.code_description == types.CodeDescription(href="https://docs.example.org/mplint/rules/MP101.md")


@session
async def test_fix_all_and_a_fix_that_adds_an_import(editor: Editor, root: Path):
    text = 'from keras.backend import set_floatx\n\nset_floatx("float16")\n'
    uri = editor.open(root / "setup_policy.py", text)
    [d] = await editor.diagnostics(uri)
    assert (d.code, d.range.start) == ("MP602", types.Position(2, 0))
    [fix] = [a for a in await editor.actions(uri, [d]) if a.title.startswith("Fix MP602")]
    expected = 'from keras.backend import set_floatx\nfrom keras import mixed_precision\n\nmixed_precision.set_global_policy("mixed_float16")\n'
    assert apply(text, fix.edit.changes[uri]) == expected
    [fix_all] = await editor.actions(uri, [], only=[types.CodeActionKind.SourceFixAll])
    assert (fix_all.title, fix_all.kind) == ("Fix all mplint findings", "source.fixAll.mplint")
    assert apply(text, fix_all.edit.changes[uri]) == expected


@session
async def test_unsafe_fix_is_marked_and_noqa_suppresses(editor: Editor, root: Path):
    text = POLICY + "hidden = layers.Dense(100)\n" + MODEL
    uri = editor.open(root / "model.py", text)
    found = await editor.diagnostics(uri)
    assert [(d.code, d.range.start.line) for d in found] == [("MP301", 4), ("MP101", 5)]
    offered = {a.title: a for a in await editor.actions(uri, found[:1])}
    [unsafe] = [a for title, a in offered.items() if title.startswith("Fix MP301: ")]
    assert unsafe.title.endswith(" (unsafe: may change results)") and not unsafe.is_preferred
    assert sorted(offered) == sorted([unsafe.title, "Suppress MP301 on this line (noqa)", "Fix all mplint findings"])
    assert apply(text, unsafe.edit.changes[uri]) == POLICY + "hidden = layers.Dense(104)\n" + MODEL
    [noqa] = [a for a in await editor.actions(uri, found[1:]) if "noqa" in a.title]
    assert (
        apply(text, noqa.edit.changes[uri])
        == POLICY + "hidden = layers.Dense(100)\n" + MODEL[:-1] + "  # noqa: MP101\n"
    )


@session
async def test_configuration_change_reaches_open_files(editor: Editor, root: Path):
    uri = editor.open(root / "train.py", POLICY + MODEL)
    assert [d.code for d in await editor.diagnostics(uri)] == ["MP101"]
    [watch] = editor.registered  # the server asked to hear of configuration changes
    assert watch.method == types.WORKSPACE_DID_CHANGE_WATCHED_FILES
    assert [w["globPattern"] for w in watch.register_options["watchers"]][:2] == [
        "**/pyproject.toml",
        "**/.mplint.yaml",
    ]
    (root / ".mplint.yaml").write_text("ignore: [MP101]\n")
    editor.client.workspace_did_change_watched_files(
        types.DidChangeWatchedFilesParams(
            [types.FileEvent(from_fs_path(str(root / ".mplint.yaml")), types.FileChangeType.Changed)]
        )
    )
    assert await editor.diagnostics(uri) == []


async def _open_notebook(editor: Editor, root: Path, notebook: str, cells: list[tuple[str, str]]):
    """Open ``train.ipynb`` with ``cells`` ((name, text) each); the cells' URIs and the diagnostics pushed for each."""
    uris = {name: f"vscode-notebook-cell:{root}/train.ipynb#{name}" for name, _ in cells}
    editor.client.notebook_document_did_open(
        types.DidOpenNotebookDocumentParams(
            notebook_document=types.NotebookDocument(
                uri=notebook,
                notebook_type="jupyter-notebook",
                version=1,
                cells=[types.NotebookCell(kind=types.NotebookCellKind.Code, document=uris[name]) for name, _ in cells],
            ),
            cell_text_documents=[
                types.TextDocumentItem(uri=uris[name], language_id="python", version=1, text=text)
                for name, text in cells
            ],
        )
    )
    published = {}
    while len(published) < len(cells):
        params = await asyncio.wait_for(editor.published.get(), TIMEOUT)
        published[params.uri] = list(params.diagnostics)
    return uris, published


@session
async def test_notebook_cells_get_their_own_diagnostics_and_fixes(editor: Editor, root: Path):
    notebook = from_fs_path(str(root / "train.ipynb"))
    cells = [("cell-1", "!pip install -q keras\n" + POLICY), ("cell-2", "    " + MODEL), ("cell-3", "model.fit?")]
    uris, published = await _open_notebook(editor, root, notebook, cells)
    assert published[uris["cell-1"]] == published[uris["cell-3"]] == []
    [d] = published[uris["cell-2"]]
    assert (d.code, d.range) == ("MP101", types.Range(types.Position(0, 48), types.Position(0, 86)))
    [fix] = [a for a in await editor.actions(uris["cell-2"], [d]) if a.title.startswith("Fix MP101")]
    assert apply("    " + MODEL, fix.edit.changes[uris["cell-2"]]) == "    " + FIXED_MODEL


@session
async def test_a_finding_across_modules_carries_the_other_end(editor: Editor, root: Path):
    (root / "losses.py").write_text(
        "from keras import ops\n\n\ndef focal_loss(probs, labels):\n"
        "    return -ops.mean(labels * ops.log(probs + 1e-8))\n"
    )
    text = (
        POLICY + "from keras import ops\nfrom losses import focal_loss\n\n\nclass Head(keras.layers.Layer):\n"
        "    def call(self, x, labels):\n        self.add_loss(focal_loss(ops.sigmoid(x), labels))\n        return x\n"
    )
    uri = editor.open(root / "head.py", text)
    [d] = await editor.diagnostics(uri)
    assert d.code == "MP601"
    [other] = d.related_information
    assert (other.location.uri, other.location.range.start, other.message) == (
        from_fs_path(str((root / "losses.py").resolve())),
        types.Position(4, 0),
        "`probs + 1e-8`",
    )


def test_pulled_diagnostics_equal_the_pushed_ones_and_a_configuration_change_asks_for_a_pull(tmp_path):
    (tmp_path / ".mplint.yaml").write_text("{}\n")
    text = POLICY + "hidden = layers.Dense(100)\n" + MODEL

    async def main():
        pushing = Editor(tmp_path)
        await pushing.start()
        try:
            pushed = await pushing.diagnostics(pushing.open(tmp_path / "model.py", text))
        finally:
            await pushing.stop()
        assert [(d.code, d.range.start.line) for d in pushed] == [("MP301", 4), ("MP101", 5)]

        pulling = Editor(tmp_path)
        started = await pulling.start(pull=True)
        try:
            assert started.capabilities.diagnostic_provider == types.DiagnosticOptions(
                inter_file_dependencies=True, workspace_diagnostics=False, identifier="mplint"
            )
            uri = pulling.open(tmp_path / "model.py", text)

            def ask(previous=None):
                return asyncio.wait_for(
                    pulling.client.text_document_diagnostic_async(
                        types.DocumentDiagnosticParams(types.TextDocumentIdentifier(uri), previous_result_id=previous)
                    ),
                    TIMEOUT,
                )

            report = await ask()
            assert (report.kind, list(report.items)) == ("full", pushed)
            assert pulling.published.empty()  # a client that pulls is not pushed to as well
            again = await ask(report.result_id)
            assert (again.kind, again.result_id) == ("unchanged", report.result_id)

            (tmp_path / ".mplint.yaml").write_text("ignore: [MP101]\n")
            pulling.client.workspace_did_change_watched_files(
                types.DidChangeWatchedFilesParams(
                    [types.FileEvent(from_fs_path(str(tmp_path / ".mplint.yaml")), types.FileChangeType.Changed)]
                )
            )
            for _ in range(100):
                if pulling.refreshes:
                    break
                await asyncio.sleep(0.1)
            assert pulling.refreshes == 1
            after = await ask(report.result_id)
            assert (after.kind, [d.code for d in after.items]) == ("full", ["MP301"])
        finally:
            await pulling.stop()

    asyncio.run(main())


@session
async def test_hover_on_a_finding_names_its_rule_and_links_its_page(editor: Editor, root: Path):
    uri = editor.open(root / "train.py", POLICY + MODEL)
    [d] = await editor.diagnostics(uri)

    def hover(line, character):
        return asyncio.wait_for(
            editor.client.text_document_hover_async(
                types.HoverParams(types.TextDocumentIdentifier(uri), types.Position(line, character))
            ),
            TIMEOUT,
        )

    found = await hover(4, 60)
    page = (REPO / "docs" / "rules" / "MP101.md").as_uri()
    assert found.contents == types.MarkupContent(
        kind=types.MarkupKind.Markdown,
        value=(
            "**MP101** `float16-softmax-output`: A softmax that produces a model output computes in float16/bfloat16."
            f"\n\n{d.message}\n\n[MP101 documentation]({page})"
        ),
    )
    assert found.range == d.range
    assert await hover(0, 3) is None


@session_with(resolve=True)
async def test_actions_come_from_the_last_check_and_their_edits_on_resolve(editor: Editor, root: Path):
    text = 'from keras.backend import set_floatx\n\nset_floatx("float16")\n'
    uri = editor.open(root / "setup_policy.py", text)
    [d] = await editor.diagnostics(uri)
    offered = await editor.actions(uri, [d])
    assert [(a.title.split(":")[0], a.kind, a.edit) for a in offered] == [
        ("Fix MP602", "quickfix", None),
        ("Suppress MP602 on this line (noqa)", "quickfix", None),
        ("Fix all mplint findings", "source.fixAll.mplint", None),
    ]
    resolve = lambda action: asyncio.wait_for(editor.client.code_action_resolve_async(action), TIMEOUT)  # noqa: E731
    fixed = 'from keras.backend import set_floatx\nfrom keras import mixed_precision\n\nmixed_precision.set_global_policy("mixed_float16")\n'
    fix, noqa, fix_all = [await resolve(a) for a in offered]
    assert apply(text, fix.edit.changes[uri]) == fixed
    assert apply(text, noqa.edit.changes[uri]) == text[:-1] + "  # noqa: MP602\n"
    assert apply(text, fix_all.edit.changes[uri]) == fixed
    editor.client.text_document_did_change(
        types.DidChangeTextDocumentParams(
            types.VersionedTextDocumentIdentifier(uri=uri, version=2),
            [types.TextDocumentContentChangeWholeDocument(text="\n" + text)],
        )
    )
    stale = await resolve(offered[0])  # listed for the text before the change: its edit would land a line off
    assert stale.edit is None


# The server with every check that fixes refused: a quick fix must come from the last check alone.
NO_FIX_RUNS = (
    "-c",
    "import sys\nimport mplint.server.actions as actions\n"
    "def refused(*args, **kwargs):\n    raise AssertionError('a check ran to resolve a quick fix')\n"
    "actions.check = refused\nfrom mplint.server.app import main\nsys.exit(main())\n",
)


@session_with(resolve=True, server=NO_FIX_RUNS)
async def test_a_quick_fix_is_resolved_from_the_last_check_without_running_the_rules(editor: Editor, root: Path):
    text = '"""Policy."""\nfrom keras.backend import set_floatx\nimport os\n\nset_floatx("float16")\n'
    uri = editor.open(root / "setup_policy.py", text)
    [d] = await editor.diagnostics(uri)
    [fix] = [a for a in await editor.actions(uri, [d]) if a.title.startswith("Fix MP602")]
    resolve = lambda action: asyncio.wait_for(editor.client.code_action_resolve_async(action), TIMEOUT)  # noqa: E731
    first, again = await resolve(fix), await resolve(fix)  # placed on the first resolve, then kept with the check
    fixed = (
        '"""Policy."""\nfrom keras.backend import set_floatx\nimport os\nfrom keras import mixed_precision\n\n'
        'mixed_precision.set_global_policy("mixed_float16")\n'
    )
    assert apply(text, first.edit.changes[uri]) == apply(text, again.edit.changes[uri]) == fixed
    assert [(e.range.start.line, e.range.end.line, e.new_text) for e in first.edit.changes[uri]] == [
        (4, 4, 'mixed_precision.set_global_policy("mixed_float16")'),
        (3, 3, "from keras import mixed_precision\n"),
    ]
    editor.client.text_document_did_change(
        types.DidChangeTextDocumentParams(
            types.VersionedTextDocumentIdentifier(uri=uri, version=2),
            [types.TextDocumentContentChangeWholeDocument(text=text + "x = 1\n")],
        )
    )
    assert (await resolve(fix)).edit is None  # listed for the text before the change
    [d] = await editor.diagnostics(uri)
    [fix] = [a for a in await editor.actions(uri, [d]) if a.title.startswith("Fix MP602")]
    assert apply(text + "x = 1\n", (await resolve(fix)).edit.changes[uri]) == fixed + "x = 1\n"
    assert editor.logged == []


@session_with(resolve=True, server=NO_FIX_RUNS)
async def test_a_quick_fix_in_a_notebook_cell_adds_its_import_to_the_first_cell(editor: Editor, root: Path):
    notebook = from_fs_path(str(root / "train.ipynb"))
    cells = [
        ("cell-1", "%matplotlib inline\nfrom keras.backend import set_floatx\n"),
        ("cell-2", 'set_floatx("float16")\n'),
    ]
    uris, published = await _open_notebook(editor, root, notebook, cells)
    [d] = published[uris["cell-2"]]
    assert (d.code, d.range.start) == ("MP602", types.Position(0, 0))
    [fix] = [a for a in await editor.actions(uris["cell-2"], [d]) if a.title.startswith("Fix MP602")]
    resolved = await asyncio.wait_for(editor.client.code_action_resolve_async(fix), TIMEOUT)
    assert sorted(resolved.edit.changes) == sorted(uris.values())
    # where ``mplint --fix`` puts it: above the magic (a statement to libcst), not after the imports below it
    assert apply(cells[0][1], resolved.edit.changes[uris["cell-1"]]) == (
        "from keras import mixed_precision\n\n%matplotlib inline\nfrom keras.backend import set_floatx\n"
    )
    assert (
        apply(cells[1][1], resolved.edit.changes[uris["cell-2"]])
        == 'mixed_precision.set_global_policy("mixed_float16")\n'
    )


@session
async def test_notebook_fix_all_fixes_every_cell(editor: Editor, root: Path):
    notebook = from_fs_path(str(root / "train.ipynb"))
    second = MODEL.replace("model =", "other =")
    cells = [("cell-1", POLICY), ("cell-2", MODEL), ("cell-3", second)]
    uris, published = await _open_notebook(editor, root, notebook, cells)
    assert [[d.code for d in published[uris[name]]] for name, _ in cells] == [[], ["MP101"], ["MP101"]]
    titles = [a.title for a in await editor.actions(uris["cell-2"], published[uris["cell-2"]])]
    assert titles[1:] == [
        "Suppress MP101 on this line (noqa)",
        "Fix all mplint findings",
    ]  # no notebook-wide action unasked
    [whole] = await editor.actions(uris["cell-1"], [], only=["notebook.source.fixAll"])
    assert (whole.title, whole.kind) == ("Fix all mplint findings in the notebook", "notebook.source.fixAll.mplint")
    assert sorted(whole.edit.changes) == sorted([uris["cell-2"], uris["cell-3"]])
    assert apply(MODEL, whole.edit.changes[uris["cell-2"]]) == FIXED_MODEL
    assert apply(second, whole.edit.changes[uris["cell-3"]]) == FIXED_MODEL.replace("model =", "other =")


@session_with(settings={"mplint": {"ignore": ["MP101"]}})
async def test_editor_settings_apply_without_a_restart(editor: Editor, root: Path):
    uri = editor.open(root / "model.py", POLICY + "hidden = layers.Dense(100)\n" + MODEL)
    assert [d.code for d in await editor.diagnostics(uri)] == ["MP301"]
    editor.client.workspace_did_change_configuration(
        types.DidChangeConfigurationParams(settings={"mplint": {"select": ["MP101"]}})
    )
    assert [d.code for d in await editor.diagnostics(uri)] == ["MP101"]
    editor.client.workspace_did_change_configuration(types.DidChangeConfigurationParams(settings={"mplint": {}}))
    assert [d.code for d in await editor.diagnostics(uri)] == ["MP301", "MP101"]


@session
async def test_an_unknown_request_is_method_not_found_and_a_failing_one_gets_its_error(editor: Editor, root: Path):
    from pygls.exceptions import JsonRpcInternalError, JsonRpcMethodNotFound

    uri = editor.open(root / "train.py", POLICY + MODEL)
    with pytest.raises(JsonRpcMethodNotFound):
        await asyncio.wait_for(
            editor.client.protocol.send_request_async(
                "textDocument/completion",
                types.CompletionParams(types.TextDocumentIdentifier(uri), types.Position(0, 0)),
            ),
            TIMEOUT,
        )
    broken = types.CodeAction(title="Fix MP101", data={"action": "fix", "uri": uri})  # its diagnostic left out
    with pytest.raises(JsonRpcInternalError):  # answered on the worker: the error comes back, the editor does not wait
        await asyncio.wait_for(editor.client.code_action_resolve_async(broken), TIMEOUT)
    assert [d.code for d in await editor.diagnostics(uri)] == ["MP101"]  # and the server goes on


@session_with(encodings=["utf-8"])
async def test_columns_count_in_the_encoding_the_client_offers(editor: Editor, root: Path):
    assert editor.started.capabilities.position_encoding == "utf-8"
    line = 'model = keras.Sequential([layers.Dense(64, name="ü"), layers.Dense(10, activation="softmax")])\n'
    [d] = await editor.diagnostics(editor.open(root / "train.py", POLICY + line))
    start = len(line[: line.index("layers.Dense(10")].encode("utf-8"))  # "ü" is two bytes
    assert (d.code, d.range) == ("MP101", types.Range(types.Position(4, start), types.Position(4, start + 38)))


@session_with(configuration=True)
async def test_settings_the_server_asks_for_when_told_they_changed(editor: Editor, root: Path):
    uri = editor.open(root / "model.py", POLICY + "hidden = layers.Dense(100)\n" + MODEL)
    assert [d.code for d in await editor.diagnostics(uri)] == ["MP301", "MP101"]
    editor.section = {"ignore": ["MP3"]}
    editor.client.workspace_did_change_configuration(types.DidChangeConfigurationParams(settings=None))
    assert [d.code for d in await editor.diagnostics(uri)] == ["MP101"]


def _cli_findings(root: Path, name: str) -> list[tuple]:
    """What ``mplint NAME --format json`` run in ``root`` reports: (rule, LSP range as tuples, message) each."""
    import json
    import subprocess

    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run(
        [sys.executable, "-m", "mplint", name, "--format", "json"],
        cwd=root,
        env=env,
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
    )
    return [
        (
            d["rule"],
            (d["start"]["line"] - 1, d["start"]["column"] - 1, d["end"]["line"] - 1, d["end"]["column"] - 1),
            d["message"],
        )
        for d in json.loads(done.stdout)["diagnostics"]
    ]


def _findings(diagnostics: list[types.Diagnostic]) -> list[tuple]:
    return [
        (d.code, (d.range.start.line, d.range.start.character, d.range.end.line, d.range.end.character), d.message)
        for d in diagnostics
    ]


@session
async def test_an_edit_that_sets_a_policy_updates_the_other_open_files_as_the_command_line_would(
    editor: Editor, root: Path
):
    (root / "policy.py").write_text("import keras\n")
    model = 'import policy\nimport keras\n\nmodel = keras.Sequential([keras.layers.Dense(10, activation="softmax")])\n'
    (root / "model.py").write_text(model)
    policy_uri = editor.open(root / "policy.py", "import keras\n")
    model_uri = editor.open(root / "model.py", model)
    assert await editor.diagnostics(model_uri) == []  # no policy yet: float32 everywhere
    mixed = 'import keras\nkeras.mixed_precision.set_global_policy("mixed_float16")\n'
    editor.client.text_document_did_change(
        types.DidChangeTextDocumentParams(
            types.VersionedTextDocumentIdentifier(uri=policy_uri, version=2),
            [types.TextDocumentContentChangeWholeDocument(text=mixed)],
        )
    )
    found = _findings(await editor.diagnostics(model_uri))  # checked again, the unsaved policy.py read
    (root / "policy.py").write_text(mixed)  # what the command line sees once it is saved
    assert found == _cli_findings(root, "model.py")
    assert [(rule, where) for rule, where, _ in found] == [("MP101", (3, 26, 3, 70))]
    assert "mixed_float16 set at policy.py:2" in found[0][2]
    (root / "policy.py").write_text("import keras\n")  # closed without saving: the file on disk counts again
    editor.client.text_document_did_close(types.DidCloseTextDocumentParams(types.TextDocumentIdentifier(policy_uri)))
    assert await editor.diagnostics(model_uri) == []
    assert editor.logged == []


@session_with(pull=True)
async def test_a_pulled_check_that_changes_the_facts_asks_the_client_to_pull_again(editor: Editor, root: Path):
    (root / "policy.py").write_text("import keras\n")
    model = 'import policy\nimport keras\n\nmodel = keras.Sequential([keras.layers.Dense(10, activation="softmax")])\n'
    (root / "model.py").write_text(model)
    policy_uri = editor.open(root / "policy.py", "import keras\n")
    model_uri = editor.open(root / "model.py", model)

    def pull(uri, previous=None):
        return asyncio.wait_for(
            editor.client.text_document_diagnostic_async(
                types.DocumentDiagnosticParams(types.TextDocumentIdentifier(uri), previous_result_id=previous)
            ),
            TIMEOUT,
        )

    before = await pull(model_uri)
    assert (before.kind, list(before.items)) == ("full", [])  # no policy yet: float32 everywhere
    assert list((await pull(policy_uri)).items) == []
    assert editor.refreshes == 0  # nothing changed the facts
    mixed = 'import keras\nkeras.mixed_precision.set_global_policy("mixed_float16")\n'
    editor.client.text_document_did_change(
        types.DidChangeTextDocumentParams(
            types.VersionedTextDocumentIdentifier(uri=policy_uri, version=2),
            [types.TextDocumentContentChangeWholeDocument(text=mixed)],
        )
    )
    assert list((await pull(policy_uri)).items) == []  # its check finds the project's policy changed
    for _ in range(100):
        if editor.refreshes:
            break
        await asyncio.sleep(0.1)
    assert editor.refreshes == 1
    after = await pull(model_uri, before.result_id)  # the client pulls again, as asked
    assert after.kind == "full" and after.result_id != before.result_id
    assert [(rule, where) for rule, where, _ in _findings(after.items)] == [("MP101", (3, 26, 3, 70))]
    assert editor.published.empty() and editor.logged == []


def _answer_edits(editor: Editor) -> list[types.WorkspaceEdit]:
    """The editor applies every ``workspace/applyEdit`` the server asks for; the edits asked, in order."""
    asked: list[types.WorkspaceEdit] = []

    @editor.client.feature(types.WORKSPACE_APPLY_EDIT)
    def apply_edit(params: types.ApplyWorkspaceEditParams) -> types.ApplyWorkspaceEditResult:
        asked.append(params.edit)
        return types.ApplyWorkspaceEditResult(applied=True)

    return asked


@session
async def test_the_apply_autofix_command_sends_the_safe_fixes_as_a_workspace_edit(editor: Editor, root: Path):
    assert list(editor.started.capabilities.execute_command_provider.commands) == [
        "mplint.applyAutofix",
        "mplint.explainRule",
    ]
    asked = _answer_edits(editor)
    text = POLICY + "hidden = layers.Dense(100)\n" + MODEL
    uri = editor.open(root / "model.py", text)
    assert [d.code for d in await editor.diagnostics(uri)] == ["MP301", "MP101"]  # MP301's fix is unsafe
    answer = await asyncio.wait_for(
        editor.client.workspace_execute_command_async(
            types.ExecuteCommandParams(command="mplint.applyAutofix", arguments=[{"uri": uri, "version": 1}])
        ),
        TIMEOUT,
    )
    assert answer is None
    [edit] = asked
    assert apply(text, edit.changes[uri]) == POLICY + "hidden = layers.Dense(100)\n" + FIXED_MODEL
    clean = editor.open(root / "clean.py", "import keras\n")
    await editor.diagnostics(clean)
    await asyncio.wait_for(
        editor.client.workspace_execute_command_async(
            types.ExecuteCommandParams(command="mplint.applyAutofix", arguments=[{"uri": clean}])
        ),
        TIMEOUT,
    )
    assert len(asked) == 1  # nothing to fix: no edit asked for
    assert editor.logged == []


@session
async def test_the_explain_rule_command_answers_the_rule_page(editor: Editor, root: Path):
    from mplint.catalog import load_catalog
    from mplint.rule_docs import page

    def ask(*arguments):
        return asyncio.wait_for(
            editor.client.workspace_execute_command_async(
                types.ExecuteCommandParams(command="mplint.explainRule", arguments=list(arguments))
            ),
            TIMEOUT,
        )

    answer = await ask("MP101")
    assert answer == {
        "rule": "MP101",
        "name": "float16-softmax-output",
        "url": (REPO / "docs" / "rules" / "MP101.md").as_uri(),
        "markdown": page(load_catalog()["MP101"]),
    }
    assert (await ask({"rule": "float16-softmax-output"}))["rule"] == "MP101"
    with pytest.raises(Exception, match="unknown rule 'MP999'"):
        await ask("MP999")
    with pytest.raises(Exception, match="unknown command 'mplint.nothing'"):
        await asyncio.wait_for(
            editor.client.workspace_execute_command_async(types.ExecuteCommandParams(command="mplint.nothing")), TIMEOUT
        )


# Each check's answer is recorded with whether the checker (libcst) had been imported by then.
RECORDING_SERVER = """
import sys
from mplint.server import app

ensure = app.Server.ensure


def recorded(self, key):
    checked = ensure(self, key)
    with open(sys.argv[1], "a") as record:
        record.write(f"{'libcst' in sys.modules}\\n")
    return checked


app.Server.ensure = recorded
from mplint.cli import main

sys.exit(main(["server"]))
"""


def _layers_project(root: Path) -> Path:
    """A project (its own configuration) whose layers.py has one MP101 finding."""
    (root / ".mplint.yaml").write_text("{}\n")
    layers = root / "layers.py"
    layers.write_text(POLICY + MODEL)
    return layers


async def _first_findings(path: Path, server: str, record: Path, wait: float = 0.0) -> list[tuple]:
    """One editor session on ``path``'s folder, the server run by the script ``server`` (given ``record``):
    the findings first published for ``path``, opened ``wait`` seconds after the server was initialized."""
    editor = Editor(path.parent)
    await editor.start(server=("-c", server, str(record)))
    try:
        await asyncio.sleep(wait)
        return _findings(await editor.diagnostics(editor.open(path, path.read_text())))
    finally:
        await editor.stop()


def test_a_server_opened_again_answers_an_unchanged_file_from_what_the_last_one_kept(tmp_path):
    """The first server checks (importing libcst), and on shutdown keeps its results in the project's cache; the
    next server opened on the project answers the unchanged file from there before importing the checker, with
    the same findings. A file changed on disk since is checked again."""
    layers = _layers_project(tmp_path)
    record = tmp_path.parent / f"{tmp_path.name}-checks.txt"

    def session() -> list[tuple]:
        return asyncio.run(_first_findings(layers, RECORDING_SERVER, record))

    first = session()
    assert [f[0] for f in first] == ["MP101"]
    assert sorted(p.name for p in (tmp_path / ".mplint_cache" / "v2").glob("results-*.json")) != []
    again = session()
    assert again == first == _cli_findings(tmp_path, "layers.py")
    layers.write_text(POLICY + FIXED_MODEL)
    assert session() == []
    assert record.read_text().split() == ["True", "False", "True"]


FAILING_PERSIST_SERVER = """
import sys
from mplint.project import cache


def broken():
    raise RuntimeError("disk on fire")


cache.persist_shared = broken
from mplint.cli import main

sys.exit(main(["server"]))
"""


def test_shutdown_is_answered_when_keeping_the_results_fails(tmp_path):
    (tmp_path / ".mplint.yaml").write_text("{}\n")
    layers = tmp_path / "layers.py"
    layers.write_text(POLICY + MODEL)

    async def session() -> list[str]:
        editor = Editor(tmp_path)
        await editor.start(server=("-c", FAILING_PERSIST_SERVER))
        await editor.diagnostics(editor.open(layers, layers.read_text()))
        await asyncio.wait_for(editor.stop(), TIMEOUT)  # shutdown answered, exit taken
        return editor.logged

    logged = asyncio.run(session())
    assert "mplint: keeping the checks' results in .mplint_cache/ failed: RuntimeError('disk on fire')" in logged


def test_results_are_kept_once_the_editor_is_idle_after_a_save_not_after_typing(tmp_path):
    (tmp_path / ".mplint.yaml").write_text("{}\n")
    layers = tmp_path / "layers.py"
    layers.write_text(POLICY + MODEL)
    kept = tmp_path / ".mplint_cache"

    async def session() -> tuple[bool, bool]:
        editor = Editor(tmp_path)
        await editor.start()
        try:
            uri = editor.open(layers, layers.read_text())
            await editor.diagnostics(uri)
            await asyncio.sleep(1.5)  # past the server's idle delay: typing alone writes nothing
            before_save = kept.exists()
            editor.client.text_document_did_save(types.DidSaveTextDocumentParams(types.TextDocumentIdentifier(uri)))
            await editor.diagnostics(uri)  # the open files are checked again after a save
            for _ in range(50):  # then, once idle, the results are kept
                if list(kept.glob("v2/results-*.json")):
                    break
                await asyncio.sleep(0.1)
            return before_save, bool(list(kept.glob("v2/results-*.json")))
        finally:
            await editor.stop()

    assert asyncio.run(session()) == (False, True)


# Each check records, as it starts, whether the checker (libcst and the rules) had been imported by then.
CHECK_START_RECORDING_SERVER = """
import sys
from mplint.server import app

ensure = app.Server.ensure


def recorded(self, key):
    if self.fresh(key) is None:
        with open(sys.argv[1], "a") as record:
            record.write(f"{'libcst' in sys.modules and 'mplint.checks.mp101_float16_softmax_output' in sys.modules}\\n")
    return ensure(self, key)


app.Server.ensure = recorded
from mplint.cli import main

sys.exit(main(["server"]))
"""


def test_a_file_opened_after_the_server_started_finds_the_checker_imported(tmp_path):
    """The server's warm-up leaves the checker imported (reading the project's facts loads the rules, whose
    summary kinds the facts need, and the warm-up goes on to libcst's parser), not once the editor is idle: a
    file of a project never checked, opened while the editor was still starting (here 0.8 s after
    ``initialize``, before a second of quiet), is checked without waiting for libcst and the rules."""
    layers = _layers_project(tmp_path)
    record = tmp_path.parent / f"{tmp_path.name}-check-starts.txt"
    findings = asyncio.run(_first_findings(layers, CHECK_START_RECORDING_SERVER, record, wait=0.8))
    assert findings == _cli_findings(tmp_path, "layers.py")
    assert record.read_text().split() == ["True"]
