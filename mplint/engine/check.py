"""Checking and fixing one file's source. Knows nothing of particular rules.

``check_source`` is a pure function of (path, bytes, options) so it can run
in worker processes and be cached by content.
"""

from __future__ import annotations

import ast
import functools
import io
import os
import re
import tokenize
import traceback
from dataclasses import replace
from typing import TYPE_CHECKING

import libcst as cst
from libcst.metadata import MetadataWrapper

from mplint.catalog import engine_diagnostic
from mplint.diagnostics import Diagnostic, Edit, FileResult, Finding, FixSafety
from mplint.engine import budget, statement_reuse
from mplint.engine.check_options import FIX_REVERTED, OVER_BUDGET, PARSE_ERROR, RULE_CRASHED, CheckOptions  # noqa: F401 (re-exported)
from mplint.engine.code_summary import summarize
from mplint.engine.context import FileContext
from mplint.engine.edits import apply_fixes, choose_non_overlapping
from mplint.engine.facts import per_project_table
from mplint.engine.fidelity import keep_untouched
from mplint.engine.lazy_positions import Starts, statement_starts
from mplint.engine.names import last_name
from mplint.engine.python_tree import parse_python
from mplint.engine.rule import Rule
from mplint.engine.suppressions import parse_suppressions
from mplint.engine.walk import walk

if TYPE_CHECKING:
    from mplint.engine.facts import Facts

MAX_FIX_ROUNDS = 10
# Larger files are generated data, not code to lint: parsing one costs minutes and gigabytes
# (50 MB: 5 minutes, 20 GB). They get an MP000 "file too large" instead. See docs/robustness.md.
MAX_SOURCE_BYTES = 10 * 1024 * 1024


def parse(path: str, source: bytes) -> cst.Module | Diagnostic:
    """The module, or an MP000 diagnostic saying why it cannot be read."""
    tree = parse_native(path, source)
    return tree if isinstance(tree, Diagnostic) else parse_concrete(path, source)


def parse_native(path: str, source: bytes) -> ast.Module | Diagnostic:
    """CPython's syntax tree, or an MP000 diagnostic.

    CPython's parser runs first: libcst's native parser overflows its stack and kills the whole
    process (SIGSEGV) on deep nesting that CPython rejects cleanly (3000 nested parentheses).
    """
    if b"\x00" in source:
        return engine_diagnostic(path, PARSE_ERROR, "file contains null bytes; not a Python source file")
    try:
        encoding, _ = tokenize.detect_encoding(io.BytesIO(source).readline)
        source.decode(encoding)
    except (SyntaxError, LookupError) as exc:
        return engine_diagnostic(path, PARSE_ERROR, f"cannot decode file: {exc}")
    except UnicodeDecodeError as exc:
        line, column = _line_and_column(source, exc.start, encoding)
        bad = " ".join(f"0x{byte:02x}" for byte in source[exc.start : exc.end])
        return engine_diagnostic(
            path, PARSE_ERROR, f"cannot decode file as {encoding}: {exc.reason} (byte {bad})", line, column
        )
    try:
        return parse_python(source)
    except SyntaxError as native:
        return engine_diagnostic(
            path, PARSE_ERROR, f"syntax error: {native.msg}", native.lineno or 1, max(native.offset or 1, 1)
        )
    except (RecursionError, MemoryError):
        return engine_diagnostic(path, PARSE_ERROR, "file is nested too deeply to parse")
    except ValueError as exc:
        return engine_diagnostic(path, PARSE_ERROR, f"cannot parse file: {exc}")


_LINE_BREAK = re.compile(rb"\r\n|\r|\n")  # what Python's tokenizer ends a line at


def _line_and_column(source: bytes, offset: int, encoding: str) -> tuple[int, int]:
    """The 1-based line and character column of byte ``offset``: the bytes before it on its line decode (the
    decoder stopped at the first that does not)."""
    breaks = list(_LINE_BREAK.finditer(source, 0, offset))
    start = breaks[-1].end() if breaks else 0
    before = source[start:offset].decode(encoding, errors="replace")
    return len(breaks) + 1, len(before) + 1


