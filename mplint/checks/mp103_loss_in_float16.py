"""MP103: hand-written losses computed on compute-dtype (float16) predictions."""

from __future__ import annotations

import ast
import re

import libcst as cst

from mplint.analysis.call_args import argument
from mplint.analysis.constants import literal_number
from mplint.analysis.dtype_flow import FLOAT32, Carrier, DtypeFlow, carrying_unit
from mplint.analysis.output_dtype import binding_for, cast_call
from mplint.diagnostics import Fix, FixSafety, Related
from mplint.engine.code_summary import calls_in
from mplint.engine.imports import callee_name
from mplint.engine.names import dotted
from mplint.engine.rule import Rule
from mplint.engine.summaries import Summary, SummaryKind, declare, first_line_text, parameters, summary_at
from mplint.engine.summaries import walk as walk_python
from mplint.knowledge.apinames import KName
from mplint.knowledge.loss_math import GROWING, GROWING_NAMES, REDUCTION_NAMES, REDUCTIONS, SUMS

# Calls whose results a sum grows from without bound (log-probabilities, exponentials).
_UNBOUNDED = frozenset({"log", "log_softmax", "log_sigmoid", "exp", "softplus", "logsumexp", "reduce_logsumexp"})
_MAYBE_LOSS = re.compile(r"(^|\.)(losses|reduce_mean|reduce_sum|mean|sum)(\.|$)")
_ARITHMETIC = (cst.Add, cst.Subtract, cst.Multiply, cst.Divide, cst.FloorDivide)
_LOSS_SINKS = frozenset({"add_loss", "gradient", "scale_loss", "get_scaled_loss"})
# The functions of keras.losses and tf.keras.losses (Keras 2 and 3) that compute a loss.
_FUNCTIONAL_LOSSES = frozenset(
    {
        "binary_crossentropy",
        "binary_focal_crossentropy",
        "categorical_crossentropy",
        "categorical_focal_crossentropy",
        "categorical_generalized_cross_entropy",
        "categorical_hinge",
        "circle",
        "cosine_similarity",
        "ctc",
        "dice",
        "hinge",
        "huber",
        "kl_divergence",
        "kld",
        "kullback_leibler_divergence",
        "log_cosh",
        "logcosh",
        "mae",
        "mape",
        "mean_absolute_error",
        "mean_absolute_percentage_error",
        "mean_squared_error",
        "mean_squared_logarithmic_error",
        "mse",
        "msle",
        "poisson",
        "sparse_categorical_crossentropy",
        "squared_hinge",
        "tversky",
    }
)


# --- losses of another file that grow their parameters (CPython's tree) ----------------------------------------


def _loss_reduction_params(statements: list[ast.stmt], source: bytes) -> dict[str, Summary]:
    """Module functions named for a loss that reduce a square, exponential or power of their parameters as they
    came (``def reconstruction_loss(x, x_hat): return tf.reduce_sum(tf.square(x - x_hat))``): called on float16
    values the loss overflows above 65504. `value` lists the parameters inside the growing math as
    "name@position" ("x@0,x_hat@1"); `default` is the reduction as written (shortened)."""
    found: dict[str, Summary] = {}
    for function in statements:
        if not isinstance(function, ast.FunctionDef) or "loss" not in function.name.lower():
            continue
        positional, params, own, rebound = parameters(function)
        for node in own:
            if not (isinstance(node, ast.Call) and callee_name(node) in REDUCTION_NAMES and node.args):
                continue
            grown = [
                g
                for g in walk_python(node.args[0])
                if isinstance(g, ast.BinOp)
                and isinstance(g.op, ast.Pow)
                or isinstance(g, ast.Call)
                and callee_name(g) in GROWING_NAMES
            ]
            if any(isinstance(c, ast.Call) and callee_name(c) == "cast" for c in walk_python(node.args[0])):
                continue  # cast somewhere inside: the reduction's dtype is the cast's
            names = {n.id for g in grown for n in walk_python(g) if isinstance(n, ast.Name)}
            if names & params & rebound:
                continue  # `x = tf.cast(x, tf.float32)` first: the math is float32 (or mixes and fails anyway)
            used = sorted(
                names & params, key=lambda p: (p not in positional, positional.index(p) if p in positional else 0, p)
            )
            if used:
                text = first_line_text(source, node)
                value = ",".join(f"{p}@{positional.index(p) if p in positional else -1}" for p in used)
                found[function.name] = summary_at(node, value, -1, text if len(text) <= 60 else text[:57] + "...")
                break
    return found


