"""What a file's code mentions, read off CPython's ``ast`` (the engine's second pre-filter).

The byte triggers of a rule also match comments, docstrings and longer
identifiers (``batch`` in ``batch_size``). Before a file reaches libcst, the
engine summarises its syntax tree, which it parses anyway to report syntax
errors, and asks each admitted rule whether the summary can hold a finding
(``Rule.candidate``). On a large library most files stop here: parsing with
libcst and walking its tree costs about thirty times more than this summary.

Names are kept as written plus what imports make of them: ``from keras.layers
import Dense as D`` puts ``Dense`` among the called names where ``D(...)`` is
called, and a name the project re-exports from Keras (``from mypkg import
Head``, where ``mypkg`` imports ``keras.layers.Dense as Head``) brings the
re-exported path's names along.
"""

from __future__ import annotations

import ast
import functools
import io
import re
import tokenize
from collections.abc import Mapping
from dataclasses import dataclass, field

from mplint.engine.imports import callee_name, import_bindings, resolve_relative
from mplint.engine.summaries import SummaryKind, walk
from mplint.knowledge.apinames import KName, canonical, torch_canonical

_LINE = re.compile(r"[^\r\n]*(?:\r\n|\r|\n)|[^\r\n]+\Z")
# Strings longer than this are text (messages, docstrings, data), never an API name, dtype or policy.
_MAX_WORD = 100


