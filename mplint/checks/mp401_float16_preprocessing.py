"""MP401: input pipelines that convert to float16 and then keep computing."""

from __future__ import annotations

import ast

import libcst as cst

from mplint.analysis.call_args import argument
from mplint.analysis.constants import origin_of
from mplint.analysis.dtype_flow import DtypeFlow, dtype_spelling
from mplint.diagnostics import Fix, FixSafety, Related
from mplint.engine.imports import callee_name
from mplint.engine.imports import dotted_name as _dotted
from mplint.engine.names import assigned_name
from mplint.engine.rule import Rule
from mplint.engine.summaries import FunctionSummary, Summary, SummaryKind, declare, summary_at
from mplint.engine.summaries import walk as walk_python
from mplint.engine.walk import walk
from mplint.knowledge.conversions import CONVERSIONS, DTYPE_KEYWORD_CONVERSIONS, NP_MATH, TF_MATH
from mplint.knowledge.dtypes import FLOAT16_NAMES, FLOAT16_SPELLINGS

# Last names of every call _float16_conversion accepts (the pre-filter's test).
_CONVERTERS = frozenset(
    {"astype", *(p.rsplit(".", 1)[-1] for p in CONVERSIONS), *DTYPE_KEYWORD_CONVERSIONS, *FLOAT16_NAMES}
)
_ARITHMETIC = (cst.Add, cst.Subtract, cst.Multiply, cst.Divide, cst.FloorDivide, cst.Power)


# --- functions of another file that convert to a dtype parameter and compute (CPython's tree) ------------------


def _conversion_dtype_params(statements: list[ast.stmt], source: bytes = b"") -> dict[str, Summary]:
    """``def normalize_image(self, image, dtype=tf.float32): image = tf.image.convert_image_dtype(image, dtype);
    image -= mean ...``: functions and methods (``Class.method``) that convert data to a parameter's dtype and
    then compute with it, so a caller passing float16 does its preprocessing in float16 (MP401)."""
    found: dict[str, Summary] = {}
    for stmt in statements:
        if isinstance(stmt, ast.FunctionDef):
            functions = [(stmt.name, stmt, 0)]
        elif isinstance(stmt, ast.ClassDef):
            functions = [
                (f"{stmt.name}.{f.name}", f, 1)
                for f in stmt.body
                if isinstance(f, ast.FunctionDef)
                and not any(isinstance(d, ast.Name) and d.id == "staticmethod" for d in f.decorator_list)
            ]
        else:
            continue
        for name, function, offset in functions:
            entry = _conversion_dtype_param(function, offset)
            if entry is not None:
                found[name] = entry
    return found


def _conversion_dtype_param(function: ast.FunctionDef, offset: int) -> Summary | None:
    positional = [a.arg for a in function.args.args]
    # dtype parameters are named so (`dtype`, `out_dtype`, `image_type`): the others are not walked for conversions
    params = {p for p in (*positional[offset:], *(a.arg for a in function.args.kwonlyargs)) if "type" in p}
    if not params:
        return None
    conversions = [
        (node, dtype)
        for node in walk_python(function)
        if isinstance(node, ast.Call) and isinstance(dtype := _conversion_dtype(node), ast.Name) and dtype.id in params
    ]
    if not conversions:
        return None
    parents = {child: node for node in walk_python(function) for child in ast.iter_child_nodes(node)}
    for node, dtype in conversions:
        if not _computed_with(node, function, parents):
            continue
        index = positional.index(dtype.id) - offset if dtype.id in positional else -1
        return summary_at(node, dtype.id, index, None)
    return None