LOSS_REDUCTION = declare(SummaryKind("loss_reduction", (b"loss",), True, _loss_reduction_params))


class LossInFloat16(Rule):
    id = "MP103"
    governed_by_policy = True
    triggers = (re.compile(rb"reduce_mean|reduce_sum|\bmean\(|\bsum\(|losses"),)
    summary_triggers = (LOSS_REDUCTION,)  # `reconstruction_loss(x, x_hat)` of a project loss that squares

    @classmethod
    def candidate(cls, code) -> bool:
        """In one unit of ``code.flow_units`` where a compute-dtype value can come from (``may_carry``): a
        Keras loss function called, or a TF/Keras reduction of something that can grow (a power, an
        exponential or a sum) where ``_is_loss`` can hold (a loss sink is called, or a function or an
        assignment target is named a loss)."""
        functional = any(map(_loss_function, code.api_calls))
        reduction = code.calls_api(*REDUCTION_NAMES)
        passes = code.calls_summarized(LOSS_REDUCTION)
        if not (functional or reduction or passes):
            return False
        return carrying_unit(
            code,
            lambda unit: (
                functional
                and _calls_loss_function(unit, code)
                or reduction
                and _reduces_a_loss(unit, code)
                or passes
                and calls_in(unit, passes)
            ),
        )

    @classmethod
    def active_for(cls, facts):
        # float16 programs, and library code that any user may run under mixed_float16.
        return facts.float16_capable

    def visit_Call(self, node: cst.Call) -> None:
        self._project_loss(node)
        callee = dotted(node.func)
        if callee is not None and "." in callee and not _MAYBE_LOSS.search(callee):
            # cheap textual reject before any name resolution, unless the first name is an import
            # alias (``from tensorflow.keras import losses as L``)
            root = callee.split(".", 1)[0]
            if not any(_MAYBE_LOSS.search(path) for path in self.context.names.bindings.imports.get(root, ())):
                return
        kname = self.context.names.kname(node.func)
        if kname is None or not node.args:
            return
        if kname.path in REDUCTIONS and (kname.ns == "tf" or kname.is_keras):
            self._check_reduction(node, kname.path)
        elif _loss_function(kname):
            self._check_functional_loss(node)

    def _project_loss(self, call: cst.Call) -> None:
        """``reconstruction_loss(inputs, outputs)`` of another module of the project, which squares, exponentiates or
        sums its parameters, called on compute-dtype values (``loss_reduction`` summaries). Reported where the
        float16 value is known, as MP601 does: in Layer/Model code or for an explicit float16 value. The fix casts
        those arguments to float32 when every argument that meets the math has a known dtype."""
        found = self.context.summary(call.func, LOSS_REDUCTION)
        if found is None:
            return
        params, _, math, path, line = found
        flow = self.context.analysis(DtypeFlow)
        carriers, unknown = [], False
        for spec in params.split(","):
            name, _, position = spec.rpartition("@")
            value = argument(call, int(position) if int(position) >= 0 else None, name)
            kind = flow.classify(value) if value is not None else None
            if isinstance(kind, Carrier):
                carriers.append((value, kind))
            elif kind is not FLOAT32:
                unknown = True
        if not carriers or not (flow.in_layer_class(call) or any(c.always_float16 for _, c in carriers)):
            return
        name = dotted(call.func) or "the loss"
        shown = ", ".join(f"`{self._code(v)}`" for v, _ in carriers)
        fix = None
        if not unknown:
            replacements, imports = {}, []
            for value in (*(v for v, _ in carriers), *self._partners(call)):
                replacements[value], needed = cast_call(self.context, value, self.context.generation == 3)
                imports.extend(needed)
            fix = Fix(replacements, FixSafety.SAFE, imports=imports)
        self.report(
            call,
            f"`{name}` computes `{math}` ({path}:{line}) on the compute-dtype {shown}: under mixed_float16 the loss "
            "overflows to inf above 65504 (an error of 256 squared is already inf); cast to float32 before the call"
            + self.context.facts.library_note(),
            fix,
            related=(Related(path, line, f"`{math}`"),),
        )

    def _check_reduction(self, call: cst.Call, path: str) -> None:
        risky = self._reduction_risk(call, path)
        if risky is None or not self._is_loss(call):
            return
        if self._functional_predictions(risky):
            return  # the sum of a functional loss reported itself: that finding's fix makes the sum float32 too
        self.report(
            call,
            f"this loss squares, exponentiates or sums the compute-dtype `{self._code(risky)}`: under mixed_float16 "
            "it overflows to inf above 65504 (an error of 256 squared is already inf); compute the loss in float32"
            + self.context.facts.library_note(),
            self._cast_fix(call, self._cast_points(risky), self._partners(call)),
        )

    def _reduction_risk(self, call: cst.Call, path: str) -> cst.BaseExpression | None:
        """What the reduction ``call`` (of API ``path``) squares, exponentiates or sums in the compute dtype."""
        if not call.args:
            return None
        values = call.args[0].value
        risky = self._growing_operand(values)
        if (
            risky is None
            and path in SUMS
            and self._is_compute(values)
            and not self._bounded_sum(call, values)
            and (self.context.analysis(DtypeFlow).in_layer_class(call) or self._unbounded(values))
        ):
            risky = values
        return risky

    def _reported_reduction(self, node: cst.CSTNode) -> bool:
        """A reduction this rule reports (its own fix makes it float32)."""
        if not (isinstance(node, cst.Call) and node.args):
            return False
        kname = self.context.names.kname(node.func)
        if kname is None or kname.path not in REDUCTIONS or not (kname.ns == "tf" or kname.is_keras):
            return False
        risky = self._reduction_risk(node, kname.path)
        return risky is not None and self._is_loss(node)

    def _becomes_float32(self, node: cst.BaseExpression) -> bool:
        """An operand another finding of this rule makes float32: a reported reduction, a functional loss whose
        predictions it casts, or a name bound to an expression holding one."""
        if isinstance(node, cst.Name):
            node = self.context.analysis(DtypeFlow).assigned_value(node)
            if node is None:
                return False
        return any(
            self._reported_reduction(c) or self._functional_predictions(c)
            for c in (node, *self.context.nodes_within(node, cst.Call))
        )

    def _cast_points(self, risky: cst.BaseExpression, depth: int = 0) -> list[cst.BaseExpression]:
        """Where to cast to float32 so that the math which overflows runs in float32: before it, not after.
        A functional loss: its predictions. An exponential, square or power: its operand. Arithmetic holding such a
        call: each compute-dtype operand (a float16 operand left beside a float32 one is a TypeError in
        TensorFlow). A name bound in the function to such arithmetic (``kl = -0.5 * (1 + v - exp(v))``): the
        points of its value. Anything else is cast whole."""
        predictions = self._functional_predictions(risky)
        if predictions:
            return predictions
        flow = self.context.analysis(DtypeFlow)
        if depth < 8 and self._grows_inside(risky):
            if isinstance(risky, cst.Call):
                return self._cast_points(risky.args[0].value, depth + 1)
            if isinstance(risky, cst.UnaryOperation):
                return self._cast_points(risky.expression, depth + 1)
            if isinstance(risky, cst.BinaryOperation) and isinstance(risky.operator, _ARITHMETIC):
                sides = [
                    side
                    for side in (risky.left, risky.right)
                    if literal_number(side) is None and flow.classify(side) is not FLOAT32
                ]
                if all(self._grows_inside(side) or self._is_compute(side) for side in sides):
                    return [point for side in sides for point in self._cast_points(side, depth + 1)]
            if isinstance(risky, cst.Name):
                value = flow.assigned_value(risky)
                if value is not None:
                    return self._cast_points(value, depth + 1)
        return [risky]

    def _grows_inside(self, node: cst.BaseExpression) -> bool:
        """A TF/Keras exponential, square or power (by resolved name) is ``node`` or in it, or in the value a
        name ``node`` is bound to in its function: math that overflows element by element. A log does not (only
        the sum of logs grows), so the cast after it, before the sum, is enough."""
        if isinstance(node, cst.Name):
            value = self.context.analysis(DtypeFlow).assigned_value(node)
            return (
                value is not None
                and value is not node
                and not isinstance(value, cst.Name)
                and self._grows_inside(value)
            )
        for found in (node, *self.context.nodes_within(node, cst.Call)):
            if isinstance(found, cst.Call) and found.args:
                api = self.context.names.kname(found.func)
                if api is not None and (api.ns == "tf" or api.is_keras) and api.path in GROWING:
                    return True
        return isinstance(node, cst.BinaryOperation) and isinstance(node.operator, cst.Power)

    def _functional_predictions(self, node: cst.BaseExpression) -> list[cst.BaseExpression]:
        """The compute-dtype predictions of a functional Keras loss call ``node`` (what its finding casts)."""
        if not (isinstance(node, cst.Call) and node.args):
            return []
        kname = self.context.names.kname(node.func)
        if kname is None or not _loss_function(kname):
            return []
        predictions = argument(node, 1, "y_pred")
        return [predictions] if predictions is not None and self._is_compute(predictions) else []

    def _unbounded(self, expr: cst.BaseExpression, depth: int = 0) -> bool:
        """Per-example losses, logs or exponentials (``example_losses`` of a cross-entropy), followed through the
        function's assignments: what a sum grows from without bound. Outside Layer code a sum of anything else
        sums a plain function's inputs, whose size its callers decide (box coordinates clipped to [0, 1])."""
        if depth > 3:
            return False
        if any(self._unbounded_call(call) for call in self.context.nodes_within(expr, cst.Call)):
            return True
        flow = self.context.analysis(DtypeFlow)
        for name in self.context.nodes_within(expr, cst.Name):
            value = flow.assigned_value(name)
            if value is not None and value is not expr and self._unbounded(value, depth + 1):
                return True
        return False

    def _unbounded_call(self, call: cst.Call) -> bool:
        """A TensorFlow, Keras or NumPy log, exponential or loss (by the name the callee resolves to), or a call of
        something that is no such API and is named for a loss (``compute_loss``, ``self.loss_object``)."""
        api = self.context.names.kname(call.func)
        if api is not None and (api.ns in ("tf", "np") or api.is_keras):
            return api.last in _UNBOUNDED or _loss_function(api) or "entropy" in api.last
        if api is not None:
            return False
        word = call.func.attr.value if isinstance(call.func, cst.Attribute) else getattr(call.func, "value", "")
        return isinstance(word, str) and ("loss" in word.lower() or "entropy" in word.lower())

    def _partners(self, call: cst.BaseExpression) -> list[cst.BaseExpression]:
        """The operands the fixed, float32 result meets in arithmetic (``sum(loss * mask) / normalizer * weight``):
        TensorFlow does not mix float32 and float16 tensors (``x and y must have the same dtype``), so the fix casts
        each of them to float32 too; a no-op where they already are float32, as in a float32 run. Number literals
        take the tensor's dtype and operands already cast to float32 stay as they are, as do reductions this rule
        reports itself and names bound to them (their own fix makes them float32). The result is followed through
        reductions and a unary minus (``reduce_mean(reduce_sum(x))`` keeps its dtype) and through the one name it
        is assigned to, to where that name is used next in the function."""
        flow = self.context.analysis(DtypeFlow)
        partners: list[cst.BaseExpression] = []
        starts, seen = [call], set()
        while starts:
            node = starts.pop()
            while True:
                parent = self.context.parent(node)
                if isinstance(parent, cst.BinaryOperation) and isinstance(parent.operator, _ARITHMETIC):
                    other = parent.right if parent.left is node else parent.left
                    reported = isinstance(other, cst.Call) and other.args and self._growing_operand(other.args[0].value)
                    if (
                        literal_number(other) is None
                        and flow.classify(other) is not FLOAT32
                        and not reported
                        and not self._becomes_float32(other)
                    ):
                        partners.append(other)
                elif not isinstance(parent, (cst.UnaryOperation, cst.Arg)) and not self._reduces(parent, node):
                    break
                node = parent
            # the float32 result bound to a name (``kl_loss = reduce_mean(...)``) meets its partners where the
            # name is used next in the function (``total = reconstruction + kl_loss``)
            for use in self._later_uses(parent, node):
                if id(use) not in seen:
                    seen.add(id(use))
                    starts.append(use)
        return partners

    def _reduces(self, parent: cst.CSTNode | None, node: cst.CSTNode) -> bool:
        """``parent`` is a TF/Keras reduction of ``node`` (``reduce_mean(<node>)``): the result keeps its dtype."""
        if not (isinstance(parent, cst.Call) and isinstance(node, cst.Arg) and parent.args and parent.args[0] is node):
            return False
        kname = self.context.names.kname(parent.func)
        return kname is not None and kname.path in REDUCTIONS and (kname.ns == "tf" or kname.is_keras)

    def _later_uses(self, statement: cst.CSTNode | None, value: cst.CSTNode) -> list[cst.Name]:
        """The loads of the one name ``statement`` (an assignment of ``value``) binds, after it in its function."""
        if not (
            isinstance(statement, cst.Assign)
            and statement.value is value
            and len(statement.targets) == 1
            and isinstance(statement.targets[0].target, cst.Name)
        ):
            return []
        flow = self.context.analysis(DtypeFlow)
        function = flow.enclosing_function(statement)
        if function is None:
            return []
        bound = statement.targets[0].target
        return [
            name
            for name in self.context.nodes_within(function.body, cst.Name)
            if name.value == bound.value
            and name is not bound
            and self.context.source_order(name) > self.context.source_order(statement)
            and flow.assigned_value(name) is value
        ]

    def _is_loss(self, call: cst.Call) -> bool:
        """Whether the reduction computes a loss rather than a value of the forward pass.

        A loss: inside an ``add_loss(...)`` argument, assigned to a name that says ``loss`` or that
        is later handed to ``add_loss``, ``tape.gradient`` or loss scaling in the same function, or
        returned by a function whose name says ``loss``. A sum inside ``call()`` that feeds the
        layer's output (pooling, attention) is not a loss: casting it to float32 would change the
        dtype of the forward pass and break the float16 arithmetic that follows it."""
        statement = None
        for parent in self.context.ancestors(call):
            if isinstance(parent, cst.Call) and self._sink(parent.func) == "add_loss":
                return True
            if isinstance(parent, (cst.Assign, cst.AnnAssign, cst.AugAssign, cst.Return)):
                statement = parent
                break
            if isinstance(parent, (cst.BaseSuite, cst.FunctionDef, cst.ClassDef, cst.Module)):
                break
        function = self.context.analysis(DtypeFlow).enclosing_function(call)
        if isinstance(statement, cst.Return):
            return function is not None and "loss" in function.name.value.lower()
        if statement is None:
            return False
        targets = [t.target for t in statement.targets] if isinstance(statement, cst.Assign) else [statement.target]
        if any("loss" in self.context.module.code_for_node(t).lower() for t in targets):
            return True
        names = {n.value for t in targets for n in _names(self.context, t) if n.value != "self"}
        return bool(names) and function is not None and self._sunk(function, names)

    @staticmethod
    def _sink(func: cst.BaseExpression) -> str | None:
        last = func.attr.value if isinstance(func, cst.Attribute) else getattr(func, "value", None)
        return last if last in _LOSS_SINKS else None

    def _sunk(self, function: cst.FunctionDef, names: set[str]) -> bool:
        """Whether one of ``names`` reaches a loss sink (its first argument) inside ``function``."""
        for node in self.context.nodes_within(function.body, cst.Call):
            sink = self._sink(node.func)
            if sink is not None and node.args:
                values = [a.value for a in node.args] if sink == "add_loss" else [node.args[0].value]
                if any(n.value in names for v in values for n in _names(self.context, v)):
                    return True
        return False

    def _bounded_sum(self, call: cst.Call, values: cst.BaseExpression) -> bool:
        """A sum that cannot grow like a sum of losses: a count of a 0/1 mask (``reduce_sum(mask)``),
        or, over the last axis, ``x * one_hot(...)``, which picks one element of ``x`` per row."""
        flow = self.context.analysis(DtypeFlow)
        if flow.is_mask(values):
            return True
        axis = argument(call, 1, "axis")
        if not (
            isinstance(values, cst.BinaryOperation) and isinstance(values.operator, cst.Multiply)
        ) or not _is_last_axis(axis):
            return False
        return any(self._is_one_hot(side) for side in (values.left, values.right))

    def _is_one_hot(self, node: cst.BaseExpression) -> bool:
        flow = self.context.analysis(DtypeFlow)
        if isinstance(node, cst.Name):
            node = flow.assigned_value(node) or node
        if not isinstance(node, cst.Call):
            return False
        kname = self.context.names.kname(node.func)
        return kname is not None and kname.last == "one_hot" and (kname.ns == "tf" or kname.is_keras)

    def _growing_operand(self, node: cst.BaseExpression) -> cst.BaseExpression | None:
        if isinstance(node, cst.BinaryOperation) and isinstance(node.operator, cst.Power):
            return node.left if self._is_compute(node.left) else None
        if isinstance(node, cst.Call) and node.args:
            kname = self.context.names.kname(node.func)
            if kname is not None and kname.path in GROWING and (kname.ns == "tf" or kname.is_keras):
                inner = node.args[0].value
                return inner if self._is_compute(inner) else None
        return None

    def _check_functional_loss(self, call: cst.Call) -> None:
        # The loss computes in the dtype of its predictions: Keras casts y_true to y_pred's dtype,
        # so integer or compute-dtype labels do not matter.
        predictions = argument(call, 1, "y_pred")
        risky = [predictions] if predictions is not None and self._is_compute(predictions) else []
        if not risky:
            return
        self.report(
            call,
            f"`{self._code(call.func)}` computes in the dtype of its predictions, here the compute dtype of "
            f"`{self._code(risky[-1])}`: under mixed_float16 the loss overflows to inf above 65504; cast the "
            "predictions to float32 first (loss objects such as `MeanSquaredError()` do this themselves)"
            + self.context.facts.library_note(),
            self._cast_fix(call, risky, self._partners(call)),
        )

    def _is_compute(self, node: cst.BaseExpression) -> bool:
        return isinstance(self.context.analysis(DtypeFlow).classify(node), Carrier)

    def _cast_fix(self, call: cst.Call, values, partners=()) -> Fix | None:
        """Wrap ``values`` (and the ``partners`` the result of ``call`` meets) in a float32 cast spelled
        through the namespace of ``call``."""
        spelled = dotted(call.func) or ""
        kname = self.context.names.kname(call.func)
        if "." not in spelled or kname is None:
            return None
        root = spelled.split(".", 1)[0]
        if kname.ns == "tf" or kname.ns == "tf.keras" and spelled.startswith(f"{root}.keras."):
            template = f"{root}.cast({{}}, {root}.float32)"
        elif kname.path.startswith("ops."):
            template = f'{spelled.rsplit(".", 1)[0]}.cast({{}}, "float32")'
        elif kname.ns == "keras" and spelled.startswith(f"{root}.losses."):
            template = f'{root}.ops.cast({{}}, "float32")'
        elif kname.ns in ("tf.keras", "tf_keras") and (tf := binding_for(self.context, KName("tf", ""))):
            template = f"{tf}.cast({{}}, {tf}.float32)"  # `from tensorflow import keras`: TensorFlow is imported
        else:
            return None
        replacements = {
            v: cst.parse_expression(template.format(self._unparenthesized(v))) for v in (*values, *partners)
        }
        return Fix(replacements, FixSafety.SAFE)

    def _unparenthesized(self, node: cst.BaseExpression) -> str:
        if getattr(node, "lpar", None):  # the cast call brackets it already
            node = node.with_changes(lpar=(), rpar=())
        return self.context.module.code_for_node(node).strip()

    def _code(self, node: cst.CSTNode) -> str:
        text = " ".join(self.context.module.code_for_node(node).split())
        return text if len(text) <= 40 else text[:37] + "..."


