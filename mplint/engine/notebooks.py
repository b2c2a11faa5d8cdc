"""Jupyter notebooks: code cells as one virtual module, findings mapped back to cells.

The code cells are joined into one module (so a policy set in cell 1 governs a
model built in cell 3), each preceded by a marker comment line. Each cell is read
as IPython reads it (``ipython_syntax``): magics, shell commands and help lines
become placeholders, one per line, so every other line keeps its position, and
the indentation or prompts IPython removes are added back to every column. A cell
that is not valid Python is reported on its own (MP000) and the others are still
checked. Fixes are written back by replacing only the changed cells' ``source``
values in the original JSON text: outputs, metadata, key order and formatting stay
byte-identical.
"""

from __future__ import annotations

import ast
import bisect
import json
import re
from dataclasses import dataclass, field, replace
from json.decoder import scanstring
from typing import TYPE_CHECKING

from mplint.catalog import engine_diagnostic
from mplint.diagnostics import Diagnostic, Edit, FileResult

if TYPE_CHECKING:
    from mplint.engine.ipython_syntax import Line

SUFFIX = ".ipynb"
PARSE_ERROR = "MP000"
FIX_REVERTED = "MP001"

_MARKER = "# __mplint_cell_{}__"
_MARKER_LINE = re.compile(r"^# __mplint_cell_(\d+)__\n", re.M)
_PLACEHOLDER = "# __ipython_magic_{}__"
_PLACEHOLDER_END = re.compile(r"# __ipython_magic_(\d+)__$")
_WS = re.compile(r"[ \t\n\r]*")


def is_notebook(path) -> bool:
    return str(path).endswith(SUFFIX)


@dataclass
class Cell:
    index: int  # 1-based position in the notebook's cell list (markdown cells counted)
    text: str  # the source as one string
    lines: list[Line]  # one per source line: what Python sees and the prefix IPython removed
    code: list[str] = field(default_factory=list)  # the virtual module's lines for this cell

    @property
    def masked(self) -> str:
        return "".join(line + "\n" for line in self.code)

    def shift(self, line: int) -> int:
        """Columns IPython removed from the start of a (1-based) line of this cell."""
        return len(self.lines[line - 1].prefix) if 0 < line <= len(self.lines) else 0


@dataclass
class CellError:
    """A code cell that is not valid Python even as IPython reads it."""

    index: int
    text: str
    message: str
    line: int
    column: int


@dataclass
class Notebook:
    raw: str  # the decoded JSON text
    bom: str
    cells: list[Cell]
    magics: list[str]  # original text of each masked line, by placeholder number
    virtual: str  # the module the rules see
    starts: list[int] = field(default_factory=list)  # virtual line of each cell's marker
    errors: list[CellError] = field(default_factory=list)

    def locate(self, line: int) -> tuple[int, int]:
        """(cell index, line in that cell) of a virtual module line."""
        i = max(bisect.bisect_right(self.starts, line) - 1, 0)
        return self.cells[i].index, max(line - self.starts[i], 1)

    def cell(self, index: int) -> Cell:
        return next(c for c in self.cells if c.index == index)

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
        return {cell.index: self._source(cell, body) for cell, body in zip(self.cells, bodies)}

    def _source(self, cell: Cell, body: str) -> str:
        """A cell's source from its (fixed) lines: unchanged lines as they were, masked lines restored,
        changed or new lines given back the prefix of the line they replace or follow."""
        import difflib

        from mplint.engine import ipython_syntax

        fixed = ipython_syntax.source_lines(body)
        if fixed == cell.code:
            return cell.text
        source = ipython_syntax.source_lines(cell.text)
        out: list[str] = []
        matcher = difflib.SequenceMatcher(None, cell.code, fixed, autojunk=False)
        for op, i1, i2, j1, j2 in matcher.get_opcodes():
            if op == "equal":
                out += source[i1:i2]
                continue
            for k, line in enumerate(fixed[j1:j2]):
                m = _PLACEHOLDER_END.search(line)
                if m:
                    out.append(self.magics[int(m.group(1))])
                    continue
                near = min(i1 + k, i2 - 1) if i2 > i1 else max(i1 - 1, 0)  # lines added on top take the first's
                prefix = cell.lines[near].prefix if 0 <= near < len(cell.lines) else ""
                out.append(prefix + line if line.strip() else line)
        text = "\n".join(out)
        return text + "\n" if cell.text.endswith("\n") or (not cell.text and out) else text

    def rewrite(self, virtual: str) -> bytes | None:
        """The notebook's bytes with the cells of ``virtual`` written back; None if unchanged or unmappable."""
        texts = self.cell_texts(virtual)
        if texts is None:
            return None
        changed = {c.index: texts[c.index] for c in self.cells if texts[c.index] != c.text}
        if not changed:
            return None
        return (self.bom + _splice_sources(self.raw, changed)).encode("utf-8")


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
    sources: list[tuple[int, str]] = []
    for index, cell in enumerate(doc["cells"], start=1):
        if not isinstance(cell, dict):
            return f"cell {index} is not a JSON object", 1, 1
        text = _source_text(cell.get("source", ""))
        if text is None:
            return f"cell {index}: 'source' must be a string or a list of strings", 1, 1
        if cell.get("cell_type") == "code" and is_python:
            sources.append((index, text))
    return assemble(raw, bom, sources)


