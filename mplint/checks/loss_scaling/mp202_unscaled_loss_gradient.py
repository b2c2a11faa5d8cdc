"""MP202: a LossScaleOptimizer is in play but the tape differentiates the unscaled loss (or G2 never unscales)."""

from __future__ import annotations

import libcst as cst

from mplint.analysis.keras_guards import note_safety
from mplint.checks.loss_scaling._gradient_site_rule import GradientSiteRule
from mplint.checks.loss_scaling.backend_loops import JAX_SCALED_LOSS, TRIGGERS, describe_loop, differentiation
from mplint.checks.loss_scaling.fixes import range_note, scaling_insertion
from mplint.checks.loss_scaling.sites import describe_when, method_name
from mplint.diagnostics import Fix
from mplint.knowledge.loss_scale_names import SCALE_METHOD, UNSCALE_METHOD, scale_method

# Where a generation is known rather than guessed (``Generation.origin``).
_PINNED = frozenset({"config", "pin-keras", "pin-tensorflow"})


class UnscaledLossGradient(GradientSiteRule):
    id = "MP202"
    triggers = (*GradientSiteRule.triggers, *TRIGGERS)
    backend_loops = True

    @classmethod
    def active_for(cls, facts) -> bool:
        # Library code: a train_step override that never scales breaks every user who compiles under
        # mixed_float16 (compile() wraps the optimizer). Keras 3 must be pinned (or configured): a library without
        # pins runs on whatever its users have, Keras 2 included, where the Keras 3 fix does not exist, and one
        # test importing `keras` says nothing of what the library's users install. A range without Keras 3 (TF 2
        # before 2.16, tf_keras) comes from evidence: pins, the config, or the code's own tf_keras.
        generation = facts.generation
        return (
            facts.float16
            or facts.library_context
            and (generation.value == 3 and generation.origin in _PINNED or generation.value in (1, 2))
        )

    def visit_Module(self, node: cst.Module) -> None:
        for site, _ in self.running_sites():
            live = [p for p in site.paths if not p.float32]
            self._maybe_wrapped(site, live)
            wrapped = [p for p in live if p.origin is not None and p.origin.wrap in ("explicit", "auto")]
            if not wrapped:
                continue
            if site.keras.newest == 3:  # the site's own range: its version guards narrow the program's
                self._keras3(site, live, wrapped)
            else:
                self._keras2(site, live, wrapped)

    def _maybe_wrapped(self, site, live) -> None:
        """An optimizer made by a call that is handed float16 options (``configure_optimizer(opt,
        use_float16=...)``) may be a LossScaleOptimizer or not; a loop that neither scales nor
        unscales is broken either way: nothing scales, or (Keras 3) the wrapper divides the gradients."""
        hits = [
            p
            for p in live
            if p.origin is not None
            and p.origin.wrap == "maybe"
            and p.scaled_by is None
            and not p.unscaled
            and not any(op.kind == "manual_unscale" for op in p.ops)
        ]
        if not hits:
            return
        origin = hits[0].origin
        if origin.made_by:
            comes_from = (
                f"the optimizer comes from {origin.made_by}, which wraps it in a LossScaleOptimizer on some paths"
            )
        else:
            made_by = " ".join(self.context.module.code_for_node(origin.construction.func).split())
            comes_from = (
                f"the optimizer comes from `{made_by}(...)`, which is handed float16 options and may wrap it in "
                "a LossScaleOptimizer"
            )
        message = (
            f"{comes_from}, but {describe_when(site.paths, hits)}the loss is never scaled (scale_loss/get_scaled_loss): "
            "without scaling small float16 gradients underflow"
            + (
                ", and a Keras 3 LossScaleOptimizer would also divide the unscaled gradients by the loss scale"
                if site.keras.newest == 3
                else ""
            )
        )
        self.report(site.call, message, related=origin.related)

    def _how(self, path) -> str:
        if path.origin.wrap == "auto":
            if not self.context.facts.float16:
                return "in library code, compile() wraps the optimizer in a LossScaleOptimizer for any user under mixed_float16"
            return "compile() wraps the optimizer in a LossScaleOptimizer"
        if path.origin.made_by:
            return f"the optimizer is a LossScaleOptimizer (returned by {path.origin.made_by})"
        return "the optimizer is a LossScaleOptimizer"

    def _keras3(self, site, live, wrapped) -> None:
        hits = [p for p in wrapped if p.scaled_by is None]
        if not hits:
            return
        where = "" if site.backend == "tensorflow" else f"in this {describe_loop(site)} "
        message = (
            f"{self._how(hits[0])}, which divides the gradients by the loss scale, but {describe_when(site.paths, hits)}"
            f"{where}{differentiation(site)} differentiates the unscaled loss: updates are 32768x too small and "
            "training silently stalls; differentiate "
        )
        if site.backend == "jax":
            message += f"{JAX_SCALED_LOSS} (no fix on JAX)"
            self.report(site.call, message, related=hits[0].origin.related)
            return
        self._report_fixed(
            site.call,
            message + "optimizer.scale_loss(loss)",
            self._fix(site, scale=True, unscale=False),
            related=hits[0].origin.related,
        )

    def _keras2(self, site, live, wrapped) -> None:
        def manual(p):
            return any(op.kind == "manual_unscale" for op in p.ops)

        unscaled_only = [p for p in wrapped if p.scaled_by is None and (p.unscaled or manual(p))]
        never = [p for p in wrapped if p.scaled_by is None and not (p.unscaled or manual(p))]
        # `scale_loss` is Keras 3's API (Keras 2's LossScaleOptimizer has none: AttributeError there), and Keras 3's
        # apply_gradients unscales: a path that scales with it is Keras 3 code, right as written.
        too_large = [
            p
            for p in wrapped
            if p.scaled_by is not None
            and not p.unscaled
            and not manual(p)
            and method_name(p.scaled_by) != SCALE_METHOD[3]
        ]
        if unscaled_only:
            when = describe_when(site.paths, unscaled_only)
            message = (
                f"{self._how(unscaled_only[0])}; {when}the gradients are unscaled but the tape differentiates the "
                "unscaled loss: updates 32768x too small"
            )
            self._report_fixed(
                site.call, message, self._fix(site, scale=True, unscale=False), related=unscaled_only[0].origin.related
            )
        elif never:
            when = describe_when(site.paths, never)
            message = (
                f"{self._how(never[0])}, but {when}the loss is never scaled (get_scaled_loss) so small float16 "
                "gradients underflow"
            )
            self._report_fixed(
                site.call, message, self._fix(site, scale=True, unscale=True), related=never[0].origin.related
            )
        if too_large:
            when = describe_when(site.paths, too_large)
            message = (
                f"{self._how(too_large[0])}; {when}the tape differentiates the scaled loss but "
                "get_unscaled_gradients is never called: updates 32768x too large"
            )
            self._report_fixed(
                site.apply_call,
                message,
                self._fix(site, scale=False, unscale=True),
                related=too_large[0].origin.related,
            )

    def _report_fixed(self, node, message: str, fix: tuple[Fix, str | None] | None, **kwargs) -> None:
        """A finding whose fix holds on part of the target range only says so."""
        fix, note = fix or (None, None)
        self.report(node, message + (f" ({note})" if note else ""), fix, **kwargs)

    def _fix(self, site, scale: bool, unscale: bool) -> tuple[Fix, str | None] | None:
        """The scaling calls of the newest generation the range admits; unsafe where an admitted one lacks them.
        In library code whose optimizer compile() wraps for some users only, Keras 2's calls run under a test of
        the optimizer's type, ``hasattr(opt, "get_scaled_loss")``: a float32 user's optimizer has no such method
        (Keras 3's ``scale_loss`` is a method of every optimizer, a no-op without loss scaling)."""
        if site.conditional:
            return None  # the scaling depends on flags: the message says which path to fix
        g3 = site.keras.newest == 3
        names = ({scale_method(3 if g3 else 2)} if scale else set()) | (
            {UNSCALE_METHOD} if unscale and not g3 else set()
        )
        guard = None
        if not g3 and self._users_pick(site):
            # A test of what the optimizer can do, not of a class: the LossScaleOptimizer of tf.keras, of tf_keras
            # and of TF 2.1-2.3 all have the method, whichever namespace this file reaches Keras through.
            guard = f'hasattr({self.context.module.code_for_node(site.optimizer_expr)}, "{SCALE_METHOD[2]}")'
        insertion = scaling_insertion(self.context, site, scale, unscale, guard)
        if not insertion:
            return None
        note = range_note(self.context, names, site.keras)
        return Fix(insertion, note_safety(note)), note

    def _users_pick(self, site) -> bool:
        """Library code whose optimizer is the one compile() wraps under its user's mixed_float16 only."""
        return self.context.facts.library_context and any(
            p.origin is not None and p.origin.wrap == "auto" for p in site.paths
        )
