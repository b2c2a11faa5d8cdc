"""The engine on its own: parsing, positions, suppressions, the fix loop and its safety checks."""

from __future__ import annotations

import pytest
from conftest import Crashes, DenseWithoutDtype, NeverSettles, ReturnEverywhere, UnsafeImportAdder

from mplint.diagnostics import FixSafety
from mplint.engine.check import CheckOptions, check_source
from mplint.project.facts import ProjectFacts


def check(source: bytes, *rules, fix=False, unsafe=False):
    return check_source("m.py", source, CheckOptions(tuple(rules), ProjectFacts(), fix=fix, unsafe_fixes=unsafe))


def summary(result):
    return [(d.rule_id, d.line, d.column, d.end_line, d.end_column, d.fixed) for d in result.diagnostics]


SOURCE = b"""import tensorflow as tf
from keras import layers as L
import tensorflow.keras as k

a = tf.keras.layers.Dense(3)
b = L.Dense(2, activation="softmax")
c = k.layers.Dense(1, dtype="float32")
"""


def test_positions_are_exact_and_aliases_resolve():
    result = check(SOURCE, DenseWithoutDtype)
    assert summary(result) == [("TEST1", 5, 5, 5, 29, False), ("TEST1", 6, 5, 6, 37, False)]
    assert result.fixed_source is None


def test_fix_output_is_exact_and_a_fixed_point():
    result = check(SOURCE, DenseWithoutDtype, fix=True)
    expected = SOURCE.replace(b"Dense(3)", b'Dense(3, dtype="float32")').replace(
        b'activation="softmax")', b'activation="softmax", dtype="float32")'
    )
    assert result.fixed_source == expected
    assert result.fixes_applied == 2
    assert [d.fixed for d in result.diagnostics] == [True, True]
    again = check(result.fixed_source, DenseWithoutDtype, fix=True)
    assert again.fixed_source is None and again.diagnostics == []


def test_fix_keeps_bom_and_crlf():
    source = b"\xef\xbb\xbf" + SOURCE.replace(b"\n", b"\r\n")
    result = check(source, DenseWithoutDtype, fix=True)
    assert result.fixed_source.startswith(b"\xef\xbb\xbfimport tensorflow as tf\r\n")
    assert b"\n" not in result.fixed_source.replace(b"\r\n", b"")
    assert b'Dense(3, dtype="float32")\r\n' in result.fixed_source


def test_fix_keeps_a_declared_latin1_encoding():
    source = b"# -*- coding: latin-1 -*-\n# caf\xe9\nfrom keras import layers\nx = layers.Dense(4)\n"
    result = check(source, DenseWithoutDtype, fix=True)
    assert result.fixed_source == source.replace(b"Dense(4)", b'Dense(4, dtype="float32")')


def test_suppressions():
    source = b"""from keras import layers
a = layers.Dense(1)  # noqa: TEST1
b = layers.Dense(1)  # noqa
c = layers.Dense(1)  # noqa: MP101
# mplint: ignore[TEST1]
d = layers.Dense(1)
e = layers.Dense(1)  # mplint: ignore[dense-without-dtype]
f = layers.Dense(1)  # mplint: ignore
g = layers.Dense(1, name="# noqa: TEST1")
# mplint: ignore[TEST]
h = layers.Dense(1)
"""
    assert [d.line for d in check(source, DenseWithoutDtype).diagnostics] == [4, 9]


def test_file_level_suppression():
    source = b"from keras import layers\n# mplint: ignore-file[TEST1]\na = layers.Dense(1)\n"
    assert check(source, DenseWithoutDtype).diagnostics == []
    other = b"from keras import layers\n# mplint: ignore-file[MP101]\na = layers.Dense(1)\n"
    assert [d.line for d in check(other, DenseWithoutDtype).diagnostics] == [3]


def test_syntax_error_is_mp000_with_position():
    result = check(b"x = Dense\ndef f(:\n    pass\n", DenseWithoutDtype)
    [d] = result.diagnostics
    assert (d.rule_id, d.name, d.line, d.column) == ("MP000", "parse-error", 2, 7)
    assert d.message.startswith("syntax error")


