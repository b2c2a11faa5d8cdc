"""What dtype a model output has, and the rewrites that make it float32 (MP101, MP102).

Only static evidence counts: a ``dtype=`` argument that evaluates, a final
cast, a softmax. An argument the linter cannot evaluate (``dtype=out_dtype``)
is taken as the author's deliberate choice and never flagged.
"""

from __future__ import annotations

import libcst as cst

from mplint.analysis.call_args import keyword, keyword_arg
from mplint.diagnostics import ImportSpec
from mplint.engine.context import FileContext
from mplint.engine.names import KName, canonical, dotted
from mplint.engine.walk import descendants
from mplint.knowledge.policies import BFLOAT16_POLICIES, FLOAT16_POLICIES, UNKNOWN_POLICY

FLOAT32 = frozenset({"float32", "float64"})
REDUCED = FLOAT16_POLICIES | BFLOAT16_POLICIES
INTEGER_LAYERS = frozenset(
    {
        "StringLookup",
        "IntegerLookup",
        "Hashing",
        "HashedCrossing",
        "TextVectorization",
        "CategoryEncoding",
        "Discretization",
    }
)
INTEGER_OPS = frozenset(
    {"argmax", "argmin", "math.argmax", "math.argmin", "ops.argmax", "ops.argmin", "argsort", "ops.argsort"}
)
_SOFTMAX_FUNCTIONS = {
    "tf": ("nn.softmax", "math.softmax"),
    "keras": ("activations.softmax", "ops.softmax", "ops.nn.softmax"),
}
_CAST_FUNCTIONS = {"tf": ("cast", "dtypes.cast"), "keras": ("ops.cast",)}
_UNEVALUATED = "<unevaluated>"


# --- reading dtypes ---------------------------------------------------------------------------


def string_value(node: cst.BaseExpression | None) -> str | None:
    if isinstance(node, cst.SimpleString):
        value = node.evaluated_value
        return value if isinstance(value, str) else None
    return None


def dtype_value(context: FileContext, node: cst.BaseExpression) -> str:
    """``"float32"`` for ``"float32"``, ``tf.float32``, ``np.float32``, ``Policy("float32")``; else unevaluated."""
    text = string_value(node)
    if text is not None:
        return text
    k = context.names.kname(node) if isinstance(node, (cst.Name, cst.Attribute)) else None
    if (
        k is not None
        and k.ns in ("tf", "np")
        and k.path.rsplit(".", 1)[-1] in ("float16", "bfloat16", "float32", "float64")
    ):
        return k.last
    if isinstance(node, cst.Call) and context.names.callee(node, ["mixed_precision.Policy"]) and node.args:
        return dtype_value(context, node.args[0].value)
    return _UNEVALUATED


def layer_dtype(context: FileContext, call: cst.Call) -> str | None:
    """The dtype given to a layer construction, None when it has none."""
    arg = keyword(call, "dtype")
    return None if arg is None else dtype_value(context, arg.value)


def keras_layer(context: FileContext, call: cst.Call | None) -> KName | None:
    """The Keras layer class constructed by ``call`` (any namespace and alias)."""
    if call is None:
        return None
    k = context.names.kname(call.func)
    return k if k is not None and k.is_keras and k.path.startswith("layers.") else None


def function_name(context: FileContext, call: cst.Call, table: dict[str, tuple[str, ...]]) -> KName | None:
    for k in context.names.knames(call.func):
        ns = "keras" if k.is_keras else k.ns
        if k.path in table.get(ns, ()):
            return k
    return None


def is_softmax_activation(context: FileContext, node: cst.BaseExpression) -> bool:
    if string_value(node) == "softmax":
        return True
    for k in context.names.knames(node) if isinstance(node, (cst.Name, cst.Attribute)) else ():
        if k.path in _SOFTMAX_FUNCTIONS.get("keras" if k.is_keras else k.ns, ()):
            return True
    return False


def is_softmax_layer(context: FileContext, call: cst.Call | None) -> bool:
    k = keras_layer(context, call)
    if k is None:
        return False
    if k.last == "Softmax":
        return True
    activation = keyword(call, "activation")
    if activation is None and k.last == "Activation" and call.args and call.args[0].keyword is None:
        activation = call.args[0]
    return activation is not None and is_softmax_activation(context, activation.value)


def softmax_function(context: FileContext, call: cst.BaseExpression) -> KName | None:
    return function_name(context, call, _SOFTMAX_FUNCTIONS) if isinstance(call, cst.Call) else None