@dataclass(frozen=True)
class CodeSummary:
    source: bytes
    #: CPython's tree, for the rare test the sets below cannot answer
    tree: ast.Module
    #: identifiers, attribute names, keyword-argument names, imported names and modules, definition
    #: names, and the values of short string literals other than docstrings
    words: frozenset[str]
    #: the last name of every called expression (``fit`` for ``model.fit(...)``), import aliases resolved
    calls: frozenset[str]
    #: the last name of calls on an attribute (``sum`` for ``ops.sum(x)``, not for ``sum(x)``)
    attribute_calls: frozenset[str]
    #: names imports bind or bring (``Dense`` and ``D`` for ``from keras.layers import Dense as D``)
    imported: frozenset[str]
    #: import aliases: local name -> the last name of what it stands for
    aliases: Mapping[str, str]
    #: the last name of every class base, import aliases resolved
    bases: frozenset[str]
    #: names of keyword arguments in calls (``batch_size`` in ``fit(x, batch_size=30)``)
    keywords: frozenset[str]
    #: what call arguments spell directly: string values and last names (``float16`` in ``cast(x, tf.float16)``)
    argument_words: frozenset[str]
    #: arithmetic operators used (``Pow`` for ``x ** 2``)
    operators: frozenset[str]
    #: absolute values of int and float literals that are operands of arithmetic (``x - 1e9``, ``x += 1e-9``)
    operand_numbers: frozenset[float]
    #: absolute values of int and float literals passed as positional call arguments
    argument_numbers: frozenset[float]
    #: import bindings: local name -> the dotted paths imports bind it to (relative imports resolved)
    origins: Mapping[str, frozenset[str]]
    #: every call whose callee is a Name or an Attribute chain (``ops.sum(x)``, ``fit(...)``)
    called: tuple[ast.Call, ...]
    #: re-exported name -> the parts of the Keras path it stands for (see ``ProjectFacts.reexported_names``)
    reexported: Mapping[str, frozenset[str]]
    #: the project's re-exports: ``mypkg.Dense`` -> ``keras.layers.Dense`` (see ``ProjectFacts.reexports``)
    reexports: Mapping[str, str]
    #: kind -> last names of the project's functions with such a summary (see ``ProjectFacts.summarized_names``)
    summarized: Mapping[str, frozenset[str]] = field(default_factory=dict)

    def mentions(self, *words: str) -> bool:
        return not self.words.isdisjoint(words)

    def calls_any(self, *names: str) -> bool:
        return not self.calls.isdisjoint(names)

    def calls_summarized(self, kind: SummaryKind) -> frozenset[str]:
        """The last names of the project's functions with a summary of ``kind`` that this file calls."""
        return self.calls & self.summarized.get(kind.name, frozenset())

    def calls_api(self, *names: str) -> bool:
        """A call that can reach an imported API named so: ``ops.sum(x)`` or an imported ``sum``, not builtin ``sum(x)``."""
        return any(n in self.attribute_calls or (n in self.calls and n in self.imported) for n in names)

    def names_of(self, call: ast.Call) -> set[str]:
        """What a call may call, by last name: as written, through an import alias (``Dense`` for
        ``D(3)``) and through a project re-export (the parts of its Keras path). Nothing for a call
        of anything but a name or attribute (``f()()``, ``fs[0]()``)."""
        func = call.func
        if type(func) is ast.Name:
            return self.spelled(func.id)
        return self.spelled(func.attr) if type(func) is ast.Attribute else set()

    def words_of(self, node: ast.expr) -> set[str]:
        """What an argument spells directly, as in ``argument_words``."""
        found: set[str] = set()
        _add_word(node, found)
        return set().union(*map(self.spelled, found))

    def spelled(self, name: str) -> set[str]:
        """``name``, what an import alias of that name stands for, and what a re-export of it does."""
        return {name, self.aliases.get(name, name), *self.reexported.get(name, ())}

    def import_paths(self, call: ast.Call) -> list[str]:
        """The dotted paths a call goes through when its first name is imported, that name replaced
        by what the import binds: ``keras.losses.mse`` for ``losses.mse(y, p)`` after ``from keras
        import losses``, or for ``mse(y, p)`` after ``from keras.losses import mse``."""
        func = call.func
        parts = []
        while type(func) is ast.Attribute:
            parts.append(func.attr)
            func = func.value
        if type(func) is not ast.Name:
            return []
        rest = ".".join(reversed(parts))
        return [f"{origin}.{rest}" if rest else origin for origin in self.origins.get(func.id, ())]

    @functools.cached_property
    def flow_units(self) -> list[list[ast.AST]]:
        """The file's code in the parts dtype flow (``analysis.dtype_flow.classify``) follows names within: each
        outermost function (methods included, nested functions and lambdas with it), and the code outside
        functions. Computed once for every rule's ``candidate`` that asks."""
        outside: list[ast.AST] = []
        functions: list[ast.AST] = []
        stack = list(ast.iter_child_nodes(self.tree))
        while stack:
            node = stack.pop()
            if type(node) in (ast.FunctionDef, ast.AsyncFunctionDef):
                functions.append(node)
                continue
            outside.append(node)
            stack.extend(ast.iter_child_nodes(node))
        return [outside, *(walk(f) for f in functions)]

    @functools.cached_property
    def simple_bindings(self) -> Mapping[str, tuple[ast.expr, ...]]:
        """Name -> the values the file binds it to in ways a constant can come from: ``name = value``,
        ``name: T = value`` (any scope) and parameter defaults (``def f(units=64)``, lambdas too)."""
        return self._bindings[0]

    @functools.cached_property
    def self_attribute_bindings(self) -> Mapping[str, tuple[ast.expr, ...]]:
        """Attribute name -> the values the file assigns to ``self.<name>`` (``self.eps = eps``)."""
        return self._bindings[1]

    @functools.cached_property
    def _bindings(self) -> tuple[Mapping[str, tuple[ast.expr, ...]], Mapping[str, tuple[ast.expr, ...]]]:
        """``simple_bindings`` and ``self_attribute_bindings``, in one walk."""
        names: dict[str, list[ast.expr]] = {}
        attributes: dict[str, list[ast.expr]] = {}
        for node in walk(self.tree):
            kind = type(node)
            if kind is ast.Assign or kind is ast.AnnAssign:
                if node.value is None:
                    continue
                for target in node.targets if kind is ast.Assign else (node.target,):
                    if type(target) is ast.Name:
                        if kind is ast.AnnAssign or len(node.targets) == 1:
                            names.setdefault(target.id, []).append(node.value)
                    elif type(target) is ast.Attribute and type(target.value) is ast.Name and target.value.id == "self":
                        attributes.setdefault(target.attr, []).append(node.value)
            elif kind is ast.arguments:
                positional = [*node.posonlyargs, *node.args]
                for arg, default in zip(positional[len(positional) - len(node.defaults) :], node.defaults):
                    names.setdefault(arg.arg, []).append(default)
                for arg, default in zip(node.kwonlyargs, node.kw_defaults):
                    if default is not None:
                        names.setdefault(arg.arg, []).append(default)
        return (
            {name: tuple(values) for name, values in names.items()},
            {name: tuple(values) for name, values in attributes.items()},
        )

    @functools.cached_property
    def _lines(self) -> list[bytes]:
        """The source's lines as CPython counts them (``\\r``, ``\\n``, ``\\r\\n`` only), in UTF-8: the
        encoding CPython's column offsets count in, whatever the file declares."""
        try:
            encoding, _ = tokenize.detect_encoding(io.BytesIO(self.source).readline)
            text = self.source.decode(encoding)
        except (SyntaxError, LookupError, UnicodeDecodeError):
            text = self.source.decode("utf-8", errors="replace")
        return [line.encode("utf-8") for line in _LINE.findall(text)]

    def segment(self, node: ast.expr) -> str:
        """The source text of ``node`` (as ``ast.get_source_segment``, without re-splitting the file)."""
        lines = self._lines
        first, last = node.lineno - 1, node.end_lineno - 1
        if first == last:
            raw = lines[first][node.col_offset : node.end_col_offset]
        else:
            raw = b"".join(
                [lines[first][node.col_offset :], *lines[first + 1 : last], lines[last][: node.end_col_offset]]
            )
        return raw.decode("utf-8", errors="replace")

    def api_names(self, call: ast.Call) -> list[KName]:
        """What ``import_paths`` of a call resolve to, as the name resolver does (project re-exports
        followed): ``losses.mse`` in namespace ``keras`` for ``keras.losses.mse(y, p)``."""
        return [found for path in self.import_paths(call) if (found := canonical(path, self.reexports)) is not None]

    def torch_names(self, call: ast.Call) -> list[KName]:
        """``api_names`` for PyTorch and apex: ``nn.Linear`` in namespace ``torch`` for ``nn.Linear(4, 3)``
        after ``from torch import nn``."""
        return [found for path in self.import_paths(call) if (found := torch_canonical(path)) is not None]

    @functools.cached_property
    def imports_torch(self) -> bool:
        """Whether the file imports PyTorch or apex (the MPT rules' context is the file's own code)."""
        return any(torch_canonical(path) is not None for paths in self.origins.values() for path in paths)

    @functools.cached_property
    def api_calls(self) -> frozenset[KName]:
        """``api_names`` of every call of the file."""
        return frozenset(found for call in self.called for found in self.api_names(call))


