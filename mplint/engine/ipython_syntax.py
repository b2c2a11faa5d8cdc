"""A notebook cell read as IPython reads it, every line kept in its place.

IPython turns a cell into Python in three steps (``IPython.core.inputtransformer2``
and ``InteractiveShell.transform_cell``): clean-up (leading blank lines dropped, the
indentation common to all lines removed, ``>>>`` and ``In [1]:`` prompts
removed), cell magics (``%%time``), then one piece of special syntax at a time, the
earliest first, found on Python's tokens: ``%magic`` and ``!cmd`` at the start of a
logical line (with their backslash-continued lines), ``x = %magic``, ``x = !cmd``,
``obj?``. A cell that is a single line after that may also be an automagic command
(``ls ./data``, ``cd ..``, ``pip install x``) unless a name of the notebook shadows it.

IPython replaces each piece with one line of Python. Here each of its lines becomes a
placeholder of its own (``pass``, ``x = None`` or an empty line), so every other line
keeps its number, and removed prefixes are remembered per line, so every column maps
back to the cell. The scanner below follows the tokenizer IPython relies on (strings,
comments, brackets, continuation lines), so ``%`` or ``!`` inside an expression or a
string is left alone. ``tests/test_ipython_syntax.py`` compares the result with
IPython's own transformer on a corpus of cells.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

# Cell magics whose body IPython runs as a cell of Python (through transform_cell).
PYTHON_CELL_MAGICS = frozenset({"time", "timeit", "capture", "prun", "debug"})

# IPython's own line magics and aliases, as IPython 9.18 registers them (the version the
# test extra pins; tests/test_ipython_syntax.py compares this set with the installed one).
IPYTHON_LINE_MAGICS = frozenset(
    """
    alias alias_magic autoawait autocall automagic bookmark cat cd code_wrap colors conda config cp
    debug dhist dirs doctest_mode ed edit env gui hist history killbgscripts ldir lf lk ll load
    load_ext loadpy logoff logon logstart logstate logstop ls lsmagic lx macro magic mamba matplotlib
    micromamba mkdir mv notebook page pastebin pdb pdef pdoc pfile pinfo pinfo2 pip popd pprint
    precision prun psearch psource pushd pwd pycat pylab quickref recall rehashx reload_ext rep rerun
    reset reset_selective rm rmdir run save sc set_env sx system tb time timeit unalias unload_ext uv
    who who_ls whos xdel xmode
""".split()
)
# What a notebook kernel adds: ipykernel's kernel magics, and Colab's tensorflow_version.
KERNEL_LINE_MAGICS = frozenset("autosave clear connect_info less man more qtconsole tensorflow_version".split())
LINE_MAGICS = IPYTHON_LINE_MAGICS | KERNEL_LINE_MAGICS

# Line magics that well-known extensions add once a notebook loads them (``%load_ext NAME``).
EXTENSION_MAGICS = {
    "autoreload": ("autoreload", "aimport"),
    "line_profiler": ("lprun",),
    "memory_profiler": ("memit", "mprun"),
    "sql": ("sql",),
    "tensorboard": ("tensorboard",),
    "watermark": ("watermark",),
}
_LOAD_EXT = re.compile(r"^\s*%?(?:re)?load_ext\s+([\w.]+)")

ESCAPES = frozenset("!?%,;/")  # a logical line starting with one of these is a command
_IPYTHON_PROMPT = re.compile(r"^(((\[nav\]|\[ins\])?\ )?In\ \[\d+\]:\ |\s*\.{3,}:\ ?)")
# Pasted doctest prompts (IPython's ``classic_prompt``, in doctest mode since IPython 9).
_DOCTEST_INITIAL = re.compile(r"^\s*>>>")
_DOCTEST_PS1 = re.compile(r"^\s*>>>[ \t]?")
_DOCTEST_PS2 = re.compile(r"^\s*\.\.\.[ \t]?")
_TRIPLE_QUOTE = re.compile(r"(?<!\\)(\"\"\"|''')")
_STRING_PREFIX = re.compile(r"(?i)^[rubf]*$")
_HELP_END = re.compile(r"(%{0,2}(?!\d)[\w*]+(\.(?!\d)[\w*]+|\[-?[0-9]+\])*)(\?\??)$")
# IPython's split of a line into command and arguments (IPython.core.splitinput.line_split)
_LINE_SPLIT = re.compile(r"^(\s*)([,;/%]|!!?|\?\??)?\s*(%{0,2}[\w\.\*]*)(.*?$|$)")
_TRANSFORM_LIMIT = 500  # IPython gives up after as many rounds


@dataclass
class Line:
    """One physical line of a cell."""

    code: str  # the line as Python sees it: a placeholder when it is IPython syntax
    prefix: str = ""  # removed from the start of the source line (indentation, prompts)
    special: bool = False  # IPython syntax: written back exactly as it was


@dataclass
class CellCode:
    lines: list[Line]
    automagic: int | None = None  # the line IPython would run as a magic, unless a notebook name shadows it
    command: str = ""  # that line's command name (``ls``, ``cd``, ``pip``)


def source_lines(text: str) -> list[str]:
    """The cell's lines as IPython counts them (a final newline starts no line)."""
    lines = text.split("\n")
    return lines[:-1] if lines[-1] == "" else lines