def test_undecodable_and_null_bytes_and_bad_cookie_are_mp000():
    for source, words in [
        (b"x = '\xff\xfe' + Dense\n", "decode"),
        (b"x = Dense\x00\n", "null bytes"),
        (b"# -*- coding: klingon -*-\nx = Dense\n", "decode"),
    ]:
        [d] = check(source, DenseWithoutDtype).diagnostics
        assert d.rule_id == "MP000" and words in d.message, d.message


def test_fix_that_does_not_compile_is_reverted():
    source = b"from keras import layers\nlayers.Dense(1)\nmarker\n"
    result = check(source, ReturnEverywhere, DenseWithoutDtype, fix=True)
    assert result.fixed_source is None
    ids = [d.rule_id for d in result.diagnostics]
    assert ids == ["TEST1", "TEST2", "MP001"]
    assert "would not compile" in result.diagnostics[-1].message
    assert not any(d.fixed for d in result.diagnostics)


def test_fix_that_never_settles_is_reverted():
    result = check(b"x = 1\n", NeverSettles, fix=True)
    assert result.fixed_source is None
    assert result.diagnostics[-1].rule_id == "MP001"
    assert "did not settle" in result.diagnostics[-1].message


def test_crashing_rule_is_reported_and_other_rules_are_not_lost():
    result = check(b"boom = 1\n", Crashes)
    [d] = result.diagnostics
    assert d.rule_id == "MP002" and "RuntimeError('boom')" in d.message


def test_a_crashing_rule_loses_only_its_own_findings_and_mp002_names_it_and_the_frame():
    # TEST1 reports before and after the name that makes TEST4 raise: both of its findings stay.
    source = b"from keras import layers\nlayers.Dense(1)\nboom = 1\nlayers.Dense(2)\n"
    result = check(source, Crashes, DenseWithoutDtype)
    assert [(d.rule_id, d.line) for d in result.diagnostics] == [("TEST1", 2), ("TEST1", 4), ("MP002", 1)]
    message = result.diagnostics[-1].message
    assert message.startswith("rule TEST4 (crashes) crashed on this file: RuntimeError('boom') in visit_Name (")
    assert "conftest.py:" in message
    assert "its findings for this file were dropped, the other rules' findings are kept" in message


def test_a_crashing_rule_is_not_called_again_on_the_same_file():
    calls = []

    class CrashesTwice(Crashes):
        def visit_Name(self, node):
            calls.append(node.value)
            super().visit_Name(node)

    result = check(b"boom = 1\nboom = 2\nafter = 3\n", CrashesTwice)
    [d] = result.diagnostics
    assert d.rule_id == "MP002" and calls == ["boom"]
    # the rule's own frame first, then the frame that raised
    assert "in visit_Name (" in d.message and ", raised at " in d.message and d.message.count("conftest.py:") == 1


def test_a_crash_during_fixing_keeps_the_other_rules_fixes():
    source = b"from keras import layers\nlayers.Dense(1)\nboom = 1\n"
    result = check(source, Crashes, DenseWithoutDtype, fix=True)
    assert result.fixed_source == source.replace(b"Dense(1)", b'Dense(1, dtype="float32")')
    assert [(d.rule_id, d.fixed) for d in result.diagnostics] == [("TEST1", True), ("MP002", False)]


def test_unsafe_fixes_need_opt_in_and_imports_are_added():
    source = b"x = rounded(2.5)\n"
    plain = check(source, UnsafeImportAdder, fix=True)
    assert plain.fixed_source is None
    assert [(d.rule_id, d.fix_safety, d.fixed) for d in plain.diagnostics] == [("TEST5", FixSafety.UNSAFE, False)]
    unsafe = check(source, UnsafeImportAdder, fix=True, unsafe=True)
    assert unsafe.fixed_source == b"import math\n\nx = math.ceil(2.5)\n"


