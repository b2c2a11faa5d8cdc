"""MP101 float16-softmax-output: a softmax that produces a model output computes in float16/bfloat16."""

from __future__ import annotations

import ast

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
from mplint.engine.imports import callee_name
from mplint.engine.names import last_name
from mplint.engine.rule import Rule
from mplint.engine.summaries import FunctionSummary, Summary, SummaryKind, declare, parameter_defaults, summary_at
from mplint.engine.summaries import walk as walk_python

# --- what a builder in another file does with the softmax output layer it makes (CPython's tree) ---------------


def _activation_params(statements: list[ast.stmt], source: bytes = b"") -> dict[str, Summary]:
    """``def build(n, activation=None): ... Dense(n, activation=activation)`` (or a class whose ``__init__``
    parameter reaches a layer's ``activation=``, directly or through ``self.<attr>``): what a caller picks there
    decides whether the model ends in a float16 softmax."""
    found: dict[str, Summary] = {}
    for stmt in statements:
        if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)):
            function, owner = stmt, stmt
        elif isinstance(stmt, ast.ClassDef):
            init = next((s for s in stmt.body if isinstance(s, ast.FunctionDef) and s.name == "__init__"), None)
            if init is None:
                continue
            function, owner = init, stmt
        else:
            continue
        params = function.args.args + function.args.kwonlyargs
        offset = 1 if owner is not function else 0  # `self` is not passed by callers of a class
        defaults = parameter_defaults(function)
        names = {a.arg for a in params}
        held = {}  # self.attr -> parameter
        for node in walk_python(owner):
            if isinstance(node, ast.Assign) and isinstance(node.value, ast.Name) and node.value.id in names:
                for target in node.targets:
                    if (
                        isinstance(target, ast.Attribute)
                        and isinstance(target.value, ast.Name)
                        and target.value.id == "self"
                    ):
                        held[target.attr] = node.value.id
        for node in walk_python(owner):
            if not isinstance(node, ast.Call):
                continue
            for kw in node.keywords:
                value = kw.value
                param = (
                    value.id
                    if isinstance(value, ast.Name) and value.id in names
                    else held.get(value.attr)
                    if isinstance(value, ast.Attribute)
                    and isinstance(value.value, ast.Name)
                    and value.value.id == "self"
                    else None
                )
                if kw.arg != "activation" or param is None or any(k.arg == "dtype" for k in node.keywords):
                    continue
                index = (
                    [a.arg for a in function.args.args].index(param) - offset
                    if param in [a.arg for a in function.args.args]
                    else -1
                )
                default = defaults.get(param)
                default = (
                    default.value if isinstance(default, ast.Constant) and isinstance(default.value, str) else None
                )
                found.setdefault(owner.name, summary_at(node, param, index, default))
    return found


def _output_dtype_params(statements: list[ast.stmt], source: bytes = b"") -> dict[str, Summary]:
    """``def build_model(num_classes, dtype=None): ... Dense(num_classes, activation="softmax", dtype=dtype)``: a
    softmax layer whose dtype is a parameter used nowhere else (a class's ``__init__`` parameter too). A caller
    that leaves it at None under mixed_float16 gets a float16 softmax output; one that passes "float32" does not.
    `default` is the default when it is a string or None, else the marker "<required>" or "<other>"."""
    found: dict[str, Summary] = {}
    for stmt in statements:
        if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)):
            function, offset = stmt, 0
        elif isinstance(stmt, ast.ClassDef):
            function = next((s for s in stmt.body if isinstance(s, ast.FunctionDef) and s.name == "__init__"), None)
            offset = 1  # `self` is not passed by callers of a class
            if function is None:
                continue
        else:
            continue
        positional = [a.arg for a in function.args.args]
        defaults = dict(zip(positional[len(positional) - len(function.args.defaults) :], function.args.defaults))
        defaults.update({a.arg: d for a, d in zip(function.args.kwonlyargs, function.args.kw_defaults)})
        reads: dict[str, int] = {}
        for node in walk_python(function):
            if isinstance(node, ast.Name):
                reads[node.id] = reads.get(node.id, 0) + 1
        for node in walk_python(function):
            if not (isinstance(node, ast.Call) and _is_softmax_layer(node)):
                continue
            dtype = next((k.value for k in node.keywords if k.arg == "dtype"), None)
            if not (
                isinstance(dtype, ast.Name) and dtype.id in defaults.keys() | set(positional) and reads[dtype.id] == 1
            ):
                continue
            param = dtype.id
            index = positional.index(param) - offset if param in positional else -1
            value = defaults.get(param, "<required>")
            if isinstance(value, ast.Constant) and (value.value is None or isinstance(value.value, str)):
                value = value.value
            elif not isinstance(value, str):
                value = "<other>"
            found.setdefault(stmt.name, summary_at(node, param, index, value))
    return found


def _is_softmax_layer(call: ast.Call) -> bool:
    """``Dense(n, activation="softmax")``, ``Activation("softmax")``, ``Softmax()``."""
    last = callee_name(call)
    if last == "Softmax":
        return True
    spelled = [k.value for k in call.keywords if k.arg == "activation"] + (
        call.args[:1] if last == "Activation" else []
    )
    return any(isinstance(v, ast.Constant) and v.value == "softmax" for v in spelled)


ACTIVATION = declare(SummaryKind("activation", (b"activation",), True, _activation_params))
OUTPUT_DTYPE = declare(SummaryKind("output_dtype", (b"dtype", b"oftmax"), True, _output_dtype_params))


class Float16SoftmaxOutput(Rule):
    id = "MP101"
    triggers = (b"softmax", b"Softmax")
    summary_triggers = (OUTPUT_DTYPE,)  # `build_model(10)` of a builder whose softmax takes its dtype parameter

    @classmethod
    def candidate(cls, code) -> bool:
        # a model built here, "softmax" handed to a call (a project builder's activation parameter), or a call of
        # a project builder whose softmax output layer takes a dtype parameter
        return (
            code.mentions("softmax", "Softmax")
            and (builds_model(code) or "softmax" in code.argument_words)
            or bool(code.calls_summarized(OUTPUT_DTYPE))
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
        if not (ACTIVATION.name in summarized or OUTPUT_DTYPE.name in summarized) or not global_reduced(self.context):
            return
        for call in self.context.nodes(cst.Call):
            found = self.context.summary(call.func, ACTIVATION)
            if found is not None:
                self._softmax_passed(call, last_name(call.func), found)
            found = self.context.summary(call.func, OUTPUT_DTYPE)
            if found is not None:
                self._dtype_left_to_policy(call, last_name(call.func), found)

    def _dtype_left_to_policy(self, call: cst.Call, last: str, found: FunctionSummary) -> None:
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

    def _softmax_passed(self, call: cst.Call, last: str, found: FunctionSummary) -> None:
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