def _conversion_dtype(call: ast.Call) -> ast.expr | None:
    """The dtype argument of a conversion (``cast``, ``convert_image_dtype``, ``astype``, ``asarray(dtype=)``)."""
    last = callee_name(call)
    keyword = next((k.value for k in call.keywords if k.arg == "dtype"), None)
    if last == "astype":
        return call.args[0] if call.args else keyword
    position = next((i for path, i in CONVERSIONS.items() if path.rsplit(".", 1)[-1] == last), None)
    if position is not None:
        return call.args[position] if len(call.args) > position else keyword
    return keyword if last in DTYPE_KEYWORD_CONVERSIONS else None


def _computed_with(call: ast.Call, function: ast.FunctionDef, parents: dict) -> bool:
    """The converted value is an arithmetic operand, or is assigned to a name that later is one (or is
    updated in place, or passed to ``tf.image.*``/``tf.math.*``/NumPy math)."""
    parent = parents.get(call)
    if isinstance(parent, ast.BinOp):
        return True
    if not (isinstance(parent, ast.Assign) and len(parent.targets) == 1 and isinstance(parent.targets[0], ast.Name)):
        return False
    name, after = parent.targets[0].id, (parent.lineno, parent.col_offset)
    for node in walk_python(function):
        if not isinstance(node, ast.Name) or node.id != name or (node.lineno, node.col_offset) <= after:
            continue
        use = parents.get(node)
        if isinstance(use, ast.BinOp) or isinstance(use, ast.AugAssign) and use.target is node:
            return True
        if isinstance(use, ast.Call) and node in use.args:
            dotted = _dotted(use.func) or ""
            last = dotted.rsplit(".", 1)[-1]
            if (
                ".image." in f".{dotted}"
                and last != "convert_image_dtype"
                or ".math." in f".{dotted}"
                or last in TF_MATH
                or last in NP_MATH
            ):
                return True
    return False


CONVERSION_DTYPE = declare(SummaryKind("conversion_dtype", (b"dtype",), False, _conversion_dtype_params))