def _is_last_axis(axis: cst.BaseExpression | None) -> bool:
    return (
        isinstance(axis, cst.UnaryOperation)
        and isinstance(axis.operator, cst.Minus)
        and isinstance(axis.expression, cst.Integer)
        and axis.expression.value == "1"
    )


def _api_calls(unit, code):
    """Calls in the unit of an attribute or of an imported name (not ``sum(x)`` of the builtins)."""
    for node in unit:
        if type(node) is ast.Call:
            func = node.func
            if type(func) is ast.Attribute or type(func) is ast.Name and func.id in code.imported:
                yield node


def _calls_loss_function(unit, code) -> bool:
    return any(_loss_function(found) for call in _api_calls(unit, code) for found in code.api_names(call))


def _reduces_a_loss(unit, code) -> bool:
    """A reduction, something that grows, and a loss (a sink called, or a name that says loss)."""
    called = {
        found.path
        for call in _api_calls(unit, code)
        for found in code.api_names(call)
        if found.ns == "tf" or found.is_keras
    }
    if called.isdisjoint(REDUCTIONS):
        return False
    if called.isdisjoint(GROWING | SUMS) and not any(
        type(node) is ast.BinOp and type(node.op) is ast.Pow for node in unit
    ):
        return False
    sinks = any(type(node) is ast.Call and not code.names_of(node).isdisjoint(_LOSS_SINKS) for node in unit)
    return sinks or _names_a_loss(unit, code)


def _loss_function(found) -> bool:
    """``keras.losses.mse``: a functional Keras loss, not the class ``keras.losses.Loss`` nor a helper
    of the losses package (``get``, ``unscale_loss_for_distribution``)."""
    return found.is_keras and found.path.startswith("losses.") and found.last in _FUNCTIONAL_LOSSES


def _names_a_loss(unit, code) -> bool:
    """Whether a function's name, or the text of an assignment target, says ``loss``."""
    for node in unit:
        kind = type(node)
        if kind in (ast.FunctionDef, ast.AsyncFunctionDef):
            if "loss" in node.name.lower():
                return True
        elif kind in (ast.Assign, ast.AnnAssign, ast.AugAssign):
            targets = node.targets if kind is ast.Assign else [node.target]
            if any("loss" in code.segment(target).lower() for target in targets):
                return True
    return False


def _names(context, node: cst.CSTNode) -> list[cst.Name]:
    """The plain names in ``node`` (targets, tuple targets, operands), not attributes' members."""
    return [
        name
        for name in context.nodes_within(node, cst.Name)
        if not (isinstance(parent := context.parent(name), cst.Attribute) and parent.attr is name)
    ]
