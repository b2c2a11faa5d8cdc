"""Keras version guards: the eras (``api_versions.ERAS``) an arm of a feature or version test runs in.

``hasattr(tf.keras.mixed_precision, "experimental")`` is true on TF 2.1-2.8 only, ``hasattr(opt, "get_scaled_loss")``
on Keras 2 only (false also where ``opt`` is no LossScaleOptimizer), ``hasattr(keras.optimizers,
"LossScaleOptimizer")`` on Keras 3 only; ``try: from keras.optimizers import LossScaleOptimizer`` runs the rest of its
body on Keras 3 and its ``except ImportError`` fallback elsewhere; ``tf.__version__``/``keras.__version__`` comparisons
are read too, in ``if`` statements and conditional expressions; code past ``if <test>: return`` (``raise``,
``continue``) runs in the test's false arm. ``not``/``and``/``or`` combine them. A test of any other shape that looks
like a version test (the
engine's ``in_compatibility_branch``) leaves its arms unknown: the rules stay silent there.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import libcst as cst
from packaging.version import Version

from mplint.analysis.version_guards import guard_arms, try_imports
from mplint.diagnostics import FixSafety
from mplint.engine.check import IMPORT_ERRORS, VERSION_WORDS
from mplint.engine.early_exits import exits_before
from mplint.engine.names import dotted
from mplint.knowledge.api_versions import (
    ERA_GENERATION,
    ERAS,
    G1,
    K2,
    K2_EARLY,
    K3,
    KERAS,
    LOSS_SCALE_OPTIMIZER,
    eras_label,
    eras_of,
    keras_eras,
)

ALL = frozenset(ERAS)
_KERAS_ROOTS = ("tensorflow.keras.", "tensorflow.python.keras.", "keras.")
# owner module (below the Keras root) -> name -> the eras that have it
MODULE_FEATURES = {
    "mixed_precision": {
        "experimental": keras_eras("mixed_precision.experimental.LossScaleOptimizer"),
        "LossScaleOptimizer": keras_eras("mixed_precision.LossScaleOptimizer") - {G1},
        "set_global_policy": keras_eras("mixed_precision.set_global_policy") - {G1},
    },
    "mixed_precision.experimental": {
        n: keras_eras(f"mixed_precision.experimental.{n}") for n in ("LossScaleOptimizer", "set_policy")
    },
    "optimizers": {"LossScaleOptimizer": keras_eras("optimizers.LossScaleOptimizer")},
}
# the first TF/Keras version of each era, and the last one probed
_TF_PROBES = {G1: ("2.1", "2.3"), K2_EARLY: ("2.4", "2.8"), K2: ("2.9", "2.15"), K3: ("2.16", "2.99")}
_KERAS_PROBES = {G1: ("2.3", "2.3"), K2_EARLY: ("2.4", "2.8"), K2: ("2.9", "2.15"), K3: ("3.0", "3.99")}

Arms = tuple[frozenset[str] | None, frozenset[str] | None]  # where true, where false; None: unknown


@dataclass(frozen=True)
class Branch:
    eras: frozenset[str] | None  # None: some guard around the code has an unknown range
    tests: tuple[str, ...]  # the guards read, outermost first ("the arm of `hasattr(opt, "get_scaled_loss")` (line 4)")


def keras_branch(context, node: cst.CSTNode) -> Branch | None:
    """The eras the guards around ``node`` let it run in; None when no version guard surrounds it. Code past an
    early exit (``if <test>: return``, ``raise``, ``continue``) runs in the test's false arm; an early exit whose
    test has no known range is not read as a guard (``if not hasattr(self, "built"): return``)."""
    eras, tests, guarded = ALL, [], False
    child = node
    for ancestor in context.ancestors(node):
        if isinstance(ancestor, (cst.Module, cst.IndentedBlock)):
            for exit_ in exits_before(ancestor, child):
                text = context.module.code_for_node(exit_.guard.test)
                false = _arms(context, exit_.guard.test)[1] if any(word in text for word in VERSION_WORDS) else None
                if false is None or false == ALL:
                    continue
                guarded, eras = True, eras & false
                line = context.position(exit_.guard).start.line
                tests.insert(0, f"the code past `if {text}: {exit_.keyword}` (line {line})")
            child = ancestor
            continue
        arm = None
        if isinstance(ancestor, (cst.If, cst.IfExp)) and child is not ancestor.test:
            text = context.module.code_for_node(ancestor.test)
            if not any(word in text for word in VERSION_WORDS):
                child = ancestor
                continue  # no version test: a plain condition
            true, false = _arms(context, ancestor.test)
            arm = true if child is ancestor.body else false
        elif isinstance(ancestor, cst.Try) and (
            child is ancestor.body and ancestor.handlers or child in ancestor.handlers
        ):
            if not _catches_import_errors(ancestor):
                child = ancestor
                continue
            text = "try: import ... except ImportError"
            true, false = _import_arms(context, ancestor)
            arm = true if child is ancestor.body else false
        else:
            child = ancestor
            continue
        guarded = True
        if arm is None:
            return Branch(None, ())
        eras &= arm
        tests.insert(0, f"the arm of `{text}` (line {context.position(ancestor).start.line})")
        child = ancestor
    return Branch(eras, tuple(tests)) if guarded else None


def test_arms(context, test: cst.BaseExpression) -> Arms | None:
    """The eras where a version or feature test may be true and those where it may be false; None for a test that
    is no version test, or whose range is unknown."""
    if not any(word in context.module.code_for_node(test) for word in VERSION_WORDS):
        return None
    true, false = _arms(context, test)
    return None if true is None or false is None else (true, false)


def _catches_import_errors(node: cst.Try) -> bool:
    caught = set()
    for handler in node.handlers:
        types = [e.value for e in handler.type.elements] if isinstance(handler.type, cst.Tuple) else [handler.type]
        caught |= {dotted(t) or "" if t is not None else "Exception" for t in types}
    return bool(caught & IMPORT_ERRORS)


def _arms(context, test: cst.BaseExpression) -> Arms:
    if isinstance(test, cst.UnaryOperation) and isinstance(test.operator, cst.Not):
        true, false = _arms(context, test.expression)
        return false, true
    if isinstance(test, cst.BooleanOperation):
        left, right = _arms(context, test.left), _arms(context, test.right)
        if isinstance(test.operator, cst.And):  # true where both are, false where either is
            return _meet(left[0], right[0]), _join(left[1], right[1])
        return _join(left[0], right[0]), _meet(left[1], right[1])
    if isinstance(test, cst.Call) and dotted(test.func) == "hasattr" and len(test.args) == 2:
        return _hasattr(context, test.args[0].value, test.args[1].value)
    text = context.module.code_for_node(test)
    for package, probes in (("tf", _TF_PROBES), ("tensorflow", _TF_PROBES), ("keras", _KERAS_PROBES)):
        true, false = guard_arms(text, package)
        if true is not None:
            return _probe(true, probes), _probe(false, probes)
    if any(word in text for word in VERSION_WORDS):
        return None, None
    return ALL, ALL  # a plain condition: no version meaning


def _meet(a, b):
    return None if a is None or b is None else a & b


def _join(a, b):
    return None if a is None or b is None else a | b


def _probe(specifier, probes) -> frozenset[str]:
    return frozenset(
        e
        for e, (first, last) in probes.items()
        if specifier.contains(Version(first), prereleases=True) or specifier.contains(Version(last), prereleases=True)
    )


def _keras_module(context, node: cst.BaseExpression) -> str | None:
    """The Keras module ``node`` names, below its root (``mixed_precision`` for ``tf.keras.mixed_precision``)."""
    for name in context.names.qualified(node) | {dotted(node) or ""}:
        name = name.replace("tf.keras.", "tensorflow.keras.", 1) if name.startswith("tf.keras.") else name
        for root in _KERAS_ROOTS:
            if name.startswith(root):
                return name[len(root) :]
    return None


def _hasattr(context, owner: cst.BaseExpression, name: cst.BaseExpression) -> Arms:
    if not isinstance(name, cst.SimpleString):
        return None, None
    attr = name.evaluated_value
    module = _keras_module(context, owner)
    if module is not None:
        eras = MODULE_FEATURES.get(module, {}).get(attr)
        return (eras, ALL - eras) if eras is not None else (None, None)
    if attr in LOSS_SCALE_OPTIMIZER and attr in KERAS:
        return keras_eras(attr), ALL  # false too wherever the object is no LossScaleOptimizer
    return None, None


def _import_arms(context, node: cst.Try) -> Arms:
    """The body gets past its imports where every imported name exists; the handlers run where one does not."""
    found = [_imported_eras(module, name) for module, name in try_imports(node)]
    if not found or any(eras is None for eras in found):
        return None, None
    body = ALL
    for eras in found:
        body &= eras
    return body, ALL - body


def _imported_eras(module: str, name: str) -> frozenset[str] | None:
    module = module.replace("tf.keras", "tensorflow.keras", 1)
    for root in _KERAS_ROOTS:
        if f"{module}.".startswith(root):
            return MODULE_FEATURES.get(f"{module}."[len(root) :].rstrip("."), {}).get(name)
    return None


@dataclass(frozen=True)
class GuardedTarget:
    eras: frozenset[str]  # the eras of the program's range this arm runs in
    label: str  # "target Keras 3: the arm of `...` (line 4) within Keras 2 or Keras 3, from ..."


def guarded_target(context, node: cst.CSTNode, generation, wrong: frozenset[str]) -> GuardedTarget | bool | None:
    """For a rule whose finding is right in the eras ``wrong``: None when no guard surrounds ``node`` (the program's
    target decides), False when the arm never runs where the code is wrong or its guards are unknown (silent),
    else the arm's own target."""
    branch = keras_branch(context, node)
    if branch is None:
        return None
    if branch.eras is None:
        return False
    eras = branch.eras & target_eras(generation)
    if not eras & wrong:
        return False
    within = " and ".join(branch.tests)
    return GuardedTarget(
        eras, f"target {eras_label(eras)}: {within}, within {generation.label} from {generation.source}"
    )


