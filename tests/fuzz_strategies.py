"""Inputs and properties for fuzzing the engine and its fixes.

The corpus is every ``fixtures/`` script and every example of ``rules/*.yaml``.
Mutations keep a program valid Python while changing its surface: renamed
import aliases, swapped independent statements, comments and odd whitespace,
and the code wrapped in a function, class or ``if`` block.

Profiles: ``ci`` (default; bounded and derandomized) and ``long``
(``HYPOTHESIS_PROFILE=long``). Neither writes a hypothesis database.
"""

from __future__ import annotations

import ast
import difflib
import os
import re
import tempfile
from dataclasses import dataclass
from pathlib import Path

import libcst as cst
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.configuration import set_hypothesis_home_dir

from mplint.catalog import load_catalog
from mplint.checks import all_rules
from mplint.diagnostics import FileResult
from mplint.engine.check import FIX_REVERTED, PARSE_ERROR, RULE_CRASHED, CheckOptions, check_source
from mplint.project.programs import in_memory_facts

REPO = Path(__file__).resolve().parent.parent

# -- profiles -----------------------------------------------------------------

# hypothesis keeps example patches and caches under its home: outside the repository
set_hypothesis_home_dir(os.path.join(tempfile.gettempdir(), "mplint-hypothesis"))
_COMMON = dict(database=None, deadline=None, suppress_health_check=list(HealthCheck), print_blob=True)
settings.register_profile("ci", derandomize=True, **_COMMON)
settings.register_profile("long", derandomize=False, **_COMMON)
PROFILE = os.environ.get("HYPOTHESIS_PROFILE", "ci")
if PROFILE not in ("ci", "long"):
    PROFILE = "ci"
LONG = PROFILE == "long"
# Caps every test's cases in the long profile (a long run that fits an afternoon): MPLINT_FUZZ_LIMIT=5000.
LIMIT = int(os.environ.get("MPLINT_FUZZ_LIMIT", "0") or 0)


def fuzz_settings(ci_examples: int, long_examples: int) -> settings:
    """Per-test settings on top of the chosen profile; never changes other tests' settings."""
    examples = min(long_examples, LIMIT or long_examples) if LONG else ci_examples
    return settings(settings.get_profile(PROFILE), max_examples=examples)


# -- corpus -------------------------------------------------------------------


@dataclass(frozen=True)
class Program:
    name: str
    code: str
    keras: int | None = None
    policy: str | None = None
    files: tuple[tuple[str, str], ...] = ()  # other files of the project (they feed facts only)


def _corpus() -> list[Program]:
    programs = []
    for path in sorted((REPO / "fixtures").rglob("*.py")):
        programs.append(Program(path.relative_to(REPO).as_posix(), path.read_text(encoding="utf-8")))
    for meta in load_catalog().values():
        if meta.kind != "static":
            continue
        for kind in ("flagged", "clean"):
            for i, example in enumerate(getattr(meta, kind)):
                s = example.settings
                programs.append(
                    Program(
                        f"{meta.id}-{kind}-{i}",
                        example.code,
                        s.get("keras"),
                        s.get("policy"),
                        tuple(sorted((s.get("files") or {}).items())),
                    )
                )
    return programs


CORPUS = _corpus()


# -- running the engine -------------------------------------------------------


def options_for(program: Program, code: str, fix: bool, prefilter: bool = True) -> CheckOptions:
    """CheckOptions as the runner builds them, with a mixed_float16 policy when the code sets none."""
    files = {
        "example.py": code.encode("utf-8", "surrogatepass"),
        **{name: text.encode() for name, text in program.files},
    }
    facts = in_memory_facts(files, program.keras, program.policy)["example.py"]  # no pins
    if not facts.reduced_precision:
        facts = in_memory_facts(files, program.keras, "mixed_float16")["example.py"]
    rules = tuple(r for r in all_rules().values() if r.applies_to(facts))
    return CheckOptions(rules, facts, fix=fix, unsafe_fixes=True, prefilter=prefilter)


def check(
    program: Program, source: bytes, fix: bool, facts_from: bytes | None = None, prefilter: bool = True
) -> FileResult:
    """``check_source`` with options built from ``facts_from`` (default: ``source``), as one runner pass would."""
    code = (source if facts_from is None else facts_from).decode("utf-8", "replace")
    return check_source("example.py", source, options_for(program, code, fix, prefilter), "example", False)


def _lines_of(source: bytes) -> list[str]:
    """Lines as Python counts them (a form feed is not a line break, unlike in str.splitlines)."""
    lines = re.split(r"\r\n|\r|\n", source.decode("utf-8"))
    return lines[:-1] if lines[-1] == "" else lines