class Float16Preprocessing(Rule):
    id = "MP401"
    triggers = (b"float16", b"half")
    _summaries_by_name: dict[str, list[FunctionSummary]] | None = None

    @classmethod
    def candidate(cls, code) -> bool:
        """A call ``_float16_conversion`` accepts: ``x.astype(<float16>)``, or a NumPy/TensorFlow
        ``float16(x)``, cast or conversion (through an import) with an argument that spells float16; or
        another call given float16 (``_passed_dtype``); or, in a file that maps a dataset, a conversion whose
        dtype is computed (``_float16_through``)."""
        if not (code.calls_any(*_CONVERTERS) or code.calls_summarized(CONVERSION_DTYPE)):
            return False
        computed = code.mentions(*FLOAT16_SPELLINGS) and not code.attribute_calls.isdisjoint(_MAP_METHODS)
        for call in code.called:
            names = code.names_of(call)
            spells = any(
                not FLOAT16_SPELLINGS.isdisjoint(code.words_of(arg))
                for arg in [*call.args, *(k.value for k in call.keywords)]
            )
            if names.isdisjoint(_CONVERTERS):
                if spells and not names.isdisjoint(code.summarized.get(CONVERSION_DTYPE.name, ())):
                    return True  # float16 handed to a project function that converts to it (``_passed_dtype``)
                continue
            if type(call.func) is ast.Attribute and call.func.attr == "astype":
                if spells or computed and _computed_dtype(call):
                    return True
            elif (spells or not names.isdisjoint(FLOAT16_NAMES) or computed and _computed_dtype(call)) and _numpy_or_tf(
                code, call
            ):
                return True
        return False

    @classmethod
    def active_for(cls, facts):
        # Preprocessing for a mixed-precision model: where no mixed policy governs the code (a tutorial about
        # float16 itself, a conversion tool, library code no policy-setting program reaches), float16 is the point.
        return facts.reduced_precision

    def visit_Call(self, node: cst.Call) -> None:
        self._passed_dtype(node)
        dtype = self._conversion_argument(node)
        if dtype is None or self.context.analysis(DtypeFlow).in_layer_class(node):
            return
        if dtype_spelling(self.context, dtype) in FLOAT16_SPELLINGS or dtype is node.func:
            use = self._arithmetic_use(node)
            if use is not None:
                self.report(
                    node,
                    f"data converted to float16 here is then processed ({self._code(use)}): {_HARM}; do the math in "
                    "float32 (Keras casts model inputs to the compute dtype)",
                    Fix({dtype: _as_float32(dtype)}, FixSafety.SAFE),
                )
            return
        self._float16_through(node, dtype)

    def _float16_through(self, call: cst.Call, dtype: cst.BaseExpression) -> None:
        """A dataset map function that converts to a dtype which is float16 in the mixed-precision runs:
        ``tf.float16 if fp16 else tf.float32`` written there, or a name or ``self`` attribute bound once to such
        a value or to float16 (``dtype = tf.float16 if use_fp16 else tf.float32; image = tf.cast(image, dtype)``).
        A parameter's default is left alone: callers may pass float32."""
        origin = None
        value = dtype
        if isinstance(dtype, (cst.Name, cst.Attribute)):
            origin = origin_of(self.context, dtype)
            if origin is None or origin.parameter:
                return
            value = origin.value
        arms = [value.body, value.orelse] if isinstance(value, cst.IfExp) else [value]
        half = next((arm for arm in arms if dtype_spelling(self.context, arm) in FLOAT16_SPELLINGS), None)
        if half is None or not self._in_dataset_map(call):
            return
        use = self._arithmetic_use(call)
        if use is None:
            return
        other = next((arm for arm in arms if arm is not half), None)
        when = f"`{self._code(value)[1:-1]}`" if other is not None else "float16"
        if origin is None:
            shown = f"data converted to {when} here"
            fix = (
                Fix({dtype: other}, FixSafety.SAFE)
                if other is not None and dtype_spelling(self.context, other) == "float32"
                else None
            )
            related = ()
        else:
            line = self.context.position(origin.binding).start.line
            shown = f"data converted to `{self._code(dtype)[1:-1]}` here ({when}, {origin.where(self.context)})"
            fix = None  # the name may serve other code: the message says where to change it
            related = (Related("", line, f"`{self._code(dtype)[1:-1]}` is float16 here"),)
        self.report(
            call,
            f"{shown} is then processed in a dataset map function ({self._code(use)}): "
            f"{'in the mixed-precision runs that is float16, and ' if other is not None else ''}{_HARM}; convert to "
            "float32 (Keras casts model inputs to the compute dtype)",
            fix,
            related=related,
        )

    def _in_dataset_map(self, node: cst.CSTNode) -> bool:
        """Inside a function or lambda the file maps over a dataset (``ds.map(parse)``, ``ds.map(self.parse)``,
        ``ds.map(partial(parse, ...))``, ``ds.map(lambda r: parse(r, fp16))``), or a function of the file such a
        function calls."""
        mapped_names, mapped_lambdas = self.context.analysis(_dataset_map_functions)
        for ancestor in self.context.ancestors(node):
            if isinstance(ancestor, cst.Lambda) and id(ancestor) in mapped_lambdas:
                return True
            if isinstance(ancestor, cst.FunctionDef):
                return ancestor.name.value in mapped_names
        return False

    def _passed_dtype(self, call: cst.Call) -> None:
        """``processor.normalize_image(image, dtype=tf.float16 if amp else tf.float32)`` where the project's
        function converts to that parameter's dtype and then computes with the result (``summaries``)."""
        if not self.context.facts.summaries_of(CONVERSION_DTYPE):
            return
        found = self._converting_function(call.func)
        if (
            found is None
            or self._float16_conversion(call) is not None
            or self.context.analysis(DtypeFlow).in_layer_class(call)
        ):
            return  # conversions themselves are ``_float16_conversion``'s
        name, (param, index, _default, path, line) = found
        passed = argument(call, index if index >= 0 else None, param)
        arms = [passed.body, passed.orelse] if isinstance(passed, cst.IfExp) else [passed]
        for dtype in arms:
            if dtype is not None and dtype_spelling(self.context, dtype) in FLOAT16_SPELLINGS:
                other = next((arm for arm in arms if arm is not dtype), None)
                # `tf.float16 if amp else tf.float32` becomes `tf.float32`, not a conditional with two equal arms
                edit = (
                    {passed: other}
                    if other is not None and dtype_spelling(self.context, other) == "float32"
                    else {dtype: _as_float32(dtype)}
                )
                self.report(
                    dtype,
                    f"`{name}` converts its data to this dtype at {path}:{line} and then computes with it: float16 "
                    "arithmetic is slow on CPUs, where input pipelines run, and rounds integers above 2048; pass "
                    "float32 (Keras casts model inputs to the compute dtype)",
                    Fix(edit, FixSafety.SAFE),
                    related=(Related(path, line, f"`{name}` converts to its `{param}` here, then computes"),),
                )

    def _by_name(self) -> dict[str, list[FunctionSummary]]:
        """Function or method name -> the project's functions and methods of that name that convert to a
        parameter's dtype, then compute: a method called on an object is known by its name alone (no types)."""
        if self._summaries_by_name is None:
            self._summaries_by_name = {}
            for name, entry in self.context.facts.summaries_of(CONVERSION_DTYPE).items():
                self._summaries_by_name.setdefault(name.rsplit(".", 1)[-1], []).append(entry)
        return self._summaries_by_name

    def _converting_function(self, func: cst.BaseExpression) -> tuple[str, FunctionSummary] | None:
        """The function called and its summary: by the qualified name the callee resolves to, or for a method
        call on an object (``processor.normalize_image``) the project's one method of that name."""
        summaries = self.context.facts.summaries_of(CONVERSION_DTYPE)
        if not self.context.names.could_be(func, self._by_name()):
            return None  # cheap textual reject: not a project function's name, nor an import alias of one
        exact = next((name for name in sorted(self.context.names.project_paths(func)) if name in summaries), None)
        if exact is not None:
            return exact.rsplit(".", 1)[-1], summaries[exact]
        if not isinstance(func, cst.Attribute):
            return None
        distinct = {entry[3:]: entry for entry in self._by_name().get(func.attr.value, ())}  # re-exports count once
        return (func.attr.value, next(iter(distinct.values()))) if len(distinct) == 1 else None

    def _float16_conversion(self, call: cst.Call) -> cst.BaseExpression | None:
        """The dtype argument of a conversion to float16 (the callee for ``np.float16(x)``), else None."""
        dtype = self._conversion_argument(call)
        if dtype is not None and (dtype is call.func or dtype_spelling(self.context, dtype) in FLOAT16_SPELLINGS):
            return dtype
        return None

    def _conversion_argument(self, call: cst.Call) -> cst.BaseExpression | None:
        """The dtype argument of a conversion (the callee for ``np.float16(x)``), else None."""
        func = call.func
        if isinstance(func, cst.Attribute) and func.attr.value == "astype":
            return argument(call, 0, "dtype")
        if not self.context.names.could_be(func, _CONVERTERS):
            return None  # textual reject before name resolution
        kname = self.context.names.kname(func)
        if kname is None or kname.ns not in ("tf", "np"):
            return None
        if kname.ns == "np" and kname.path in FLOAT16_NAMES:
            return func
        if kname.path in CONVERSIONS:
            return argument(call, CONVERSIONS[kname.path], "dtype")
        if kname.path in DTYPE_KEYWORD_CONVERSIONS:
            return argument(call, None, "dtype")
        return None

    def _arithmetic_use(self, call: cst.Call) -> cst.CSTNode | None:
        """Where the float16 result is computed with: directly, or through the name it is assigned to."""
        if self._is_arithmetic_operand(call):
            return self._use_site(call)
        parent = self.context.parent(call)
        name = assigned_name(parent)
        if name is None:
            parent, name = self._unpacked_into(call)
        if name is None:
            return None
        scope = self._scope(parent)
        finder = _LaterUses(name, parent, self.context)
        walk(scope, finder, self.context.children)
        for use in finder.uses:
            if isinstance(use, cst.AugAssign):
                return use
            if self._is_arithmetic_operand(use):
                return self._use_site(use)
        return None

    def _unpacked_into(self, call: cst.Call) -> tuple[cst.CSTNode | None, str | None]:
        """``x, y = tf.cast(x, tf.float16), label``: the assignment and the name at the call's place."""
        element = self.context.parent(call)
        values = self.context.parent(element) if isinstance(element, cst.Element) else None
        assign = self.context.parent(values) if isinstance(values, cst.Tuple) else None
        if not (isinstance(assign, cst.Assign) and assign.value is values and len(assign.targets) == 1):
            return None, None
        target = assign.targets[0].target
        if not isinstance(target, (cst.Tuple, cst.List)) or len(target.elements) != len(values.elements):
            return None, None
        index = next(i for i, e in enumerate(values.elements) if e is element)
        bound = target.elements[index]
        if isinstance(bound, cst.StarredElement) or not isinstance(bound.value, cst.Name):
            return None, None
        return assign, bound.value.value

    def _use_site(self, node: cst.CSTNode) -> cst.CSTNode:
        parent = self.context.parent(node)
        return self.context.parent(parent) if isinstance(parent, cst.Arg) else parent

    def _is_arithmetic_operand(self, node: cst.CSTNode) -> bool:
        parent = self.context.parent(node)
        if isinstance(parent, cst.BinaryOperation):
            return isinstance(parent.operator, _ARITHMETIC)
        if isinstance(parent, cst.Arg):
            call = self.context.parent(parent)
            kname = self.context.names.kname(call.func) if isinstance(call, cst.Call) else None
            if kname is None:
                return False
            if kname.ns == "np":
                return kname.path in NP_MATH
            if kname.ns == "tf":
                return (
                    kname.path.startswith(("image.", "math."))
                    and kname.path != "image.convert_image_dtype"
                    or kname.path in TF_MATH
                )
        return False

    def _scope(self, node: cst.CSTNode) -> cst.CSTNode:
        return self.context.enclosing(node, cst.FunctionDef) or self.context.module

    def _code(self, node: cst.CSTNode) -> str:
        text = " ".join(self.context.module.code_for_node(node).split())
        return f"`{text}`" if len(text) <= 50 else f"`{text[:47]}...`"