def read_cell(text: str, magics: frozenset[str] = LINE_MAGICS) -> CellCode | None:
    """Python lines for a cell, one per source line; None for a cell that is not Python (``%%bash``)."""
    return _read([Line(code) for code in source_lines(text)], magics)


def loaded_extension_magics(line: str) -> tuple[str, ...]:
    m = _LOAD_EXT.match(line)
    return EXTENSION_MAGICS.get(m.group(1), ()) if m else ()


def _read(lines: list[Line], magics: frozenset[str]) -> CellCode | None:
    first = next((i for i, line in enumerate(lines) if line.code.strip()), len(lines))
    body = lines[first:]
    _strip_leading_indent(body)
    _strip_doctest_prompts(body)
    _strip_prompts(body, _IPYTHON_PROMPT)
    if body and body[0].code.startswith("%%") and not re.match(r"%%\w+\?", body[0].code):
        name = body[0].code[2:].rstrip().partition(" ")[0]
        if name not in PYTHON_CELL_MAGICS:
            return None
        _mask(body, 0, 0, "pass", "")
        inner = _read(body[1:], magics)
        if inner is None:
            return None
        automagic = None if inner.automagic is None else first + 1 + inner.automagic
        return CellCode(lines, automagic, inner.command)
    _transform_tokens(body)
    return CellCode(lines, *_automagic(lines, first, magics))


def _strip_leading_indent(lines: list[Line]) -> None:
    """IPython's ``leading_indent`` is ``textwrap.dedent``: whitespace-only lines are emptied,
    and the margin common to the other lines is removed from each."""
    margin = None
    for line in lines:
        if not line.code.strip(" \t"):
            _cut(line, len(line.code))
            continue
        indent = re.match(r"[ \t]*", line.code).group(0)
        if margin is None or margin.startswith(indent):
            margin = indent
        elif not indent.startswith(margin):
            margin = margin[: next(i for i, (a, b) in enumerate(zip(margin, indent)) if a != b)]
    if margin:
        for line in lines:
            if line.code:
                _cut(line, len(margin))


def _strip_prompts(lines: list[Line], prompt: re.Pattern) -> None:
    if lines and (prompt.match(lines[0].code) or (len(lines) > 1 and prompt.match(lines[1].code))):
        for line in lines:
            m = prompt.match(line.code)
            if m:
                _cut(line, m.end())


def _strip_doctest_prompts(lines: list[Line]) -> None:
    """``>>>``/``...`` removed outside triple-quoted strings once any line has ``>>>``, then each
    run of lines that lost a prompt dedented, as IPython 9's ``PromptStripper(doctest=True)``."""
    inside = _triple_quote_mask([line.code for line in lines])
    if not any(not kept and _DOCTEST_INITIAL.match(line.code) for line, kept in zip(lines, inside)):
        return
    stripped = []
    for line, kept in zip(lines, inside):
        m = None if kept else (_DOCTEST_PS1.match(line.code) or _DOCTEST_PS2.match(line.code))
        if m:
            _cut(line, m.end())
        stripped.append(bool(m))
    start = 0
    while start < len(lines):
        end = start
        while end < len(lines) and inside[end] == inside[start]:
            end += 1
        if not inside[start] and any(stripped[start:end]):
            _strip_leading_indent(lines[start:end])
        start = end