def cast_dtype(context: FileContext, node: cst.BaseExpression) -> str | None:
    """The target dtype of a ``tf.cast``/``keras.ops.cast`` call, None when ``node`` is no cast."""
    if not isinstance(node, cst.Call) or function_name(context, node, _CAST_FUNCTIONS) is None:
        return None
    arg = keyword(node, "dtype") or (node.args[1] if len(node.args) > 1 and node.args[1].keyword is None else None)
    return _UNEVALUATED if arg is None else dtype_value(context, arg.value)


def is_integer_op(context: FileContext, node: cst.BaseExpression) -> bool:
    return isinstance(node, cst.Call) and any(
        (k.ns == "tf" or k.is_keras) and k.path in INTEGER_OPS for k in context.names.knames(node.func)
    )


def needs_float32(dtype: str | None) -> bool:
    """A layer dtype that leaves the output in reduced precision (None: the global policy decides)."""
    return dtype is None or dtype in REDUCED


def global_reduced(context: FileContext) -> bool:
    """A global policy (not only per-layer dtypes) may make layers compute in float16/bfloat16."""
    return bool(context.facts.global_policy_names & (REDUCED | {UNKNOWN_POLICY}))


def policy_reason(context: FileContext, layer: cst.Call | None) -> str:
    """Which policy makes an output reduced-precision, and where it was set."""
    own = layer_dtype(context, layer) if layer is not None else None
    if own in REDUCED and not global_reduced(context):
        return f'dtype="{own}" on this layer'
    return context.facts.describe_policy()


# --- rewriting ------------------------------------------------------------------------------


def quote_of(call: cst.Call) -> str:
    """The file's quoting style as seen in the call's own string arguments."""
    for node, _, _ in descendants(call):
        if isinstance(node, cst.SimpleString) and node.value[-1] in "'\"" and not node.value.endswith(('"""', "'''")):
            return node.value[-1]
    return '"'


def _no_comment(ws: cst.BaseParenthesizableWhitespace) -> cst.BaseParenthesizableWhitespace:
    if isinstance(ws, cst.ParenthesizedWhitespace):
        return ws.with_changes(first_line=cst.TrailingWhitespace())
    return ws


def append_argument(call: cst.Call, arg: cst.Arg) -> cst.Call:
    """``call`` with ``arg`` last, in the call's layout (one line or one argument per line, trailing comma)."""
    args = list(call.args)
    if not args:
        return call.with_changes(args=[arg])
    last = args[-1]
    if len(args) > 1 and isinstance(args[-2].comma, cst.Comma):
        separator = args[-2].comma.with_changes(whitespace_after=_no_comment(args[-2].comma.whitespace_after))
    elif isinstance(call.whitespace_before_args, cst.ParenthesizedWhitespace):
        separator = cst.Comma(whitespace_after=_no_comment(call.whitespace_before_args))
    else:
        separator = cst.Comma(whitespace_after=cst.SimpleWhitespace(" "))
    if isinstance(last.comma, cst.Comma):
        if separator.whitespace_after == cst.SimpleWhitespace(""):
            separator = separator.with_changes(whitespace_after=cst.SimpleWhitespace(" "))
        args[-1] = last.with_changes(comma=separator)
        args.append(arg.with_changes(comma=last.comma))
    else:
        args[-1] = last.with_changes(comma=separator, whitespace_after_arg=cst.SimpleWhitespace(""))
        args.append(arg.with_changes(whitespace_after_arg=last.whitespace_after_arg))
    return call.with_changes(args=args)


def with_float32_dtype(call: cst.Call, name: str = "dtype") -> cst.Call | None:
    """The layer construction (or a builder's call) with ``dtype="float32"`` (or another keyword ``name``):
    replaces that argument, else appends one.

    None when ``**kwargs`` may already carry it.
    """
    value = cst.SimpleString(f"{quote_of(call)}float32{quote_of(call)}")
    current = keyword(call, name)
    if current is not None:
        return call.with_changes(args=[a.with_changes(value=value) if a is current else a for a in call.args])
    if any(a.star == "**" for a in call.args):
        return None
    return append_argument(call, keyword_arg(name, value))


