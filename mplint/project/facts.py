"""The facts in force for one module, handed to every rule that checks it.

Which policies govern the module (its MP context: those set by the programs that reach
it, see ``programs``), whether it is library code, which Keras generation its programs
target, their TPU use and Keras flavours, the project's re-exports of Keras, and the torch
versions the pins nearest the module admit.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING

from mplint.engine.facts import per_project_table
from mplint.engine.summaries import FunctionSummary, SummaryKind
from mplint.knowledge.policies import BFLOAT16_POLICIES, FLOAT16_POLICIES, FLOAT32_POLICIES, UNKNOWN_POLICY
from mplint.project.extract import PolicySite
from mplint.project.generation import DEFAULT, Generation

if TYPE_CHECKING:
    from mplint.project.torch_target import TorchTarget
    from mplint.project.trainer_target import StackTarget


def reexported_names(reexports: dict) -> dict[str, frozenset[str]]:
    def compute() -> dict[str, frozenset[str]]:
        out: dict[str, frozenset[str]] = {}
        for key, target in reexports.items():
            last = key.rsplit(".", 1)[-1]
            out[last] = out.get(last, frozenset()) | frozenset(target.split("."))
        return out

    return per_project_table(reexports, "names", compute)


@dataclass(frozen=True)
class ProgramLink:
    """How a program reaches the module: its entry point and the modules in between."""

    entry: str  # display path of the entry point
    via: tuple[str, ...] = ()  # display paths from the entry (exclusive) to the module (exclusive)


@dataclass(frozen=True)
class ProjectFacts:
    policies: tuple[PolicySite, ...] = ()
    generation: Generation = DEFAULT
    tpu_sites: tuple[tuple[str, int], ...] = ()
    reexports: dict = field(default_factory=dict, compare=False)
    keras_namespaces: frozenset = frozenset()
    policy_from_config: bool = False
    # The program of each policy site in ``policies`` (same order), for messages.
    links: tuple[ProgramLink, ...] = ()
    library_context: bool = False  # published package code, or importable code no policy-setting program reaches
    distribution: str = ""  # the distribution that publishes this module ("" when the project publishes none of it)
    path: str = ""  # the module these facts are for ("" for project-wide facts)
    test_module: bool = False  # test_*.py / *_test.py: exercises code, trains nothing users run
    trained_names: frozenset = frozenset()  # classes/functions of this module whose models a reaching program trains
    # The project's function summaries (``FileFacts.summaries`` lists the kinds), by qualified name (and the names
    # imports re-export them under): name -> kind name -> ``FunctionSummary``. Shared by every module.
    summaries: dict = field(default_factory=dict, compare=False)
    # The torch range the pins nearest the module admit, None where none pins torch (see ``torch_target``).
    torch_pin: TorchTarget | None = None
    # The trainer stacks (transformers, Accelerate, Lightning, DeepSpeed) the same pins name, with their ranges.
    trainer_pins: tuple[StackTarget, ...] = ()
    # Functions and methods of this module that nothing in the project names (``f``, ``Class.method``): dead code,
    # which version rules leave alone. Empty for published modules: their users call them.
    uncalled: frozenset[str] = frozenset()
    # No program of the project runs any of this module (``programs.modules_never_run``): version rules leave all of
    # it alone, its top-level code included (a stale copy breaks on no version).
    never_runs: bool = False
    # Packages that replace torch names on import (``mplint.knowledge.torch_patches``) which a program that reaches
    # the module imports anywhere, a conditional import in a function included: there the name may be theirs.
    patching_imports: frozenset[str] = frozenset()
    # The module's top-level functions -> the last top-level line that runs them (``run_order``): with a setter's
    # ``runs_at`` in the same file, whether the policy governs the layers they build.
    run_lines: tuple[tuple[str, int], ...] = ()

    @property
    def orders_policies(self) -> bool:
        return any(site.runs_at is not None and site.path == self.path for site in self.policies)

    def at(self, function: str, line: int | None) -> ProjectFacts:
        """The facts in force for code of this module that runs in ``function`` (a top-level function; "" at top
        level, ``line`` naming its top-level statement): a setter of this file that runs only after that code
        does not govern it. ``line`` None: code whose runs cannot be told (a class, a lambda), under every site."""
        last = dict(self.run_lines).get(function) if function else line
        if last is None:
            return self
        kept = [
            i
            for i, site in enumerate(self.policies)
            if site.runs_at is None or site.path != self.path or not last < site.runs_at
        ]
        if len(kept) == len(self.policies):
            return self
        links = tuple(self.links[i] for i in kept) if self.links else ()
        return replace(self, policies=tuple(self.policies[i] for i in kept), links=links)

    @property
    def torch_target(self) -> TorchTarget:
        """The torch versions the module may run on: what the PyTorch rules' fixes may write for. Unpinned is
        every supported torch (``mplint.project.torch_target``, imported only by the rules that ask)."""
        if self.torch_pin is not None:
            return self.torch_pin
        from mplint.project.torch_target import UNPINNED

        return UNPINNED

    def trainer_target(self, stack: str) -> StackTarget:
        """The releases of ``stack`` (a key of ``knowledge.trainer_versions.STACKS``) the module may run with:
        every release where no pin names it."""
        from mplint.project.trainer_target import unpinned

        return next((t for t in self.trainer_pins if t.stack == stack), None) or unpinned(stack)

    @property
    def reexported_names(self) -> dict[str, frozenset[str]]:
        """Last name of each re-export -> the parts of the Keras path it stands for (for the pre-filter).
        Computed once per project: every module shares the project's re-exports."""
        return reexported_names(self.reexports)

    def summaries_of(self, kind: SummaryKind) -> dict[str, FunctionSummary]:
        """The project's summaries of one kind: qualified name -> summary. Computed once per project."""
        summaries, name = self.summaries, kind.name
        return per_project_table(
            summaries, ("of", name), lambda: {f: kinds[name] for f, kinds in summaries.items() if name in kinds}
        )

    @property
    def summarized_names(self) -> dict[str, frozenset[str]]:
        """Kind -> last names of the project's functions with that summary (for the pre-filter). Computed once
        per project, like ``reexported_names``."""
        summaries = self.summaries

        def compute() -> dict[str, frozenset[str]]:
            out: dict[str, set[str]] = {}
            for name, kinds in summaries.items():
                for kind in kinds:
                    out.setdefault(kind, set()).add(name.rsplit(".", 1)[-1])
            return {kind: frozenset(names) for kind, names in out.items()}

        return per_project_table(summaries, "summarized", compute)

    @property
    def policy_names(self) -> frozenset[str]:
        return frozenset(p.policy for p in self.policies)

    @property
    def global_policy_names(self) -> frozenset[str]:
        return frozenset(p.policy for p in self.policies if p.how != "layer")

    @property
    def layer_policy_names(self) -> frozenset[str]:
        return frozenset(p.policy for p in self.policies if p.how == "layer")

    @property
    def reduced_precision(self) -> bool:
        """Some code may compute in float16/bfloat16 (an unevaluable policy counts)."""
        names = self.policy_names
        return bool(names & (FLOAT16_POLICIES | BFLOAT16_POLICIES)) or UNKNOWN_POLICY in names

    @property
    def float16(self) -> bool:
        names = self.policy_names
        return bool(names & FLOAT16_POLICIES) or UNKNOWN_POLICY in names

    @property
    def float16_capable(self) -> bool:
        """float16 here, or library code that any user may run under mixed_float16."""
        return self.float16 or self.library_context

    @property
    def bfloat16_only(self) -> bool:
        names = self.policy_names - FLOAT32_POLICIES
        return bool(names) and names <= BFLOAT16_POLICIES

    @property
    def uses_tpu(self) -> bool:
        return bool(self.tpu_sites)

    def describe_policy(self) -> str:
        """Where the MP context comes from, for messages: the policy, where it is set, and by which program."""
        mixed = [
            (p, link)
            for p, link in zip(self.policies, self.links or [None] * len(self.policies))
            if p.policy not in FLOAT32_POLICIES
        ]
        if not mixed:
            return self.library_reason() or "no mixed policy"
        site, link = mixed[0]
        return self._program_policy(site, link)

    def library_reason(self) -> str:
        """Why this is library code, for messages ("" when it is not): the published distribution (and the
        repository's scripts whose float32 policy does not decide for its users), or no program sets a policy."""
        if not self.library_context:
            return ""
        if not self.distribution:
            return "library code (no program of this project that reaches it sets a policy; any user may pick mixed_float16)"
        text = f"library code of {self.distribution} (users pick the policy)"
        for site, link in zip(self.policies, self.links or [None] * len(self.policies)):
            if site.policy in FLOAT32_POLICIES and link is not None and link.entry != self.path:
                stem = link.entry.rsplit("/", 1)[-1].removesuffix(".py")
                kind = "a test" if stem.startswith("test_") or stem.endswith("_test") else "a tool script"
                return f"{text}; {link.entry} sets {site.policy} but is {kind} of this repository"
        return text

    def library_status(self) -> str:
        """Whether this is library code and why, for ``--show-facts``: the reason messages give."""
        mixed = self.describe_policy() if any(p.policy not in FLOAT32_POLICIES for p in self.policies) else ""
        if self.library_context:  # a mixed program that reaches it adds its own context, as messages say
            return f"{self.library_reason()}; also {mixed}" if mixed else self.library_reason()
        if mixed:
            return f"not library code: {mixed}"
        float32 = [f"{p.policy} set at {p.path}:{p.line}" for p in self.policies if p.policy in FLOAT32_POLICIES]
        if float32:
            return f"not library code: this project's programs run it with {', '.join(float32)}"
        return "not library code: a program of this project"

    def library_note(self) -> str:
        """``; library code of ...`` for the messages of numerics rules: why code no float16 program of the
        project runs is checked at all ("" where a float16 program reaches it: that says why)."""
        return "" if self.float16 or not self.library_context else f"; {self.library_reason()}"

    def _program_policy(self, site: PolicySite, link: ProgramLink | None) -> str:
        if site.how == "config":
            return f"policy {site.policy} from the mplint config"
        name = "a policy known only at run time" if site.policy == UNKNOWN_POLICY else site.policy
        text = f"{name} set at {site.where()}"
        if link is None or (link.entry == self.path and site.path == self.path):
            return text
        if link.entry == self.path:
            return f"{text}, called from this program"
        program = "" if site.path == link.entry else f" in the program of {link.entry}"
        if link.via:
            return f"{text}{program}, which reaches this module through {', '.join(link.via)}"
        return f"{text}{program}, which imports this module"

    def context_record(self) -> dict:
        """The MP context and target of this module, for JSON and SARIF."""
        record: dict = {
            "keras_generation": self.generation.value,
            "keras_generation_source": self.generation.source,
            "library": self.library_context,
            "distribution": self.distribution or None,
            "policy": None,
        }
        for site, link in zip(self.policies, self.links or [None] * len(self.policies)):
            if site.policy in FLOAT32_POLICIES:
                continue
            record["policy"] = site.policy
            record["set_at"] = (
                None
                if site.how == "config"
                else (
                    {"path": site.path, "line": site.line}
                    if site.cell is None
                    else {"path": site.path, "cell": site.cell, "line": site.cell_line}
                )
            )
            if link is not None:
                record["program"] = link.entry
                record["via"] = list(link.via)
            break
        return record


@dataclass
class ProjectSummary:
    """What a run learnt about one project: for the JSON ``projects`` block."""

    root: Path
    files: int
    programs: list[dict]  # {entry, policies: [{policy, path, line}]} of each program that sets a policy
    generation: dict | None  # {value, source} when config or pins decide the target project-wide; None: per program
    reached: dict[str, list[str]] = field(default_factory=dict)  # program entry -> the modules it reaches
    library: dict[str, str] = field(default_factory=dict)  # file checked -> whether it is library code and why

    def reaching(self, checked: set[str], library: dict[str, str] | None = None) -> ProjectSummary:
        """The summary of a run that checks ``checked`` (display paths): the programs that reach one of them,
        and the library status of each file checked."""
        programs = (
            [p for p in self.programs if not checked.isdisjoint(self.reached.get(p["entry"], ()))]
            if self.reached
            else self.programs
        )
        return ProjectSummary(self.root, self.files, programs, self.generation, self.reached, library or {})
