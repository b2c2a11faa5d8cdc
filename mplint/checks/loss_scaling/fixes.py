"""The loss-scaling fixes' text: ``LossScaleOptimizer`` spelled in the file's own import style for the site's Keras
range, the scaling calls of that range's newest generation inserted around a gradient site, and the note on the
versions a fix holds on."""

from __future__ import annotations

import libcst as cst

from mplint.analysis.keras_guards import KerasRange, generations_note, program_range
from mplint.checks.loss_scaling.sites import GradientSite, names_in
from mplint.diagnostics import ImportSpec
from mplint.engine.context import FileContext
from mplint.engine.names import canonical, module_imports
from mplint.knowledge.loss_scale_names import scale_method

# --- spelling LossScaleOptimizer in the file's own import style -----------------------------------


def keras_spellings(context: FileContext) -> dict[str, str]:
    """Module-level bound names: lso (the class), mixed_precision, optimizers, keras, tf."""
    found: dict[str, str] = {}
    for bound, qualified in module_imports(context.module):
        k = canonical(qualified, context.facts.reexports)
        if k is None:
            continue
        key = _SPELLING_KEYS.get(k.path)
        if key is None and k.path == "":
            key = "tf" if k.ns == "tf" else "keras" if k.is_keras else None
        if key and key not in found:
            found[key] = bound
    return found


_SPELLING_KEYS = {
    "optimizers.LossScaleOptimizer": "lso",
    "mixed_precision": "mixed_precision",
    "optimizers": "optimizers",
}


def lso_spelling(context: FileContext, keras: KerasRange | None = None) -> tuple[str, list[ImportSpec]]:
    """How this file writes ``LossScaleOptimizer``, and the import it needs for that.

    ``mixed_precision.LossScaleOptimizer`` is the spelling Keras 2 (TF >= 2.4, tf_keras) and Keras 3 share; the
    Keras 3 ``optimizers.LossScaleOptimizer`` is written only where the range (``keras``, else the program's) is
    Keras 3 alone."""
    s = keras_spellings(context)
    g3_only = (keras or program_range(context.facts.generation)).generations == {3}
    if "lso" in s:
        return s["lso"], []
    if "mixed_precision" in s:
        return f"{s['mixed_precision']}.LossScaleOptimizer", []
    if "keras" in s:
        sub = "optimizers" if g3_only else "mixed_precision"
        return f"{s['keras']}.{sub}.LossScaleOptimizer", []
    if "optimizers" in s and g3_only:
        return f"{s['optimizers']}.LossScaleOptimizer", []
    if "tf" in s:
        return f"{s['tf']}.keras.mixed_precision.LossScaleOptimizer", []
    if g3_only:
        return "keras.optimizers.LossScaleOptimizer", [ImportSpec("keras")]
    return "mixed_precision.LossScaleOptimizer", [ImportSpec("tensorflow.keras", "mixed_precision")]


def written_names(spelling: str) -> set[str]:
    """The table names (``mplint.knowledge.api_versions.KERAS``) a LossScaleOptimizer spelling relies on; the
    file's own imported name is whatever its environment has."""
    for name in ("mixed_precision.LossScaleOptimizer", "optimizers.LossScaleOptimizer"):
        if spelling == name or spelling.endswith("." + name):
            return {name}
    return set()


def range_note(context: FileContext, names: set[str], keras: KerasRange | None = None) -> str | None:
    """None when every name exists in every version the range (``keras``, else the program's target) admits; else
    what to say: the range, and the versions the fix holds on."""
    from mplint.knowledge.api_versions import keras_holds

    keras = keras or program_range(context.facts.generation)
    return generations_note(context, {g for g in keras.generations if keras_holds(names, [g], keras.tf_newest)}, keras)


def optimizers_get_spelling(context: FileContext) -> str | None:
    s = keras_spellings(context)
    if "keras" in s:
        return f"{s['keras']}.optimizers.get"
    if "optimizers" in s:
        return f"{s['optimizers']}.get"
    if "tf" in s:
        return f"{s['tf']}.keras.optimizers.get"
    return None