def assemble(raw: str, bom: str, sources: list[tuple[int, str]]) -> Notebook:
    """The virtual module of code cells given as (cell index, source)."""
    from mplint.engine.ipython_syntax import source_lines

    cells = _read_cells(sources)
    magics: list[str] = []
    checked: list[Cell] = []
    errors: list[CellError] = []
    for cell in cells:
        cell.code = [_virtual_line(line, source, magics) for line, source in zip(cell.lines, source_lines(cell.text))]
        error = _syntax_error(cell)
        if error is None:
            checked.append(cell)
        else:
            errors.append(error)
    parts, starts, line = [], [], 1
    for cell in checked:
        starts.append(line)
        parts.append(_MARKER.format(cell.index) + "\n" + cell.masked)
        line += 1 + len(cell.code)
    return Notebook(raw, bom, checked, magics, "".join(parts), starts, errors)


def _read_cells(sources: list[tuple[int, str]]) -> list[Cell]:
    """Each Python cell read as IPython reads it; automagic lines masked unless a notebook name shadows them."""
    from mplint.engine import ipython_syntax

    magics = ipython_syntax.LINE_MAGICS
    read = [(index, text, ipython_syntax.read_cell(text, magics)) for index, text in sources]
    extensions = {
        name
        for _, text, code in read
        if code is not None
        for line, source in zip(code.lines, ipython_syntax.source_lines(text))
        if line.special
        for name in ipython_syntax.loaded_extension_magics(source)
    }
    if extensions - magics:  # `%load_ext tensorboard` makes `tensorboard --logdir logs` a command
        magics = magics | extensions
        read = [(index, text, ipython_syntax.read_cell(text, magics)) for index, text in sources]
    codes = [code for _, _, code in read if code is not None]
    shadowed: set[str] = set()
    for code in codes:
        if code.automagic is None:  # a command cell binds no name
            shadowed |= ipython_syntax.bound_names("".join(line.code + "\n" for line in code.lines))
    for code in codes:
        ipython_syntax.mask_automagic(code, shadowed)
    return [Cell(index, text, code.lines) for index, text, code in read if code is not None]


def _virtual_line(line: Line, source: str, magics: list[str]) -> str:
    if not line.special:
        return line.code
    marker = _PLACEHOLDER.format(len(magics))
    magics.append(source)
    return f"{line.code}  {marker}" if line.code.strip() else line.code + marker


def _syntax_error(cell: Cell) -> CellError | None:
    try:
        compile(cell.masked, f"cell {cell.index}", "exec", flags=ast.PyCF_ONLY_AST, dont_inherit=True)
    except SyntaxError as exc:
        line = exc.lineno or 1
        column = max(exc.offset or 1, 1) + cell.shift(line)
        return CellError(cell.index, cell.text, f"syntax error: {exc.msg}", line, column)
    except (RecursionError, MemoryError):
        return CellError(cell.index, cell.text, "cell is nested too deeply to parse", 1, 1)
    except ValueError as exc:
        return CellError(cell.index, cell.text, f"cannot parse cell: {exc}", 1, 1)
    return None


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
        indent = inner.group(1)[len(key_indent) :]
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
        nb = self.notebook
        for c in [*nb.cells, *nb.errors] if nb else ():
            if c.index == cell:
                return c.text.splitlines()
        return []


def to_cell(nb: Notebook, d: Diagnostic) -> Diagnostic:
    """A diagnostic of the virtual module placed in its cell, columns counted in the cell's own lines."""
    if not nb.cells:
        return d
    cell, line = nb.locate(d.line)
    end_cell, end_line = nb.locate(d.end_line)
    if end_cell != cell:
        end_line = line
    shift = nb.cell(cell).shift
    edits = []
    for e in d.edits:
        start, end = nb.locate(e.line)[1], nb.locate(e.end_line)[1]
        edits.append(Edit(start, e.column + shift(start), end, e.end_column + shift(end), e.text))
    related = tuple(
        replace(r, cell=nb.locate(r.line)[0], line=nb.locate(r.line)[1])
        if r.path in ("", d.path) and r.cell is None
        else r
        for r in d.related
    )
    return replace(
        d,
        cell=cell,
        line=line,
        end_line=end_line,
        column=d.column + shift(line),
        end_column=d.end_column + shift(end_line),
        edits=tuple(edits),
        related=related,
    )


def _cell_errors(path: str, nb: Notebook) -> list[Diagnostic]:
    return [engine_diagnostic(path, PARSE_ERROR, e.message, e.line, e.column, e.index) for e in nb.errors]