def summarize(
    tree: ast.Module,
    source: bytes,
    reexported: Mapping[str, frozenset[str]] = {},
    module_name: str = "",
    is_package: bool = False,
    reexports: Mapping[str, str] = {},
    summarized: Mapping[str, frozenset[str]] = {},
) -> CodeSummary:
    """The summary of one parsed file. ``reexported`` maps a re-exported name to the parts of its
    target and ``reexports`` is the project's table of them (``ProjectFacts``); ``module_name`` and
    ``is_package`` place the file for relative imports; ``summarized`` names the project's functions
    that have summaries, by kind."""
    words: set[str] = set()
    calls: set[str] = set()
    attribute_calls: set[str] = set()
    imported: set[str] = set()
    bases: set[str] = set()
    keywords: set[str] = set()
    argument_words: set[str] = set()
    operators: set[str] = set()
    operands: set[float] = set()
    arguments: set[float] = set()
    aliases: dict[str, str] = {}
    origins: dict[str, set[str]] = {}
    called: list[ast.expr] = []
    docstrings: set[int] = set()
    add = words.add
    for node in walk(tree):
        kind = type(node)
        if kind is ast.Name:
            add(node.id)
        elif kind is ast.Attribute:
            add(node.attr)
        elif kind is ast.Call:
            func = node.func
            if type(func) is ast.Name:
                calls.add(func.id)
                called.append(node)
            elif type(func) is ast.Attribute:
                calls.add(func.attr)
                attribute_calls.add(func.attr)
                called.append(node)
            for arg in node.args:
                _add_number(arg, arguments)
                _add_word(arg, argument_words)
            for keyword in node.keywords:
                _add_word(keyword.value, argument_words)
        elif kind is ast.Constant:
            value = node.value
            if type(value) is str and len(value) <= _MAX_WORD and id(node) not in docstrings:
                add(value)
        elif kind is ast.keyword:
            if node.arg:
                add(node.arg)
                keywords.add(node.arg)
        elif kind is ast.BinOp:
            operators.add(type(node.op).__name__)
            _add_number(node.left, operands)
            _add_number(node.right, operands)
        elif kind is ast.AugAssign:
            operators.add(type(node.op).__name__)
            _add_number(node.value, operands)
        elif kind is ast.Expr:
            if type(node.value) is ast.Constant:
                docstrings.add(id(node.value))  # parents come first: the constant is seen later
        elif kind is ast.alias:
            parts = node.name.split(".")
            words.update(parts)
            imported.add(parts[-1] if node.asname else parts[0])
            if node.asname:
                add(node.asname)
                imported.add(node.asname)
                aliases[node.asname] = parts[-1]
        elif kind is ast.Import:
            for local, path in import_bindings((a.name, a.asname) for a in node.names):
                origins.setdefault(local, set()).add(path)
        elif kind is ast.ImportFrom:
            if node.module:
                words.update(node.module.split("."))
            imported.update(alias.name for alias in node.names)
            for local, path in import_bindings(((a.name, a.asname) for a in node.names), node.level, node.module or ""):
                origins.setdefault(local, set()).add(resolve_relative(path, module_name, is_package))
        elif kind in (ast.FunctionDef, ast.AsyncFunctionDef):
            add(node.name)
        elif kind is ast.ClassDef:
            add(node.name)
            for base in node.bases:
                if type(base) is ast.Name:
                    bases.add(base.id)
                elif type(base) is ast.Attribute:
                    bases.add(base.attr)
    for table in (calls, bases, argument_words):
        table.update([aliases[name] for name in table if name in aliases])
    if reexported:
        for name in [w for w in words if w in reexported]:
            target = reexported[name]
            words.update(target)
            imported.update(target)
            for table in (calls, bases, argument_words):
                if name in table:
                    table.update(target)
    return CodeSummary(
        source,
        tree,
        frozenset(words),
        frozenset(calls),
        frozenset(attribute_calls),
        frozenset(imported),
        aliases,
        frozenset(bases),
        frozenset(keywords),
        frozenset(argument_words),
        frozenset(operators),
        frozenset(operands),
        frozenset(arguments),
        {name: frozenset(paths) for name, paths in origins.items()},
        tuple(called),
        reexported,
        reexports,
        summarized,
    )


