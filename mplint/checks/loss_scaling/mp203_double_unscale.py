"""MP203: gradients divided by the loss scale twice."""

from __future__ import annotations

import libcst as cst

from mplint.analysis.keras_guards import generations_note, note_safety
from mplint.checks.loss_scaling._gradient_site_rule import GradientSiteRule
from mplint.checks.loss_scaling.sites import describe_when
from mplint.diagnostics import Fix


class DoubleUnscale(GradientSiteRule):
    id = "MP203"

    def visit_Module(self, node: cst.Module) -> None:
        for site, g3 in self.running_sites():
            if g3:
                # apply_gradients/apply already divide by the scale; get_unscaled_gradients is MP502's.
                why = "apply_gradients already divides the gradients by the loss scale"
            else:
                why = "the gradients were already unscaled"
            live = [p for p in site.paths if not p.float32]
            found: dict[int, tuple[object, list]] = {}  # op node -> (op, paths)
            for path in live:
                if path.origin is None or path.origin.wrap not in ("explicit", "auto"):
                    continue
                if g3:
                    extra = [op for op in path.ops if op.kind == "manual_unscale"]
                else:
                    unscales = [op for op in path.ops if op.kind in ("unscale", "manual_unscale")]
                    extra = unscales[1:]
                for op in extra:
                    found.setdefault(id(op.node), (op, []))[1].append(path)
            # Keras 3's apply_gradients unscales, Keras 2's does not: where the range admits both, removing the
            # hand-written unscale is right on Keras 3 only.
            note = generations_note(self.context, {3}, site.keras) if g3 else None
            for op, paths in found.values():
                when = describe_when(site.paths, paths)
                fix = None if site.conditional else self._fix(op, note)
                message = f"{why}: {when}this second unscale makes updates 32768x too small"
                self.report(op.node, message + (f" ({note})" if fix and note else ""), fix)

    def _fix(self, op, note: str | None) -> Fix | None:
        # Only a reassignment of the same name can go without renaming its uses.
        if op.stmt is None or len(op.targets) != 1 or op.inputs != frozenset(op.targets):
            return None
        return Fix({op.stmt: cst.RemovalSentinel.REMOVE}, note_safety(note))
