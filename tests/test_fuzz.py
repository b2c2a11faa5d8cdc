"""Fuzzing the engine and its fixes with the real rules.

For every input: the engine never raises and no rule crashes; every fix
leaves a file that parses and compiles; ``--fix`` is idempotent; fixing
changes nothing outside the flagged spans; lint -> fix -> lint shows none of
the fixed findings. Inputs: the corpus (fixtures and rule examples) as is and
mutated, and hypothesmith-generated programs, alone and appended to the corpus.

The ``ci`` profile is the default; ``HYPOTHESIS_PROFILE=long`` runs far more
cases (see docs/robustness.md).
"""

from __future__ import annotations

import ast

import fuzz_corpus
import hypothesmith
import libcst as cst
import pytest
from fuzz_strategies import (
    CORPUS,
    LONG,
    WRAPPERS,
    Program,
    assert_engine_properties,
    check,
    decorate,
    fuzz_settings,
    import_aliases,
    independent_pairs,
    mutated_programs,
    odd_text,
    rename_alias,
    swap_statements,
    wrap,
)
from hypothesis import assume, given
from hypothesis import strategies as st

from mplint.testing import lint_code

pytestmark = pytest.mark.filterwarnings("ignore::SyntaxWarning")  # generated code such as `1()` warns

BARE = Program("generated", "")


@pytest.mark.parametrize("program", CORPUS, ids=[p.name for p in CORPUS])
def test_corpus_as_is(program):
    assert_engine_properties(program, program.code.encode("utf-8"))


@fuzz_settings(ci_examples=1_200, long_examples=50_000)
@given(mutated_programs())
def test_mutated_corpus(case):
    program, code = case
    assert_engine_properties(program, code.encode("utf-8"))


def generated_program_properties(code: str) -> None:
    source = code.encode("utf-8", "surrogatepass")
    result = check(BARE, source, fix=True, prefilter=False)  # every rule visits the generated code
    assert all(d.rule_id != "MP002" for d in result.diagnostics)
    if all(d.rule_id != "MP000" for d in result.diagnostics):
        assert_engine_properties(BARE, source, fixes_without_prefilter=True)


def followed_by_generated_properties(program: Program, generated: str) -> bool:
    """False where the two do not compile together (a ``return`` after module code, say): nothing to check."""
    code = program.code + "\n" + generated
    try:
        compile(code, "example.py", "exec", dont_inherit=True)
    except (SyntaxError, ValueError):
        return False
    assert_engine_properties(program, code.encode("utf-8"))
    return True


def each(cases, check_one) -> int:
    """Run ``check_one`` on every case; a failure names the case it failed on. How many cases were checked."""
    checked = 0
    for index, case in cases:
        try:
            checked += check_one(*case) is not False
        except AssertionError as failure:
            shown = "\n---\n".join(c if isinstance(c, str) else c.name for c in case)
            raise AssertionError(f"case {index} of the kept corpus:\n{shown}\n---\n{failure}") from failure
    return checked


if LONG:  # new programs every run, drawn by hypothesmith

    @fuzz_settings(ci_examples=0, long_examples=100_000)
    @given(hypothesmith.from_grammar())
    def test_generated_programs(code):
        generated_program_properties(code)

    @fuzz_settings(ci_examples=0, long_examples=20_000)
    @given(st.sampled_from(CORPUS), hypothesmith.from_node())
    def test_corpus_followed_by_generated_code(program, generated):
        assume(followed_by_generated_properties(program, generated))

else:  # the ci profile's derandomized draws, kept (tests/fuzz_corpus.py), in slices the workers share
    GENERATED = fuzz_corpus.load("from_grammar")
    NODES = fuzz_corpus.load("from_node")
    SLICES = 16

    @pytest.mark.parametrize("part", range(SLICES))
    def test_generated_programs(part):
        cases = [(i, (code,)) for i, code in enumerate(GENERATED)][part::SLICES]
        assert each(cases, generated_program_properties) == len(cases)

    @pytest.mark.parametrize("part", range(SLICES))
    def test_corpus_followed_by_generated_code(part):
        """Each kept statement after a corpus program, taking the corpus in turn (every program is followed)."""
        cases = [(i, (CORPUS[i % len(CORPUS)], code)) for i, code in enumerate(NODES)][part::SLICES]
        assert each(cases, followed_by_generated_properties) > len(cases) // 2


