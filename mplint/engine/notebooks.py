"""Jupyter notebooks: code cells as one virtual module, findings mapped back to cells.

The code cells are joined into one module (so a policy set in cell 1 governs a
model built in cell 3), each preceded by a marker comment line. IPython magics
and shell lines are masked by ``pass`` placeholders, one per line, so every
other line keeps its position and the module parses. Fixes are written back by
replacing only the changed cells' ``source`` values in the original JSON text:
outputs, metadata, key order and formatting stay byte-identical.
"""

from __future__ import annotations

import bisect
import json
import re
from dataclasses import dataclass, field, replace
from json.decoder import scanstring

from mplint.catalog import load_catalog
from mplint.diagnostics import Diagnostic, Edit, FileResult

SUFFIX = ".ipynb"
PARSE_ERROR = "MP000"
FIX_REVERTED = "MP001"

_MARKER = "# __mplint_cell_{}__"
_MARKER_LINE = re.compile(r"^# __mplint_cell_(\d+)__\n", re.M)
_PLACEHOLDER = "pass  # __ipython_magic_{}__"
_PLACEHOLDER_LINE = re.compile(r"^[ \t]*pass  # __ipython_magic_(\d+)__$")
# `%time x`, `!ls`, `?obj`, `files = !ls`, `t = %timeit -o f()`
_MAGIC_LINE = re.compile(r"^[ \t]*(?:[%!?]|[\w.]+[ \t]*=[ \t]*[%!])")
# `obj?`, `obj.attr??`
_HELP_LINE = re.compile(r"^[ \t]*[\w.]+\?{1,2}[ \t]*$")
# cell magics whose body is Python: the first line is masked, the body checked
_PYTHON_CELL_MAGICS = {"time", "timeit", "capture", "prun", "debug"}
_WS = re.compile(r"[ \t\n\r]*")


def is_notebook(path) -> bool:
    return str(path).endswith(SUFFIX)


@dataclass
class Cell:
    index: int  # 1-based position in the notebook's cell list (markdown cells counted)
    text: str  # the source as one string
    masked: str  # Python text: magics replaced by placeholders, ends with a newline


@dataclass
class Notebook:
    raw: str  # the decoded JSON text
    bom: str
    cells: list[Cell]
    magics: list[str]  # original text of each masked line, by placeholder number
    virtual: str  # the module the rules see
    starts: list[int] = field(default_factory=list)  # virtual line of each cell's marker

    def locate(self, line: int) -> tuple[int, int]:
        """(cell index, line in that cell) of a virtual module line."""
        i = max(bisect.bisect_right(self.starts, line) - 1, 0)
        return self.cells[i].index, max(line - self.starts[i], 1)

    def virtual_line(self, cell: int, line: int) -> int:
        i = next(n for n, c in enumerate(self.cells) if c.index == cell)
        return self.starts[i] + line

    def cell_texts(self, virtual: str) -> dict[int, str] | None:
        """Cell index -> source text for a (fixed) virtual module; None when the cell markers were lost."""
        parts = _MARKER_LINE.split(virtual)
        found = [int(i) for i in parts[1::2]]
        if found != [c.index for c in self.cells]:
            return None
        bodies = parts[2::2]
        bodies[0] = parts[0] + bodies[0]
        texts = {}
        for cell, body in zip(self.cells, bodies):
            lines = [self._restore(line) for line in body.split("\n")]
            text = "\n".join(lines)
            if not cell.text.endswith("\n") and text.endswith("\n"):
                text = text[:-1]
            texts[cell.index] = text
        return texts

    def _restore(self, line: str) -> str:
        m = _PLACEHOLDER_LINE.match(line)
        return self.magics[int(m.group(1))] if m else line

    def rewrite(self, virtual: str) -> bytes | None:
        """The notebook's bytes with the cells of ``virtual`` written back; None if unchanged or unmappable."""
        texts = self.cell_texts(virtual)
        if texts is None:
            return None
        changed = {c.index: texts[c.index] for c in self.cells if texts[c.index] != c.text}
        if not changed:
            return None
        return (self.bom + _splice_sources(self.raw, changed)).encode("utf-8")


