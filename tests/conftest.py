from __future__ import annotations

import dataclasses
import functools
import importlib.util
import inspect
import json
import re
import sys
from pathlib import Path

import libcst as cst
import pytest
from proof_runs import ProofRuns, proofs_of

from mplint.catalog import RuleKey, RuleMeta, load_catalog
from mplint.checks import all_rules
from mplint.diagnostics import Fix, FixSafety, ImportSpec
from mplint.engine.rule import Rule

all_rules()  # the rules declare the summary kinds that project facts read (tests read facts without the runner)
REPO = Path(__file__).resolve().parent.parent


def _entry(rule_id: str, name: str, safety: FixSafety) -> tuple[RuleMeta, RuleKey]:
    """A test rule's catalog entry and the key a check reads of it."""
    base = load_catalog()["MP000"]
    meta = dataclasses.replace(base, id=rule_id, name=name, kind="static", fix_safety=safety, fix="Add dtype.")
    return meta, RuleKey(rule_id, name, True, meta.severity, meta.generations, meta.fix, meta.source, safety)


class DenseWithoutDtype(Rule):
    """Test rule: every Keras Dense(...) without dtype= gets dtype="float32" (safe)."""

    id = "TEST1"
    meta, key = _entry("TEST1", "dense-without-dtype", FixSafety.SAFE)
    triggers = (b"Dense",)

    def visit_Call(self, node: cst.Call) -> None:
        if self.context.names.matches(node.func, ["layers.Dense"]) and not any(
            a.keyword and a.keyword.value == "dtype" for a in node.args
        ):
            arg = cst.Arg(
                cst.SimpleString('"float32"'),
                keyword=cst.Name("dtype"),
                equal=cst.AssignEqual(cst.SimpleWhitespace(""), cst.SimpleWhitespace("")),
            )
            self.report(node, "Dense without dtype", Fix({node: node.with_changes(args=[*node.args, arg])}))


class ReturnEverywhere(Rule):
    """Test rule whose fix yields code that parses but does not compile."""

    id = "TEST2"
    meta, key = _entry("TEST2", "return-everywhere", FixSafety.SAFE)

    def visit_Expr(self, node: cst.Expr) -> None:
        if isinstance(node.value, cst.Name) and node.value.value == "marker":
            self.report(node, "marker", Fix({node: cst.Return(cst.Integer("1"))}))


class NeverSettles(Rule):
    """Test rule whose fix never removes the finding."""

    id = "TEST3"
    meta, key = _entry("TEST3", "never-settles", FixSafety.SAFE)

    def visit_Integer(self, node: cst.Integer) -> None:
        self.report(node, "int", Fix({node: cst.Integer(str(int(node.value) + 1))}))


class Crashes(Rule):
    id = "TEST4"
    meta, key = _entry("TEST4", "crashes", FixSafety.NONE)

    def visit_Name(self, node: cst.Name) -> None:
        if node.value == "boom":
            raise RuntimeError("boom")


class UnsafeImportAdder(Rule):
    """Test rule with an unsafe fix that also needs an import."""

    id = "TEST5"
    meta, key = _entry("TEST5", "unsafe-import-adder", FixSafety.UNSAFE)

    def visit_Call(self, node: cst.Call) -> None:
        if isinstance(node.func, cst.Name) and node.func.value == "rounded":
            new = node.with_changes(func=cst.Attribute(cst.Name("math"), cst.Name("ceil")))
            self.report(node, "use math.ceil", Fix({node: new}, safety=FixSafety.UNSAFE, imports=[ImportSpec("math")]))


@pytest.fixture
def repo() -> Path:
    return REPO


NO_CUDA = "no CUDA device here: this runs where torch.cuda.is_available() (bench/gpu/check runs it on a GPU machine)"


def devices(torch) -> list:
    """The devices a device-parametrized test runs on: the CPU always, CUDA where this machine has it (test ids
    ``[cpu]`` and ``[cuda]``: ``pytest -k "cpu] or cuda]"`` selects them all)."""
    return ["cpu", pytest.param("cuda", marks=pytest.mark.skipif(not torch.cuda.is_available(), reason=NO_CUDA))]


def write_files(root, files: dict[str, str]):
    """A project on disk: ``{"pkg/m.py": source}`` under ``root``; returns ``root``."""
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    return root


# A custom loop and a per-layer policy trained with compile(), for the target tests of MP201/MP207.
def lint_json(capsys, *args: str) -> tuple[int, list[tuple]]:
    """``mplint --format json ARGS``: the exit code and each finding's (rule, line, message, fix safety)."""
    from mplint.cli import main

    capsys.readouterr()
    code = main(["--format", "json", *args])
    doc = json.loads(capsys.readouterr().out)
    return code, [
        (d["rule"], d["start"]["line"], d["message"], d["fix"]["safety"] if d.get("fix") else None)
        for d in doc["diagnostics"]
    ]