def parse_concrete(path: str, source: bytes) -> cst.Module | Diagnostic:
    """libcst's tree of a file CPython has parsed (see ``parse_native``); in the language server, put together
    from the trees of the statements it had last time where it can (``statement_reuse``)."""
    reused = statement_reuse.parse(source)
    if reused is not None:
        return reused
    try:
        return cst.parse_module(source)
    except cst.ParserSyntaxError as exc:
        return _syntax_error(path, source, exc)
    except RecursionError:
        return engine_diagnostic(path, PARSE_ERROR, "file is nested too deeply to parse")
    except (ValueError, SyntaxError) as exc:
        return engine_diagnostic(path, PARSE_ERROR, f"cannot parse file: {exc}")


def _syntax_error(path: str, source: bytes, exc: cst.ParserSyntaxError) -> Diagnostic:
    """Prefer CPython's own message and position: it is what users know from tracebacks."""
    try:
        compile(source, path, "exec", flags=ast.PyCF_ONLY_AST, dont_inherit=True)
    except SyntaxError as native:
        if native.lineno:
            return engine_diagnostic(
                path, PARSE_ERROR, f"syntax error: {native.msg}", native.lineno, max(native.offset or 1, 1)
            )
    except (ValueError, RecursionError, MemoryError):
        pass
    return engine_diagnostic(path, PARSE_ERROR, f"syntax error: {exc.message}", exc.raw_line, exc.raw_column + 1)


def admits(rule: type[Rule], source: bytes, facts: Facts | None = None, module_name: str = "") -> bool:
    """The byte-level pre-filter: can this rule match anything in ``source`` (of module ``module_name``)?

    A project module that re-exports a Keras name under another (``Linear = layers.Dense``)
    makes that other name a trigger too: the rule resolves it, so the pre-filter must see it; so
    do the names of the project's functions whose summaries the rule reads (``summary_triggers``).
    """
    if rule.requires and not (
        any(name in source for name in rule.requires) or module_name.partition(".")[0].encode() in rule.requires
    ):
        return False
    if not rule.triggers:
        return True
    triggers = rule.triggers + (_aliased_triggers(rule, facts) if facts is not None and facts.reexports else ())
    if rule.summary_triggers and facts is not None:
        summarized = facts.summarized_names
        triggers += tuple(name.encode() for kind in rule.summary_triggers for name in summarized.get(kind.name, ()))
    for trigger in triggers:
        if trigger.search(source) if isinstance(trigger, re.Pattern) else trigger in source:
            return True
    return False


def _aliased_triggers(rule: type[Rule], facts: Facts) -> tuple[bytes, ...]:
    """Once per rule and project (every module shares the project's re-exports)."""

    def compute() -> tuple[bytes, ...]:
        out = []
        for alias, parts in facts.reexported_names.items():
            # What a file using the target directly would spell: `layers.Dense(` for `Linear(`.
            spelled = " ".join(f"{part}({part}" for part in sorted(parts)).encode()
            for trigger in rule.triggers:
                if trigger.search(spelled) if isinstance(trigger, re.Pattern) else trigger in spelled:
                    out.append(alias.encode())
                    break
        return tuple(out)

    return per_project_table(facts.reexports, rule, compute)


@functools.cache
def _handlers(rule: type[Rule]) -> tuple[dict[str, str], dict[str, str]]:
    """Node type -> method name, for visit_X and leave_X methods of a rule class (computed once)."""
    visits, leaves = {}, {}
    for name in dir(rule):
        if name.startswith("visit_") and name.count("_") == 1 and name != "visit_batched":
            visits[name[6:]] = name
        elif name.startswith("leave_") and name.count("_") == 1:
            leaves[name[6:]] = name
    return visits, leaves


