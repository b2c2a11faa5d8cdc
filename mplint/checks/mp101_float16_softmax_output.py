"""MP101 float16-softmax-output: a softmax that produces a model output computes in float16/bfloat16."""

from __future__ import annotations

import libcst as cst

from mplint.analysis.call_args import argument
from mplint.analysis.model_outputs import builds_model, reported_outputs
from mplint.analysis.output_dtype import (
    FLOAT32,
    cast_call,
    cast_dtype,
    global_reduced,
    is_softmax_layer,
    layer_dtype,
    needs_float32,
    policy_reason,
    quote_of,
    softmax_function,
    with_float32_dtype,
)
from mplint.diagnostics import Fix, FixSafety, Related
from mplint.engine.names import last_name
from mplint.engine.rule import Rule


class Float16SoftmaxOutput(Rule):
    id = "MP101"
    triggers = (b"softmax", b"Softmax")
    summary_triggers = ("output_dtype",)  # `build_model(10)` of a builder whose softmax takes its dtype parameter

    @classmethod
    def candidate(cls, code) -> bool:
        # a model built here, "softmax" handed to a call (a project builder's activation parameter), or a call of
        # a project builder whose softmax output layer takes a dtype parameter
        return (
            code.mentions("softmax", "Softmax")
            and (builds_model(code) or "softmax" in code.argument_words)
            or bool(code.calls_summarized("output_dtype"))
        )

    @classmethod
    def active_for(cls, facts):
        return facts.reduced_precision

    def visit_Module(self, node: cst.Module) -> None:
        self._builder_calls()
        reported: set[int] = set()
        for site in reported_outputs(self.context):
            if is_softmax_layer(self.context, site.layer):
                target = site.layer
                if id(target) not in reported and self._layer_in_reduced_precision(target):
                    reported.add(id(target))
                    self._report_layer(target)
            elif softmax_function(self.context, site.expr) and global_reduced(self.context):
                if id(site.expr) not in reported:
                    reported.add(id(site.expr))
                    self._report_function(site.expr, site.kind)

    def _builder_calls(self) -> None:
        """Calls of the project's model builders (other modules too) that build a float16 softmax output."""
        summarized = self.context.facts.summarized_names
        if not ("activation" in summarized or "output_dtype" in summarized) or not global_reduced(self.context):
            return
        for call in self.context.nodes(cst.Call):
            found = self.context.summary(call.func, "activation")
            if found is not None:
                self._softmax_passed(call, last_name(call.func), found)
            found = self.context.summary(call.func, "output_dtype")
            if found is not None:
                self._dtype_left_to_policy(call, last_name(call.func), found)

    def _dtype_left_to_policy(self, call: cst.Call, last: str, found: tuple) -> None:
        """``build_model(10)`` where the builder's softmax output layer takes ``dtype=dtype`` (default None): under a
        reduced-precision policy it computes in float16; passing ``dtype="float32"`` fixes that call, and changes
        nothing in float32."""
        param, index, default, path, line = found
        passed = argument(call, index if index >= 0 else None, param)
        if passed is None:
            if default is not None or any(a.star for a in call.args):
                return  # a string default (checked where it is written), a required parameter, or **kwargs
            given = "left at its default None"
        elif isinstance(passed, cst.Name) and passed.value == "None":
            given = "given None"
        else:
            return  # a value the caller computes or names: its own business
        reason = policy_reason(self.context, None)
        fixed = (
            with_float32_dtype(call, param)
            if passed is None
            else call.deep_replace(passed, cst.SimpleString(f"{quote_of(call)}float32{quote_of(call)}"))
        )
        self.report(
            call,
            f"`{last}` builds a softmax output layer at {path}:{line} whose dtype is its `{param}` parameter, "
            f'{given}: it computes in reduced precision ({reason}): {_harm(reason)}; pass {param}="float32"',
            Fix({call: fixed}, FixSafety.SAFE) if fixed is not None else None,
            related=(Related(path, line, f"`{last}` gives its softmax layer `dtype={param}` here"),),
        )

    def _softmax_passed(self, call: cst.Call, last: str, found: tuple) -> None:
        """``ImageClassifier(activation="softmax")`` where the project's class feeds that parameter to a layer's
        activation without a float32 dtype: the program builds a float16 softmax output in another module."""
        param, index, _default, path, line = found
        passed = argument(call, index if index >= 0 else None, param)
        if isinstance(passed, cst.SimpleString) and passed.evaluated_value == "softmax":
            reason = policy_reason(self.context, None)
            self.report(
                call,
                f'`{last}({param}="softmax")` builds a softmax output layer at {path}:{line} that computes '
                f'in reduced precision ({reason}): {_harm(reason)}; give that layer dtype="float32" '
                "(a dtype parameter of the builder), or apply the softmax in float32 after it",
                related=(Related(path, line, f"`{last}` builds its output layer from `{param}` here"),),
            )

    def _layer_in_reduced_precision(self, layer: cst.Call) -> bool:
        dtype = layer_dtype(self.context, layer)
        return needs_float32(dtype) and (dtype is not None or global_reduced(self.context))

    def _report_layer(self, layer: cst.Call) -> None:
        fixed = with_float32_dtype(layer)
        reason = policy_reason(self.context, layer)
        message = f'softmax output layer computes in reduced precision ({reason}): {_harm(reason)}; give this layer dtype="float32"'
        self.report(layer, message, Fix({layer: fixed}, FixSafety.SAFE) if fixed is not None else None)

    def _report_function(self, call: cst.Call, kind: str) -> None:
        positional = [a for a in call.args if a.keyword is None and not a.star]
        logits = positional[0] if positional else None
        if logits is not None and cast_dtype(self.context, logits.value) in FLOAT32:
            return
        reason = self.context.facts.describe_policy()
        message = f"softmax producing a model output runs on reduced-precision logits ({reason}): {_harm(reason)}; cast the logits to float32 first"
        if logits is None:
            self.report(call, message)
            return
        keras3 = any(k.ns == "keras" for k in self.context.names.knames(call.func))
        cast, imports = cast_call(self.context, logits.value, keras3, quote_of(call))
        new_call = call.with_changes(args=[a.with_changes(value=cast) if a is logits else a for a in call.args])
        self.report(call, message, Fix({call: new_call}, FixSafety.SAFE, imports=imports))


def _harm(reason: str) -> str:
    if "bfloat16" in reason:
        return "bfloat16 keeps 8 bits of mantissa, so probabilities, loss and metrics come out coarse"
    return "float16 probabilities round to 0 or 1 and the loss becomes inf/NaN"