def calls_in(unit: list[ast.AST], names: frozenset[str]) -> bool:
    """Does the unit (a list of nodes, see ``CodeSummary.flow_units``) call something by one of these last names?"""
    return any(type(node) is ast.Call and callee_name(node) in names for node in unit)


def literal_number(node: ast.AST) -> float | None:
    """A number written as a literal, signed or not (``-1e9``): on CPython's tree what
    ``analysis.constants.literal_number`` is on libcst's."""
    sign = 1
    while type(node) is ast.UnaryOp and type(node.op) in (ast.USub, ast.UAdd):
        sign = -sign if type(node.op) is ast.USub else sign
        node = node.operand
    return sign * node.value if type(node) is ast.Constant and type(node.value) in (int, float) else None


def _add_number(node: ast.expr, into: set[float]) -> None:
    value = literal_number(node)
    if value is not None:
        into.add(abs(value))


def _add_word(node: ast.expr, into: set[str]) -> None:
    kind = type(node)
    if kind is ast.Name:
        into.add(node.id)
    elif kind is ast.Attribute:
        into.add(node.attr)
    elif kind is ast.Constant and type(node.value) is str and len(node.value) <= _MAX_WORD:
        into.add(node.value)
    elif kind is ast.IfExp:  # `tf.float16 if amp else tf.float32`: either arm may be passed
        _add_word(node.body, into)
        _add_word(node.orelse, into)