class _Dispatcher(cst.CSTVisitor):
    """One traversal for all rules; method tables are per class, not recomputed per file.

    A rule whose handler raises is dropped for the rest of the file (``crashed``): it loses its
    own findings, the other rules go on. A RecursionError ends the whole traversal (the file is
    nested too deeply for any rule)."""

    def __init__(self, visitors: list[Rule]):
        super().__init__()
        self._visit: dict[str, tuple] = {}
        self._leave: dict[str, tuple] = {}
        self.crashed: dict[int, tuple[Rule, Exception]] = {}
        for visitor in visitors:
            visits, leaves = _handlers(type(visitor))
            for node_type, method in visits.items():
                self._visit[node_type] = (*self._visit.get(node_type, ()), (visitor, getattr(visitor, method)))
            for node_type, method in leaves.items():
                self._leave[node_type] = (*self._leave.get(node_type, ()), (visitor, getattr(visitor, method)))

    def _call(self, handlers: tuple, node: cst.CSTNode) -> None:
        for visitor, handler in handlers:
            try:
                handler(node)
            except RecursionError:
                raise
            except Exception as exc:  # noqa: BLE001 - isolate the rule, keep the others
                self._drop(visitor, exc)

    def _drop(self, visitor: Rule, exc: Exception) -> None:
        if id(visitor) in self.crashed:
            return
        self.crashed[id(visitor)] = (visitor, exc)
        for table in (self._visit, self._leave):  # replaced in place: running loops see the new tuples
            for node_type, handlers in table.items():
                table[node_type] = tuple(entry for entry in handlers if entry[0] is not visitor)

    def on_visit(self, node: cst.CSTNode) -> bool:
        handlers = self._visit.get(type(node).__name__)
        if handlers:
            self._call(handlers, node)
        return True

    def on_leave(self, original_node: cst.CSTNode) -> None:
        handlers = self._leave.get(type(original_node).__name__)
        if handlers:
            self._call(handlers, original_node)

    def run(self, context: FileContext) -> None:
        """Visit the file. Rules that leave nothing but the module need no traversal: a loop over
        the file's nodes in source order (from the context's index) calls their handlers."""
        if set(self._leave) - {"Module"}:
            walk(context.module, self, context.children)
            return
        visit = self._visit
        call = self._call
        for node in context.preorder():
            handlers = visit.get(type(node).__name__)
            if handlers:
                call(handlers, node)
        self.on_leave(context.module)


def crash_message(rule: Rule, exc: Exception) -> str:
    """MP002's message: the rule, the error, the rule's first frame (the handler the engine called)
    and, when the error came from deeper down, the frame that raised it."""
    frames = traceback.extract_tb(exc.__traceback__)[1:]  # the first frame is the engine's own call
    name = getattr(getattr(rule, "meta", None), "name", "")
    label = f"{rule.id} ({name})" if name else rule.id
    where = ""
    if frames:
        first, last = frames[0], frames[-1]
        where = f" in {first.name} ({_frame_path(first)}:{first.lineno})"
        if last is not first:
            where += f", raised at {_frame_path(last)}:{last.lineno} in {last.name}"
    return (
        f"rule {label} crashed on this file: {exc!r}{where}; its findings for this file were dropped, "
        "the other rules' findings are kept"
    )


def _frame_path(frame: traceback.FrameSummary) -> str:
    """A frame's file, relative to the folder holding the mplint package when it is mplint's."""
    package = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    filename = os.path.abspath(frame.filename)
    return (
        os.path.relpath(filename, os.path.dirname(package)) if filename.startswith(package + os.sep) else frame.filename
    )


VERSION_WORDS = (
    "__version__",
    "version.parse",
    "LooseVersion",
    "StrictVersion",
    "parse_version",
    "VERSION",
    "hasattr(",
)
IMPORT_ERRORS = frozenset({"ImportError", "ModuleNotFoundError", "AttributeError", "Exception"})


def in_compatibility_branch(context: FileContext, node: cst.CSTNode) -> bool:
    """``node`` sits in an arm of a version gate (``if tf.__version__ ...``, ``version.parse(...)``,
    ``hasattr(opt, "get_scaled_loss")``) or in a ``try: ... except ImportError`` with a fallback: a
    compatibility shim that runs the old API only where the old API exists."""
    child = node
    for ancestor in context.ancestors(node):
        if isinstance(ancestor, cst.If):
            # either arm of a version or feature test runs only where its API exists
            test = context.module.code_for_node(ancestor.test)
            if child is not ancestor.test and any(word in test for word in VERSION_WORDS):
                return True
        elif isinstance(ancestor, cst.Try):
            catches = {
                n.value
                for h in ancestor.handlers
                for n in ([h.type] if not isinstance(h.type, cst.Tuple) else [e.value for e in h.type.elements])
                if isinstance(n, cst.Name)
            } | ({"Exception"} if any(h.type is None for h in ancestor.handlers) else set())
            if catches & IMPORT_ERRORS and (child is ancestor.body and ancestor.handlers or child in ancestor.handlers):
                return True
        child = ancestor
    return False