def _mask_cell(text: str, magics: list[str]) -> str | None:
    """Python text of a code cell with magics masked; None for a cell that is not Python (``%%bash``)."""
    lines = text.split("\n")
    if lines[0].startswith("%%"):
        name = lines[0][2:].split(maxsplit=1)[0] if lines[0][2:].strip() else ""
        if name not in _PYTHON_CELL_MAGICS:
            return None
    out = []
    continued = False
    for n, line in enumerate(lines):
        stripped = line.rstrip("\r")
        if continued or (n == 0 and line.startswith("%%")) or _MAGIC_LINE.match(line) or _HELP_LINE.match(line):
            indent = line[: len(line) - len(line.lstrip(" \t"))]
            out.append(indent + _PLACEHOLDER.format(len(magics)))
            magics.append(line)
            continued = stripped.endswith("\\")
        else:
            out.append(line)
    masked = "\n".join(out)
    return masked if masked.endswith("\n") else masked + "\n"


def _source_text(source) -> str | None:
    if isinstance(source, str):
        return source
    if isinstance(source, list) and all(isinstance(s, str) for s in source):
        return "".join(source)
    return None


def load(data: bytes) -> Notebook | tuple[str, int, int]:
    """The notebook, or (message, line, column) saying why it cannot be read."""
    bom = ""
    try:
        raw = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        return f"notebook is not valid UTF-8: {exc}", 1, 1
    if raw.startswith("\ufeff"):
        bom, raw = "\ufeff", raw[1:]
    try:
        doc = json.loads(raw)
    except json.JSONDecodeError as exc:
        return f"notebook is not valid JSON: {exc.msg}", exc.lineno, exc.colno
    except RecursionError:
        return "notebook JSON is nested too deeply", 1, 1
    if not isinstance(doc, dict) or not isinstance(doc.get("cells"), list):
        return "notebook has no 'cells' list (only nbformat 4 notebooks are supported)", 1, 1
    language = (doc.get("metadata") or {}).get("language_info", {}) if isinstance(doc.get("metadata"), dict) else {}
    is_python = not isinstance(language, dict) or language.get("name", "python") == "python"
    cells: list[Cell] = []
    magics: list[str] = []
    for index, cell in enumerate(doc["cells"], start=1):
        if not isinstance(cell, dict):
            return f"cell {index} is not a JSON object", 1, 1
        text = _source_text(cell.get("source", ""))
        if text is None:
            return f"cell {index}: 'source' must be a string or a list of strings", 1, 1
        if cell.get("cell_type") != "code" or not is_python:
            continue
        masked = _mask_cell(text, magics)
        if masked is not None:
            cells.append(Cell(index, text, masked))
    parts, starts, line = [], [], 1
    for cell in cells:
        starts.append(line)
        parts.append(_MARKER.format(cell.index) + "\n" + cell.masked)
        line += 1 + cell.masked.count("\n")
    return Notebook(raw, bom, cells, magics, "".join(parts), starts)


# -- write-back ---------------------------------------------------------------

def _ws(raw: str, i: int) -> int:
    return _WS.match(raw, i).end()


def _members(raw: str, i: int):
    """(key, key_start, value_start, value_end) of each member of the JSON object at ``raw[i] == '{'``."""
    decoder = json.JSONDecoder()
    i = _ws(raw, i + 1)
    while raw[i] != "}":
        key, after = scanstring(raw, i + 1)
        value = _ws(raw, _ws(raw, after) + 1)  # past the ':'
        _, end = decoder.raw_decode(raw, value)
        yield key, i, value, end
        i = _ws(raw, end)
        if raw[i] == ",":
            i = _ws(raw, i + 1)


def _elements(raw: str, i: int):
    """(start, end) of each element of the JSON array at ``raw[i] == '['``."""
    decoder = json.JSONDecoder()
    i = _ws(raw, i + 1)
    while raw[i] != "]":
        _, end = decoder.raw_decode(raw, i)
        yield i, end
        i = _ws(raw, end)
        if raw[i] == ",":
            i = _ws(raw, i + 1)


def _format_source(text: str, was_list: bool, original: str, raw: str, key_start: int) -> str:
    """``text`` as a JSON value laid out like the value it replaces (json.dumps' layout at that depth)."""
    ensure_ascii = raw.isascii() and "\\u" in raw
    value = text.splitlines(keepends=True) if was_list else text
    if "\n" not in raw:
        separators = (",", ":") if '":' in raw and '": ' not in raw else (", ", ": ")
        return json.dumps(value, ensure_ascii=ensure_ascii, separators=separators)
    line_start = raw.rfind("\n", 0, key_start) + 1
    key_indent = raw[line_start:key_start]
    step = re.match(r"\{\r?\n([ \t]*)", raw)
    indent = step.group(1) if step else " "
    inner = re.match(r"\[\r?\n([ \t]*)", original)
    if inner and inner.group(1).startswith(key_indent):
        indent = inner.group(1)[len(key_indent):]
    dumped = json.dumps(value, indent=indent, ensure_ascii=ensure_ascii)
    newline = "\r\n" if "\r\n" in raw else "\n"
    return dumped.replace("\n", newline + key_indent)