@pytest.mark.parametrize(
    "ceiling, offered, applied",
    [("unsafe", FixSafety.UNSAFE, False), ("none", FixSafety.NONE, False), ("safe", FixSafety.SAFE, True)],
)
def test_the_catalog_caps_a_rules_fix_safety(ceiling, offered, applied):
    """A rule's code marks each fix, but never safer than its catalog entry says: a fix marked safe by a rule
    whose YAML says ``fix_safety: unsafe`` is offered as unsafe, and a rule whose YAML says none offers none."""
    import dataclasses

    class Capped(DenseWithoutDtype):
        key = dataclasses.replace(DenseWithoutDtype.key, fix_safety=FixSafety(ceiling))

    source = b"from keras import layers\nlayers.Dense(1)\n"
    result = check(source, Capped, fix=True)
    assert [(d.rule_id, d.fix_safety, d.fixed) for d in result.diagnostics] == [("TEST1", offered, applied)]
    assert (result.fixed_source is not None) is applied


def test_edits_describe_the_fix_as_text():
    [d, _] = check(SOURCE, DenseWithoutDtype).diagnostics
    [edit] = d.edits
    assert (edit.line, edit.column, edit.end_line, edit.end_column) == (5, 5, 5, 29)
    assert edit.text == 'tf.keras.layers.Dense(3, dtype="float32")'


def test_files_no_rule_admits_skip_libcst_but_syntax_errors_still_show(monkeypatch):
    assert check(b"x = 1\n", DenseWithoutDtype).diagnostics == []
    [d] = check(b"def f(:\n", DenseWithoutDtype).diagnostics
    assert (d.rule_id, d.line, d.column, d.message) == ("MP000", 1, 7, "syntax error: invalid syntax")
    import libcst

    monkeypatch.setattr(libcst, "parse_module", lambda *a: (_ for _ in ()).throw(AssertionError("parsed")))
    assert check(b"x = 2\n", DenseWithoutDtype).diagnostics == []


def test_nested_fixes_are_applied_over_rounds():
    source = b"from keras import layers\nlayers.Dense(layers.Dense(1))\n"
    result = check(source, DenseWithoutDtype, fix=True)
    assert (
        result.fixed_source
        == b'from keras import layers\nlayers.Dense(layers.Dense(1, dtype="float32"), dtype="float32")\n'
    )


def test_positions_match_libcsts_position_provider():
    """``context.positions`` skips libcst's empty batched visit; the positions must be libcst's own."""
    from pathlib import Path

    import libcst as cst
    from libcst.metadata import MetadataWrapper, PositionProvider

    from mplint.engine.lazy_positions import whole_module

    sources = sorted((Path(__file__).parent.parent / "fixtures").rglob("*.py"))
    assert sources
    for path in sources:
        wrapper = MetadataWrapper(cst.parse_module(path.read_bytes()))
        expected = wrapper.resolve(PositionProvider)
        found = whole_module(wrapper)
        assert len(found) == len(expected) > 0
        assert all(found[node] == expected[node] for node in expected), path


def _lazy_positions(source: bytes):
    import ast

    import libcst as cst
    from libcst.metadata import MetadataWrapper

    from mplint.engine.lazy_positions import LazyPositions, statement_starts, whole_module
    from mplint.engine.walk import descendants

    module = cst.parse_module(source)
    wrapper = MetadataWrapper(module, unsafe_skip_copy=True)
    parents = {id(node): parent for node, parent, _ in descendants(module) if parent is not None}
    text = source.decode(module.encoding).lstrip("\ufeff")
    tree = compile(source, "x.py", "exec", flags=ast.PyCF_ONLY_AST, dont_inherit=True)
    lazy = LazyPositions(wrapper, lambda: text, statement_starts(tree), lambda n: parents.get(id(n)))
    nodes = [node for node, _, _ in descendants(module) if node is not module]
    return lazy, whole_module(wrapper), nodes