def _triple_quote_mask(codes: list[str]) -> list[bool]:
    """IPython's heuristic: lines inside a triple-quoted string that did not start after a prompt."""
    mask: list[bool] = []
    quote, preserve, seen_prompt = None, False, False
    for code in codes:
        mask.append(quote is not None and preserve)
        for m in _TRIPLE_QUOTE.finditer(code):
            if quote is None:
                quote = m.group(1)
                before = code[: m.start()]
                rest = _DOCTEST_PS2.sub("", _DOCTEST_PS1.sub("", before, count=1), count=1)
                preserve = not (rest != before and seen_prompt) and bool(_STRING_PREFIX.match(rest.strip()))
                mask[-1] = preserve
            elif quote == m.group(1):
                quote, preserve = None, False
        seen_prompt = seen_prompt or bool(_DOCTEST_INITIAL.match(code))
    return mask


def _cut(line: Line, n: int) -> None:
    line.prefix += line.code[:n]
    line.code = line.code[n:]


def _automagic(lines: list[Line], first: int, magics: frozenset[str]) -> tuple[int | None, str]:
    """IPython tries automagic only on a cell that is one line once its special syntax is replaced."""
    kept = [i for i in range(first, len(lines)) if not (lines[i].special and not lines[i].code.strip())]
    if len(kept) != 1 or lines[kept[0]].special:
        return None, ""
    _, _, command, rest = _LINE_SPLIT.match(lines[kept[0]].code).groups()
    if command not in magics or rest.lstrip()[:1] in ("=", ","):
        return None, ""
    return kept[0], command


# -- special syntax, one piece at a time, earliest first ---------------------------------------

# Every piece of special syntax needs one of these; a cell without any skips the scan.
_MAY_BE_SPECIAL = re.compile(r"^[ \t]*[!?%,;/]|=[ \t]*[%!]|\?", re.M)


def _transform_tokens(lines: list[Line]) -> None:
    if not _MAY_BE_SPECIAL.search("\n".join(line.code for line in lines)):
        return
    for _ in range(_TRANSFORM_LIMIT):
        codes = [line.code for line in lines]
        for found in sorted(_candidates(_logical_lines(codes))):
            if _apply(lines, codes, found):
                break
        else:
            return


def _candidates(groups: list[list[tuple]]) -> list[tuple]:
    """The first match of each kind of special syntax: (line, column, priority, kind, extra)."""
    found: dict[str, tuple] = {}
    for tokens in groups:
        real = [t for t in tokens if t[0] not in ("nl", "newline")]
        if not real:
            continue
        if "assign" not in found:
            assign = _assignment(tokens)
            if assign is not None:
                found["assign"] = assign
        if "escape" not in found and real[0][1] in ESCAPES:
            found["escape"] = (real[0][2], real[0][3], 10, "escape", None)
        if "help" not in found and len(tokens) > 2 and tokens[-2][:2] == ("error", "?"):
            found["help"] = (real[0][2], real[0][3], 5, "help", tokens[-2][2])
    return list(found.values())


def _assignment(tokens: list[tuple]) -> tuple | None:
    """``x = %magic args`` or ``x = !cmd``: the first ``=`` outside brackets followed by one."""
    depth = 0
    for i, (_, text, _, _, physical) in enumerate(tokens):
        if text == "=" and depth == 0:
            after = tokens[i + 1 : i + 3]
            if len(after) == 2 and after[0][1] == "%" and after[1][0] == "name":
                return after[0][2], after[0][3], 10, "assign", None
            if after and after[0][0] == "error" and after[0][1] == "!" and not physical.strip().startswith("="):
                return after[0][2], after[0][3], 10, "assign", None
            return None
        if text in ("(", "[", "{"):
            depth += 1
        elif text in (")", "]", "}") and depth:
            depth -= 1
    return None


def _continued_end(codes: list[str], start: int) -> int:
    end = start
    while end < len(codes) - 1 and codes[end].endswith("\\"):
        end += 1
    return end


def _apply(lines: list[Line], codes: list[str], found: tuple) -> bool:
    start, column, _, kind, q_line = found
    if kind == "help":
        content = "\n".join(codes[start : q_line + 1])[column:] + "\n"
        if not _HELP_END.search(content):
            return False  # IPython's HelpEnd raises SyntaxError here and tries the next candidate
        _mask(lines, start, q_line, "pass", codes[start][:column])
    elif kind == "assign":
        _mask(lines, start, _continued_end(codes, start), "None", codes[start][:column])
    else:
        _mask(lines, start, _continued_end(codes, start), "pass", codes[start][:column])
    return True


def _mask(lines: list[Line], start: int, end: int, placeholder: str, lead: str) -> None:
    lines[start].code = lead + placeholder
    lines[start].special = True
    for line in lines[start + 1 : end + 1]:
        line.code, line.special = "", True


# -- the tokens IPython looks at, grouped by logical line -------------------------------------