_HARM = "float16 arithmetic is slow on CPUs, where input pipelines run, and rounds integers above 2048"
_MAP_METHODS = frozenset({"map"})


def _dataset_map_functions(context) -> tuple[frozenset[str], frozenset[int]]:
    """The names of the file's functions handed to a dataset's ``map`` (directly, as ``self.<method>``, through
    ``partial`` or called in a lambda), with the functions of the file those call, and the lambdas handed so."""
    names: set[str] = set()
    lambdas: set[int] = set()
    for call in context.nodes(cst.Call):
        if not (isinstance(call.func, cst.Attribute) and call.func.attr.value in _MAP_METHODS):
            continue
        mapped = argument(call, 0, "map_func")
        if isinstance(mapped, cst.Call) and "functools.partial" in context.names.qualified(mapped.func) and mapped.args:
            mapped = mapped.args[0].value
        if isinstance(mapped, cst.Lambda):
            lambdas.add(id(mapped))
            names.update(_called_names(context, mapped))
        elif mapped is not None and (own := _own_function(mapped)) is not None:
            names.add(own)
    functions = {f.name.value: f for f in context.nodes(cst.FunctionDef)}
    for function in [functions[n] for n in names if n in functions]:  # ``parse`` normalises with ``_normalize``
        names.update(_called_names(context, function))
    return frozenset(names), frozenset(lambdas)


