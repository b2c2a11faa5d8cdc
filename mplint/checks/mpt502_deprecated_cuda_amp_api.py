"""MPT502: ``torch.cuda.amp``/``torch.cpu.amp`` spellings, deprecated since torch 2.4."""

from __future__ import annotations

import re

import libcst as cst
from packaging.version import Version

from mplint.analysis.call_args import argument, keyword_arg
from mplint.analysis.torch_amp import BFLOAT16, TorchAmp
from mplint.analysis.version_guards import branch_admits
from mplint.checks._torch_rule import TorchRule
from mplint.diagnostics import Fix, FixSafety, ImportSpec
from mplint.engine.names import dotted
from mplint.knowledge.api_versions import torch_since
from mplint.knowledge.torch_patches import TorchPatch, patches_of

# deprecated path -> (device, new name)
_DEPRECATED = {
    f"{device}.amp.{path}": (device, name)
    for device in ("cuda", "cpu")
    for path, name in (
        ("autocast", "autocast"),
        ("autocast_mode.autocast", "autocast"),
        ("GradScaler", "GradScaler"),
        ("grad_scaler.GradScaler", "GradScaler"),
        ("custom_fwd", "custom_fwd"),
        ("custom_bwd", "custom_bwd"),
    )
    if device == "cuda" or not name.startswith("custom")
}
# What each name becomes: `torch.autocast` (from 1.10) is the same class as `torch.amp.autocast` (from 1.12), so the
# rewrite of autocast holds on more of a range; the others exist under torch.amp only.
_REPLACEMENT = {
    "autocast": "torch.autocast",
    "GradScaler": "torch.amp.GradScaler",
    "custom_fwd": "torch.amp.custom_fwd",
    "custom_bwd": "torch.amp.custom_bwd",
}
_NEW_API = re.compile(
    r"(?<!cuda\.)(?<!cpu\.)\bamp\.(?:GradScaler|autocast|custom_fwd|custom_bwd)\(|\bautocast\(\s*(?:device_type=)?[\"']|GradScaler\(\s*(?:device=)?[\"']"
)
# torch.cuda.amp.autocast(enabled, dtype, cache_enabled) -> torch.autocast(device_type, dtype, enabled, cache_enabled)
_AUTOCAST_POSITIONS = ("enabled", "dtype", "cache_enabled")