def target_lines(capsys, root: Path) -> list[str]:
    """The ``target:`` and ``torch:`` lines ``mplint --show-facts`` prints for the project at ``root``."""
    from mplint.cli import main

    capsys.readouterr()
    assert main(["--show-facts", "--no-cache", str(root)]) == 0
    return [
        line.strip() for line in capsys.readouterr().out.splitlines() if line.strip().startswith(("target:", "torch:"))
    ]


KERAS_LOOP = """\
import tensorflow as tf

tf.keras.mixed_precision.set_global_policy("mixed_float16")
model = tf.keras.Sequential([tf.keras.layers.Dense(8, dtype="float32")])
optimizer = tf.keras.optimizers.Adam()


def step(x, y):
    with tf.GradientTape() as tape:
        loss = tf.reduce_mean(tf.square(model(x) - y))
    grads = tape.gradient(loss, model.trainable_variables)
    optimizer.apply_gradients(zip(grads, model.trainable_variables))
"""

PER_LAYER = """\
import tensorflow as tf

model = tf.keras.Sequential([tf.keras.layers.Dense(8, dtype="mixed_float16"), tf.keras.layers.Dense(1, dtype="float32")])
model.compile(optimizer=tf.keras.optimizers.Adam(), loss="mse")
"""


# bench/realworld.py loaded as a module, for the tests of the real-world check.
@pytest.fixture(scope="module")
def realworld():
    spec = importlib.util.spec_from_file_location("realworld", REPO / "bench" / "realworld.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["realworld"] = module  # dataclasses look their module up while the class is created
    spec.loader.exec_module(module)
    yield module
    del sys.modules["realworld"]


# `mplint verify` runs scripts only inside a private view of the file system (Linux mount namespaces). On a machine
# that cannot give one, verify refuses to run (exit 2, tested with the probe faked); the tests that run scripts
# through it are skipped there with the machine's reason instead of failing on the refusal.
_RUNS_SCRIPTS = {
    "test_verify.py",
    "test_verify_faults.py",
    "test_verify_install.py",
    "test_verify_isolation.py",
    "test_verify_keras_backends.py",
    "test_verify_torch.py",
    "test_verify_warm.py",
}


# A rule's code, as the catalog spells it (MP101, MPT203): ``pytest -k MP201`` selects every test whose code names it.
_RULE_CODE = re.compile(r"\bMPT?\d{3}\b")


@functools.cache
def _codes_named_in(function) -> frozenset[str]:
    try:
        return frozenset(_RULE_CODE.findall(inspect.getsource(function)))
    except (OSError, TypeError):
        return frozenset()


_RULE_RANGE = re.compile(r"\b(MPT?\d{3})\s*[-\u2013]\s*(MPT?\d{3})\b")


@functools.cache
def _codes_of_themed_file(module) -> frozenset[str]:
    """The rules a test file is about: those its docstring's first paragraph names ("MP201-MP207 on the fixture
    projects ..."), not those a later paragraph mentions in passing."""
    doc = ((module.__doc__ or "") if module is not None else "").strip().split("\n\n")[0]
    codes = set(_RULE_CODE.findall(doc))
    for low, high in _RULE_RANGE.findall(doc):
        codes.update(c for c in load_catalog() if len(c) == len(low) and c[:-3] == low[:-3] and low <= c <= high)
    return frozenset(codes)


def _mark_rule_codes(items) -> None:
    """Each test gets as keywords the rule codes its source (decorators included), its parameters and its
    file's docstring name."""
    for item in items:
        function = getattr(item, "function", None)
        codes = set(_codes_named_in(function)) if function is not None else set()
        codes.update(_codes_of_themed_file(getattr(item, "module", None)))
        codes.update(_RULE_CODE.findall(item.name))
        item.extra_keyword_matches.update(codes)


def pytest_configure(config):
    config.pluginmanager.register(ProofRuns(proofs_of(load_catalog())), "proof-runs")


def pytest_ignore_collect(collection_path, config):
    """``-m quick`` (the one-minute subset that shows an install works) leaves out the files that mark no test quick:
    importing them, some with TensorFlow, would take longer than running the subset."""
    if config.getoption("markexpr", "") != "quick" or collection_path.suffix != ".py":
        return None
    if not collection_path.name.startswith("test_"):
        return None
    return "pytest.mark.quick" not in collection_path.read_text(encoding="utf-8") or None


def pytest_collection_modifyitems(config, items):
    _mark_rule_codes(items)
    running = [item for item in items if item.path.name in _RUNS_SCRIPTS]
    if not running:
        return
    from mplint.verify.runner import isolation_problem

    problem = isolation_problem()
    if problem is None:
        return
    skip = pytest.mark.skip(reason=f"this machine gives no private file-system view: {problem}")
    for item in running:
        item.add_marker(skip)
