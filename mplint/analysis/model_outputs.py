"""Which expressions of a file produce model outputs, and of which models.

A model output is the last layer of ``Sequential([...])`` (or its last
``.add(...)``), the ``outputs`` of a functional ``Model(...)``, or what a
subclassed model's ``call()`` returns. Names are followed back through simple
assignments (the last one in the same scope before the use) and ``self.attr``
calls to the ``self.attr = Layer(...)`` that built the layer.

Each output also says what its model is for (``OutputSite.role``), read from how
the file uses the model:

- ``trained``: ``compile``/``fit``/``train_on_batch``/``evaluate``, its
  ``trainable_variables``, a call inside a ``GradientTape`` block, or a class
  that overrides ``train_step``;
- ``sub``: a component of another model (a backbone, encoder or preprocessing
  ``Sequential``): called on a tensor before another model is built from it, an
  element of a ``Sequential`` or an ``.add()``, its ``.output`` feeding another
  model, built inside a Layer or Model class, a ``Sequential`` of preprocessing
  layers only (Resizing, Rescaling, Random*...), or returned by a function whose
  name says encoder/backbone/feature extractor/preprocessing;
- ``inference``: a model local to a function that only predicts, summarises
  or saves, and never leaves the function (test code);
- ``unknown``: anything else, in particular a model that leaves the file's view
  (returned, module level, passed to another function), which its users may train.

A trained or unknown model whose output is a sub-model's output passes the role
on: the sub-model's output layer produces the outer model's output.
``cast_before_loss``: every use of the model's outputs in the file casts them to
float32 first (``tf.cast``, a helper, ``map_structure``) and nothing compiles it.

``output_layers`` also follows outputs back through shape-preserving layers
(Activation, Softmax, Dropout, a cast, a float32 ``Activation("linear")``, the
layer a project function maps an activation's name to: ``get_activation("softmax")``):
the ``Dense(10)`` before ``Activation("softmax", dtype="float32")`` sets the class
count.
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass, field

import libcst as cst

from mplint.analysis.activation_layers import activation_by_name
from mplint.analysis.call_args import argument
from mplint.engine.code_summary import CodeSummary
from mplint.engine.context import FileContext
from mplint.engine.names import assigned_name, last_name
from mplint.knowledge.apinames import KERAS_NAMESPACES
from mplint.knowledge.layers import SHAPE_PRESERVING

_SCOPES = (cst.Module, cst.FunctionDef, cst.ClassDef, cst.Lambda)
_MAX_HOPS = 20  # guards against assignment cycles such as `x = y; y = x`


@dataclass(frozen=True)
class OutputSite:
    expr: cst.BaseExpression  # the expression that produces the output value (after following assignments)
    layer: cst.Call | None  # the layer construction call producing it, when traceable
    kind: str  # "sequential" | "sequential-add" | "functional" | "subclass-call"
    model: cst.CSTNode  # the Sequential(...)/Model(...) call or the ClassDef
    written: cst.BaseExpression | None = None  # the output as written (list element, outputs= value, return value)
    role: str = "unknown"  # trained | unknown | sub | inference (see the module's docstring)
    cast_before_loss: bool = False  # every use of the outputs in this file casts them to float32 first

    @property
    def reported(self) -> bool:
        """An output of a model that is trained, or may be: MP101/MP102 report these."""
        return self.role in REPORTED_ROLES


REPORTED_ROLES = frozenset({"trained", "unknown"})
_TRAINING_METHODS = frozenset({"compile", "fit", "fit_generator", "train_on_batch", "evaluate", "evaluate_generator"})
_TRAINABLE = frozenset({"trainable_variables", "trainable_weights"})
_FEATURES = frozenset({"output", "outputs", "input", "inputs", "layers", "get_layer"})
_COMPONENT_WORDS = re.compile(r"encoder|backbone|extractor|feature|preprocess|augment|embedding|tower|stem|trunk", re.I)
# Words of a class name, or folders of its package, that make a model class a part of a model.
_COMPONENT_CLASS_WORDS = frozenset(
    "encoder backbone extractor embedding embeddings tower stem trunk head block decoder neck".split()
)
_COMPONENT_PACKAGES = frozenset("heads backbones encoders decoders necks blocks layers networks".split())


def _component_class(name: str, module: str) -> bool:
    words = {w.lower() for w in re.findall(r"[A-Z]?[a-z]+|[A-Z]+(?![a-z])", name)}
    return bool(words & _COMPONENT_CLASS_WORDS) or bool(set(module.split(".")) & _COMPONENT_PACKAGES)


# Names of variables that hold a part of a model.
_COMPONENT_NAME = re.compile(r"encoder|backbone|extractor|sub_?model|tower|decoder", re.I)
# Keyword arguments that hand a model to another model as a part of it.
_COMPONENT_ARGUMENT = re.compile(
    r"network|encoder|decoder|backbone|embedding|tower|layer|head|feature|interaction|_cls$|^cls$|sub_?model|base_model",
    re.I,
)
# Layers with no weights that only prepare inputs: a Sequential of these is a preprocessing pipeline.
_PREPROCESSING = frozenset(
    {
        "Resizing",
        "Rescaling",
        "CenterCrop",
        "Normalization",
        "RandomFlip",
        "RandomRotation",
        "RandomZoom",
        "RandomTranslation",
        "RandomContrast",
        "RandomCrop",
        "RandomBrightness",
        "RandomHeight",
        "RandomWidth",
        "InputLayer",
        "Input",
        "Lambda",
        "StringLookup",
        "IntegerLookup",
        "TextVectorization",
        "Hashing",
        "Discretization",
        "CategoryEncoding",
    }
)
_SHAPE_PRESERVING_FUNCTIONS = frozenset(
    {
        "cast",
        "dtypes.cast",
        "ops.cast",
        "nn.softmax",
        "math.softmax",
        "activations.softmax",
        "ops.softmax",
        "nn.sigmoid",
        "math.sigmoid",
        "sigmoid",
        "activations.sigmoid",
        "ops.sigmoid",
        "identity",
        "nn.relu",
        "activations.linear",
    }
)


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
        self.constructions: list[tuple[cst.Call, cst.CSTNode]] = []  # Sequential/Model calls with their scope
        self._find()
        _Roles(self).assign()

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

    def layer_of(
        self, expr: cst.BaseExpression, scope: cst.CSTNode, cls: cst.ClassDef | None = None
    ) -> cst.Call | None:
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

    # --- output layers through shape-preserving layers ------------------------------------

    def producing_layers(self, site: OutputSite) -> list[cst.CSTNode]:
        """The output's layer construction (or expression), and the ones before it while the
        later ones only preserve the shape (activations, dropout, casts)."""
        found: list[cst.CSTNode] = [site.expr]
        if site.layer is not None:
            found.append(site.layer)
        scope = self._scope_of(site.expr)
        cls = site.model if isinstance(site.model, cst.ClassDef) else None
        if site.kind.startswith("sequential"):
            previous = self._previous_sequential_layers(site)
            found.extend(previous)
            return found
        expr, layer = site.expr, site.layer
        for _ in range(_MAX_HOPS):
            before = self._shape_preserving_input(expr, layer, scope, cls)
            if before is None:
                break
            expr = self.trace(before, scope)
            layer = self.layer_of(expr, scope, cls)
            found.append(expr)
            if layer is not None:
                found.append(layer)
        return found

    def _shape_preserving_input(self, expr, layer, scope, cls) -> cst.BaseExpression | None:
        """``x`` when ``expr`` is ``Activation(...)(x)``, ``tf.cast(x, ...)``, ``tf.nn.softmax(x)``..."""
        if not isinstance(expr, cst.Call) or not expr.args:
            return None
        names = self.context.names
        if layer is not None:
            k = names.kname(layer.func)
            if (k is None or not k.is_keras or k.last not in SHAPE_PRESERVING) and not activation_by_name(
                self.context, layer
            ):
                return None
            return expr.args[0].value
        if isinstance(expr.func, cst.Call):
            return None
        for k in names.knames(expr.func):
            if (k.ns == "tf" or k.is_keras) and k.path in _SHAPE_PRESERVING_FUNCTIONS:
                return expr.args[0].value
        return None

    def _previous_sequential_layers(self, site: OutputSite) -> list[cst.CSTNode]:
        """For ``Sequential([..., Dense(10), Activation("softmax")])``: ``Dense(10)``."""
        model = site.model
        layers: list[cst.BaseExpression] = []
        if site.kind == "sequential-add":
            adds = sorted(
                (
                    c
                    for c, _ in self.index.calls
                    if isinstance(c.func, cst.Attribute)
                    and c.func.attr.value == "add"
                    and c.args
                    and isinstance(c.func.value, cst.Name)
                    and self.trace(c.func.value, self._scope_of(c)) is model
                ),
                key=self.context.source_order,
            )
            layers = [c.args[0].value for c in adds]
        else:
            listing = argument(model, 0, "layers")
            listing = self.trace(listing, self._scope_of(model)) if listing is not None else None
            if isinstance(listing, (cst.List, cst.Tuple)):
                layers = [e.value for e in listing.elements if isinstance(e, cst.Element)]
        found: list[cst.CSTNode] = []
        names = self.context.names
        for i in range(len(layers) - 2, -1, -1):
            after = layers[i + 1]
            k = names.kname(after.func) if isinstance(after, cst.Call) else None
            if (k is None or not k.is_keras or k.last not in SHAPE_PRESERVING) and not activation_by_name(
                self.context, after
            ):
                break
            found.append(layers[i])
        return found

    def _scope_of(self, node: cst.CSTNode) -> cst.CSTNode:
        for ancestor in self.context.ancestors(node):
            if isinstance(ancestor, _SCOPES):
                return ancestor
        return self.context.module

    # --- the three kinds of models --------------------------------------------------------

    def _find(self) -> None:
        names = self.context.names
        added: dict[int, list[cst.Call]] = {}  # Sequential call id -> its .add calls
        sequentials: list[tuple[cst.Call, cst.CSTNode]] = []
        for call, scope in self.index.calls:
            if names.callee(call, ["Sequential"]):
                sequentials.append((call, scope))
                self.constructions.append((call, scope))
            elif names.callee(call, ["Model"]):
                self.constructions.append((call, scope))
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
        layer = (
            expr if kind.startswith("sequential") and isinstance(expr, cst.Call) else self.layer_of(expr, scope, cls)
        )
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


class _Roles:
    """What each model of the file is for (see the module's docstring)."""

    def __init__(self, outputs: ModelOutputs):
        self.outputs = outputs
        self.context = outputs.context
        self.names = outputs.context.names
        self._tapes: dict[int, bool] = {}

    def assign(self) -> None:
        sites = self.outputs.sites
        roles: dict[int, tuple[str, bool]] = {}
        for site in sites:
            if id(site.model) not in roles:
                roles[id(site.model)] = self.role(site.model)
        # A reported model whose output is a sub-model's output: the sub-model's output layer is its output.
        for _ in range(3):
            for site in sites:
                inner = site.layer
                if inner is None or id(inner) not in roles or roles[id(site.model)][0] not in REPORTED_ROLES:
                    continue
                outer, current = roles[id(site.model)], roles[id(inner)]
                if current[0] not in REPORTED_ROLES or (outer[0] == "trained" and current[0] != "trained"):
                    roles[id(inner)] = outer
        self.outputs.sites = [
            dataclasses.replace(site, role=roles[id(site.model)][0], cast_before_loss=roles[id(site.model)][1])
            for site in sites
        ]

    # --- one model ----------------------------------------------------------------------------

    def role(self, model: cst.CSTNode) -> tuple[str, bool]:
        """(role, cast_before_loss) of a Sequential/Model construction or a model class."""
        if isinstance(model, cst.ClassDef):
            return self._class_role(model)
        if self._preprocessing_only(model):
            return "sub", False
        return self._construction_role(model)

    def _class_role(self, cls: cst.ClassDef) -> tuple[str, bool]:
        methods = {s.name.value: s for s in cls.body.body if isinstance(s, cst.FunctionDef)}
        if "train_step" in methods:
            uses = [
                c
                for c in self.context.nodes_within(methods["train_step"], cst.Call)
                if isinstance(c.func, cst.Name) and c.func.value == "self"
            ]
            return "trained", bool(uses) and all(self._cast_result(c) for c in uses)
        built = [
            c for c, _ in self.outputs.index.calls if (isinstance(c.func, cst.Name) and c.func.value == cls.name.value)
        ]
        if not built:
            # A library model class: a component when its name or its package says so
            # (SegmentationHead, vision/modeling/backbones/resnet.py).
            return ("sub" if _component_class(cls.name.value, self.context.module_name) else "unknown"), False
        return self._combine([self._construction_role(c) for c in built])

    @staticmethod
    def _combine(found: list[tuple[str, bool]]) -> tuple[str, bool]:
        cast = all(c for _, c in found)
        for role in ("trained", "unknown", "sub", "inference"):
            if any(r == role for r, _ in found):
                return role, cast and role in REPORTED_ROLES
        return "unknown", False

    def _preprocessing_only(self, model: cst.Call) -> bool:
        if not self.names.callee(model, ["Sequential"]):
            return False
        listing = argument(model, 0, "layers")
        if not isinstance(listing, (cst.List, cst.Tuple)) or not listing.elements:
            return False
        for element in listing.elements:
            value = element.value if isinstance(element, cst.Element) else None
            k = self.names.kname(value.func) if isinstance(value, cst.Call) else None
            if k is None or not k.is_keras or k.last not in _PREPROCESSING:
                return False
        return True

    def _construction_role(self, call: cst.Call) -> tuple[str, bool]:
        """How the model a ``Sequential(...)``/``Model(...)``/``MyModel(...)`` call builds is used."""
        cls = self.context.enclosing(call, cst.ClassDef)
        if cls is not None and self._is_layer_class(cls):
            return "sub", False  # built inside a Layer or Model: a component
        node: cst.CSTNode = call
        for parent in self.context.ancestors(call):
            if isinstance(parent, cst.Call):
                if parent.func is node:
                    return "sub", False  # Model(...)(x): used as a layer
                if self._builds_model(parent):
                    return "sub", False  # an element of Sequential([...]) / .add(...)
                return "unknown", False  # handed to a function
            if isinstance(parent, cst.Return):
                return self._returned(call)
            if isinstance(parent, (cst.Assign, cst.AnnAssign)):
                targets = [t.target for t in parent.targets] if isinstance(parent, cst.Assign) else [parent.target]
                if len(targets) == 1 and isinstance(targets[0], cst.Name) and parent.value is node:
                    role = self._name_role(targets[0].value, parent)
                    if role[0] != "trained" and _COMPONENT_NAME.search(targets[0].value):
                        return "sub", False  # encoder = keras.Model(...), sub_model = ...
                    return role
                return "unknown", False
            if isinstance(parent, cst.Expr):
                return "inference", False  # built and dropped: `keras.Model(inputs, outputs)` to trace a graph
            if isinstance(parent, (cst.BaseStatement, cst.BaseSmallStatement, cst.Lambda)):
                return "unknown", False
            node = parent
        return "unknown", False

    def _returned(self, node: cst.CSTNode) -> tuple[str, bool]:
        function = self.context.enclosing(node, cst.FunctionDef)
        if function is not None and _COMPONENT_WORDS.search(function.name.value):
            return "sub", False
        return "unknown", False

    def _name_role(self, name: str, binding: cst.CSTNode) -> tuple[str, bool]:
        scope = self.outputs._scope_of(binding)
        after = self.context.end_order(binding)
        trained = sub = escapes = compiled = False
        consumed: list[bool] = []  # per use of the outputs: cast to float32 first?
        if isinstance(scope, cst.Module):
            escapes = True  # importable: other modules may train it
        for use in self.context.nodes_within(scope, cst.Name):
            if use.value != name or self.context.source_order(use) <= after:
                continue
            parent = self.context.parent(use)
            if isinstance(parent, cst.Attribute):
                if parent.value is not use:
                    continue
                attr = parent.attr.value
                if attr in _TRAINING_METHODS or attr in _TRAINABLE:
                    trained = True
                    compiled = compiled or attr in _TRAINING_METHODS
                elif attr in _FEATURES and self._model_built_after(parent, scope):
                    sub = True
                continue
            if isinstance(parent, cst.Call) and parent.func is use:
                if self._in_tape(parent):
                    trained = True
                    consumed.append(self._cast_result(parent))
                elif self._model_built_after(parent, scope):
                    sub = True
                else:
                    consumed.append(self._cast_result(parent))
                continue
            if self._is_target(use):
                # Rebound: later uses are another value. `model = wrap(model)` hands this one on.
                # A rebinding in another branch (`elif`) leaves this value's later uses alone.
                statement = self.context.enclosing(
                    use, (cst.Assign, cst.AugAssign, cst.AnnAssign, cst.For, cst.WithItem)
                )
                value = getattr(statement, "value", None) or getattr(statement, "iter", None)
                if value is None or any(
                    n.value == name and not self._is_member(n) for n in self.context.nodes_within(value, cst.Name)
                ):
                    escapes = True
                    break
                block = self.context.enclosing(use, cst.BaseSuite)
                if block is None or self.context.contains(block, binding):
                    break
                continue
            holder = self._holder(use)
            if holder == "component":
                sub = True
            elif holder == "returned":
                function = self.context.enclosing(use, cst.FunctionDef)
                if function is not None and _COMPONENT_WORDS.search(function.name.value):
                    sub = True
                else:
                    escapes = True
            elif holder == "escapes":
                escapes = True
        cast = not compiled and bool(consumed) and all(consumed)
        if trained:
            return "trained", cast
        if sub:
            return "sub", False
        if escapes:
            return "unknown", cast
        return "inference", False

    # --- helpers ------------------------------------------------------------------------------

    def _is_member(self, name: cst.Name) -> bool:
        """``b`` in ``a.b``: an attribute, not a use of the name ``b``."""
        parent = self.context.parent(name)
        return isinstance(parent, cst.Attribute) and parent.attr is name

    def _is_target(self, name: cst.Name) -> bool:
        for parent in self.context.ancestors(name):
            if isinstance(parent, cst.AssignTarget):
                return True
            if isinstance(parent, (cst.Tuple, cst.List, cst.StarredElement, cst.Element)):
                continue
            return False
        return False

    def _holder(self, use: cst.Name) -> str:
        """Where a bare use of a model name puts the model: ``component`` (an element of a
        Sequential, an ``.add``), ``returned``, ``escapes`` (an argument, an attribute, an
        alias, a container) or ``none`` (a test, a comparison)."""
        node: cst.CSTNode = use
        for parent in self.context.ancestors(use):
            if isinstance(parent, cst.Call):
                if self._builds_model(parent):
                    return "component"
                if (
                    isinstance(node, cst.Arg)
                    and node.keyword is not None
                    and _COMPONENT_ARGUMENT.search(node.keyword.value)
                ):
                    return "component"  # EncoderScaffold(embedding_cls=network), Classifier(network=encoder)
                if (last_name(parent.func) or "").startswith("assert"):
                    return "none"
                return "escapes"
            if isinstance(parent, cst.Return):
                return "returned"
            if isinstance(parent, (cst.Assign, cst.AnnAssign, cst.AugAssign, cst.Yield)):
                return "escapes"
            if isinstance(parent, (cst.BaseStatement, cst.BaseSmallStatement, cst.Lambda, cst.Comparison, cst.If)):
                return "none"
            node = parent
        return "none"

    def _builds_model(self, call: cst.Call) -> bool:
        if self.names.callee(call, ["Sequential", "Model"]):
            return True
        return isinstance(call.func, cst.Attribute) and call.func.attr.value == "add"

    def _model_built_after(self, node: cst.CSTNode, scope: cst.CSTNode) -> bool:
        """Another model is built later in the same scope (from what this use produced)."""
        at = self.context.source_order(node)
        return any(
            self.context.end_order(c) > at and c is not node and self.context.contains(scope, c)
            for c, _ in self.outputs.constructions
        )

    def _in_tape(self, node: cst.CSTNode) -> bool:
        for parent in self.context.ancestors(node):
            if isinstance(parent, cst.With):
                for item in parent.items:
                    if isinstance(item.item, cst.Call) and last_name(item.item.func) == "GradientTape":
                        return True
            if isinstance(parent, (cst.FunctionDef, cst.ClassDef)):
                return False
        return False

    def _is_layer_class(self, cls: cst.ClassDef) -> bool:
        from mplint.analysis.dtype_flow import DtypeFlow

        return self.context.analysis(DtypeFlow).is_layer_class(cls)

    def _cast_result(self, call: cst.Call) -> bool:
        """Whether the outputs ``call`` (a model call) returns are cast to float32 before any other
        use: the call is the argument of a float32 cast/helper, or it is assigned to a name whose
        next use is one."""
        from mplint.analysis.dtype_flow import FLOAT32, DtypeFlow

        flow = self.context.analysis(DtypeFlow)
        parent = self.context.parent(call)
        if isinstance(parent, cst.Arg):
            outer = self.context.parent(parent)
            return isinstance(outer, cst.Call) and flow.classify(outer) is FLOAT32
        name = assigned_name(parent)
        if name is None:
            return False
        scope = self.outputs._scope_of(parent)
        after = self.context.end_order(parent)
        for use in self.context.nodes_within(scope, cst.Name):
            if (
                use.value != name
                or self.context.source_order(use) <= after
                or self._is_target(use)
                or self._is_member(use)
            ):
                continue
            arg = self.context.parent(use)
            outer = self.context.parent(arg) if isinstance(arg, cst.Arg) else None
            return isinstance(outer, cst.Call) and flow.classify(outer) is FLOAT32
        return False


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
    """True if the layer construction ``call`` produces a model output, directly or through
    shape-preserving layers (``Dense(10)`` followed by ``Activation("softmax", dtype="float32")``)."""
    return id(call) in context.analysis(_output_layers)


def _output_layers(context: FileContext) -> set[int]:
    analysis = output_analysis(context)
    found: set[int] = set()
    for site in analysis.sites:
        for layer in analysis.producing_layers(site):
            found.add(id(layer))
    return found


def construction_role(context: FileContext, call: cst.Call) -> str:
    """The role (see the module's docstring) of the model a call builds: ``build_resnet(...)`` of a project builder
    as well as ``Sequential(...)``."""
    return _Roles(output_analysis(context))._construction_role(call)[0]


def reported_outputs(context: FileContext) -> tuple[OutputSite, ...]:
    """The outputs of models that are trained or may be (not sub-models, not inference-only test
    models): what MP101 and MP102 report."""
    return tuple(site for site in model_outputs(context) if site.reported)
