"""The editor's open documents, kept in step by LSP text and notebook synchronization.

A notebook is its list of cells (kind and the URI of each cell's text document); the cells'
texts live with the other text documents. Every method is called with the server's lock held.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import unquote, urlparse

from mplint.server.documents import Buffer, Part
from mplint.server.positions import Codec

CODE_CELL = 2  # LSP's NotebookCellKind.Code


@dataclass
class TextDocument:
    text: str
    language: str | None = "python"


@dataclass
class Notebook:
    cells: list[tuple[int, str]] = field(default_factory=list)  # (kind, cell document URI)


def fs_path(uri: str) -> Path | None:
    parsed = urlparse(uri)
    if parsed.scheme != "file":
        return None
    path = unquote(parsed.path)
    if len(path) > 2 and path[0] == "/" and path[2] == ":":  # file:///C:/... on Windows
        path = path[1:]
    return Path(path)


class Workspace:
    def __init__(self, codec: Codec):
        self.codec = codec
        self.texts: dict[str, TextDocument] = {}
        self.notebooks: dict[str, Notebook] = {}
        self.owner: dict[str, str] = {}  # cell URI -> notebook URI
        self.folders: list[Path] = []

    # -- text documents ------------------------------------------------------------------------

    def open_text(self, item: dict) -> None:
        self.texts[item["uri"]] = TextDocument(item["text"], item.get("languageId"))

    def change_text(self, uri: str, changes: list[dict]) -> None:
        document = self.texts.get(uri)
        if document is not None:
            for change in changes:
                document.text = self.codec.apply(document.text, change)

    def close_text(self, uri: str) -> None:
        self.texts.pop(uri, None)

    # -- notebooks -----------------------------------------------------------------------------

    def open_notebook(self, notebook: dict, cell_documents: list[dict]) -> None:
        for item in cell_documents:
            self.open_text(item)
        self.notebooks[notebook["uri"]] = Notebook([(c["kind"], c["document"]) for c in notebook.get("cells", [])])
        for _, cell in self.notebooks[notebook["uri"]].cells:
            self.owner[cell] = notebook["uri"]

    def change_notebook(self, uri: str, change: dict) -> None:
        notebook = self.notebooks.get(uri)
        if notebook is None:
            return
        structure = (change.get("cells") or {}).get("structure")
        if structure:
            array = structure["array"]
            start, count = array["start"], array["deleteCount"]
            notebook.cells[start : start + count] = [(c["kind"], c["document"]) for c in array.get("cells") or []]
            for item in structure.get("didOpen") or []:
                self.open_text(item)
            for closed in structure.get("didClose") or []:
                self.close_text(closed["uri"])
                self.owner.pop(closed["uri"], None)
            for _, cell in notebook.cells:
                self.owner[cell] = uri
        for data in (change.get("cells") or {}).get("data") or []:
            notebook.cells = [
                (data["kind"], cell) if cell == data["document"] else (kind, cell) for kind, cell in notebook.cells
            ]
        for content in (change.get("cells") or {}).get("textContent") or []:
            self.change_text(content["document"]["uri"], content["changes"])

    def close_notebook(self, uri: str) -> None:
        notebook = self.notebooks.pop(uri, None)
        for _, cell in notebook.cells if notebook else ():
            self.close_text(cell)
            self.owner.pop(cell, None)

    # -- what gets checked ---------------------------------------------------------------------

    def key(self, uri: str) -> str:
        """The URI a document is checked under: its notebook's for a cell, its own otherwise."""
        return self.owner.get(uri, uri)

    def keys(self) -> list[str]:
        return [*self.notebooks, *(u for u in self.texts if u not in self.owner)]

    def buffer(self, key: str) -> Buffer | None:
        """A snapshot of the file or notebook ``key`` names (``None`` once it is closed)."""
        notebook = self.notebooks.get(key)
        if notebook is not None:
            parts = []
            for index, (kind, cell) in enumerate(notebook.cells, start=1):
                document = self.texts.get(cell) or TextDocument("")
                python = kind == CODE_CELL and document.language in (None, "python")
                parts.append(Part(cell, document.text, index, python))
            return Buffer(self.path(key, ".ipynb"), tuple(parts))
        document = self.texts.get(key)
        if document is None:
            return None
        return Buffer(self.path(key, ".py"), (Part(key, document.text),))

    def path(self, uri: str, suffix: str) -> Path:
        """The file a URI names; an unsaved buffer (``untitled:``) stands for a new file in the workspace."""
        path = fs_path(uri)
        if path is None:
            root = self.folders[0] if self.folders else Path(".")
            return root.resolve() / f"untitled{suffix}"
        return path