class DeprecatedCudaAmpApi(TorchRule):
    id = "MPT502"
    silent_in_uncalled_code = True
    triggers = (b"amp",)  # torch.cuda.amp, torch.cpu.amp, `from torch.cuda import amp`

    @classmethod
    def candidate(cls, code) -> bool:
        return (
            code.imports_torch
            and "amp" in code.words
            and code.mentions("autocast", "GradScaler", "custom_fwd", "custom_bwd")
        )

    def __init__(self, context):
        super().__init__(context)
        self.target = context.facts.torch_target

    def visit_Call(self, node: cst.Call) -> None:
        found = self._deprecated(node.func)
        if found is not None and not isinstance(self.context.parent(node), cst.Decorator):
            self._report(node, node.func, found, node)

    def visit_Decorator(self, node: cst.Decorator) -> None:
        expr = node.decorator
        func = expr.func if isinstance(expr, cst.Call) else expr
        found = self._deprecated(func)
        if found is not None:
            self._report(expr, func, found, expr if isinstance(expr, cst.Call) else None)

    def _deprecated(self, func: cst.BaseExpression) -> tuple[str, str, str] | None:
        if not self.target.admits_from("2.4"):
            return None  # deprecated only from 2.4
        found = self.context.names.torch_api(func, _DEPRECATED)
        return (found.path, *_DEPRECATED[found.path]) if found is not None and found.ns == "torch" else None

    def _in_compatibility_branch(self, node: cst.CSTNode) -> bool:
        """``torch.amp.GradScaler(...) if new_torch else torch.cuda.amp.GradScaler()``, an ``else:`` or an
        ``except`` fallback whose other branch already writes the torch.amp API: code for older torch."""
        child = node
        for ancestor in self.context.ancestors(node):
            other = None
            if isinstance(ancestor, cst.IfExp):
                other = ancestor.body if child is ancestor.orelse else ancestor.orelse
            elif isinstance(ancestor, cst.If):
                other = ancestor.orelse if child is ancestor.body else ancestor.body
            elif isinstance(ancestor, cst.ExceptHandler):
                other = self.context.parent(ancestor).body
            if other is not None and _NEW_API.search(self.code(other)):
                return True
            if isinstance(ancestor, (cst.FunctionDef, cst.ClassDef)):
                return False
            child = ancestor
        return False

    def _report(self, node, func, found, call: cst.Call | None) -> None:
        admits = branch_admits(self.context, node, "torch", "2.4")
        if self._in_compatibility_branch(node) or admits is False or self._bound_to_new_api_too(func):
            return  # code for older torch, a branch that never runs on torch >= 2.4, or a shim's name
        path, device, name = found
        if name == "GradScaler" and self._replaced(device, name):
            return  # a package the program imports binds its own, undeprecated GradScaler there
        new = self._new_spelling(call, device, name)
        patch = self._float16_autocast_patch(call, device, name)
        if patch is not None:  # the new spelling would turn this region's float16 off where the package patches
            self.report(
                node,
                f"`torch.{path}` is deprecated since torch 2.4 (FutureWarning) (target {self.target.described}); "
                f"no automatic fix: this program imports {patch.package}, whose releases for torch before "
                f"{patch.torch_until} replace it with {patch.effect}, and this call's dtype may be float16 (pin "
                f"torch >= {patch.torch_until}, or set `torch` in the config, for the fix)",
            )
            return
        message = (
            f"`torch.{path}` is deprecated since torch 2.4 (FutureWarning): write "
            f"`{self.code(new) if new is not None else _REPLACEMENT[name]}` (target "
            f"{self.target.described})"
        )
        since = torch_since(_REPLACEMENT[name])
        fix = None
        from mplint.engine.check import in_compatibility_branch  # the engine's own test of a version gate

        needs = self._call_needs(call, device, name)
        if admits is not None or in_compatibility_branch(self.context, node):
            message += "; no automatic fix: a version test guards this code"
        elif new is not None and (self.target.at_least(since) or needs is not None and needs[0] >= Version(since)):
            if needs is not None and not self.target.at_least(since):
                message += f"; {needs[1]}, where `{_REPLACEMENT[name]}` exists too"
            fix = self._fix(node, func, new, FixSafety.SAFE)
        elif new is not None:
            # The old spelling is the only one the older part of the range has: a rewrite would break it there.
            message += (
                f"; no automatic fix: `{_REPLACEMENT[name]}` exists from torch {since} only, and the range "
                f"admits older torch (pin torch >= {since}, or set `torch` in the config, for the fix)"
            )
        self.report(node, message, fix)

    def _replaced(self, device: str, name: str) -> list[TorchPatch]:
        """The replacements of ``torch.<device>.amp.<name>`` by packages the program imports, on torch the target
        admits."""
        found = patches_of(f"torch.{device}.amp.{name}", self.context.facts.patching_imports)
        return [p for p in found if self.target.admits_span(p.torch_from, p.torch_until)]

    def _float16_autocast_patch(self, call: cst.Call | None, device: str, name: str) -> TorchPatch | None:
        """The package that replaces ``torch.cpu.amp.autocast`` with one that takes float16 where torch's own CPU
        autocast does not, when this call's dtype may be float16 (given and not bfloat16/float32)."""
        if name != "autocast" or device != "cpu" or call is None:
            return None
        dtype = argument(call, 1, "dtype")
        if dtype is None or self.context.analysis(TorchAmp.of).dtype_of(dtype) in (BFLOAT16, "float32"):
            return None  # the CPU default is bfloat16, which both spellings take
        patches = [p for p in self._replaced(device, name) if p.torch_until is not None]
        return patches[0] if patches else None

    def _call_needs(self, call: cst.Call | None, device: str, name: str) -> tuple[Version, str] | None:
        """The torch the deprecated call itself needs, whatever the pins say: ``torch.cpu.amp.autocast`` came with
        torch 1.10, and so did the ``dtype``/``cache_enabled`` parameters of ``torch.cuda.amp.autocast`` (1.6-1.9
        take ``enabled`` alone), so where the line runs ``torch.autocast`` exists; ``torch.cpu.amp.GradScaler``
        came with ``torch.amp.GradScaler`` in 2.3."""
        if name == "GradScaler" and device == "cpu":
            since = torch_since("torch.cpu.amp.GradScaler")
            return Version(since), f"`torch.cpu.amp.GradScaler` itself needs torch >= {since}"
        if name != "autocast":
            return None
        if device == "cpu":
            since = torch_since("torch.cpu.amp.autocast")
            return Version(since), f"`torch.cpu.amp` itself needs torch >= {since}"
        if call is not None and (
            len([a for a in call.args if a.keyword is None]) > 1
            or any(a.keyword is not None and a.keyword.value in ("dtype", "cache_enabled") for a in call.args)
        ):
            since = torch_since("torch.cuda.amp.autocast(dtype=)")
            return Version(since), f"the call's own `dtype`/`cache_enabled` needs torch >= {since}"
        return None

    def _bound_to_new_api_too(self, func: cst.BaseExpression) -> bool:
        """``GradScaler()`` (or ``amp.GradScaler()``) whose name an import of torch.amp binds too: the shim
        ``try: from torch.amp import GradScaler`` / ``except ImportError: from torch.cuda.amp import GradScaler``
        writes the new API wherever torch has it."""
        while isinstance(func, cst.Attribute):
            func = func.value
        scope = self.context.names.scopes.get(func) if isinstance(func, cst.Name) else None
        if scope is None:
            return False
        for assignment in scope[func.value]:
            statement = getattr(assignment, "node", None)
            if isinstance(statement, cst.ImportFrom) and statement.module is not None:
                module = dotted(statement.module) or ""
                names = () if isinstance(statement.names, cst.ImportStar) else [dotted(a.name) for a in statement.names]
                if module == "torch.amp" or module.startswith("torch.amp.") or module == "torch" and "amp" in names:
                    return True
        return False

    def _new_spelling(self, call: cst.Call | None, device: str, name: str) -> cst.BaseExpression | None:
        func = cst.parse_expression(_REPLACEMENT[name])
        old_args = list(call.args) if call is not None else []
        if any(a.star for a in old_args):
            return None
        if name == "autocast":
            args = [cst.Arg(cst.SimpleString(f'"{device}"'))]
            for i, arg in enumerate(old_args):
                if arg.keyword is None:
                    if i >= len(_AUTOCAST_POSITIONS):
                        return None
                    arg = keyword_arg(_AUTOCAST_POSITIONS[i], arg.value)
                args.append(arg)
        elif name == "GradScaler":
            args = [cst.Arg(cst.SimpleString(f'"{device}"')), *old_args]
        else:  # custom_fwd / custom_bwd: device_type is keyword-only
            if any(a.keyword is None for a in old_args):
                return None
            args = [keyword_arg("device_type", cst.SimpleString(f'"{device}"')), *old_args]
        comma = cst.Comma(whitespace_after=cst.SimpleWhitespace(" "))
        args = [a.with_changes(comma=comma) for a in args[:-1]] + [
            args[-1].with_changes(comma=cst.MaybeSentinel.DEFAULT)
        ]
        return cst.Call(func, args)

    def _fix(self, node, func, new: cst.Call, safety: FixSafety) -> Fix:
        replacements = {node: new}
        if isinstance(func, cst.Name):
            removal = self._import_removal(func)
            if removal is not None:
                replacements.update(removal)
        return Fix(replacements, safety, imports=[ImportSpec("torch")])

    def _rewritten(self, reference: cst.CSTNode) -> bool:
        """Whether this rule's fix rewrites the use ``reference`` (so the import it came from can go)."""
        parent = self.context.parent(reference)
        found = self._deprecated(reference)
        if found is None:
            return False
        if isinstance(parent, cst.Decorator):
            return True
        if isinstance(parent, cst.Call) and parent.func is reference:
            return (
                self._new_spelling(parent, found[1], found[2]) is not None
                and self._float16_autocast_patch(parent, found[1], found[2]) is None
            )
        return False

    def _import_removal(self, name: cst.Name) -> dict | None:
        """Drop ``name`` from ``from torch.cuda.amp import ...`` when this is its last use in the file."""
        scope = self.context.names.scopes.get(name)
        if scope is None:
            return None
        for assignment in scope[name.value]:
            statement = getattr(assignment, "node", None)
            if not isinstance(statement, cst.ImportFrom) or isinstance(statement.names, cst.ImportStar):
                continue
            references = sorted((r.node for r in assignment.references), key=self.context.source_order)
            if not references or references[-1] is not name or not all(map(self._rewritten, references)):
                return None
            line = self.context.parent(statement)
            kept = [a for a in statement.names if (a.asname.name.value if a.asname else dotted(a.name)) != name.value]
            if not kept:
                return (
                    {line: cst.RemovalSentinel.REMOVE}
                    if isinstance(line, cst.SimpleStatementLine) and len(line.body) == 1
                    else None
                )
            kept[-1] = kept[-1].with_changes(comma=cst.MaybeSentinel.DEFAULT)
            return {statement: statement.with_changes(names=kept)}
        return None
