"""MP503: TensorFlow's automatic mixed precision graph rewrite in Keras code."""

from __future__ import annotations

import libcst as cst

from mplint.analysis.exclusive_guards import together
from mplint.analysis.policy_calls import policy_setter
from mplint.diagnostics import Fix, FixSafety, Related
from mplint.engine import matchers as m
from mplint.engine.names import dotted
from mplint.engine.rule import Rule
from mplint.knowledge.policies import FLOAT32_POLICIES, MIXED_POLICIES, UNKNOWN_POLICY

REWRITE_FUNCTION = "enable_mixed_precision_graph_rewrite"
AMP_OPTION = "auto_mixed_precision"
AMP_ENV = "TF_ENABLE_AUTO_MIXED_PRECISION"
_DISABLED = frozenset({"0", "false", "False", ""})
_SETS = "sets the mixed policy"


class GraphRewriteWithPolicy(Rule):
    id = "MP503"
    silent_in_uncalled_code = True
    triggers = (REWRITE_FUNCTION.encode(), AMP_OPTION.encode(), AMP_ENV.encode())

    @classmethod
    def candidate(cls, code) -> bool:
        return code.mentions(REWRITE_FUNCTION, AMP_OPTION, AMP_ENV)

    @classmethod
    def active_for(cls, facts):
        # Without a (possibly) mixed Keras policy the rewrite with its own loss scaling is a working setup.
        return bool(facts.policy_names & (MIXED_POLICIES | {UNKNOWN_POLICY}))

    def _why(self) -> str:
        why = f"together with the Keras policy ({self.context.facts.describe_policy()}) it raises at run time"
        if self._float32_mode():
            why += " (the program may also set float32, where deleting the rewrite drops mixed precision: unsafe fix)"
        return why

    def _float32_mode(self) -> bool:
        """The program may also run with a float32 policy: a mode where the rewrite is the only mixed precision."""
        return bool(self.context.facts.policy_names & FLOAT32_POLICIES)

    def _mode_switch(self, node: cst.CSTNode) -> bool:
        """A switch under a condition in a program that also has a float32 policy: the rewrite is one mode, the
        mixed policy another (``--fp16_implementation=graph_rewrite`` builds the model in float32)."""
        return self._float32_mode() and self.context.enclosing(node, (cst.If, cst.IfExp)) is not None

    def _with_policy(self, node: cst.CSTNode) -> tuple[Related, ...] | None:
        """Where a mixed policy of the program is set that surely runs with the switch at ``node`` (related
        locations), or None when none does. A policy of this file runs with it when the run-time tests around one
        are the other's too (``exclusive_guards.together``): ``if dtype == tf.float16: <policy>`` and ``if
        FLAGS.fp16_implementation == "graph_rewrite": <rewrite>`` are two modes a flag may tie together, not one
        run. A policy of another file, the configuration's, or one this file sets where no call shows it, runs with
        every switch of the program."""
        mixed = [p for p in self.context.facts.policies if p.policy not in FLOAT32_POLICIES]
        if not mixed:
            return ()
        setters = None
        related = []
        for site in mixed:
            if site.path != self.context.path or site.cell is not None:
                related.append(Related(site.path, site.cell_line or site.line, _SETS, site.cell))
                continue
            if setters is None:
                setters = [c for c in self.context.nodes(cst.Call) if policy_setter(self.context, c)]
            at_line = [c for c in setters if self.context.position(c).start.line == site.line]
            if not at_line or any(together(self.context, node, c) for c in at_line):
                related.append(Related("", site.line, _SETS))
        return tuple(related) or None

    def _report(self, node: cst.CSTNode, message: str, fix: Fix | None) -> None:
        related = self._with_policy(node)
        if related is not None:
            self.report(node, message, fix, related=related)

    def visit_Call(self, node: cst.Call) -> None:
        if self._mode_switch(node):
            return
        name = dotted(node.func) or ""
        if name.rsplit(".", 1)[-1] == REWRITE_FUNCTION:
            self._report_rewrite(node)
        elif name.endswith("set_experimental_options") and node.args:
            self._report_option(node, node.args[0].value)
        elif name.endswith("environ.setdefault") and len(node.args) == 2:
            key, value = node.args[0].value, node.args[1].value
            if m.matches(key, m.SimpleString()) and key.evaluated_value == AMP_ENV and _enabled(value):
                statement = self._lone_call_line(node)
                fix = self._delete(statement) if statement is not None and statement.body[0].value is node else None
                self._report(node, f"{AMP_ENV} turns on TensorFlow's graph rewrite: {self._why()}", fix)

    def visit_SimpleStatementLine(self, node: cst.SimpleStatementLine) -> None:
        """``os.environ["TF_ENABLE_AUTO_MIXED_PRECISION"] = "1"``."""
        if len(node.body) != 1 or not isinstance(node.body[0], cst.Assign):
            return
        assign = node.body[0]
        target = assign.targets[0].target
        if not m.matches(target, m.Subscript(slice=[m.SubscriptElement(m.Index(m.SimpleString()))])):
            return
        if target.slice[0].slice.value.evaluated_value != AMP_ENV or not _enabled(assign.value):
            return
        if self._mode_switch(node):
            return
        self._report(target, f"{AMP_ENV} turns on TensorFlow's graph rewrite: {self._why()}", self._delete(node))

    def _report_rewrite(self, call: cst.Call) -> None:
        statement = self._lone_call_line(call)
        fix = None
        if statement is not None:
            small = statement.body[0]
            if isinstance(small, cst.Expr) and small.value is call:
                fix = self._delete(statement)
            elif isinstance(small, cst.Assign) and small.value is call and call.args:
                optimizer = call.args[0].value
                target = small.targets[0].target
                same = target.deep_equals(optimizer)  # `opt = rewrite(opt)`, `self.opt = rewrite(self.opt)`
                fix = self._delete(statement) if same else self._keep_optimizer(small, optimizer)
        self._report(
            call,
            f"`{REWRITE_FUNCTION}` applies TensorFlow's graph rewrite: {self._why()}. "
            "The rewrite also added loss scaling; compile() adds a LossScaleOptimizer under mixed_float16",
            fix,
        )

    def _report_option(self, call: cst.Call, options: cst.BaseExpression) -> None:
        if not isinstance(options, cst.Dict):
            return
        entries = [e for e in options.elements if isinstance(e, cst.DictElement)]
        amp = [e for e in entries if m.matches(e.key, m.SimpleString()) and e.key.evaluated_value == AMP_OPTION]
        if not amp or not _enabled(amp[0].value):
            return
        if len(options.elements) == 1:
            statement = self._lone_call_line(call)
            fix = self._delete(statement) if statement is not None and statement.body[0].value is call else None
        else:
            fix = self._fix(options, options.with_changes(elements=_without(options.elements, amp[0])))
        self._report(amp[0], f'`"{AMP_OPTION}": True` turns on TensorFlow\'s graph rewrite: {self._why()}', fix)

    def _lone_call_line(self, call: cst.Call) -> cst.SimpleStatementLine | None:
        """The line ``call`` makes alone (``tf.config.optimizer.set_experimental_options(...)``), which a fix may delete."""
        parent = self.context.parent(call)
        statement = self.context.parent(parent) if parent is not None else None
        if isinstance(statement, cst.SimpleStatementLine) and len(statement.body) == 1:
            return statement
        return None

    def _delete(self, statement: cst.SimpleStatementLine) -> Fix | None:
        block = self.context.parent(statement)
        alone = isinstance(block, cst.IndentedBlock) and len(block.body) == 1
        replacement = statement.with_changes(body=[cst.Pass()]) if alone else cst.RemoveFromParent()
        return self._fix(statement, replacement)

    def _keep_optimizer(self, assign: cst.Assign, optimizer: cst.BaseExpression) -> Fix | None:
        return self._fix(assign, assign.with_changes(value=optimizer))

    def _fix(self, old: cst.CSTNode, new) -> Fix:
        # Where the program may also run with a float32 policy, the rewrite is that mode's only mixed precision.
        return Fix({old: new}, FixSafety.UNSAFE if self._float32_mode() else FixSafety.SAFE)


def _enabled(value: cst.BaseExpression) -> bool:
    if isinstance(value, cst.Name):
        return value.value != "False" and value.value != "None"
    if isinstance(value, cst.SimpleString):
        return value.evaluated_value not in _DISABLED
    if isinstance(value, cst.Integer):
        return value.value != "0"
    return True


def _without(elements, dropped):
    kept = [e for e in elements if e is not dropped]
    last = elements[-1]
    if kept and kept[-1] is not last:  # the removed entry was last: the new last keeps its trailing comma style
        kept[-1] = kept[-1].with_changes(comma=last.comma)
    return kept