# What a finding says in place of a fix that would hold on part of a range nothing evidences (``evidenced``).
NO_FIX = "no fix: nothing says which TensorFlow runs this (set `target` or pin tensorflow for one)"
# A range none of whose generations has the names a fix writes (and has executed proof for): TF 1, TF 2.1-2.3.
NO_FIX_OUTSIDE = "no fix: its names are written and proven for Keras 2 and Keras 3 only"


@dataclass(frozen=True)
class KerasRange:
    """The Keras versions a piece of code runs on: the program's target, narrowed by the version guards around it."""

    eras: frozenset[str]
    tf_newest: str | None  # the newest TF the range admits, where known
    text: str  # "target Keras 2 or Keras 3 (TF >= 2.6), from requirements.txt pins tensorflow>=2.6"
    guarded: bool = False  # narrowed by a guard: ``text`` names the arm
    evidenced: bool = True  # something says which part of it runs: config, pins, imports or a guard's arm

    @property
    def generations(self) -> frozenset[int]:
        return frozenset(ERA_GENERATION[e] for e in self.eras) or frozenset({0})  # no era: TF1

    @property
    def newest(self) -> int:
        return max(self.generations)


def generations_note(context, holds: set[int], keras: KerasRange | None = None) -> str | None:
    """None when a fix that is right on the generations ``holds`` is right on the whole range (``keras``, else the
    program's target); else the range and where the fix holds."""
    keras = keras or program_range(context.facts.generation)
    if keras.generations <= holds:
        return None
    if not keras.evidenced:
        return f"{keras.text}; {NO_FIX}"
    if not holds & keras.generations:  # TF 1 or TF 2.1-2.3 alone: the names the fix writes are not proven there
        return f"{keras.text}; {NO_FIX_OUTSIDE}"
    where = " or ".join(_GENERATION_NAMES[g] for g in sorted(holds))
    if keras.guarded:
        return f"{keras.text}; the fix holds on {where} only"
    return f"{keras.text}; the fix holds on {where} only: set the target or pin TensorFlow to make it safe"