def check_notebook(path: str, data: bytes, check, module_name: str = "", is_package: bool = False) -> NotebookResult:
    from mplint.engine.check import check_source

    nb = load(data)
    if not isinstance(nb, Notebook):
        message, line, column = nb
        return NotebookResult(path, [engine_diagnostic(path, PARSE_ERROR, message, line, column)], original_source=data)
    result = check_source(path, nb.virtual.encode("utf-8"), check, module_name, is_package)
    out = NotebookResult(path, [], original_source=data, notebook=nb)
    texts = nb.cell_texts(result.fixed_source.decode("utf-8")) if result.fixed_source is not None else None
    if result.fixed_source is None:
        out.diagnostics = [to_cell(nb, d) for d in result.diagnostics]
    elif texts is None:
        unfixed = check_source(path, nb.virtual.encode("utf-8"), replace(check, fix=False), module_name, is_package)
        out.diagnostics = [to_cell(nb, d) for d in unfixed.diagnostics]
        out.diagnostics.append(
            engine_diagnostic(
                path, FIX_REVERTED, "the fixes would have merged notebook cells; the notebook was left unchanged"
            )
        )
    else:
        out.fixed_cells = {c.index: texts[c.index] for c in nb.cells if texts[c.index] != c.text}
        out.fixed_source = nb.rewrite(result.fixed_source.decode("utf-8"))
        out.fixes_applied = result.fixes_applied if out.fixed_source else 0
        # what remains points into the fixed module, whose cells may have grown
        fixed_nb = load(out.fixed_source) if out.fixed_source else nb
        out.diagnostics = [to_cell(nb if d.fixed else fixed_nb, d) for d in result.diagnostics]
    out.diagnostics = _cell_errors(path, nb) + out.diagnostics
    return out


# -- positions in the .ipynb file ------------------------------------------------


def _string_offsets(raw: str, quote: int) -> tuple[str, list[int], int]:
    """The JSON string literal at ``raw[quote] == '"'``: its text, the offset in ``raw`` of each of its characters,
    and the offset of the closing quote. An escape (``\\n``, ``\\"``, ``\\u00e9``, a surrogate pair) is one
    character that starts at its backslash."""
    chars: list[str] = []
    offsets: list[int] = []
    i = quote + 1
    while raw[i] != '"':
        offsets.append(i)
        if raw[i] != "\\":
            chars.append(raw[i])
            i += 1
            continue
        kind = raw[i + 1]
        if kind != "u":
            chars.append(json.loads(f'"{raw[i : i + 2]}"'))
            i += 2
            continue
        unit = raw[i : i + 6]
        if 0xD800 <= int(unit[2:], 16) < 0xDC00 and raw[i + 6 : i + 8] == "\\u":
            unit = raw[i : i + 12]
        chars.append(json.loads(f'"{unit}"'))
        i += len(unit)
    return "".join(chars), offsets, i


def source_offsets(raw: str) -> dict[int, tuple[str, list[int]]]:
    """Cell index (1-based) -> (source text, offset in ``raw`` of each character, plus one past the end)."""
    found: dict[int, tuple[str, list[int]]] = {}
    for key, _, value, _ in _members(raw, _ws(raw, 0)):
        if key != "cells":
            continue
        for index, (start, _) in enumerate(_elements(raw, value), start=1):
            for name, _, v_start, v_end in _members(raw, start):
                if name != "source":
                    continue
                literals = [s for s, _ in _elements(raw, v_start)] if raw[v_start] == "[" else [v_start]
                text, offsets, end = "", [], v_end
                for literal in literals:
                    part, where, end = _string_offsets(raw, literal)
                    text += part
                    offsets += where
                found[index] = (text, offsets + [end])
    return found


class FilePositions:
    """Positions in a cell (1-based line and code-point column) as positions in the notebook's JSON text, where
    annotations and code-scanning results must point."""

    def __init__(self, raw: str):
        self.raw = raw
        self.cells = source_offsets(raw)
        self.line_starts = [0] + [i + 1 for i, ch in enumerate(raw) if ch == "\n"]

    def locate(self, cell: int, line: int, column: int) -> tuple[int, int] | None:
        if cell not in self.cells:
            return None
        text, offsets = self.cells[cell]
        starts = [0] + [i + 1 for i, ch in enumerate(text) if ch == "\n"]
        if not 0 < line <= len(starts):
            return None
        index = min(starts[line - 1] + column - 1, len(offsets) - 1)
        offset = offsets[index]
        row = bisect.bisect_right(self.line_starts, offset) - 1
        return row + 1, offset - self.line_starts[row] + 1


def file_positions(data: bytes | None) -> FilePositions | None:
    """The notebook file's position map; None when it is not a readable notebook."""
    if not data:
        return None
    try:
        raw = data.decode("utf-8").removeprefix("\ufeff")
        json.loads(raw)
        return FilePositions(raw)
    except (UnicodeDecodeError, ValueError, RecursionError, IndexError, KeyError):
        return None