@pytest.mark.parametrize(
    "source, per_statement",
    [
        (
            b"# header\n\nimport keras\n\n\ndef f(x):\n    return keras.layers.Dense(3)(x)\n    # kept by the block\n# dedented\ny = f(1)\n",
            True,
        ),
        (b"a = 1; b = (\n  2)\nc = \\\n  3\n\n\n", True),
        (b'x = 1\r\ny = (\r\n 2)\r\n\r\ndef f():\r\n    return """a\r\nb"""\r\n', True),
        (b"\xef\xbb\xbfx = 1\nif x:\n    y = 2\nelse:\n\ty = 3\n", True),
        (b"# c\n\n@ (deco)  # x\n\n@other\nclass A:\n    x = 1\n\ny = 2", True),  # no final newline
        (b"@(\n  deco\n)\ndef f():\n    pass\n", False),  # the decorator's expression starts a line below its "@"
        (b"x = 1\n\\\n\ny = 2\n", False),  # a continued blank line
    ],
)
def test_lazy_positions_are_libcsts_for_every_node(source, per_statement):
    """Positions computed per top-level statement equal PositionProvider's for the whole module; where a
    statement's first line cannot be told from CPython's tree, the whole module's are used."""
    lazy, whole, nodes = _lazy_positions(source)
    assert nodes
    assert [lazy[node] for node in nodes] == [whole[node] for node in nodes]
    assert (lazy._whole is None) is per_statement


def test_lazy_positions_place_only_the_statements_asked_about():
    source = b"import keras\n\n" + b"".join(
        b"def f%d(x):\n    return keras.layers.Dense(%d)(x)\n\n" % (i, i) for i in range(20)
    )
    lazy, whole, nodes = _lazy_positions(source)
    last_call = [n for n in nodes if type(n).__name__ == "Call"][-1]
    assert lazy[last_call] == whole[last_call]
    assert (lazy[last_call].start.line, lazy[last_call].start.column) == (61, 11)
    assert len(lazy._done) == 1 and lazy._whole is None


def test_rules_are_not_libcst_visitors_and_say_so():
    """libcst authors expect attribute visitors and get_metadata; a rule that defines them is rejected at once."""
    from mplint.engine.rule import Rule

    with pytest.raises(TypeError, match=r"Wrong.visit_Call_func: rules get visit_<Node>/leave_<Node> calls only"):

        class Wrong(Rule):  # noqa: F841
            id = "MP999"

            def visit_Call_func(self, node):
                pass

    assert not hasattr(Rule, "get_metadata")


def test_a_real_rule_crashing_in_a_shared_analysis_leaves_the_other_rules_findings(monkeypatch):
    """MP201-MP204 share the optimizer-flow analysis: when it raises, each of them is dropped on
    that file and says so; MP101 on the same file still reports."""
    from mplint.checks.loss_scaling import optimizer_flow
    from mplint.testing import lint_code

    def broken(self, context):
        raise KeyError("site")

    monkeypatch.setattr(optimizer_flow.OptimizerFlow, "__init__", broken)
    code = (
        "import keras\nimport tensorflow as tf\n\n"
        'keras.mixed_precision.set_global_policy("mixed_float16")\n'
        'model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(3, activation="softmax")])\n'
        "optimizer = keras.optimizers.Adam()\n"
        "with tf.GradientTape() as tape:\n"
        "    loss = tf.reduce_mean(model(x))\n"
        "grads = tape.gradient(loss, model.trainable_variables)\n"
        "optimizer.apply_gradients(zip(grads, model.trainable_variables))\n"
    )
    found = lint_code(code, keras=3).diagnostics
    assert [(d.rule_id, d.line) for d in found if d.rule_id != "MP002"] == [("MP101", 5)]
    crashed = [d.message for d in found if d.rule_id == "MP002"]
    assert crashed and all("KeyError('site') in visit_Module (mplint/checks/loss_scaling/mp20" in m for m in crashed)
    assert any(m.startswith("rule MP201 (missing-loss-scaling) crashed") for m in crashed)
    assert all(", raised at " in m and "test_engine.py:" in m and " in broken;" in m for m in crashed)