def _splice_sources(raw: str, changed: dict[int, str]) -> str:
    """``raw`` with the ``source`` value of each changed cell (1-based index) replaced, nothing else touched."""
    spans = []
    for key, _, value, _ in _members(raw, _ws(raw, 0)):
        if key != "cells":
            continue
        spans = []
        for index, (start, _) in enumerate(_elements(raw, value), start=1):
            for name, key_start, v_start, v_end in _members(raw, start):
                if name == "source" and index in changed:
                    spans.append((key_start, v_start, v_end, index))
    out, last = [], 0
    for key_start, v_start, v_end, index in spans:
        original = raw[v_start:v_end]
        out += [raw[last:v_start], _format_source(changed[index], original.startswith("["), original, raw, key_start)]
        last = v_end
    out.append(raw[last:])
    return "".join(out)


# -- checking -----------------------------------------------------------------

@dataclass
class NotebookResult(FileResult):
    notebook: Notebook | None = None
    fixed_cells: dict[int, str] = field(default_factory=dict)

    def cell_lines(self, cell: int) -> list[str]:
        """The lines of a cell as the remaining diagnostics see them (after --fix, the fixed text)."""
        if cell in self.fixed_cells:
            return self.fixed_cells[cell].splitlines()
        for c in self.notebook.cells if self.notebook else ():
            if c.index == cell:
                return c.text.splitlines()
        return []


def _diagnostic(path: str, rule_id: str, message: str, line: int = 1, column: int = 1, cell: int | None = None) -> Diagnostic:
    meta = load_catalog()[rule_id]
    return Diagnostic(path, rule_id, meta.name, message, line, column, line, column + 1, meta.severity, cell=cell)


def to_cell(nb: Notebook, d: Diagnostic) -> Diagnostic:
    cell, line = nb.locate(d.line)
    end_cell, end_line = nb.locate(d.end_line)
    if end_cell != cell:
        end_line = line
    edits = tuple(
        Edit(nb.locate(e.line)[1], e.column, nb.locate(e.end_line)[1], e.end_column, e.text) for e in d.edits
    )
    return replace(d, cell=cell, line=line, end_line=end_line, edits=edits)


def check_notebook(path: str, data: bytes, check, module_name: str = "", is_package: bool = False) -> NotebookResult:
    from mplint.engine.check import check_source

    nb = load(data)
    if not isinstance(nb, Notebook):
        message, line, column = nb
        return NotebookResult(path, [_diagnostic(path, PARSE_ERROR, message, line, column)], original_source=data)
    result = check_source(path, nb.virtual.encode("utf-8"), check, module_name, is_package)
    out = NotebookResult(path, [], original_source=data, notebook=nb)
    texts = nb.cell_texts(result.fixed_source.decode("utf-8")) if result.fixed_source is not None else None
    if result.fixed_source is None:
        out.diagnostics = [to_cell(nb, d) for d in result.diagnostics]
    elif texts is None:
        unfixed = check_source(path, nb.virtual.encode("utf-8"), replace(check, fix=False), module_name, is_package)
        out.diagnostics = [to_cell(nb, d) for d in unfixed.diagnostics]
        out.diagnostics.append(_diagnostic(path, FIX_REVERTED, "the fixes would have merged notebook cells; the notebook was left unchanged"))
    else:
        out.fixed_cells = {c.index: texts[c.index] for c in nb.cells if texts[c.index] != c.text}
        out.fixed_source = nb.rewrite(result.fixed_source.decode("utf-8"))
        out.fixes_applied = result.fixes_applied if out.fixed_source else 0
        # what remains points into the fixed module, whose cells may have grown
        fixed_nb = load(out.fixed_source) if out.fixed_source else nb
        out.diagnostics = [to_cell(nb if d.fixed else fixed_nb, d) for d in result.diagnostics]
    return out