_RAISE_EXPECTATIONS = frozenset({"raises", "assertRaises", "assertRaisesRegex", "assertRaisesRegexp"})


class _Run:
    """One lint pass over one parsed module."""

    def __init__(
        self,
        path: str,
        module: cst.Module,
        options: CheckOptions,
        module_name: str,
        is_package: bool,
        source: bytes,
        rules: list[type[Rule]] | None = None,
        starts: Starts | None = None,
    ):
        self.path = path
        self.options = options
        self.wrapper = MetadataWrapper(module, unsafe_skip_copy=True)
        self.context = FileContext(
            path,
            self.wrapper,
            options.facts,
            module_name,
            is_package,
            source,
            frozenset(r.id for r in options.rules),
            starts,
        )
        self.findings: list[Finding] = []
        self.crashes: list[Diagnostic] = []
        if rules is None:
            rules = [r for r in options.rules if admits(r, source, options.facts, module_name)]
        self.keys = {r.id: r.key for r in rules}
        if not rules:
            return
        visitors = [rule(self.context) for rule in rules]
        dispatcher = _Dispatcher(visitors)
        try:
            dispatcher.run(self.context)
        except RecursionError:
            self.crashes.append(engine_diagnostic(path, PARSE_ERROR, "file is nested too deeply to analyse"))
            return
        finally:
            self.context.release()
        for visitor, exc in dispatcher.crashed.values():  # a crashed rule loses only its own findings
            self.crashes.append(engine_diagnostic(path, RULE_CRASHED, crash_message(visitor, exc)))
        suppressions = parse_suppressions(self.context.text)
        for visitor in visitors:
            if id(visitor) in dispatcher.crashed:
                continue
            for finding in visitor.findings:
                line = self.context.position(finding.node).start.line
                if suppressions.suppressed(visitor.key, line) or self.expected_to_raise(finding.node):
                    continue
                if (
                    visitor.silent_in_compatibility_branches
                    and not finding.guards_read
                    and in_compatibility_branch(self.context, finding.node)
                ):
                    continue
                if visitor.silent_in_uncalled_code and (
                    getattr(self.context.facts, "never_runs", False)
                    or self.in_uncalled_function(finding.node)
                    or self.unreachable(finding.node)
                ):
                    continue
                self.findings.append(finding)
        self.findings.sort(key=lambda f: self.span(f.node))

    def unreachable(self, node: cst.CSTNode) -> bool:
        """After a statement that always leaves its block (``raise``, ``return``, ``assert False, "untested"``,
        ``continue``, ``break``) in a block that holds ``node``: code that never runs."""
        child: cst.CSTNode = node
        for parent in self.context.ancestors(node):
            if isinstance(parent, (cst.IndentedBlock, cst.Module)) and child in parent.body:
                for statement in parent.body[: parent.body.index(child)]:
                    if isinstance(statement, cst.SimpleStatementLine) and any(map(_leaves_block, statement.body)):
                        return True
            if isinstance(parent, (cst.FunctionDef, cst.ClassDef, cst.Lambda)):
                return False  # a definition's body runs when it is called, not where it stands
            child = parent
        return False

    def in_uncalled_function(self, node: cst.CSTNode) -> bool:
        """Inside a function or method the project's facts name as never called (or a function nested in one)."""
        uncalled = getattr(self.context.facts, "uncalled", frozenset())
        if not uncalled:
            return False
        scopes = [a for a in self.context.ancestors(node) if isinstance(a, (cst.FunctionDef, cst.ClassDef))]
        if not scopes:
            return False
        outer = scopes[-1]  # the top-level def or class
        name = outer.name.value
        if isinstance(outer, cst.ClassDef):
            methods = [s for s in scopes[:-1] if isinstance(s, cst.FunctionDef)]
            return bool(methods) and f"{name}.{methods[-1].name.value}" in uncalled
        return name in uncalled

    def expected_to_raise(self, node: cst.CSTNode) -> bool:
        """Inside ``with pytest.raises(...)``/``self.assertRaises(...)``: a test that wants the error."""
        for ancestor in self.context.ancestors(node):
            if isinstance(ancestor, cst.With):
                for item in ancestor.items:
                    call = item.item
                    name = last_name(call.func) if isinstance(call, cst.Call) else None
                    if name in _RAISE_EXPECTATIONS:
                        return True
        return False

    def span(self, node: cst.CSTNode):
        r = self.context.position(node)
        return ((r.start.line, r.start.column), (r.end.line, r.end.column))

    def diagnostic(self, finding: Finding, fixed: bool = False) -> Diagnostic:
        key = self.keys[finding.rule_id]
        r = self.context.position(finding.node)
        safety = finding.fix.safety if finding.fix else FixSafety.NONE
        return Diagnostic(
            self.path,
            finding.rule_id,
            key.name,
            finding.message,
            r.start.line,
            r.start.column + 1,
            r.end.line,
            r.end.column + 1,
            finding.severity or key.severity,
            safety,
            finding.fix.description if finding.fix else "",
            fixed,
            edits=self.edits(finding),
            context=self.context.facts.context_record(),
            related=tuple(replace(r, path=r.path or self.path) for r in finding.related),
            imports=tuple(finding.fix.imports) if finding.fix else (),
        )

    def edits(self, finding: Finding) -> tuple[Edit, ...]:
        if finding.fix is None:
            return ()
        out = []
        for node, new in finding.fix.replacements.items():
            r = self.context.position(node)
            if isinstance(new, cst.RemovalSentinel):
                text = ""
            elif isinstance(new, cst.FlattenSentinel):
                text = "".join(self.wrapper.module.code_for_node(n) for n in new.nodes)
            else:
                text = self.wrapper.module.code_for_node(new)
            out.append(Edit(r.start.line, r.start.column + 1, r.end.line, r.end.column + 1, text))
        return tuple(sorted(out, key=lambda e: (e.line, e.column)))

    def fixable(self) -> list[Finding]:
        return [f for f in self.findings if f.fix is not None and self.options.may_apply(f.fix.safety)]


