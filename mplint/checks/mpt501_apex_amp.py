"""MPT501: NVIDIA apex's deprecated AMP, migrated to ``torch.autocast`` + ``torch.amp.GradScaler``.

One finding per apex site: each ``amp.initialize`` call (or, in a file without one, its first apex use; and
its first ``apex.fp16_utils`` use), with the file's other apex uses as related locations. The migration is one
fix for the whole file, attached to that finding, written as the migration guides write it:

    model, optimizer = amp.initialize(model, optimizer, opt_level="O1")  ->  scaler = torch.amp.GradScaler("cuda")
    output = model(x); loss = criterion(output, y)                        ->  with torch.autocast("cuda"): ...
    with amp.scale_loss(loss, optimizer) as scaled_loss:                  ->  scaler.scale(loss).backward()
        scaled_loss.backward()
    clip_grad_norm_(amp.master_params(optimizer), 1.0)                    ->  scaler.unscale_(optimizer)
                                                                              clip_grad_norm_(model.parameters(), 1.0)
    optimizer.step()                                                      ->  scaler.step(optimizer); scaler.update()
    amp.state_dict() / amp.load_state_dict(s)                             ->  scaler.state_dict() / scaler.load_state_dict(s)

Only O1 and O2 migrate (unsafe: O2 kept float16 master weights' model copy, and old checkpoints' ``amp``
state does not load into a GradScaler); O0 (float32) and O3 (pure float16), a computed ``opt_level``,
several ``initialize`` calls and ``FP16_Optimizer`` are reported with what to write instead. The native API is
spelled for the target's torch (``torch.autocast`` from 1.10, ``torch.amp.GradScaler`` from 2.3, ``torch.cuda.amp``'s
before them), and a module without a ``backward()`` uses apex's AMP for inference: autocast alone replaces it.

An import nothing in the module uses is dead code, not a finding: apex deprecates its AMP where it runs
(``amp.initialize``), not on import. Where the module uses the imported name only in ways the migration does
not know (``amp.register_half_function(...)``, ``network_to_half(model)`` through ``from apex.fp16_utils import
*``), the finding is at the first such use. Where the code runs in an environment dated before apex deprecated its
AMP (an NGC image of 2020 bundles that apex), or on a torch without ``torch.cuda.amp``, apex's AMP is the
documented API and nothing is reported.
"""

from __future__ import annotations

import libcst as cst

from mplint.analysis.call_args import argument
from mplint.checks._torch_rule import TorchRule
from mplint.diagnostics import Fix, FixSafety, ImportSpec, Related
from mplint.engine.names import dotted
from mplint.knowledge.api_versions import torch_since
from mplint.knowledge.releases import APEX_AMP_DEPRECATED
from mplint.knowledge.torch_clipping import CLIP_APIS

_AMP_CALLS = {"amp.initialize", "amp.scale_loss", "amp.master_params", "amp.state_dict", "amp.load_state_dict"}
# Words of a message spelled once the whole module is read (whether it trains, see ``_spelled``).
_DEPRECATED, _USE, _LEGACY_ADVICE = "\x00deprecated\x00", "\x00use\x00", "\x00legacy\x00"
# What apex did with its AMP and fp16_utils: NVIDIA/apex 48bf0df5 (2022-10-10) made them warn, cb65b8ed (2025-05-08)
# removed them. An older apex, such as an NGC image's before late 2022, runs them without a warning.
_APEX_STATUS = "deprecated (apex warns since October 2022 and removed it in May 2025)"
_FP16_UTILS = ("fp16_utils", "FP16_Optimizer")
_STOPS = ("zero_grad", "step", "backward")  # statements that end the forward pass wrapped in autocast
# What ``from apex.fp16_utils import *`` binds: apex/fp16_utils/__init__.py (and its fp16util, fp16_optimizer and
# loss_scaler modules), the names of apex releases from 0.1 to its removal, read at NVIDIA/apex 0d91a65 and d44ce75.
_FP16_UTILS_NAMES = frozenset(
    {
        "BN_convert_float",
        "network_to_half",
        "prep_param_lists",
        "model_grads_to_master_grads",
        "master_params_to_model_params",
        "tofp16",
        "to_python_float",
        "clip_grad_norm",
        "convert_module",
        "convert_network",
        "FP16Model",
        "Fused_Weight_Norm",
        "fp32_to_fp16",
        "fp16_to_fp32",
        "FP16_Module",
        "FP16_Optimizer",
        "LossScaler",
        "DynamicLossScaler",
    }
)


