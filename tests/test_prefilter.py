"""The rules' pre-filter (Rule.candidate on CPython's tree) never hides a finding.

Each corpus is checked twice, with the pre-filter on and off; the diagnostics must be identical.
The fuzz tests (tests/test_fuzz.py) check the same on every generated input.
"""

from __future__ import annotations

import ast
import importlib.util
import shutil
from pathlib import Path

import pytest

from mplint.catalog import load_catalog
from mplint.check_options import CheckOptions
from mplint.code_summary import summarize
from mplint.engine import check_source
from mplint.facts import Generation, PolicySite, ProjectFacts, UNKNOWN_POLICY
from mplint.registry import all_rules
from mplint.runner import RunOptions, run

REPO = Path(__file__).resolve().parent.parent


def _keys(diagnostics):
    return sorted((d.path, d.rule_id, d.line, d.column, d.message) for d in diagnostics)


def test_fixtures_find_the_same_with_and_without_the_prefilter(tmp_path):
    shutil.copytree(REPO / "fixtures", tmp_path / "fixtures")
    every_rule = sorted(load_catalog())
    on = run(RunOptions([tmp_path / "fixtures"], cache=False, jobs=1, select=every_rule))
    off = run(RunOptions([tmp_path / "fixtures"], cache=False, jobs=1, select=every_rule, prefilter=False))
    assert _keys(on.diagnostics) == _keys(off.diagnostics)
    assert len({d.rule_id for d in on.diagnostics}) >= 13  # the fixtures exercise most rules


def _every_rule_active() -> CheckOptions:
    """A project where every rule can fire: a float16 policy nobody can evaluate, TPUs, Keras 3."""
    facts = ProjectFacts(
        policies=(PolicySite(UNKNOWN_POLICY, "train.py", 1, "global"), PolicySite("mixed_float16", "m.py", 1, "layer")),
        generation=Generation(3, "test"),
        tpu_sites=(("tpu.py", 1),),
        keras_namespaces=frozenset({"keras", "tf.keras"}),
    )
    return CheckOptions(tuple(all_rules().values()), facts)


def _keras_sample() -> list[Path]:
    spec = importlib.util.find_spec("keras")
    if spec is None or not spec.submodule_search_locations:
        return []
    src = Path(list(spec.submodule_search_locations)[0]) / "src"
    return sorted(p for p in src.rglob("*.py") if not p.name.endswith("_test.py"))[::12]


@pytest.mark.parametrize("path", _keras_sample(), ids=lambda p: "/".join(p.parts[-2:]))
def test_a_large_library_finds_the_same_with_and_without_the_prefilter(path):
    options = _every_rule_active()
    source = path.read_bytes()
    on = check_source(str(path), source, options)
    off = check_source(str(path), source, CheckOptions(options.rules, options.facts, prefilter=False))
    assert _keys(on.diagnostics) == _keys(off.diagnostics)


def test_every_flagged_example_is_a_candidate_for_its_rule():
    rules = all_rules()
    for meta in load_catalog().values():
        rule = rules.get(meta.id)
        if rule is None:
            continue  # engine codes
        for example in meta.flagged:
            code = summarize(ast.parse(example.code), example.code.encode())
            assert rule.candidate(code), f"{meta.id}: a flagged example is not a candidate:\n{example.code}"


def test_the_prefilter_stops_files_that_only_talk_about_an_api():
    """A docstring and a comment name softmax, a model and float16; the code does neither."""
    source = b'"""Builds a Sequential Model with a softmax output in float16."""\n# keras.Model, softmax\nx = 1\n'
    code = summarize(ast.parse(source), source)
    rules = all_rules()
    assert not rules["MP101"].candidate(code)
    assert not rules["MP102"].candidate(code)
    assert not rules["MP602"].candidate(code)
    aliased = b"from keras.layers import Dense as D, Softmax as S\nfrom keras import Sequential as Seq\nm = Seq([D(3), S()])\n"
    assert rules["MP101"].candidate(summarize(ast.parse(aliased), aliased))


def test_valid_python_only_libcst_rejects_is_not_reported_when_no_rule_could_match():
    """Found by the fuzz tests: CPython accepts a backslash-CRLF at the end of a file, libcst does not.
    Such a file reaches libcst (and gets an MP000) only when some rule could match it."""
    source = b"# softmax Sequential\nx = 1\n\\\r\n"
    compile(source, "example.py", "exec")
    assert check_source("example.py", source, _every_rule_active()).diagnostics == []
    unfiltered = _every_rule_active()
    unfiltered = CheckOptions(unfiltered.rules, unfiltered.facts, prefilter=False)
    assert [d.rule_id for d in check_source("example.py", source, unfiltered).diagnostics] == ["MP000"]