def _changed_regions(before: list[str], after: list[str]):
    """(first, last) 1-based lines of ``before`` that were replaced or deleted, and insertions (before line, lines)."""
    replaced, inserted = [], []
    for tag, i1, i2, j1, j2 in difflib.SequenceMatcher(None, before, after, autojunk=False).get_opcodes():
        if tag in ("replace", "delete"):
            replaced.append((i1 + 1, i2, after[j1:j2]))
        elif tag == "insert":
            inserted.append((i1 + 1, after[j1:j2]))
    return replaced, inserted


def _is_import(line: str) -> bool:
    stripped = line.strip()
    return stripped.startswith(("import ", "from ")) or stripped in ("", ")") or stripped.endswith(",")


def assert_engine_properties(program: Program, source: bytes, fixes_without_prefilter: bool = False) -> None:
    """Every property of the engine on one input; raises AssertionError with the evidence.

    The checks of the fixed text use the project facts of the original text: the
    engine's contract is a pure function of (path, bytes, options). That a second
    run, whose facts come from the fixed text, may still find work is a runner
    matter (see test_hostile_inputs' xfail on facts that go stale during --fix).
    """
    lint = check(program, source, fix=False)
    crashed = [d.message for d in lint.diagnostics if d.rule_id == RULE_CRASHED]
    assert not crashed, f"a rule crashed: {crashed}"
    assert lint.fixed_source is None

    # the rules' pre-filter (Rule.candidate) hides no finding. (Not compared: MP000 from libcst alone, for
    # code CPython accepts but libcst cannot parse, such as a backslash-CRLF at the end of the file; a file
    # no rule can match never reaches libcst, so there is nothing to report about it.)
    found = [(d.rule_id, d.line, d.column, d.message) for d in lint.diagnostics if d.rule_id != PARSE_ERROR]
    unfiltered = check(program, source, fix=False, prefilter=False)
    unfiltered_found = [
        (d.rule_id, d.line, d.column, d.message) for d in unfiltered.diagnostics if d.rule_id != PARSE_ERROR
    ]
    assert found == unfiltered_found, "the pre-filter hid a finding"

    if fixes_without_prefilter:  # every rule visits, whatever the code mentions
        lint = unfiltered
    if not any(d.fixable for d in lint.diagnostics):
        return  # with nothing to fix, --fix runs exactly the lint pass above
    fixed = check(program, source, fix=True, prefilter=not fixes_without_prefilter)
    reverted = [d.message for d in fixed.diagnostics if d.rule_id in (FIX_REVERTED, RULE_CRASHED)]
    assert not reverted, f"a fix was reverted or a rule crashed: {reverted}"
    if fixed.fixed_source is None:
        assert [d for d in fixed.diagnostics if d.fixed] == []
        return
    new = fixed.fixed_source

    # the fixed file parses and compiles
    ast.parse(new)
    compile(new, "example.py", "exec", dont_inherit=True)

    # --fix is idempotent; with nothing left to fix, that second --fix is also the lint of the fixed text
    relint = check(program, new, fix=True, facts_from=source, prefilter=not fixes_without_prefilter)
    assert relint.fixed_source is None, "a second --fix changed the file:\n" + new.decode()
    assert not any(d.fixed for d in relint.diagnostics)

    # lint -> fix -> lint: the fixed findings are gone, and what --fix reported as left is what a lint finds
    left = [(d.rule_id, d.line, d.column, d.message) for d in fixed.diagnostics if not d.fixed]
    assert left == [(d.rule_id, d.line, d.column, d.message) for d in relint.diagnostics]
    new_lines, old_lines = _lines_of(new), _lines_of(source)
    for d in fixed.diagnostics:
        if d.fixed:
            was = old_lines[d.line - 1].strip() if d.line <= len(old_lines) else None
            still = [
                r
                for r in relint.diagnostics
                if r.rule_id == d.rule_id and r.column == d.column and new_lines[r.line - 1].strip() == was
            ]
            assert not still, f"{d.rule_id} at {d.line}:{d.column} was fixed but is still reported: {still[0].message}"

    # fixing changes nothing outside the flagged spans (imports added at the top aside)
    allowed: set[int] = set()
    for d in [*lint.diagnostics, *fixed.diagnostics]:
        if d.fixable or d.fixed:
            allowed.update(range(d.line, d.end_line + 1))
            for e in d.edits:
                allowed.update(range(e.line, e.end_line + 1))
    # fixes of later rounds are placed in that round's text: allow for the lines earlier rounds added or removed
    replaced, inserted = _changed_regions(old_lines, new_lines)
    added = sum(len(lines) for _, lines in inserted) + sum(
        max(len(by) - (last - first + 1), 0) for first, last, by in replaced
    )
    removed = sum(max(last - first + 1 - len(by), 0) for first, last, by in replaced)
    first_round = {(d.rule_id, d.line, d.column) for d in lint.diagnostics}
    for d in fixed.diagnostics:
        if d.fixed and (d.rule_id, d.line, d.column) not in first_round:
            for start, end in [(d.line, d.end_line), *((e.line, e.end_line) for e in d.edits)]:
                allowed.update(range(start - added, end + removed + 1))
    for n in sorted(allowed):  # a statement's node owns the comments and blank lines right above it
        while n > 1 and n - 1 not in allowed and old_lines[n - 2].strip()[:1] in ("", "#"):
            n -= 1
            allowed.add(n)
    # every line outside the allowed spans survives, in order (a subsequence test: identical lines
    # such as repeated comments cannot confuse it the way a diff alignment can)
    kept = [line for n, line in enumerate(old_lines, start=1) if n not in allowed and not _is_import(line)]
    remaining = iter(new_lines)
    for line in kept:
        assert any(line == candidate for candidate in remaining), (
            f"a line outside every flagged span changed or moved: {line!r}"
        )


