"""MP102 output-not-float32: a model output (other than a softmax, see MP101) left in float16/bfloat16."""

from __future__ import annotations

import libcst as cst

from mplint.analysis.activation_layers import softmax_by_name
from mplint.analysis.dtype_flow import FLOAT32 as DTYPE_FLOAT32
from mplint.analysis.dtype_flow import DtypeFlow
from mplint.analysis.model_outputs import OutputSite, builds_model, reported_outputs
from mplint.analysis.output_dtype import (
    FLOAT32,
    INTEGER_LAYERS,
    cast_call,
    cast_dtype,
    float32_linear,
    global_reduced,
    is_integer_op,
    is_softmax_layer,
    keras_layer,
    layer_dtype,
    needs_float32,
    policy_reason,
    quote_of,
    softmax_function,
    with_float32_dtype,
)
from mplint.diagnostics import Fix
from mplint.engine.rule import Rule
from mplint.knowledge.dtypes import REDUCED_DTYPES

_MODELS = ("Sequential", "Model")
# Uses of a model that train it outside compile's loss.
_CUSTOM_TRAINING = frozenset({"trainable_variables", "trainable_weights", "train_step", "compute_loss"})
_OPS_PREFIXES = ("nn.", "math.", "ops.", "activations.")


class OutputNotFloat32(Rule):
    id = "MP102"
    governed_by_policy = True
    triggers = (b"Sequential", b"Model")  # model outputs exist only where a model is built or subclassed

    @classmethod
    def candidate(cls, code) -> bool:
        return builds_model(code)

    @classmethod
    def active_for(cls, facts):
        return facts.reduced_precision

    def visit_Module(self, node: cst.Module) -> None:
        reported: set[int] = set()
        for site in reported_outputs(self.context):
            if (
                is_softmax_layer(self.context, site.layer)
                or softmax_function(self.context, site.expr)
                or softmax_by_name(self.context, site.layer)
            ):
                continue  # MP101
            if site.cast_before_loss:
                continue  # every use of the outputs in this file casts them to float32 first
            if self._keras3_compiled_loss(site):
                continue
            if site.role != "trained" and not self._policy_chosen_here() and not self._trained_by_a_program(site):
                # A model that leaves a module its program reaches from elsewhere (a library class, a builder's
                # result) may have its outputs cast where it is trained: unlike a float16 softmax (MP101), no
                # precision is lost yet, and the cast is out of sight.
                continue
            if keras_layer(self.context, site.layer) is not None:
                self._known_layer(site.layer, reported)
            elif global_reduced(self.context) and self._computed_in_policy(site):
                target = site.written if site.kind == "subclass-call" else site.expr
                if id(target) not in reported:
                    reported.add(id(target))
                    self._other(site, target)

    def _keras3_compiled_loss(self, site: OutputSite) -> bool:
        """Keras 3 only, and the model is trained only through ``compile`` with a built-in loss and accuracy
        metrics: Keras 3's ``Loss.__call__`` converts the predictions to the loss's dtype (floatx, float32) before
        computing, since 3.0 (``keras/src/losses/loss.py``; compile wraps every loss in one), and an accuracy
        compares. Other metrics take the predictions as they are; so does a custom loop."""
        if self.context.facts.generation.low != 3 or not isinstance(site.model, cst.Call):
            return False
        assign = self.context.parent(site.model)
        if not isinstance(assign, cst.Assign) or len(assign.targets) != 1:
            return False
        target = assign.targets[0].target
        if not isinstance(target, cst.Name):
            return False
        scope = next(
            (a for a in self.context.ancestors(assign) if isinstance(a, (cst.FunctionDef, cst.Module))),
            self.context.module,
        )
        compiles = 0
        for use in self.context.nodes_within(scope, cst.Name):
            if use.value != target.value or self.context.source_order(use) <= self.context.end_order(assign):
                continue
            parent = self.context.parent(use)
            if isinstance(parent, cst.Call) and parent.func is use and self._in_tape(parent):
                return False  # a custom loop: its loss may be any code
            if not isinstance(parent, cst.Attribute) or parent.value is not use:
                continue
            if parent.attr.value in _CUSTOM_TRAINING:
                return False
            call = self.context.parent(parent)
            if parent.attr.value == "compile" and isinstance(call, cst.Call) and call.func is parent:
                if not self._builtin_loss(call):
                    return False
                compiles += 1
        return compiles > 0

    def _in_tape(self, call: cst.Call) -> bool:
        names = self.context.names
        return any(
            isinstance(a, cst.With)
            and any(
                isinstance(i.item, cst.Call) and names.matches(i.item.func, ["GradientTape"], ["tf"]) for i in a.items
            )
            for a in self.context.ancestors(call)
        )

    def _builtin_loss(self, compile_call: cst.Call) -> bool:
        """``compile(loss=...)`` with one Keras loss (a name or ``keras.losses.*``) and accuracy metrics only."""
        loss = next((a.value for a in compile_call.args if a.keyword and a.keyword.value == "loss"), None)
        if loss is None and len(compile_call.args) > 1 and compile_call.args[1].keyword is None:
            loss = compile_call.args[1].value
        metrics = next((a.value for a in compile_call.args if a.keyword and a.keyword.value == "metrics"), None)
        if loss is None or not self._keras_loss(loss):
            return False
        if metrics is None:
            return True
        if not isinstance(metrics, (cst.List, cst.Tuple)):
            return False
        return all(self._accuracy(e.value) for e in metrics.elements)

    def _keras_loss(self, node: cst.BaseExpression) -> bool:
        if isinstance(node, cst.SimpleString):
            return True  # a name compile resolves among Keras' own losses
        func = node.func if isinstance(node, cst.Call) else node
        k = self.context.names.kname(func)
        return k is not None and k.is_keras and k.path.startswith("losses.")

    def _accuracy(self, node: cst.BaseExpression) -> bool:
        if isinstance(node, cst.SimpleString):
            return "acc" in node.evaluated_value.lower()
        func = node.func if isinstance(node, cst.Call) else node
        k = self.context.names.kname(func)
        return k is not None and k.is_keras and k.path.startswith("metrics.") and "Accuracy" in k.last

    def _trained_by_a_program(self, site: OutputSite) -> bool:
        """A program that reaches this module compiles or fits what this class or builder function makes."""
        trained = self.context.facts.trained_names
        if not trained:
            return False
        maker = (
            site.model if isinstance(site.model, cst.ClassDef) else self.context.enclosing(site.model, cst.FunctionDef)
        )
        if maker is not None:
            return maker.name.value in trained
        assign = self.context.enclosing(site.model, cst.Assign)  # a module-level `model = Sequential(...)`
        return assign is not None and any(
            isinstance(t.target, cst.Name) and t.target.value in trained for t in assign.targets
        )

    def _policy_chosen_here(self) -> bool:
        """The config or this file sets the policy: the model is built where its program chooses the precision."""
        facts = self.context.facts
        return facts.policy_from_config or any(p.path == self.context.path for p in facts.policies)

    def _message(self, what: str, layer: cst.Call | None) -> str:
        return (
            f"model output from {what} is not float32 ({policy_reason(self.context, layer)}): losses and metrics "
            'then run in float16/bfloat16 and may overflow or lose precision; make the output dtype="float32"'
        )

    def _known_layer(self, layer: cst.Call, reported: set[int]) -> None:
        k = keras_layer(self.context, layer)
        if k.last in INTEGER_LAYERS or id(layer) in reported:
            return
        dtype = layer_dtype(self.context, layer)
        if not needs_float32(dtype) or (dtype is None and not global_reduced(self.context)):
            return
        reported.add(id(layer))
        fixed = with_float32_dtype(layer)
        self.report(layer, self._message(f"layer {k.last}", layer), Fix({layer: fixed}) if fixed is not None else None)

    def _computed_in_policy(self, site: OutputSite) -> bool:
        """A custom layer, a ``self.attr`` layer or a TF/Keras op; not a cast to float32 or an integer op."""
        expr = site.expr
        if not isinstance(expr, cst.Call) or is_integer_op(self.context, expr):
            return False
        cast = cast_dtype(self.context, expr)
        if cast is not None:
            return cast in REDUCED_DTYPES
        if site.layer is not None:
            return (
                not self.context.names.callee(site.layer, _MODELS)
                and _is_class(site.layer)
                and not self._float32_custom_layer(site.layer)
            )
        if site.kind.startswith("sequential"):
            return False
        func = expr.func
        if isinstance(func, cst.Call):
            return True
        if isinstance(func, cst.Attribute) and isinstance(func.value, cst.Name) and func.value.value == "self":
            return True
        return any(
            (k.ns == "tf" or k.is_keras) and k.path.startswith(_OPS_PREFIXES) for k in self.context.names.knames(func)
        )

    def _float32_custom_layer(self, layer: cst.Call) -> bool:
        """A custom layer that computes or returns float32: built with ``dtype="float32"``, a class of
        this file whose ``__init__`` passes ``dtype="float32"`` to its base, or whose ``call()``
        returns only float32 values (a loss layer that casts)."""
        if layer_dtype(self.context, layer) in FLOAT32:
            return True
        cls = self._local_class(layer)
        if cls is None:
            return False
        flow = self.context.analysis(DtypeFlow)
        if flow.is_float32_layer(cls):
            return True
        call = next((s for s in cls.body.body if isinstance(s, cst.FunctionDef) and s.name.value == "call"), None)
        returns = (
            [r for r in self.context.nodes_within(call, cst.Return) if flow.enclosing_function(r) is call]
            if call
            else []
        )
        return bool(returns) and all(r.value is not None and flow.classify(r.value) is DTYPE_FLOAT32 for r in returns)

    def _local_class(self, layer: cst.Call) -> cst.ClassDef | None:
        name = layer.func.value if isinstance(layer.func, cst.Name) else None
        found = [c for c in self.context.nodes(cst.ClassDef) if c.name.value == name] if name else []
        return found[0] if len(found) == 1 and isinstance(found[0].body, cst.IndentedBlock) else None

    def _other(self, site: OutputSite, target: cst.BaseExpression) -> None:
        context = self.context
        what = "a custom layer" if site.layer is not None else "this call"
        message = self._message(what, None)
        quote = quote_of(site.expr)
        hints = [site.layer, site.model] if site.layer is not None else [site.model]
        hints = [h for h in hints if isinstance(h, cst.Call)] + _bases(site.model)
        if site.kind == "subclass-call":
            keras3 = any(k.ns == "keras" for h in _bases(site.model) for k in context.names.knames(h))
            new, imports = cast_call(context, target, keras3, quote)
            self.report(target, message, Fix({target: new}, imports=imports))
            return
        linear, imports = float32_linear(context, hints, quote)
        if site.kind == "functional":
            new = cst.Call(func=linear, args=[cst.Arg(value=target)])
            self.report(target, message, Fix({target: new}, imports=imports))
        elif site.kind == "sequential":
            self._append_to_sequential(site, linear, imports, message)
        else:
            self._add_after(site, linear, imports, message)

    def _append_to_sequential(self, site: OutputSite, linear: cst.Call, imports, message: str) -> None:
        holder = self.context.parent(site.written)
        listing = self.context.parent(holder) if isinstance(holder, cst.Element) else None
        if not isinstance(listing, (cst.List, cst.Tuple)):
            self.report(site.expr, message)
            return
        elements = list(listing.elements)
        last = elements[-1]
        if len(elements) > 1 and isinstance(elements[-2].comma, cst.Comma):
            separator = elements[-2].comma
        else:
            separator = cst.Comma(whitespace_after=cst.SimpleWhitespace(" "))
        if isinstance(last.comma, cst.Comma):
            elements[-1] = last.with_changes(comma=separator)
            elements.append(cst.Element(value=linear, comma=last.comma))
        else:
            elements[-1] = last.with_changes(comma=separator)
            elements.append(cst.Element(value=linear))
        self.report(site.expr, message, Fix({listing: listing.with_changes(elements=elements)}, imports=imports))

    def _add_after(self, site: OutputSite, linear: cst.Call, imports, message: str) -> None:
        arg = self.context.parent(site.written)
        add = self.context.parent(arg) if isinstance(arg, cst.Arg) else None
        stmt_expr = self.context.parent(add) if isinstance(add, cst.Call) else None
        line = self.context.parent(stmt_expr) if isinstance(stmt_expr, cst.Expr) else None
        if not isinstance(line, cst.SimpleStatementLine) or len(line.body) != 1:
            self.report(site.expr, message)
            return
        new_add = add.with_changes(args=[cst.Arg(value=linear)])
        new_line = line.with_changes(body=[stmt_expr.with_changes(value=new_add)], leading_lines=())
        self.report(site.expr, message, Fix({line: cst.FlattenSentinel([line, new_line])}, imports=imports))


def _is_class(call: cst.Call) -> bool:
    """A constructor call: a Keras layer or a capitalised (class) name such as a custom layer."""
    name = call.func.attr.value if isinstance(call.func, cst.Attribute) else getattr(call.func, "value", "")
    return isinstance(name, str) and name[:1].isupper()


def _bases(model: cst.CSTNode) -> list[cst.BaseExpression]:
    return [b.value for b in model.bases] if isinstance(model, cst.ClassDef) else []