class ApexAmp(TorchRule):
    id = "MPT501"
    silent_in_uncalled_code = True
    triggers = (b"apex",)

    @classmethod
    def candidate(cls, code) -> bool:
        return code.imports_torch and "apex" in code.words

    def __init__(self, context):
        super().__init__(context)
        self.items: list[tuple[cst.CSTNode, str]] = []
        self.legacy: list[tuple[cst.CSTNode, str]] = []
        self.calls: dict[str, list[cst.Call]] = {}
        self.imports: list[cst.CSTNode] = []
        self.legacy_imports: list[tuple[cst.CSTNode, str]] = []
        self.blocker: str | None = None
        # What replaces apex on every torch of the target: torch.autocast from 1.10, torch.amp.GradScaler from 2.3,
        # torch.cuda.amp's before them.
        target = context.facts.torch_target
        self.target = target
        self.autocast = (
            'torch.autocast("cuda")'
            if target.at_least(torch_since("torch.autocast"))
            else ("torch.cuda.amp.autocast()")
        )
        self.scaler = (
            'torch.amp.GradScaler("cuda")'
            if target.at_least(torch_since("torch.amp.GradScaler"))
            else ("torch.cuda.amp.GradScaler()")
        )
        # Whether the module trains what apex handles: a backward() in it, an optimizer handed to `amp.initialize`
        # (the backward may live in a trainer module it calls), or an FP16_Optimizer. Else apex only casts, for
        # inference, and no GradScaler replaces anything.
        self.backward = self.trains = True

    def visit_Module(self, node: cst.Module) -> None:
        self.backward = self.trains = any(
            isinstance(call.func, cst.Attribute) and call.func.attr.value == "backward"
            for call in self.context.nodes(cst.Call)
        )

    def _initialize_trains(self, call: cst.Call) -> bool:
        return self.backward or argument(call, 1, "optimizers") is not None

    def _replacement(self) -> str:
        """The native API to use instead: autocast alone where the module never trains."""
        return f"`{self.autocast}` and `{self.scaler}`" if self.trains else f"`{self.autocast}`"

    def _apex_amp_current(self) -> bool:
        """Whether apex's AMP is still the documented API where the code runs: an environment dated before apex
        deprecated it (an NGC image of 2020 bundles that apex), or a torch without ``torch.cuda.amp`` to move to."""
        from packaging.version import Version

        target = self.context.facts.torch_target
        return target.predates(APEX_AMP_DEPRECATED) or (target.newest is not None and target.newest < Version("1.6"))

    def visit_ImportFrom(self, node: cst.ImportFrom) -> None:
        module = dotted(node.module) if node.module is not None and not node.relative else None
        if module is None or not (module == "apex" or module.startswith("apex.")):
            return
        names = [] if isinstance(node.names, cst.ImportStar) else [dotted(a.name) for a in node.names]
        if module.startswith("apex.fp16_utils") or "fp16_utils" in names:
            self.legacy_imports.append((node, f"`apex.fp16_utils` (FP16_Optimizer, network_to_half) is {_DEPRECATED}"))
        elif module.startswith("apex.amp") or "amp" in names:
            self.imports.append(node)

    def visit_Import(self, node: cst.Import) -> None:
        for alias in node.names:
            name = dotted(alias.name) or ""
            if name == "apex.amp" or name.startswith("apex.amp."):
                self.imports.append(node)
            elif name.startswith("apex.fp16_utils"):
                self.legacy_imports.append((node, f"`apex.fp16_utils` is {_DEPRECATED}"))

    def visit_Call(self, node: cst.Call) -> None:
        found = self.context.names.torch_api(node.func, _AMP_CALLS)
        if found is not None and found.ns == "apex":
            self.calls.setdefault(found.path, []).append(node)
            self.items.append((node, self._message(found.path, node)))
        elif any(k.ns == "apex" and k.last == "FP16_Optimizer" for k in self.context.names.torch_names(node.func)):
            self.trains = True
            self._legacy(node, f"apex's `FP16_Optimizer` is {_DEPRECATED}")

    def _legacy(self, node, what: str) -> None:
        self.blocker = "the file uses apex.fp16_utils"
        self.legacy.append((node, f"{what}: {_LEGACY_ADVICE}"))

    def _message(self, path: str, call: cst.Call) -> str:
        if path == "amp.initialize":
            level = self._opt_level(call)
            if level == "O0":
                return '`amp.initialize(..., opt_level="O0")` is plain float32: delete the call and apex'
            if level == "O3" and argument(call, 1, "optimizers") is None:
                return (
                    '`amp.initialize(model, opt_level="O3")` without an optimizer casts the model to float16 for '
                    "inference: write `model.half()`, which needs no apex"
                )
            shown = f'"{level}"' if level else "?"
            if not self._initialize_trains(call):
                half = " (or `model.half()`, as it casts the model)" if level in ("O2", "O3") else ""
                return (
                    f"`amp.initialize(..., opt_level={shown})` is apex's deprecated AMP, and this module never trains "
                    f"the model (no optimizer, no `backward()`): drop it and run the forward under `{self.autocast}`{half}, which "
                    "needs no GradScaler"
                )
            if level == "O3":
                return (
                    '`amp.initialize(..., opt_level="O3")` trains in pure float16: no torch.amp equivalent; keep the model '
                    f"float32 and use `{self.autocast}` with `{self.scaler}`"
                )
            return (
                f"`amp.initialize(..., opt_level={shown})` is apex's deprecated AMP: keep model and optimizer, create "
                f"`scaler = {self.scaler}`, run the forward and loss under `{self.autocast}`"
            )
        if path == "amp.scale_loss":
            return "`with amp.scale_loss(loss, optimizer) as scaled_loss: scaled_loss.backward()` -> `scaler.scale(loss).backward()`"
        if path == "amp.master_params":
            return "`amp.master_params(optimizer)` -> the model's `parameters()`, after `scaler.unscale_(optimizer)`"
        verb = "saves" if path == "amp.state_dict" else "restores"
        return (
            f"`{path}()` {verb} apex's loss-scaler state: use `scaler.{path.split('.')[1]}()` (checkpoints written by apex "
            "hold their scale under another key and need converting)"
        )

    def _opt_level(self, call: cst.Call) -> str | None:
        value = argument(call, None, "opt_level")
        if isinstance(value, cst.SimpleString) and isinstance(value.evaluated_value, str):
            return value.evaluated_value
        return None

    # --- the migration ------------------------------------------------------------------------

    def leave_Module(self, original_node: cst.Module) -> None:
        if self._apex_amp_current():
            return
        self._imports_in_use()
        self.trains |= any(self._initialize_trains(call) for call in self.calls.get("amp.initialize", []))
        fix, why = self._migration()
        initialize = self.calls.get("amp.initialize", [])
        sites = initialize or self._first_use(self.items)
        target = f" (target {self.target.described})"
        for i, site in enumerate(sites):
            message = self._spelled(dict((id(n), m) for n, m in self.items)[id(site)]) + target
            if fix is None and why:
                message += f"; no automatic fix: {why}"
            others = [item for item in self.items if item[0] not in sites] if i == 0 else []
            self.report(site, message, fix, related=self._related(others))
        for site in self._first_use(self.legacy):
            others = [item for item in self.legacy if item[0] is not site]
            message = self._spelled(dict((id(n), m) for n, m in self.legacy)[id(site)]) + target
            self.report(site, message, related=self._related(others))

    def _spelled(self, message: str) -> str:
        """A message with the native API spelled for the target, once the module is known to train or not."""
        return (
            message.replace(_DEPRECATED, _APEX_STATUS)
            .replace(_USE, self._replacement())
            .replace(
                _LEGACY_ADVICE,
                f"keep the model float32, run the forward and loss under `{self.autocast}` and step through "
                f"`{self.scaler}`"
                if self.trains
                else f"keep the model float32 and run the forward under `{self.autocast}` (or `model.half()`)",
            )
        )

    def _imports_in_use(self) -> None:
        """The apex imports the module uses join the findings; one whose names nothing reads is dead code. A use
        no finding covers (a call the migration does not know) becomes one."""
        for node in dict.fromkeys(self.imports):
            uses = self._uses(node, "amp")
            if _star(node):  # which of its names the module reads, nothing tells: reported as before
                self.items.append((node, f"apex's AMP is {_DEPRECATED}: use {_USE}"))
            elif uses:
                self.items.append((node, f"apex's AMP is {_DEPRECATED}: use {_USE}"))
                if not any(isinstance(n, cst.Call) for n, _ in self.items):
                    site = self._use_site(uses[0])
                    self.items.append(
                        (site, f"`{self.code(_callee(site))}` is part of apex's AMP, {_DEPRECATED}: use {_USE}")
                    )
        for node, message in self.legacy_imports:
            uses = self._uses(node, "fp16_utils")
            if uses:
                self._legacy(node, message)
                if not any(isinstance(n, cst.Call) for n, _ in self.legacy):
                    site = self._use_site(uses[0])
                    self._legacy(site, f"`{self.code(_callee(site))}` of `apex.fp16_utils` is {_DEPRECATED}")

    def _uses(self, statement: cst.Import | cst.ImportFrom, module: str) -> list[cst.CSTNode]:
        """The reads of what ``statement`` binds of apex's ``module`` (``amp``, ``fp16_utils``), in source order:
        of the names it binds (``apex.amp`` of ``import apex.amp``), and for a star import the names apex.fp16_utils
        exports that nothing in the module binds."""
        scope = self.context.names.scopes.get(statement)
        if scope is None:
            return []
        if _star(statement):
            free = (
                n
                for n in self.context.nodes(cst.Name)
                if n.value in _FP16_UTILS_NAMES
                and (inner := self.context.names.scopes.get(n)) is not None
                and n in inner.accesses
                and not inner[n.value]
            )
            return list(free) if module == "fp16_utils" else []
        reads = []
        source = dotted(statement.module) if isinstance(statement, cst.ImportFrom) and statement.module else ""
        for alias in statement.names:
            name = dotted(alias.name) or ""
            full = f"{source}.{name}" if source else name
            if not (full == f"apex.{module}" or full.startswith(f"apex.{module}.")):
                continue  # another name of the same statement (``from apex import amp, optimizers``)
            # libcst binds ``import apex.amp`` as ``apex.amp``, read as that attribute chain
            bound = alias.asname.name.value if isinstance(alias.asname, cst.AsName) else name
            for assignment in scope.assignments[bound]:
                if getattr(assignment, "node", None) is statement:
                    reads += [reference.node for reference in assignment.references]
        return sorted(reads, key=self.context.source_order)

    def _chain(self, node: cst.CSTNode) -> cst.CSTNode:
        """The attribute chain ``node`` starts (``amp`` -> ``amp.register_half_function``)."""
        parent = self.context.parent(node)
        while isinstance(parent, cst.Attribute) and parent.value is node:
            node, parent = parent, self.context.parent(parent)
        return node

    def _use_site(self, read: cst.CSTNode) -> cst.CSTNode:
        """Where a use is reported: the call of the chain a read starts, else the chain."""
        chain = self._chain(read)
        parent = self.context.parent(chain)
        return parent if isinstance(parent, cst.Call) and parent.func is chain else chain

    def _first_use(self, items: list[tuple[cst.CSTNode, str]]) -> list[cst.CSTNode]:
        """The site of a file's apex uses: its first call, else its first import."""
        nodes = sorted((n for n, _ in items), key=self.context.source_order)
        calls = [n for n in nodes if isinstance(n, cst.Call)]
        return (calls or nodes)[:1]

    def _related(self, items: list[tuple[cst.CSTNode, str]]) -> tuple[Related, ...]:
        ordered = sorted(items, key=lambda item: self.context.source_order(item[0]))
        return tuple(Related("", self.context.position(n).start.line, self._spelled(m)) for n, m in ordered)

    def _migration(self) -> tuple[Fix | None, str]:
        initialize = self.calls.get("amp.initialize", [])
        if self.blocker:
            return None, self.blocker
        if len(initialize) != 1:
            return None, "the file has no single `amp.initialize` call" if initialize else ""
        call = initialize[0]
        if self._opt_level(call) not in ("O1", "O2"):
            return None, "only opt_level O1/O2 map onto autocast + GradScaler"
        if "scaler" in self.context.text:
            return None, "the name `scaler` is taken"
        replacements: dict = {}
        try:
            model = self._initialize(call, replacements)
            self._scale_losses(model, replacements)
            self._checkpoints(replacements)
            self._master_params(model, replacements)
            for node in self.imports:
                replacements[self._whole_line(node)] = cst.RemovalSentinel.REMOVE
        except _NoFix as reason:
            return None, str(reason)
        return Fix(replacements, FixSafety.UNSAFE, imports=[ImportSpec("torch")]), ""

    def _initialize(self, call: cst.Call, replacements: dict) -> str:
        line = self._whole_line(call)
        assign = line.body[0]
        args = [a.value for a in call.args if a.keyword is None][:2]
        if not isinstance(assign, cst.Assign) or len(args) != 2 or not all(isinstance(a, cst.Name) for a in args):
            raise _NoFix("`amp.initialize` is not `model, optimizer = amp.initialize(model, optimizer, ...)`")
        targets = self.code(assign.targets[0].target)
        new = [cst.parse_statement(f"scaler = {self.scaler}\n")]
        if targets.replace(" ", "").strip("()") != f"{args[0].value},{args[1].value}":
            new.insert(0, cst.parse_statement(f"{targets} = {args[0].value}, {args[1].value}\n"))
        new[0] = new[0].with_changes(leading_lines=line.leading_lines)
        replacements[line] = cst.FlattenSentinel(new)
        return args[0].value

    def _scale_losses(self, model: str, replacements: dict) -> None:
        scale_calls = self.calls.get("amp.scale_loss", [])
        if not scale_calls:
            raise _NoFix("no `amp.scale_loss` block to migrate")
        optimizers = set()
        for call in scale_calls:
            with_node = self.context.parent(self.context.parent(call))
            loss, optimizer = (argument(call, 0, "loss"), argument(call, 1, "optimizers"))
            if not isinstance(with_node, cst.With) or len(with_node.items) != 1 or with_node.items[0].asname is None:
                raise _NoFix("`amp.scale_loss` is not used as `with amp.scale_loss(loss, optimizer) as scaled_loss:`")
            scaled = self.code(with_node.items[0].asname.name)
            body = with_node.body.body if isinstance(with_node.body, cst.IndentedBlock) else ()
            backward = body[0] if len(body) == 1 else None
            text = self.code(backward).strip() if backward is not None else ""
            if not isinstance(loss, cst.Name) or optimizer is None or not text.startswith(f"{scaled}.backward("):
                raise _NoFix("the `amp.scale_loss` block does more than `scaled_loss.backward()`")
            optimizers.add(self.code(optimizer))
            new = cst.parse_statement(f"scaler.scale({loss.value})" + text[len(scaled) :] + "\n")
            replacements[with_node] = new.with_changes(leading_lines=with_node.leading_lines)
            self._wrap_forward(with_node, loss.value, model, replacements)
        self._steps(optimizers, replacements)

    def _wrap_forward(self, with_node: cst.With, loss: str, model: str, replacements: dict) -> None:
        """``with torch.autocast("cuda"):`` around the statements before the backward, from the loss's
        assignment back to the last ``zero_grad``/``step``/``backward``/compound statement."""
        block = self.context.parent(with_node)
        statements = list(block.body)
        at = statements.index(with_node)
        end = at - 1
        while end >= 0 and not (
            isinstance(statements[end], cst.SimpleStatementLine) and _assigns(statements[end], loss)
        ):
            end -= 1
        start = end
        while (
            start > 0
            and isinstance(statements[start - 1], cst.SimpleStatementLine)
            and not any(f".{stop}(" in self.code(statements[start - 1]) for stop in _STOPS)
        ):
            start -= 1
        forward = statements[start : end + 1] if end >= 0 else []
        if not forward or not any(f"{model}(" in self.code(s) for s in forward):
            raise _NoFix(
                f"the forward pass (`{model}(...)` up to `{loss} = ...`) is not a run of statements before the backward"
            )
        region = cst.parse_statement(f"with {self.autocast}:\n    pass\n")
        region = region.with_changes(
            body=region.body.with_changes(body=[forward[0].with_changes(leading_lines=()), *forward[1:]]),
            leading_lines=forward[0].leading_lines,
        )
        replacements[forward[0]] = region
        for statement in forward[1:]:
            replacements[statement] = cst.RemovalSentinel.REMOVE

    def _steps(self, optimizers: set[str], replacements: dict) -> None:
        steps = [
            c
            for c in self.context.nodes(cst.Call)
            if isinstance(c.func, cst.Attribute)
            and c.func.attr.value == "step"
            and self.code(c.func.value) in optimizers
            and not c.args
        ]
        if not steps:
            raise _NoFix("no `optimizer.step()` to route through the scaler")
        for step in steps:
            line = self.whole_line_of(step)
            if line is None:
                raise _NoFix("an `optimizer.step()` is part of a larger statement")
            replacements[line] = cst.FlattenSentinel(
                [
                    cst.parse_statement(f"scaler.step({self.code(step.func.value)})\n").with_changes(
                        leading_lines=line.leading_lines
                    ),
                    cst.parse_statement("scaler.update()\n").with_changes(trailing_whitespace=line.trailing_whitespace),
                ]
            )

    def _master_params(self, model: str, replacements: dict) -> None:
        for call in self.calls.get("amp.master_params", []):
            if not self._clipped(call):
                raise _NoFix(
                    "`amp.master_params` is used outside a gradient clip (saved or compared): apex's float32 "
                    "master copy of an O2 model has no torch.amp counterpart"
                )
            optimizer = argument(call, 0, "optimizer")
            line = self.context.enclosing(call, cst.SimpleStatementLine)
            if optimizer is None or line is None or line in replacements:
                raise _NoFix("`amp.master_params` is used where no unscale can precede it")
            unscale = cst.parse_statement(f"scaler.unscale_({self.code(optimizer)})\n").with_changes(
                leading_lines=line.leading_lines
            )
            rewritten = line.deep_replace(call, cst.parse_expression(f"{model}.parameters()"))
            replacements[line] = cst.FlattenSentinel([unscale, rewritten.with_changes(leading_lines=())])

    def _clipped(self, call: cst.Call) -> bool:
        """``amp.master_params(opt)`` is the parameters argument of a gradient clip, where unscaled model
        parameters stand in for it."""
        arg = self.context.parent(call)
        clip = self.context.parent(arg) if isinstance(arg, cst.Arg) else None
        return (
            isinstance(clip, cst.Call)
            and clip.args[0] is arg
            and self.context.names.torch_api(clip.func, CLIP_APIS) is not None
        )

    def _checkpoints(self, replacements: dict) -> None:
        for path in ("amp.state_dict", "amp.load_state_dict"):
            for call in self.calls.get(path, []):
                replacements[call.func] = cst.parse_expression(f"scaler.{path.split('.')[1]}")

    def _whole_line(self, node: cst.CSTNode) -> cst.SimpleStatementLine:
        line = (
            node if isinstance(node, cst.SimpleStatementLine) else self.context.enclosing(node, cst.SimpleStatementLine)
        )
        if (
            line is None
            or len(line.body) != 1
            or not isinstance(self.context.parent(line), (cst.Module, cst.IndentedBlock))
            or len(self.context.parent(line).body) < 2
        ):
            raise _NoFix("an apex statement shares its line or is the only statement of its block")
        return line


def _star(statement: cst.CSTNode) -> bool:
    return isinstance(statement, cst.ImportFrom) and isinstance(statement.names, cst.ImportStar)


def _callee(site: cst.CSTNode) -> cst.CSTNode:
    return site.func if isinstance(site, cst.Call) else site


class _NoFix(Exception):
    """Why the file's migration cannot be written automatically."""


def _assigns(line: cst.SimpleStatementLine, name: str) -> bool:
    small = line.body[0] if len(line.body) == 1 else None
    return isinstance(small, cst.Assign) and any(dotted(t.target) == name for t in small.targets)