_TOKEN = re.compile(
    r"""
    (?P<ws>[ \t\f\r]+)
  | (?P<comment>\#[^\n]*)
  | (?P<string>(?:[rRbBuUfF]|[rR][bBfF]|[bBfF][rR])?(?:'''|\"\"\"|'|"))
  | (?P<number>\.?\d[\w.]*)
  | (?P<name>\w+)
  | (?P<op>\*\*=?|//=?|>>=?|<<=?|->|\.\.\.|:=|[!=<>+\-*/%&|^@]=|[()\[\]{}:;,.~+\-*/%&|^@=<>])
  | (?P<continuation>\\\r?\n)
  | (?P<newline>\n)
  | (?P<error>.)
""",
    re.VERBOSE | re.DOTALL,
)
_STRING_END = {
    "'''": re.compile(r"(?:[^\\]|\\.)*?'''", re.DOTALL),
    '"""': re.compile(r'(?:[^\\]|\\.)*?"""', re.DOTALL),
    "'": re.compile(r"(?:[^\\\n]|\\.)*?'", re.DOTALL),
    '"': re.compile(r'(?:[^\\\n]|\\.)*?"', re.DOTALL),
}


def _logical_lines(codes: list[str]) -> list[list[tuple]]:
    """Tokens as (kind, text, line, column, physical line), grouped by logical line as IPython's
    ``make_tokens_by_line`` groups Python's: a group ends at a newline outside brackets. An
    unterminated triple-quoted string or bracket ends the scan, as Python's tokenizer raises there."""
    text = "\n".join(codes) + "\n"
    starts = [0]
    for code in codes:
        starts.append(starts[-1] + len(code) + 1)
    groups: list[list[tuple]] = [[]]
    depth, pos, line = 0, 0, 0
    while pos < len(text):
        m = _TOKEN.match(text, pos)
        kind, value = m.lastgroup, m.group()
        while starts[line + 1] <= pos:
            line += 1
        token = (kind, value, line, pos - starts[line], codes[line])
        pos = m.end()
        if kind in ("ws", "continuation"):
            continue
        if kind == "string":
            quote = value.lstrip("rRbBuUfF")
            end = _STRING_END[quote].match(text, pos)
            if end is None:
                if len(quote) == 3:
                    return _closed(groups)
                prefix = value[:-1]  # an unterminated quote is one error token, its prefix a name
                if prefix:
                    groups[-1].append(("name", prefix, line, token[3], codes[line]))
                token = ("error", quote, line, token[3] + len(prefix), codes[line])
            else:
                pos = end.end()
        if kind == "newline":
            real = any(t[0] != "comment" for t in groups[-1])
            if depth > 0:
                groups[-1].append(("nl", value, line, token[3], codes[line]))
                continue
            groups[-1].append(("newline" if real else "nl", value, line, token[3], codes[line]))
            groups.append([])
            continue
        groups[-1].append(token)
        if value in ("(", "[", "{"):
            depth += 1
        elif value in (")", "]", "}") and depth:
            depth -= 1
    return _closed(groups)


def _closed(groups: list[list[tuple]]) -> list[list[tuple]]:
    return [g for g in groups if g]


# -- names that shadow automagic commands ------------------------------------------------------


def mask_automagic(code: CellCode, shadowed: set[str]) -> None:
    """Mask the cell's automagic line unless a name of the notebook shadows the command (``cat = ...``)."""
    if code.automagic is not None and code.command not in shadowed:
        _mask(code.lines, code.automagic, code.automagic, "pass", "")


def bound_names(python: str) -> set[str]:
    """Names a cell binds in the notebook's namespace (not inside functions or classes); none if it does not parse."""
    import ast

    try:
        tree = ast.parse(python)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return set()
    names: set[str] = set()
    todo = list(tree.body)
    while todo:
        node = todo.pop()
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
            names.update(n for sub in ast.walk(node) if isinstance(sub, ast.Global) for n in sub.names)
            continue
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            names.update((a.asname or a.name).split(".")[0] for a in node.names if a.name != "*")
            continue
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            names.add(node.id)
        elif isinstance(node, ast.ExceptHandler) and node.name:
            names.add(node.name)
        elif isinstance(node, (ast.MatchAs, ast.MatchStar)) and node.name:
            names.add(node.name)
        if not isinstance(node, (ast.Lambda, ast.GeneratorExp, ast.ListComp, ast.SetComp, ast.DictComp)):
            todo.extend(ast.iter_child_nodes(node))
    return names