# -- mutations ----------------------------------------------------------------


class _RenameName(cst.CSTTransformer):
    def __init__(self, old: str, new: str):
        super().__init__()
        self.old, self.new = old, new

    def leave_Name(self, original_node, updated_node):
        return updated_node.with_changes(value=self.new) if updated_node.value == self.old else updated_node


def import_aliases(module: cst.Module) -> list[str]:
    """Names bound by ``import x as a`` / ``from x import y as a``."""
    found: list[str] = []

    class Collect(cst.CSTVisitor):
        def visit_ImportAlias(self, node):
            if node.asname is not None and isinstance(node.asname.name, cst.Name):
                found.append(node.asname.name.value)

    module.visit(Collect())
    return sorted(set(found))


def rename_alias(code: str, alias: str, suffix: str) -> str:
    """``import tensorflow as tf`` -> ``as tf<suffix>``, every use renamed (attribute names stay)."""
    module = cst.parse_module(code)
    new = alias + suffix

    class Rename(_RenameName):
        def visit_Attribute(self, node):  # rename only the object, never the attribute: tf.keras, not x.tf
            return False

        def leave_Attribute(self, original_node, updated_node):
            return updated_node.with_changes(value=original_node.value.visit(self))

    return module.visit(Rename(alias, new)).code


def _bound_and_used(stmt: ast.stmt) -> tuple[set[str], set[str]]:
    bound, used = set(), set()
    for node in ast.walk(stmt):
        if isinstance(node, ast.Name):
            (bound if isinstance(node.ctx, (ast.Store, ast.Del)) else used).add(node.id)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            bound.add(node.name)
        elif isinstance(node, ast.alias):
            bound.add((node.asname or node.name).split(".")[0])
        elif isinstance(node, (ast.Global, ast.Nonlocal)):
            return {"*"}, {"*"}
    return bound, used


def independent_pairs(code: str) -> list[int]:
    """Indexes i such that top-level statements i and i+1 touch no common name (neither is a __future__ import)."""
    body = ast.parse(code).body
    pairs = []
    for i in range(len(body) - 1):
        a, b = body[i], body[i + 1]
        if any(isinstance(s, ast.ImportFrom) and s.module == "__future__" for s in (a, b)):
            continue
        if i == 0 and isinstance(a, ast.Expr) and isinstance(a.value, ast.Constant):
            continue  # the docstring stays first
        ba, ua = _bound_and_used(a)
        bb, ub = _bound_and_used(b)
        if "*" in ba | bb or ba & (ub | bb) or bb & ua:
            continue
        pairs.append(i)
    return pairs


def swap_statements(code: str, index: int) -> str:
    module = cst.parse_module(code)
    body = list(module.body)
    a, b = body[index], body[index + 1]
    # the leading blank lines and comments stay where they were
    body[index] = b.with_changes(leading_lines=a.leading_lines)
    body[index + 1] = a.with_changes(leading_lines=b.leading_lines)
    return module.with_changes(body=body).code


COMMENTS = ("# mplint: fuzz", "# é ✓ 浮点", "#", "#\ttabbed comment", "# noqa-free: float16 softmax")


