"""MP602: pure float16 layers, policies and floatx: the variables themselves are float16."""

from __future__ import annotations

import libcst as cst

from mplint.analysis.dtype_flow import DtypeFlow, dtype_spelling
from mplint.analysis.keras_guards import generations_note, note_safety
from mplint.diagnostics import Fix, FixSafety, ImportSpec
from mplint.engine.names import dotted
from mplint.engine.rule import Rule
from mplint.knowledge.apinames import NAMESPACE_MODULES

_POLICY_CALLS = (
    "mixed_precision.Policy",
    "DTypePolicy",
    "mixed_precision.set_global_policy",
    "mixed_precision.experimental.Policy",
    "mixed_precision.experimental.set_policy",
    "dtype_policies.get",
    "config.set_dtype_policy",
)
_FLOATX_CALLS = ("backend.set_floatx", "config.set_floatx")
_DATA_ONLY = frozenset({"layers.Input", "Input", "layers.InputLayer", "InputLayer"})
# Files that only run a model (no optimizer step) may keep float16 weights on purpose.
_TRAINING_MARKERS = ("fit(", "apply_gradients", "GradientTape", "train_step", "compile(", "optimizer")
_INFERENCE_MARKERS = ("predict(", "load_model", "saved_model", "TFLite", "tflite", "export(", "serve")
_SETTERS = frozenset(path.rsplit(".", 1)[-1] for path in (*_POLICY_CALLS, *_FLOATX_CALLS))
_MIXED = '"mixed_float16"'
# A layer's dtype="mixed_float16" and set_global_policy hold from TF 2.4: TF 2.1-2.3's Layer reads a dtype string
# through tf.as_dtype (TypeError; base_layer.py of the 2.1.0-2.3.0 wheels) and has only experimental.set_policy.
_HOLDS = {2, 3}


class Float16Variables(Rule):
    id = "MP602"
    triggers = (b"float16", b"half")

    @classmethod
    def active_for(cls, facts) -> bool:
        return not facts.test_module  # tests set float16 on purpose, to exercise it; this rule is about training code

    @classmethod
    def candidate(cls, code) -> bool:
        """A policy or floatx setter whose first argument spells float16, or a ``dtype=`` that does,
        in a file that trains (see ``_inference_only``)."""
        if "float16" not in code.argument_words or not (code.calls_any(*_SETTERS) or "dtype" in code.keywords):
            return False
        if _inference_only(code.source):
            return False
        for call in code.called:
            if not code.names_of(call).isdisjoint(_SETTERS) and call.args and "float16" in code.words_of(call.args[0]):
                return True
            if any(k.arg == "dtype" and "float16" in code.words_of(k.value) for k in call.keywords):
                return True
        return False

    def __init__(self, context):
        super().__init__(context)
        self._inference_only = _inference_only(context.text)

    def visit_Call(self, node: cst.Call) -> None:
        if self._inference_only:
            return
        names = self.context.names
        if names.callee(node, _POLICY_CALLS):
            self._check_policy(node)
        elif names.callee(node, _FLOATX_CALLS):
            self._check_floatx(node)
        else:
            self._check_layer(node)

    def _check_policy(self, node: cst.Call) -> None:
        value = node.args[0].value if node.args and node.args[0].keyword is None else None
        if value is None or dtype_spelling(self.context, value) != "float16":
            return
        self.report(
            value,
            "policy `float16` keeps the variables themselves in float16: small updates round away and training "
            "stalls; `mixed_float16` computes in float16 and keeps float32 variables",
            Fix({value: cst.SimpleString(_MIXED)}, FixSafety.SAFE),
        )

    def _check_floatx(self, node: cst.Call) -> None:
        value = node.args[0].value if node.args else None
        if value is None or dtype_spelling(self.context, value) != "float16":
            return
        kname = self.context.names.kname(node.func)
        note = generations_note(self.context, _HOLDS)
        self.report(
            node,
            '`set_floatx("float16")` makes every variable float16: small updates round away and training stalls; '
            "use the `mixed_float16` policy, which keeps float32 variables" + (f" ({note})" if note else ""),
            self._floatx_fix(node, kname.ns if kname else "keras", note_safety(note)),
        )

    def _floatx_fix(self, node: cst.Call, ns: str, safety: FixSafety) -> Fix:
        """``<keras>.mixed_precision.set_global_policy("mixed_float16")`` spelled like the call it replaces."""
        spelled = dotted(node.func) or ""
        prefix = spelled.rsplit(".", 2)[0] if spelled.count(".") >= 2 else ""
        imports = ()
        if prefix:
            func = f"{prefix}.mixed_precision.set_global_policy"
        else:
            func = "mixed_precision.set_global_policy"
            imports = (ImportSpec(NAMESPACE_MODULES.get(ns, "keras"), "mixed_precision"),)
        replacement = cst.parse_expression(f"{func}({_MIXED})").with_changes(lpar=node.lpar, rpar=node.rpar)
        return Fix({node: replacement}, safety, imports=imports)

    def _check_layer(self, node: cst.Call) -> None:
        dtype = next((a for a in node.args if a.keyword is not None and a.keyword.value == "dtype"), None)
        if dtype is None or dtype_spelling(self.context, dtype.value) != "float16" or not self._is_layer(node):
            return
        note = generations_note(self.context, _HOLDS)
        self.report(
            dtype.value,
            '`dtype="float16"` on a layer stores its weights in float16: small updates round away and training '
            'stalls; `dtype="mixed_float16"` computes in float16 and keeps float32 weights'
            + (f" ({note})" if note else ""),
            Fix({dtype.value: cst.SimpleString(_MIXED)}, note_safety(note)),
        )

    def _is_layer(self, node: cst.Call) -> bool:
        for kname in self.context.names.knames(node.func):
            if kname.is_keras and kname.path not in _DATA_ONLY:
                return kname.path.startswith("layers.") or kname.path in ("Sequential", "Model")
        name = dotted(node.func)
        for stmt in self.context.module.body:  # a custom layer defined in this file
            if isinstance(stmt, cst.ClassDef) and stmt.name.value == name:
                return self.context.analysis(DtypeFlow).is_layer_class(stmt)
        return False


def _inference_only(code: str | bytes) -> bool:
    """A file that runs a model but never trains it (its text, or its bytes: the markers are ASCII)."""

    def has(marker: str) -> bool:
        return (marker if isinstance(code, str) else marker.encode()) in code

    return not any(map(has, _TRAINING_MARKERS)) and any(map(has, _INFERENCE_MARKERS))
