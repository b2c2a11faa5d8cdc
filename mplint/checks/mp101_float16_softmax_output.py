"""MP101 float16-softmax-output: a softmax that produces a model output computes in float16/bfloat16."""

from __future__ import annotations

import ast

import libcst as cst

from mplint.analysis.activation_layers import ACTIVATION_LAYER, softmax_by_name
from mplint.analysis.call_args import argument
from mplint.analysis.model_outputs import REPORTED_ROLES, builds_model, construction_role, reported_outputs
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
from mplint.engine.imports import callee_name, dotted_name
from mplint.engine.names import last_name
from mplint.engine.rule import Rule
from mplint.engine.summaries import (
    FunctionSummary,
    Summary,
    SummaryKind,
    declare,
    own_nodes,
    parameter_defaults,
    parameters,
    summary_at,
)
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


def _default_softmax_heads(statements: list[ast.stmt], source: bytes = b"") -> dict[str, Summary]:
    """Model builders whose output layer takes its activation from a parameter that defaults to "softmax"
    (``def ResNet(input_shape, include_top=True, classes=1000, classifier_activation="softmax"): ...
    x = layers.Dense(classes, activation=classifier_activation)(x) ... return keras.Model(inputs, x)``): a call
    that leaves it at its default builds a softmax output layer. The layer must give the returned model's outputs
    (the last element of a returned ``Sequential([...])``, or the ``outputs`` of a ``Model(...)`` call that nothing
    rebinds in between), and may be guarded by one ``if <parameter>:`` whose default is True. ``default`` is that
    guard's parameter and position (``include_top:1``), else None."""
    found: dict[str, Summary] = {}
    for function in statements:
        if isinstance(function, ast.ClassDef):
            entry = _default_softmax_head_of_class(function)
            if entry is not None:
                found[function.name] = entry
            continue
        if not isinstance(function, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        positional, _, _, rebound = parameters(function)
        defaults = parameter_defaults(function)
        parents = {child: node for node in walk_python(function) for child in ast.iter_child_nodes(node)}
        for node in walk_python(function):
            param = _softmax_default_activation(node, defaults, rebound)
            if param is None or not _gives_the_output(node, function, parents):
                continue
            guard = _guard(node, function, parents, defaults)
            if guard is False:
                continue
            index = positional.index(param) if param in positional else -1
            where = None if guard is None else f"{guard}:{positional.index(guard) if guard in positional else -1}"
            found[function.name] = summary_at(node, param, index, where)
            break
    return found


def _softmax_default_activation(node: ast.AST, defaults: dict, rebound: set[str]) -> str | None:
    """The parameter of ``Layer(..., activation=<parameter>)`` when it defaults to "softmax" (and no ``dtype`` or
    ``**kwargs`` is given the layer), else None."""
    if not isinstance(node, ast.Call) or any(k.arg in ("dtype", None) for k in node.keywords):
        return None
    param = next((k.value.id for k in node.keywords if k.arg == "activation" and isinstance(k.value, ast.Name)), None)
    default = defaults.get(param) if param is not None and param not in rebound else None
    return param if isinstance(default, ast.Constant) and default.value == "softmax" else None


def _default_softmax_head_of_class(cls: ast.ClassDef) -> Summary | None:
    """``class Classifier(keras.Model)`` whose ``__init__(self, classes=1000, activation="softmax")`` assigns
    ``self.head = Dense(classes, activation=activation)`` (unguarded) and whose ``call()`` returns only
    ``self.head(...)``."""
    if not any((dotted_name(b) or "").endswith("Model") for b in cls.bases):
        return None
    methods = {s.name: s for s in cls.body if isinstance(s, ast.FunctionDef)}
    init, call = methods.get("__init__"), methods.get("call")
    if init is None or call is None:
        return None
    returns = [n for n in own_nodes(call) if isinstance(n, ast.Return)]
    heads = {
        r.value.func.attr
        for r in returns
        if isinstance(r.value, ast.Call)
        and isinstance(r.value.func, ast.Attribute)
        and isinstance(r.value.func.value, ast.Name)
        and r.value.func.value.id == "self"
    }
    if len(heads) != 1 or len(returns) != 1 or not isinstance(returns[0].value, ast.Call):
        return None
    head = heads.pop()
    positional, _, _, rebound = parameters(init)
    defaults = parameter_defaults(init)
    for stmt in init.body:  # top-level statements only: a head assigned under a condition may not exist
        if not (isinstance(stmt, ast.Assign) and len(stmt.targets) == 1):
            continue
        target = stmt.targets[0]
        if not (
            isinstance(target, ast.Attribute)
            and target.attr == head
            and isinstance(target.value, ast.Name)
            and target.value.id == "self"
        ):
            continue
        param = _softmax_default_activation(stmt.value, defaults, rebound)
        if param is not None:
            return summary_at(stmt.value, param, positional.index(param) - 1 if param in positional else -1, None)
    return None


def _gives_the_output(layer: ast.Call, function: ast.FunctionDef, parents: dict) -> bool:
    """``layer`` is the last element of a ``Sequential([...])`` the function returns, or ``layer(x)`` is assigned
    to a name that a later ``Model(inputs, name)`` of the function takes as its outputs, with no other assignment
    to that name in between."""
    holder = parents.get(layer)
    if isinstance(holder, ast.List) and holder.elts and holder.elts[-1] is layer:
        model = parents.get(holder)
        return isinstance(model, ast.Call) and callee_name(model) == "Sequential" and model.args[:1] == [holder]
    applied = holder if isinstance(holder, ast.Call) and holder.func is layer else None
    assign = parents.get(applied) if applied is not None else None
    if not (isinstance(assign, ast.Assign) and len(assign.targets) == 1 and isinstance(assign.targets[0], ast.Name)):
        return False
    name = assign.targets[0].id
    for node in walk_python(function):
        if not (isinstance(node, ast.Call) and callee_name(node) == "Model") or node.lineno <= assign.lineno:
            continue
        outputs = (
            node.args[1] if len(node.args) > 1 else next((k.value for k in node.keywords if k.arg == "outputs"), None)
        )
        if not (isinstance(outputs, ast.Name) and outputs.id == name):
            continue
        rebound = any(
            isinstance(other, ast.Name)
            and other.id == name
            and isinstance(other.ctx, ast.Store)
            and assign.lineno < other.lineno < node.lineno
            for other in walk_python(function)
        )
        return not rebound
    return False


def _guard(layer: ast.Call, function: ast.FunctionDef, parents: dict, defaults: dict) -> str | None | bool:
    """The parameter of the one ``if <parameter>:`` (default True) whose body holds ``layer``; None where no ``if``
    does (``with`` blocks are transparent); False for anything else around it (an ``else`` arm, another test, two
    guards, a loop, a ``try``, a conditional expression)."""
    guard = None
    child: ast.AST = layer
    node = parents.get(layer)
    while node is not None and node is not function:
        if isinstance(node, ast.If):
            default = defaults.get(node.test.id) if isinstance(node.test, ast.Name) else None
            if (
                guard is not None
                or child not in node.body
                or not (isinstance(default, ast.Constant) and default.value is True)
            ):
                return False
            guard = node.test.id
        elif isinstance(node, (ast.IfExp, ast.For, ast.AsyncFor, ast.While, ast.Try, ast.Lambda, ast.Match)):
            return False
        child, node = node, parents.get(node)
    return guard


ACTIVATION = declare(SummaryKind("activation", (b"activation",), True, _activation_params))
DEFAULT_HEAD = declare(SummaryKind("default_softmax_head", (b"softmax",), True, _default_softmax_heads))
OUTPUT_DTYPE = declare(SummaryKind("output_dtype", (b"dtype", b"oftmax"), True, _output_dtype_params))


class Float16SoftmaxOutput(Rule):
    id = "MP101"
    governed_by_policy = True
    triggers = (b"softmax", b"Softmax")
    # `build_model(10)` of a builder whose softmax takes its dtype parameter, or whose activation defaults to
    # "softmax"; `get_activation("softmax")` of a function that maps a name to a layer
    summary_triggers = (OUTPUT_DTYPE, DEFAULT_HEAD, ACTIVATION_LAYER)

    @classmethod
    def candidate(cls, code) -> bool:
        # a model built here, "softmax" handed to a call (a project builder's activation parameter), or a call of
        # a project builder whose softmax output layer takes a dtype parameter or defaults to softmax
        return (
            code.mentions("softmax", "Softmax")
            and (builds_model(code) or "softmax" in code.argument_words)
            or bool(code.calls_summarized(OUTPUT_DTYPE))
            or bool(code.calls_summarized(DEFAULT_HEAD))
            or builds_model(code)
            and bool(code.calls_summarized(ACTIVATION_LAYER))
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
            elif global_reduced(self.context) and (found := softmax_by_name(self.context, site.layer)) is not None:
                if id(site.layer) not in reported:
                    reported.add(id(site.layer))
                    self._report_named_softmax(site.layer, found)

    def _report_named_softmax(self, call: cst.Call, found: FunctionSummary) -> None:
        """``get_activation("softmax")`` as the model's last layer, where the project's function maps that name to
        a softmax layer (in another module too): no dtype reaches it, so it computes in the policy's dtype."""
        name = last_name(call.func)
        written = " ".join(self.context.module.code_for_node(call).split())
        reason = policy_reason(self.context, None)
        self.report(
            call,
            f"`{written}` is this model's softmax output layer, built by `{name}` at {found.path}:{found.line} "
            f"without a dtype: it computes in reduced precision ({reason}): {_harm(reason)}; end the model with a "
            'softmax layer given dtype="float32" instead',
            related=(Related(found.path, found.line, f"`{name}` returns the softmax layer here"),),
        )

    def _builder_calls(self) -> None:
        """Calls of the project's model builders (other modules too) that build a float16 softmax output."""
        summarized = self.context.facts.summarized_names
        kinds = (ACTIVATION, OUTPUT_DTYPE, DEFAULT_HEAD)
        if not any(kind.name in summarized for kind in kinds) or not global_reduced(self.context):
            return
        for call in self.context.nodes(cst.Call):
            found = self.context.summary(call.func, ACTIVATION)
            if found is not None:
                self._softmax_passed(call, last_name(call.func), found)
            found = self.context.summary(call.func, OUTPUT_DTYPE)
            if found is not None:
                self._dtype_left_to_policy(call, last_name(call.func), found)
            found = self.context.summary(call.func, DEFAULT_HEAD)
            if found is not None:
                self._softmax_by_default(call, last_name(call.func), found)

    def _softmax_by_default(self, call: cst.Call, last: str, found: FunctionSummary) -> None:
        """``build_resnet(input_shape)`` where the project's builder gives its output layer the activation of a
        parameter that defaults to "softmax", and the call leaves it there (and leaves the head's guard, such as
        ``include_top``, at True), for a model that is trained or leaves the file: a float16 softmax output."""
        param, index, guard, path, line = found
        if any(a.star for a in call.args) or argument(call, index if index >= 0 else None, param) is not None:
            return  # **kwargs may set it; a value passed is `_softmax_passed`'s, or the caller's choice
        if guard is not None:
            name, position = guard.rsplit(":", 1)
            given = argument(call, int(position) if int(position) >= 0 else None, name)
            if given is not None and not (isinstance(given, cst.Name) and given.value == "True"):
                return  # `include_top=False`: no head
        if construction_role(self.context, call) not in REPORTED_ROLES:
            return  # a backbone called on a tensor, a model only predicted with
        reason = policy_reason(self.context, None)
        self.report(
            call,
            f'`{last}` leaves `{param}` at its default "softmax", so the output layer it builds at {path}:{line} is a '
            f"softmax that computes in reduced precision ({reason}): {_harm(reason)}; pass {param}=None and apply "
            'the softmax in float32 after it (`Activation("softmax", dtype="float32")`), or give that layer '
            'dtype="float32"',
            related=(Related(path, line, f"`{last}` gives its output layer `activation={param}` here"),),
        )

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
    return "float16 probabilities round to 0 or 1, and the loss saturates or becomes inf/NaN"