class _Decorate(cst.CSTTransformer):
    """Comments before statements and odd whitespace inside calls, chosen by a stream of draws."""

    def __init__(self, choices: list[int]):
        super().__init__()
        self.choices = choices
        self.i = 0

    def _next(self) -> int:
        value = self.choices[self.i % len(self.choices)] if self.choices else 0
        self.i += 1
        return value

    def _leading(self, updated_node):
        pick = self._next()
        if pick % 3 != 0:
            return updated_node
        comment = cst.EmptyLine(comment=cst.Comment(COMMENTS[pick % len(COMMENTS)]))
        blank = cst.EmptyLine()
        return updated_node.with_changes(
            leading_lines=[*updated_node.leading_lines, blank, comment][-3:]
            if pick % 2
            else [*updated_node.leading_lines, comment]
        )

    def leave_SimpleStatementLine(self, original_node, updated_node):
        return self._leading(updated_node)

    def leave_FunctionDef(self, original_node, updated_node):
        return self._leading(updated_node)

    def leave_ClassDef(self, original_node, updated_node):
        return self._leading(updated_node)

    def leave_If(self, original_node, updated_node):
        return self._leading(updated_node)

    def leave_Arg(self, original_node, updated_node):
        pick = self._next()
        if pick % 4 == 1:
            return updated_node.with_changes(whitespace_after_arg=cst.SimpleWhitespace("  \t "))
        if pick % 4 == 2 and updated_node.comma is not cst.MaybeSentinel.DEFAULT:
            newline = cst.ParenthesizedWhitespace(
                first_line=cst.TrailingWhitespace(comment=cst.Comment("# arg")),
                empty_lines=[cst.EmptyLine()],
                indent=True,
                last_line=cst.SimpleWhitespace("        "),
            )
            return updated_node.with_changes(comma=cst.Comma(whitespace_after=newline))
        return updated_node

    def leave_Call(self, original_node, updated_node):
        pick = self._next()
        if pick % 5 == 0:
            return updated_node.with_changes(whitespace_before_args=cst.SimpleWhitespace(" "))
        return updated_node


def decorate(code: str, choices: list[int]) -> str:
    return cst.parse_module(code).visit(_Decorate(choices)).code


WRAPPERS = (
    "def _wrapped():",
    "class Wrapped:",
    "if True:",
    'if __name__ == "__main__":',
    "try:",
    "with open(__file__):",
)


def wrap(code: str, header: str) -> str:
    """The module's statements (past its docstring and __future__ imports) inside ``header``."""
    module = cst.parse_module(code)
    body = list(module.body)
    keep = 0
    while keep < len(body) and _stays_at_top(body[keep], keep):
        keep += 1
    inner = body[keep:] or [cst.SimpleStatementLine([cst.Pass()])]
    compound = cst.parse_statement(
        f"{header}\n    pass\n" + ("except Exception:\n    pass\n" if header == "try:" else "")
    )
    new = compound.with_changes(body=compound.body.with_changes(body=inner))
    return module.with_changes(body=[*body[:keep], new]).code


def _stays_at_top(stmt, index: int) -> bool:
    if not isinstance(stmt, cst.SimpleStatementLine):
        return False
    small = stmt.body[0]
    if isinstance(small, cst.ImportFrom) and isinstance(small.module, cst.Name) and small.module.value == "__future__":
        return True
    return (
        index == 0
        and isinstance(small, cst.Expr)
        and isinstance(small.value, (cst.SimpleString, cst.ConcatenatedString))
    )


def odd_text(code: str, pick: int) -> str:
    """Whole-file surface changes that Python ignores: CRLF endings, trailing spaces, a form feed, no final newline."""
    if pick % 4 == 0:
        return code.replace("\n", "\r\n")
    if pick % 4 == 1:  # trailing whitespace outside strings: only on lines a tokenizer ends with NEWLINE/NL
        return _trailing_spaces(code)
    if pick % 4 == 2:
        return "\x0c\n" + code
    return code.rstrip("\n")


def _trailing_spaces(code: str) -> str:
    import io
    import tokenize

    ends = set()
    try:
        for tok in tokenize.generate_tokens(io.StringIO(code).readline):
            if tok.type in (tokenize.NEWLINE, tokenize.NL) and tok.string:
                ends.add(tok.start[0])
    except (tokenize.TokenError, SyntaxError):
        return code
    lines = code.split("\n")
    return "\n".join(
        line + " \t" if n + 1 in ends and not line.endswith("\\") else line for n, line in enumerate(lines)
    )


@st.composite
def mutated_programs(draw, programs=CORPUS) -> tuple[Program, str]:
    """A corpus program after one to four mutations, each of which keeps it valid Python."""
    program = draw(st.sampled_from(programs))
    code = program.code
    steps = draw(st.lists(st.sampled_from(("rename", "swap", "decorate", "wrap", "odd")), min_size=1, max_size=4))
    for step in steps:
        if step == "rename":
            aliases = import_aliases(cst.parse_module(code))
            if aliases:
                code = rename_alias(
                    code, draw(st.sampled_from(aliases)), draw(st.sampled_from(("x", "_", "2", "_alias")))
                )
        elif step == "swap":
            pairs = independent_pairs(code)
            if pairs:
                code = swap_statements(code, draw(st.sampled_from(pairs)))
        elif step == "decorate":
            code = decorate(code, draw(st.lists(st.integers(0, 59), min_size=1, max_size=12)))
        elif step == "wrap":
            code = wrap(code, draw(st.sampled_from(WRAPPERS)))
        else:
            code = odd_text(code, draw(st.integers(0, 3)))
    return program, code