def wrap_construction(
    context: FileContext, construction: cst.BaseExpression, keras: KerasRange | None = None
) -> tuple[cst.BaseExpression, list[ImportSpec]] | None:
    """``Adam(1e-3)`` -> ``LossScaleOptimizer(Adam(1e-3))``; ``"adam"`` -> ``LossScaleOptimizer(...get("adam"))``,
    spelled for the range ``keras`` (else the program's)."""
    spelling, imports = lso_spelling(context, keras)
    inner = construction
    if isinstance(construction, cst.SimpleString):
        getter = optimizers_get_spelling(context)
        if getter is None:
            return None
        inner = cst.Call(cst.parse_expression(getter), [cst.Arg(construction)])
    elif not isinstance(construction, cst.Call):
        return None
    return cst.Call(cst.parse_expression(spelling), [cst.Arg(inner)]), imports


# --- inserting the generation's scaling calls -----------------------------------------------------


def scaling_insertion(
    context: FileContext, site: GradientSite, scale: bool, unscale: bool, guard: str | None = None
) -> dict | None:
    """Replacements that scale the loss inside the tape and/or unscale the gradients after it.

    G3: ``scaled_loss = opt.scale_loss(loss)``; G1/G2: ``get_scaled_loss`` and
    ``grads = opt.get_unscaled_gradients(grads)`` (the newest generation of the site's range).
    ``guard``: a test that the optimizer is a LossScaleOptimizer, for library code whose users may train without
    one (Keras 2's methods exist on the wrapper only); each call then runs under it, as TF 2.2-2.3's
    ``Model._minimize`` guarded them, and the loss goes to the tape unscaled otherwise.
    On the torch backend the scaled loss is the one whose ``backward()`` runs.
    None when the code's shape does not allow it (the loss is not a name assigned in the tape's block).
    """
    code = context.module.code_for_node
    opt = site.optimizer_expr
    if opt is None:
        return None
    out: dict = {}
    grad_stmt = site.stmt
    new_grad_stmt = grad_stmt
    if scale:
        if site.loss_stmt is None or not isinstance(site.target, cst.Name):
            return None
        loss = site.target.value
        scaled = _free_name(context, site.scope, "scaled_loss" if loss == "loss" else f"scaled_{loss}")
        newest = (site.keras or program_range(context.facts.generation)).newest
        method = scale_method(newest)
        added = cst.parse_statement(f"{scaled} = {code(opt)}.{method}({loss})")
        if guard is not None:
            added = cst.parse_statement(
                f"if {guard}:\n    {scaled} = {code(opt)}.{method}({loss})\nelse:\n    {scaled} = {loss}\n"
            )
        out[site.loss_stmt] = cst.FlattenSentinel([site.loss_stmt, added])
        if site.backend == "torch":  # loss.backward(): the scaled loss is the receiver
            new_call = site.call.with_changes(func=site.call.func.with_changes(value=cst.Name(scaled)))  # type: ignore[union-attr]
        else:
            new_call = site.call.with_changes(
                args=[site.call.args[0].with_changes(value=cst.Name(scaled)), *site.call.args[1:]]
            )
        if grad_stmt is None:
            out[site.call] = new_call
        else:
            new_grad_stmt = grad_stmt.deep_replace(site.call, new_call)
    if unscale:
        if grad_stmt is None or len(site.grad_names) != 1:
            return None
        grads = site.grad_names[0]
        added = cst.parse_statement(f"{grads} = {code(opt)}.get_unscaled_gradients({grads})")
        if guard is not None:
            added = cst.parse_statement(f"if {guard}:\n    {grads} = {code(opt)}.get_unscaled_gradients({grads})\n")
        out[grad_stmt] = cst.FlattenSentinel([new_grad_stmt, added])
    elif new_grad_stmt is not grad_stmt:
        out[grad_stmt] = new_grad_stmt
    return out


def _free_name(context: FileContext, scope: cst.CSTNode, wanted: str) -> str:
    used = names_in(context, scope)
    name, i = wanted, 2
    while name in used:
        name, i = f"{wanted}_{i}", i + 1
    return name


def simple_line_of(context: FileContext, node: cst.CSTNode) -> cst.SimpleStatementLine | None:
    """The simple statement line holding ``node``; None where a compound statement comes first (a lambda's
    body is still its line, an ``if``'s test is not)."""
    for parent in context.ancestors(node):
        if isinstance(parent, cst.SimpleStatementLine):
            return parent
        if isinstance(parent, cst.BaseCompoundStatement):
            return None
    return None