def check_source(
    path: str, source: bytes, options: CheckOptions, module_name: str = "", is_package: bool = False
) -> FileResult:
    """Check one file. Only files that some active rule can match reach libcst.

    Two pre-filters decide: the rules' byte triggers, then (on CPython's syntax tree, which also
    reports syntax errors) each admitted rule's ``candidate`` test on what the code mentions.
    """
    result = FileResult(path, original_source=source)
    if len(source) > MAX_SOURCE_BYTES:
        # plain byte triggers only: a regular expression over many megabytes costs seconds per rule
        if any(
            not rule.triggers or any(isinstance(t, bytes) and t in source for t in rule.triggers)
            for rule in options.rules
        ):
            message = f"file too large to check ({len(source) / 2**20:.1f} MiB, limit {MAX_SOURCE_BYTES // 2**20} MiB); skipped"
        elif not isinstance(parse_native(path, source), Diagnostic):
            return result
        else:
            message = f"file too large to check and not valid Python ({len(source) / 2**20:.1f} MiB)"
        result.diagnostics.append(engine_diagnostic(path, PARSE_ERROR, message))
        return result
    # Off, the pre-filters are off together (byte triggers and candidates): the on/off tests see both.
    rules = (
        [r for r in options.rules if admits(r, source, options.facts, module_name)]
        if options.prefilter
        else list(options.rules)
    )
    if not rules and options.parses:
        return result  # nothing to look for, and no syntax error to report
    tree = parse_native(path, source)
    if isinstance(tree, Diagnostic):
        result.diagnostics.append(tree)
        return result
    if rules and options.prefilter:
        rules = _candidates(
            rules,
            summarize(
                tree,
                source,
                options.facts.reexported_names,
                module_name,
                is_package,
                options.facts.reexports,
                options.facts.summarized_names,
            ),
        )
    if not rules:
        return result
    nodes = budget.syntax_nodes(tree, budget.MAX_SYNTAX_NODES)
    if nodes > budget.MAX_SYNTAX_NODES:
        result.diagnostics.append(
            engine_diagnostic(
                path,
                OVER_BUDGET,
                (
                    f"not fully checked: more than {budget.MAX_SYNTAX_NODES:,} syntax nodes (the per-file budget, about "
                    "300 MB); its imports and policies still count for the project, its own findings are not looked for"
                ),
            )
        )
        return result
    starts = statement_starts(tree)  # where libcst's statements start: positions of only those asked about
    del tree  # CPython's tree (and the summary over it) is not needed while libcst's exists
    try:
        with budget.time_limit(budget.MAX_SECONDS):
            return _check_concrete(path, source, options, module_name, is_package, rules, result, starts)
    except budget.OverBudget:
        result = FileResult(path, original_source=source, repeatable=False)
        result.diagnostics.append(
            engine_diagnostic(
                path,
                OVER_BUDGET,
                (
                    f"not fully checked: checking took longer than {budget.MAX_SECONDS:g} s (the per-file budget); "
                    "no finding or fix of this file is reported"
                ),
            )
        )
        return result


