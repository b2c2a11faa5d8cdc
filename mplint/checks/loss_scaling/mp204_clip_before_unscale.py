"""MP204: gradients clipped while still multiplied by the loss scale."""

from __future__ import annotations

import libcst as cst

from mplint.analysis.keras_guards import code_range, generations_note, note_safety
from mplint.checks.loss_scaling._gradient_site_rule import GradientSiteRule
from mplint.checks.loss_scaling.sites import describe_when
from mplint.diagnostics import Fix, FixSafety


class ClipBeforeUnscale(GradientSiteRule):
    id = "MP204"
    triggers = (b"clip_by_",)

    @classmethod
    def candidate(cls, code) -> bool:
        return super().candidate(code) and any(name.startswith("clip_by_") for name in code.calls)

    def visit_Module(self, node: cst.Module) -> None:
        for site, g3 in self.running_sites():
            live = [p for p in site.paths if not p.float32]
            found: dict[int, tuple[object, object, list]] = {}  # clip node -> (clip, unscale, paths)
            for path in live:
                if path.scaled_by is None or path.origin is None or path.origin.wrap not in ("explicit", "auto"):
                    continue
                if g3:
                    for op in path.ops:
                        if op.kind == "clip":
                            found.setdefault(id(op.node), (op, None, []))[2].append(path)
                    continue
                unscale = next((op for op in path.ops if op.kind == "unscale"), None)
                for op in path.ops:
                    if op is unscale:
                        break
                    if op.kind == "clip":
                        found.setdefault(id(op.node), (op, unscale, []))[2].append(path)
            for op, unscale, paths in found.values():
                when = describe_when(site.paths, paths)
                if g3:
                    # global_clipnorm clips what the inner optimizer receives: unscaled on Keras 3, still scaled on
                    # Keras 2, whose apply_gradients does not unscale.
                    fix = None if site.conditional else self._keras3_fix(site, op)
                    note = self._keras3_note(site) if fix else None
                    if note:
                        fix = Fix(fix.replacements, note_safety(note), imports=fix.imports)
                    message = self._message("apply_gradients unscales them only afterwards", when)
                    self.report(op.node, message + (f" ({note})" if note else ""), fix)
                else:
                    fix = None if site.conditional else self._keras2_fix(op, unscale)
                    self.report(op.node, self._message("get_unscaled_gradients comes later", when), fix)

    def _keras3_note(self, site) -> str | None:
        """``global_clipnorm`` goes on the inner optimizer where it is built: right where both the site and that
        construction run on Keras 3 only."""
        built = code_range(self.context, site.origin.construction) or site.keras
        return generations_note(self.context, {3}, site.keras) or generations_note(self.context, {3}, built)

    @staticmethod
    def _message(later: str, when: str = "") -> str:
        return (
            f"{when}gradients are clipped while still multiplied by the loss scale ({later}): the threshold is "
            "32768x too tight"
        )

    def _keras2_fix(self, clip, unscale) -> Fix | None:
        """Move the clip right after the unscale, when both reassign the same gradient name in one block."""
        if unscale is None or clip.stmt is None or unscale.stmt is None or not clip.targets:
            return None
        name = clip.targets[0]
        if clip.inputs != {name} or unscale.targets != (name,) or unscale.inputs != {name}:
            return None
        if self.context.parent(clip.stmt) is not self.context.parent(unscale.stmt):
            return None
        return Fix(
            {clip.stmt: cst.RemovalSentinel.REMOVE, unscale.stmt: cst.FlattenSentinel([unscale.stmt, clip.stmt])},
            FixSafety.SAFE,
        )

    def _keras3_fix(self, site, clip) -> Fix | None:
        """``grads, _ = clip_by_global_norm(grads, N)`` -> ``global_clipnorm=N`` on the inner optimizer."""
        inner = site.origin.construction
        call = clip.node
        if (
            self.context.names.matches(call.func, ["clip_by_global_norm"], ["tf"]) is None
            or not isinstance(inner, cst.Call)
            or clip.stmt is None
        ):
            return None
        if len(call.args) < 2 or any(a.keyword and a.keyword.value.endswith("clipnorm") for a in inner.args):
            return None
        if not clip.targets or clip.inputs != {clip.targets[0]}:
            return None
        norm = cst.Arg(
            call.args[1].value,
            keyword=cst.Name("global_clipnorm"),
            equal=cst.AssignEqual(
                whitespace_before=cst.SimpleWhitespace(""), whitespace_after=cst.SimpleWhitespace("")
            ),
        )
        args = list(inner.args)
        if args:
            args[-1] = args[-1].with_changes(comma=cst.Comma(whitespace_after=cst.SimpleWhitespace(" ")))
        return Fix(
            {clip.stmt: cst.RemovalSentinel.REMOVE, inner: inner.with_changes(args=[*args, norm])}, FixSafety.SAFE
        )
