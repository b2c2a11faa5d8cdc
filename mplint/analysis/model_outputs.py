"""Which expressions of a file produce model outputs.

A model output is the last layer of ``Sequential([...])`` (or its last
``.add(...)``), the ``outputs`` of a functional ``Model(...)``, or what a
subclassed model's ``call()`` returns. Names are followed back through simple
assignments (the last one in the same scope before the use) and ``self.attr``
calls to the ``self.attr = Layer(...)`` that built the layer.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import libcst as cst

from mplint.analysis.call_args import argument
from mplint.engine.apinames import KERAS_NAMESPACES
from mplint.engine.code_summary import CodeSummary
from mplint.engine.context import FileContext

_SCOPES = (cst.Module, cst.FunctionDef, cst.ClassDef, cst.Lambda)
_MAX_HOPS = 20  # guards against assignment cycles such as `x = y; y = x`


@dataclass(frozen=True)
class OutputSite:
    expr: cst.BaseExpression  # the expression that produces the output value (after following assignments)
    layer: cst.Call | None  # the layer construction call producing it, when traceable
    kind: str  # "sequential" | "sequential-add" | "functional" | "subclass-call"
    model: cst.CSTNode  # the Sequential(...)/Model(...) call or the ClassDef
    written: cst.BaseExpression | None = None  # the output as written (list element, outputs= value, return value)


@dataclass
class _Index:
    """One pass over the file: assignments per scope, model constructions, classes."""

    assigns: dict[tuple[int, str], list[tuple[cst.CSTNode, cst.BaseExpression]]] = field(default_factory=dict)
    self_assigns: dict[tuple[int, str], list[cst.BaseExpression]] = field(default_factory=dict)
    calls: list[tuple[cst.Call, cst.CSTNode]] = field(default_factory=list)  # (call, scope)
    classes: list[cst.ClassDef] = field(default_factory=list)
    returns: dict[int, list[cst.Return]] = field(default_factory=dict)  # function id -> its returns
    parent_scope: dict[int, cst.CSTNode] = field(default_factory=dict)


def _build_index(context: FileContext) -> _Index:
    """Assignments, calls and returns with their scopes, from the file's node index in source order.

    A node belongs to the innermost scope (module, def, class, lambda) whose span holds it; a
    def's decorators and defaults count as inside the def, as a visitor entering it first sees them.
    """
    index = _Index()
    nodes = context.nodes(*_SCOPES, cst.Assign, cst.AnnAssign, cst.Call, cst.Return)
    stack: list[tuple[cst.CSTNode, int, cst.ClassDef | None]] = []  # (scope, its end, nearest class)
    for node in nodes:
        order = context.source_order(node)
        while stack and stack[-1][1] < order:
            stack.pop()
        if isinstance(node, _SCOPES):
            if stack:
                index.parent_scope[id(node)] = stack[-1][0]
            cls = node if isinstance(node, cst.ClassDef) else (stack[-1][2] if stack else None)
            stack.append((node, context.end_order(node), cls))
            if isinstance(node, cst.ClassDef):
                index.classes.append(node)
            continue
        scope, _, cls = stack[-1]
        if isinstance(node, cst.Call):
            index.calls.append((node, scope))
        elif isinstance(node, cst.Return):
            index.returns.setdefault(id(scope), []).append(node)
        elif isinstance(node, cst.Assign):
            for target in node.targets:
                _bind(index, scope, cls, node, target.target, node.value)
        elif node.value is not None:  # AnnAssign
            _bind(index, scope, cls, node, node.target, node.value)
    return index


def _bind(index: _Index, scope, cls, stmt: cst.CSTNode, target: cst.BaseExpression, value: cst.BaseExpression) -> None:
    if isinstance(target, cst.Name):
        index.assigns.setdefault((id(scope), target.value), []).append((stmt, value))
    elif (
        isinstance(target, cst.Attribute)
        and isinstance(target.value, cst.Name)
        and target.value.value == "self"
        and cls is not None
    ):
        index.self_assigns.setdefault((id(cls), target.attr.value), []).append(value)


class ModelOutputs:
    def __init__(self, context: FileContext):
        self.context = context
        self.index = _build_index(context)
        self.sites: list[OutputSite] = []
        self._find()

    # --- name resolution -----------------------------------------------------------------

    def _before(self, stmt: cst.CSTNode, use: cst.CSTNode) -> bool:
        return self.context.ends_before(stmt, use)

    def lookup(self, name: cst.Name, scope: cst.CSTNode) -> tuple[cst.BaseExpression, cst.CSTNode] | None:
        """The value last assigned to ``name`` before its use, and the scope it lives in."""
        candidates = [v for stmt, v in self.index.assigns.get((id(scope), name.value), []) if self._before(stmt, name)]
        if candidates:
            return candidates[-1], scope
        outer = self.index.parent_scope.get(id(scope))
        while outer is not None:  # a closure sees the enclosing function's final binding
            bound = self.index.assigns.get((id(outer), name.value))
            if bound:
                return bound[-1][1], outer
            outer = self.index.parent_scope.get(id(outer))
        return None

    def self_attr(self, node: cst.BaseExpression, cls: cst.ClassDef | None) -> cst.BaseExpression | None:
        if cls is None or not (
            isinstance(node, cst.Attribute) and isinstance(node.value, cst.Name) and node.value.value == "self"
        ):
            return None
        values = self.index.self_assigns.get((id(cls), node.attr.value))
        return values[-1] if values else None

    def trace(self, expr: cst.BaseExpression, scope: cst.CSTNode) -> cst.BaseExpression:
        """Follow a name back to the expression that produced it."""
        for _ in range(_MAX_HOPS):
            if not isinstance(expr, cst.Name):
                return expr
            found = self.lookup(expr, scope)
            if found is None:
                return expr
            expr, scope = found
        return expr

    def layer_of(self, expr: cst.BaseExpression, scope: cst.CSTNode, cls: cst.ClassDef | None = None) -> cst.Call | None:
        """The layer construction behind a value: ``Dense(10)`` in ``Dense(10)(x)`` or ``head(x)``."""
        if not isinstance(expr, cst.Call):
            return None
        func = expr.func
        if isinstance(func, cst.Call):
            return func
        if isinstance(func, cst.Name):
            value = self.trace(func, scope)
            return value if isinstance(value, cst.Call) and value is not func else None
        value = self.self_attr(func, cls)
        if isinstance(value, cst.Name):
            value = None  # `self.head = head` where head is a constructor argument: not traceable here
        return value if isinstance(value, cst.Call) else None

    def _elements(self, expr: cst.BaseExpression, scope: cst.CSTNode, cls=None) -> list[cst.BaseExpression]:
        expr = self.trace(expr, scope)
        if isinstance(expr, (cst.List, cst.Tuple)):
            out = []
            for element in expr.elements:
                if isinstance(element, cst.Element):
                    out.extend(self._elements(element.value, scope, cls))
            return out
        if isinstance(expr, cst.Dict):
            out = []
            for element in expr.elements:
                if isinstance(element, cst.DictElement):
                    out.extend(self._elements(element.value, scope, cls))
            return out
        return [expr]

    # --- the three kinds of models --------------------------------------------------------

    def _find(self) -> None:
        names = self.context.names
        added: dict[int, list[cst.Call]] = {}  # Sequential call id -> its .add calls
        sequentials: list[tuple[cst.Call, cst.CSTNode]] = []
        for call, scope in self.index.calls:
            if names.callee(call, ["Sequential"]):
                sequentials.append((call, scope))
            elif names.callee(call, ["Model"]):
                self._functional(call, scope)
            elif (
                isinstance(call.func, cst.Attribute)
                and call.func.attr.value == "add"
                and isinstance(call.func.value, cst.Name)
                and call.args
            ):
                owner = self.trace(call.func.value, scope)
                if isinstance(owner, cst.Call) and names.callee(owner, ["Sequential"]):
                    added.setdefault(id(owner), []).append(call)
        for call, scope in sequentials:
            adds = added.get(id(call))
            if adds:
                last = max(adds, key=self.context.source_order)
                self._add_site(last.args[0].value, scope, "sequential-add", call)
            else:
                layers = argument(call, 0, "layers")
                layers = self.trace(layers, scope) if layers is not None else None
                if isinstance(layers, (cst.List, cst.Tuple)) and layers.elements:
                    self._add_site(layers.elements[-1].value, scope, "sequential", call)
        for cls in self.index.classes:
            if self._is_model_class(cls):
                self._subclass(cls)

    def _add_site(self, written, scope, kind, model, cls=None) -> None:
        expr = self.trace(written, scope)
        layer = expr if kind.startswith("sequential") and isinstance(expr, cst.Call) else self.layer_of(expr, scope, cls)
        if all(site.expr is not expr for site in self.sites):  # one output shared by two models
            self.sites.append(OutputSite(expr, layer, kind, model, written))

    def _functional(self, call: cst.Call, scope: cst.CSTNode) -> None:
        outputs = argument(call, 1, "outputs")
        if outputs is None:
            return
        for element in self._elements(outputs, scope):
            written = outputs if element is self.trace(outputs, scope) else element
            self._add_site(written, scope, "functional", call)

    def _is_model_class(self, cls: cst.ClassDef, seen: frozenset = frozenset()) -> bool:
        for base in cls.bases:
            if self.context.names.matches(base.value, ["Model"]):
                return True
            if isinstance(base.value, cst.Name) and base.value.value not in seen:
                local = next((c for c in self.index.classes if c.name.value == base.value.value), None)
                if local is not None and self._is_model_class(local, seen | {cls.name.value}):
                    return True
        return False

    def _subclass(self, cls: cst.ClassDef) -> None:
        for stmt in cls.body.body:
            if isinstance(stmt, cst.FunctionDef) and stmt.name.value == "call":
                for ret in self.index.returns.get(id(stmt), []):
                    if ret.value is None:
                        continue
                    for element in self._elements(ret.value, stmt, cls):
                        written = ret.value if element is self.trace(ret.value, stmt) else element
                        self._add_site(written, stmt, "subclass-call", cls, cls)


def builds_model(code: CodeSummary) -> bool:
    """Pre-filter: model outputs need a class deriving from ``Model``, or a Keras ``Sequential``/
    ``Model`` call (``ov.Model(...)`` of openvino is none)."""
    if "Model" in code.bases:
        return True
    return code.calls_any("Sequential", "Model") and any(
        found.path in ("Sequential", "Model") and found.ns in KERAS_NAMESPACES for found in code.api_calls
    )


def _analysis(context: FileContext) -> ModelOutputs:
    return ModelOutputs(context)


def model_outputs(context: FileContext) -> tuple[OutputSite, ...]:
    """Every model output of the file, memoised per file."""
    return tuple(context.analysis(_analysis).sites)


def output_analysis(context: FileContext) -> ModelOutputs:
    """The memoised analysis itself, for rules that trace further (e.g. ``self.attr`` layers)."""
    return context.analysis(_analysis)


def is_output_layer(context: FileContext, call: cst.Call) -> bool:
    """True if the layer construction ``call`` produces a model output."""
    return any(site.layer is call or site.expr is call for site in model_outputs(context))