def _check_concrete(
    path, source, options, module_name, is_package, rules, result: FileResult, starts: Starts | None = None
) -> FileResult:
    module = parse_concrete(path, source)
    if isinstance(module, Diagnostic):
        result.diagnostics.append(module)
        return result
    run = _Run(path, module, options, module_name, is_package, source, rules, starts)
    if not options.fix or not run.fixable():
        result.diagnostics = [run.diagnostic(f) for f in run.findings] + run.crashes
        result.repeatable = not run.crashes
        return result
    return _fix(path, source, run, options, module_name, is_package, result)


def _candidates(rules: list[type[Rule]], code) -> list[type[Rule]]:
    return [rule for rule in rules if rule.candidate(code)]


def _fix(path, source, run: _Run, options, module_name, is_package, result: FileResult) -> FileResult:
    first = run
    fixed: list[Diagnostic] = []
    for _ in range(MAX_FIX_ROUNDS):
        todo = run.fixable()
        if not todo:
            break
        chosen = choose_non_overlapping(todo, lambda n, r=run: r.span(n))
        fixed.extend(run.diagnostic(f, fixed=True) for f in chosen)
        try:
            new_module = apply_fixes(run.wrapper.module, chosen)
        except Exception as exc:
            return _reverted(first, result, f"applying fixes failed ({exc!r}); the file was left unchanged")
        new_source = new_module.bytes
        reparsed = parse(path, new_source)
        if isinstance(reparsed, Diagnostic):
            return _reverted(
                first, result, f"the fixed file would not parse ({reparsed.message}); the file was left unchanged"
            )
        run = _Run(path, reparsed, options, module_name, is_package, new_source)
    else:
        return _reverted(
            first, result, f"fixes did not settle after {MAX_FIX_ROUNDS} rounds; the file was left unchanged"
        )
    final_source = keep_untouched(source, first.wrapper.module.bytes, run.wrapper.module.bytes)
    try:
        compile(final_source, path, "exec", dont_inherit=True)
    except (SyntaxError, ValueError) as exc:
        return _reverted(first, result, f"the fixed file would not compile ({exc}); the file was left unchanged")
    result.diagnostics = fixed + [run.diagnostic(f) for f in run.findings] + run.crashes
    result.repeatable = not (first.crashes or run.crashes)
    if final_source != source:
        result.fixed_source = final_source
        result.fixes_applied = len(fixed)
        _record(path, fixed)
    return result


def _record(path: str, fixed: list[Diagnostic]) -> None:
    """With ``MPLINT_RECORD_FIXES=<file>``, each fix applied is appended there as ``<rule>\t<path>``, from any
    process: how an executed proof shows that it ran the fix of the rule it proves (tests/proof_runs.py)."""
    record = os.environ.get("MPLINT_RECORD_FIXES")
    if record:
        with open(record, "a", encoding="utf-8") as out:
            out.writelines(f"{d.rule_id}\t{path}\n" for d in fixed)


def _reverted(first: _Run, result: FileResult, why: str) -> FileResult:
    result.diagnostics = [first.diagnostic(f) for f in first.findings] + first.crashes
    result.diagnostics.append(engine_diagnostic(first.path, FIX_REVERTED, why))
    result.repeatable = False
    return result


def _leaves_block(statement: cst.BaseSmallStatement) -> bool:
    if isinstance(statement, (cst.Raise, cst.Return, cst.Continue, cst.Break)):
        return True
    if isinstance(statement, cst.Assert):  # ``assert False`` / ``assert 0``: fails whenever it runs (not under -O)
        test = statement.test
        return (
            isinstance(test, cst.Name) and test.value == "False" or isinstance(test, cst.Integer) and test.value == "0"
        )
    return False