def test_the_kept_corpus_is_what_its_files_hold():
    """Distinct programs, each of which Python's grammar allows (they came from hypothesmith's grammar)."""
    for stem in fuzz_corpus.DRAWS:
        programs = fuzz_corpus.load(stem)
        assert len(programs) == len(set(programs)) > fuzz_corpus.DRAWS[stem][1] // 3
    assert sum(bool(code.strip()) for code in fuzz_corpus.load("from_grammar")) > 1_000


# -- the mutators themselves: each keeps the program valid and really changes it --------

TF_PROGRAM = '''"""Doc."""
from __future__ import annotations
import tensorflow as tf
from tensorflow.keras import layers as L

x = 1
y = 2
model = tf.keras.Sequential([L.Dense(4, activation="softmax")])
'''


def test_rename_alias_renames_the_binding_and_every_use_but_no_attribute():
    assert import_aliases(cst.parse_module(TF_PROGRAM)) == ["L", "tf"]
    renamed = rename_alias(TF_PROGRAM, "tf", "x")
    assert "import tensorflow as tfx" in renamed
    assert "tfx.keras.Sequential" in renamed and " tf." not in renamed
    assert "from tensorflow.keras import" in renamed


def test_swap_moves_only_independent_statements():
    pairs = independent_pairs(TF_PROGRAM + "z = x\nw = z\n")
    assert 4 in pairs and 6 in pairs  # x = 1 / y = 2 and model = ... / z = x
    assert 0 not in pairs and 1 not in pairs  # the docstring and __future__ stay first
    assert 7 not in pairs  # z = x / w = z: w reads z
    swapped = swap_statements(TF_PROGRAM, 4)
    assert swapped.index("y = 2") < swapped.index("x = 1")


@pytest.mark.parametrize("header", WRAPPERS)
def test_wrap_keeps_future_imports_first_and_compiles(header):
    wrapped = wrap(TF_PROGRAM, header)
    compile(wrapped, "w.py", "exec", dont_inherit=True)
    assert wrapped.startswith('"""Doc."""\nfrom __future__ import annotations\n' + header)


def test_decorate_and_odd_text_keep_the_program_valid():
    decorated = decorate(TF_PROGRAM, [0, 1, 2, 3, 6, 9])
    assert decorated != TF_PROGRAM and "#" in decorated
    for text in [decorated, *(odd_text(TF_PROGRAM, i) for i in range(4))]:
        compile(text, "d.py", "exec", dont_inherit=True)
    assert ast.dump(ast.parse(decorated)) == ast.dump(ast.parse(TF_PROGRAM))


def test_the_corpus_is_the_fixtures_and_every_rule_example():
    names = [p.name for p in CORPUS]
    assert any(n.startswith("fixtures/") for n in names)
    assert any(n.startswith("MP101-flagged") for n in names) and any(n.startswith("MP701-clean") for n in names)


# -- regressions found by fuzzing -------------------------------------------------------


def test_float16_layer_fix_then_corpus_properties_hold():
    """MP602's fix (dtype float16 -> "mixed_float16") makes a per-layer mixed policy: within one run the fix settles."""
    program = next(p for p in CORPUS if p.name == "MP602-flagged-0")
    assert_engine_properties(program, program.code.encode())


def test_two_fix_runs_with_fresh_facts_are_idempotent():
    """MP602's fix adds a per-layer mixed_float16 policy: the same run checks again with the new facts."""
    code = (
        "import tensorflow as tf\n\n"
        "model = tf.keras.Sequential([\n"
        '    tf.keras.layers.Dense(64, activation="relu", dtype=tf.float16),\n'
        '    tf.keras.layers.Dense(1, dtype="float16"),\n'
        "])\n"
        'model.compile(optimizer="adam", loss="mse")\n'
    )
    pins = {"requirements.txt": "tensorflow>=2.3\n"}  # evidence of a range: the unsafe fix is offered
    first = lint_code(code, files=pins, fix=True, unsafe_fixes=True)
    assert first.written
    second = lint_code(first.fixed_code, files=pins, fix=True, unsafe_fixes=True)
    assert not second.written, "a second --fix changed the file:\n" + second.fixed_code