def _called_names(context, node: cst.CSTNode) -> set[str]:
    """Names called in ``node`` as ``f(...)`` or ``self.f(...)``."""
    return {name for call in context.nodes_within(node, cst.Call) if (name := _own_function(call.func)) is not None}


def _own_function(func: cst.BaseExpression) -> str | None:
    """``f`` for ``f`` and for ``self.f``: a function or method of the file, by its name."""
    if isinstance(func, cst.Name):
        return func.value
    if isinstance(func, cst.Attribute) and isinstance(func.value, cst.Name) and func.value.value == "self":
        return func.attr.value
    return None


def _computed_dtype(call: ast.Call) -> bool:
    """An argument that may be a dtype held by a name, an attribute or a conditional (``_float16_through``)."""
    return any(
        isinstance(arg, (ast.Name, ast.Attribute, ast.IfExp)) for arg in [*call.args, *(k.value for k in call.keywords)]
    )


def _numpy_or_tf(code, call) -> bool:
    """Whether the call can resolve to NumPy or TensorFlow, as ``_float16_conversion`` requires."""
    return any(found.ns in ("tf", "np") for found in code.api_names(call))


class _LaterUses(cst.CSTVisitor):
    """Uses of ``name`` after the ``assign`` statement and before it is bound again (nested scopes
    skipped). Order is the file's source order (``FileContext.source_order``), not positions."""

    def __init__(self, name: str, assign: cst.CSTNode, context):
        self.name = name
        self.assign = assign
        self.end = context.end_order(assign)  # nodes ordered after this one come after the statement
        self.context = context
        self.uses: list[cst.CSTNode] = []
        self._rebound_at = None  # the end of the first later statement that binds the name again

    def visit_FunctionDef(self, node) -> bool:
        order = self.context.source_order
        return order(node) < order(self.assign) <= self.context.end_order(node)  # the scope holding the statement

    def visit_ClassDef(self, node) -> bool:
        return False

    def visit_Lambda(self, node) -> bool:
        return False

    def visit_Assign(self, node: cst.Assign) -> None:
        binds = any(isinstance(t.target, cst.Name) and t.target.value == self.name for t in node.targets)
        if binds and self._after(node):
            end = self.context.end_order(node)
            if self._rebound_at is None or end < self._rebound_at:
                self._rebound_at = end

    def visit_AugAssign(self, node: cst.AugAssign) -> None:
        if isinstance(node.target, cst.Name) and node.target.value == self.name and self._after(node):
            self.uses.append(node)

    def visit_Name(self, node: cst.Name) -> None:
        if node.value == self.name and self._after(node):
            self.uses.append(node)

    def _after(self, node) -> bool:
        return self.context.source_order(node) > self.end

    def leave_Module(self, node) -> None:
        self._trim()

    def leave_FunctionDef(self, node) -> None:
        self._trim()

    def _trim(self) -> None:
        order = self.context.source_order
        if self._rebound_at is not None:  # a use inside the rebinding statement still reads the float16 value
            self.uses = [u for u in self.uses if order(u) <= self._rebound_at]
        self.uses.sort(key=order)


def _as_float32(dtype: cst.BaseExpression) -> cst.BaseExpression:
    """The same spelling with float32: ``tf.float16`` -> ``tf.float32``, ``"half"`` -> ``"float32"``."""
    if isinstance(dtype, cst.SimpleString):
        quote = dtype.value[-1]
        return dtype.with_changes(value=f"{dtype.prefix}{quote}float32{quote}")
    if isinstance(dtype, cst.Attribute):
        return dtype.with_changes(attr=cst.Name("float32"))
    if isinstance(dtype, cst.Name):
        return dtype.with_changes(value="float32")
    return dtype
