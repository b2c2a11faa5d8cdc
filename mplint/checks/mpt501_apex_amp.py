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
several ``initialize`` calls and ``FP16_Optimizer`` are reported with what to write instead.

An import nothing in the module uses is dead code, not a finding: apex deprecates its AMP where it runs
(``amp.initialize``), not on import. Where the module uses the imported name only in ways the migration does
not know (``amp.register_half_function(...)``, ``network_to_half(model)`` through ``from apex.fp16_utils import
*``), the finding is at the first such use.
"""

from __future__ import annotations

import libcst as cst

from mplint.analysis.call_args import argument
from mplint.analysis.torch_loop import CLIP_APIS
from mplint.checks._torch_rule import TorchRule
from mplint.diagnostics import Fix, FixSafety, ImportSpec, Related
from mplint.engine.names import dotted
from mplint.knowledge.releases import APEX_AMP_DEPRECATED

_AMP_CALLS = {"amp.initialize", "amp.scale_loss", "amp.master_params", "amp.state_dict", "amp.load_state_dict"}
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
_NATIVE = "(NVIDIA points to torch.amp): use `torch.autocast` and `torch.amp.GradScaler`"


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
            self.legacy_imports.append(
                (node, "`apex.fp16_utils` (FP16_Optimizer, network_to_half) is removed from apex")
            )
        elif module.startswith("apex.amp") or "amp" in names:
            self.imports.append(node)

    def visit_Import(self, node: cst.Import) -> None:
        for alias in node.names:
            name = dotted(alias.name) or ""
            if name == "apex.amp" or name.startswith("apex.amp."):
                self.imports.append(node)
            elif name.startswith("apex.fp16_utils"):
                self.legacy_imports.append((node, "`apex.fp16_utils` is removed from apex"))

    def visit_Call(self, node: cst.Call) -> None:
        found = self.context.names.torch_api(node.func, _AMP_CALLS)
        if found is not None and found.ns == "apex":
            self.calls.setdefault(found.path, []).append(node)
            self.items.append((node, self._message(found.path, node)))
        elif any(k.ns == "apex" and k.last == "FP16_Optimizer" for k in self.context.names.torch_names(node.func)):
            self._legacy(node, "apex's `FP16_Optimizer` is removed")

    def _legacy(self, node, what: str) -> None:
        self.blocker = "the file uses apex.fp16_utils"
        self.legacy.append(
            (
                node,
                f"{what}: keep the model float32, run the forward and loss under `torch.autocast` and "
                "step through `torch.amp.GradScaler`",
            )
        )

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
            if level == "O3":
                return (
                    '`amp.initialize(..., opt_level="O3")` trains in pure float16: no torch.amp equivalent; keep the model '
                    "float32 and use `torch.autocast` with `torch.amp.GradScaler` (or `.half()` for inference only)"
                )
            shown = f'"{level}"' if level else "?"
            return (
                f"`amp.initialize(..., opt_level={shown})` is apex's deprecated AMP: keep model and optimizer, create "
                '`scaler = torch.amp.GradScaler("cuda")`, run the forward and loss under `torch.autocast("cuda")`'
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
        fix, why = self._migration()
        initialize = self.calls.get("amp.initialize", [])
        sites = initialize or self._first_use(self.items)
        for i, site in enumerate(sites):
            message = dict((id(n), m) for n, m in self.items)[id(site)]
            if fix is None and why:
                message += f"; no automatic fix: {why}"
            others = [item for item in self.items if item[0] not in sites] if i == 0 else []
            self.report(site, message, fix, related=self._related(others))
        for site in self._first_use(self.legacy):
            others = [item for item in self.legacy if item[0] is not site]
            self.report(site, dict((id(n), m) for n, m in self.legacy)[id(site)], related=self._related(others))

    def _imports_in_use(self) -> None:
        """The apex imports the module uses join the findings; one whose names nothing reads is dead code. A use
        no finding covers (a call the migration does not know) becomes one."""
        for node in dict.fromkeys(self.imports):
            uses = self._uses(node, "amp")
            if _star(node):  # which of its names the module reads, nothing tells: reported as before
                self.items.append((node, f"apex's AMP is deprecated {_NATIVE}"))
            elif uses:
                self.items.append((node, f"apex's AMP is deprecated {_NATIVE}"))
                if not any(isinstance(n, cst.Call) for n, _ in self.items):
                    site = self._use_site(uses[0])
                    self.items.append(
                        (site, f"`{self.code(_callee(site))}` is part of apex's deprecated AMP {_NATIVE}")
                    )
        for node, message in self.legacy_imports:
            uses = self._uses(node, "fp16_utils")
            if uses:
                self._legacy(node, message)
                if not any(isinstance(n, cst.Call) for n, _ in self.legacy):
                    site = self._use_site(uses[0])
                    self._legacy(site, f"`{self.code(_callee(site))}` of `apex.fp16_utils` is removed from apex")

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
        return tuple(Related("", self.context.position(n).start.line, m) for n, m in ordered)

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
        scaler = (
            'torch.amp.GradScaler("cuda")'
            if self.context.facts.torch_target.at_least("2.3")
            else "torch.cuda.amp.GradScaler()"
        )
        new = [cst.parse_statement(f"scaler = {scaler}\n")]
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
        region = cst.parse_statement('with torch.autocast("cuda"):\n    pass\n')
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
            line = self.statement_of(step)
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