def note_safety(note: str | None) -> FixSafety:
    """The safety of a fix whose range note (``range_note``, ``generations_note``) is ``note``: safe without one,
    none where nothing says which part of the range runs (``NO_FIX``), unsafe where evidence spans versions the fix
    does not hold on."""
    if note is None:
        return FixSafety.SAFE
    return FixSafety.NONE if note.endswith((NO_FIX, NO_FIX_OUTSIDE)) else FixSafety.UNSAFE


_GENERATION_NAMES = {0: "TF1", 1: "TF 2.1-2.3", 2: "Keras 2", 3: "Keras 3"}


def target_eras(generation) -> frozenset[str]:
    """The eras the program's target spans: its generations, TF >= 2.9 only where the newest TF it admits reaches
    it, and TF 2.4-2.8 only where the oldest does not pass it (the evidence's ``tf_range``: "TF >= 2.9")."""
    eras = eras_of(range(generation.low, generation.value + 1), generation.tf_newest or None)
    oldest = re.match(r"TF (?:>= )?(\d+\.\d+)", generation.tf_range or "")
    if oldest is not None and Version(oldest.group(1)) >= Version("2.9") and eras - {K2_EARLY}:
        eras -= {K2_EARLY}
    return eras


def program_range(generation) -> KerasRange:
    eras = target_eras(generation)
    return KerasRange(
        eras,
        generation.tf_newest or None,
        f"target {generation.label}, from {generation.source}",
        evidenced=generation.evidenced,
    )


def code_range(context, node: cst.CSTNode) -> KerasRange | None:
    """The range ``node`` runs on: the program's, narrowed by the version guards around it; None where its arm never
    runs on the program's range. Under a guard of unknown range the program's range stands (the rules that read
    this are not silent in compatibility shims)."""
    generation = context.facts.generation
    program = program_range(generation)
    branch = keras_branch(context, node)
    if branch is None or branch.eras is None or not program.eras:
        return program
    eras = branch.eras & program.eras
    if not eras:
        return None
    tf_newest = program.tf_newest if eras & {K2, K3} else "2.8"
    within = " and ".join(branch.tests)
    return KerasRange(
        eras,
        tf_newest,
        f"target {eras_label(eras)}: {within}, within {generation.label} from {generation.source}",
        True,
    )