def module_bindings(context: FileContext) -> dict[str, str]:
    """Module-level names bound by imports, to the dotted module or object they import."""
    out: dict[str, str] = {}
    for stmt in context.module.body:
        if not isinstance(stmt, cst.SimpleStatementLine):
            continue
        for small in stmt.body:
            if isinstance(small, cst.Import):
                for alias in small.names:
                    full = dotted(alias.name)
                    if alias.asname is not None:
                        out[alias.asname.name.value] = full
                    else:
                        out[full.split(".")[0]] = full.split(".")[0]
            elif isinstance(small, cst.ImportFrom) and small.module is not None and not small.relative:
                if isinstance(small.names, cst.ImportStar):
                    continue
                for alias in small.names:
                    bound = alias.asname.name.value if alias.asname else dotted(alias.name)
                    out[bound] = f"{dotted(small.module)}.{dotted(alias.name)}"
    return out


def binding_for(context: FileContext, wanted: KName) -> str | None:
    for bound, full in module_bindings(context).items():
        if canonical(full, context.facts.reexports) == wanted:
            return bound
    return None


def cast_call(
    context: FileContext, value: cst.BaseExpression, keras3: bool, quote: str = '"'
) -> tuple[cst.Call, list[ImportSpec]]:
    """``tf.cast(value, "float32")`` with the file's tensorflow alias, or ``keras.ops.cast`` for Keras 3 code."""
    imports: list[ImportSpec] = []
    if keras3:
        ops = binding_for(context, KName("keras", "ops"))
        root = binding_for(context, KName("keras", ""))
        if ops:
            func = f"{ops}.cast"
        elif root:
            func = f"{root}.ops.cast"
        else:
            func, imports = "keras.ops.cast", [ImportSpec("keras")]
    else:
        root = binding_for(context, KName("tf", ""))
        if root:
            func = f"{root}.cast"
        else:
            func, imports = "tf.cast", [ImportSpec("tensorflow", None, "tf")]
    call = cst.Call(
        func=cst.parse_expression(func),
        args=[
            cst.Arg(value=value, comma=cst.Comma(whitespace_after=cst.SimpleWhitespace(" "))),
            cst.Arg(value=cst.SimpleString(f"{quote}float32{quote}")),
        ],
    )
    return call, imports


def layer_reference(
    context: FileContext, name: str, hints: list[cst.CSTNode]
) -> tuple[cst.BaseExpression, list[ImportSpec]]:
    """How this file spells the Keras layer ``name``: like the layers or model classes it already uses."""
    names = context.names
    namespaces = [k.ns for h in hints for k in names.knames(h.func if isinstance(h, cst.Call) else h) if k.is_keras]
    for ns in dict.fromkeys(namespaces):
        module = binding_for(context, KName(ns, "layers"))
        if module:
            return cst.parse_expression(f"{module}.{name}"), []
        direct = binding_for(context, KName(ns, f"layers.{name}"))
        if direct:
            return cst.Name(direct), []
    for hint in hints:
        func = hint.func if isinstance(hint, cst.Call) else hint
        k = names.kname(func)
        if k is None or not k.is_keras:
            continue
        spelled = dotted(func)
        if spelled is None:
            continue
        if k.path.startswith("layers.") and "." in spelled:
            return cst.parse_expression(f"{spelled.rsplit('.', 1)[0]}.{name}"), []
        if k.path in ("Sequential", "Model") and "." in spelled:
            prefix = spelled.rsplit(".", 1)[0]
            prefix = prefix[: -len(".models")] if prefix.endswith(".models") else prefix
            if prefix != "models":
                return cst.parse_expression(f"{prefix}.layers.{name}"), []
    for hint in hints:
        func = hint.func if isinstance(hint, cst.Call) else hint
        for q in sorted(names.qualified(func)):
            k = canonical(q, context.facts.reexports)
            if k is not None and k.is_keras:
                root = {"keras": "keras", "tf.keras": "tensorflow.keras", "tf_keras": "tf_keras"}[k.ns]
                return cst.Name(name), [ImportSpec(f"{root}.layers", name)]
    return cst.parse_expression(f"keras.layers.{name}"), [ImportSpec("keras")]


def float32_linear(
    context: FileContext, hints: list[cst.CSTNode], quote: str = '"'
) -> tuple[cst.Call, list[ImportSpec]]:
    """``layers.Activation("linear", dtype="float32")`` in the file's spelling."""
    func, imports = layer_reference(context, "Activation", hints)
    call = cst.Call(
        func=func,
        args=[
            cst.Arg(
                value=cst.SimpleString(f"{quote}linear{quote}"),
                comma=cst.Comma(whitespace_after=cst.SimpleWhitespace(" ")),
            ),
            keyword_arg("dtype", cst.SimpleString(f"{quote}float32{quote}")),
        ],
    )
    return call, imports
