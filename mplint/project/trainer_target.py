"""The versions of each trainer stack (transformers, Accelerate, Lightning, DeepSpeed) a file targets.

Read as torch's range is (``mplint.project.torch_target``): the nearest folder above the file whose pin sources
(``pins.pin_sources``, then what its README documents) name the stack, stopping at a project's root; a stack no pin
names is unpinned, which is every release of it (``mplint.knowledge.trainer_versions.STACKS``).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from packaging.version import Version

from mplint.knowledge.trainer_versions import STACKS
from mplint.project.config import is_marked
from mplint.project.manifests import Requirement, allowed_versions, sample_versions
from mplint.project.pins import consistent, documented_sources, pin_sources
from mplint.project.torch_target import AdmittedReleases


@dataclass(frozen=True)
class StackTarget(AdmittedReleases):
    """The releases of one stack (a key of ``STACKS``) the pins admit: ``minimum``/``newest`` None where unpinned or
    unbounded that way."""

    stack: str
    pinned: bool = False
    minimum: Version | None = None
    newest: Version | None = None
    source: str = ""

    @property
    def label(self) -> str:
        """``Lightning 2.1-2.4``, ``Lightning >= 2.0``, ``any Lightning`` (unpinned)."""
        name = STACKS[self.stack].label
        low, high = self.minimum, self.newest
        if not self.pinned or (low is None and high is None):
            return f"any {name}"
        if low is None:
            return f"{name} <= {_short(high)}"
        if high is None:
            return f"{name} >= {_short(low)}"
        return f"{name} {_short(low)}" if _short(low) == _short(high) else f"{name} {_short(low)}-{_short(high)}"

    @property
    def described(self) -> str:
        """The range and its evidence, as messages cite them."""
        return (
            f"{self.label}, from {self.source}" if self.pinned else f"{self.label}: no {STACKS[self.stack].label} pin"
        )


def _short(version: Version | None) -> str:
    return "" if version is None else f"{version.major}.{version.minor}"


def unpinned(stack: str) -> StackTarget:
    return StackTarget(stack)


class TrainerTargets:
    """The stacks' ranges for the files of one run: each folder is searched once (``parsed`` shared with the run's
    ``PinFinder``, so each pin file is read once)."""

    def __init__(self, parsed: dict | None = None):
        self._parsed = {} if parsed is None else parsed
        self._folders: dict[Path, dict[str, list[tuple[Requirement, str]]]] = {}

    def of(self, path: str | Path) -> tuple[StackTarget, ...]:
        """The pinned stacks of the file at ``path``, in ``STACKS`` order (a stack no pin names is left out)."""
        try:
            folder = Path(path).resolve().parent
        except (OSError, RuntimeError):
            return ()
        found = self._requirements_of(folder)
        return tuple(_target(stack, found[stack]) for stack in STACKS if found.get(stack))

    def _requirements_of(self, folder: Path) -> dict[str, list[tuple[Requirement, str]]]:
        found = self._folders.get(folder)
        if found is None:
            found = dict(_stack_requirements(folder, self._parsed))
            if folder.parent != folder and not is_marked(folder):  # a stack no pin here names: the folder above
                for stack, pins in self._requirements_of(folder.parent).items():
                    found.setdefault(stack, pins)
            self._folders[folder] = found
        return found


def _stack_requirements(folder: Path, parsed: dict) -> Iterable[tuple[str, list[tuple[Requirement, str]]]]:
    """Each stack's requirements in ``folder`` (its pins, else what its README documents), with where they lie."""
    sources = [(where, reqs) for where, reqs in pin_sources(folder, parsed)]
    documented = [(where, reqs) for where, reqs in documented_sources(folder, parsed)]
    for stack, info in STACKS.items():
        for named in (sources, documented):
            every = [(r, where) for where, reqs in named for r in reqs]
            mine = [item for name in info.distributions for item in consistent(every, name)]
            if mine:
                yield stack, mine
                break


def _target(stack: str, pins: list[tuple[Requirement, str]]) -> StackTarget:
    samples = sample_versions(stack)
    allowed = [set(allowed_versions(req, samples)) for req, _ in pins]
    common = set.intersection(*allowed) if allowed else set()
    below = any(any(s.operator in (">=", ">", "==", "~=", "===") for s in req.specifier) for req, _ in pins)
    above = any(any(s.operator in ("<=", "<", "==", "~=", "===") for s in req.specifier) for req, _ in pins)
    source = ", ".join(
        f"{where} pins {req.shown}" if req.specifier else f"{where} names {req.name}" for req, where in pins
    )
    if not common:
        return StackTarget(stack, True, None, None, source)
    return StackTarget(stack, True, min(common) if below else None, max(common) if above else None, source)
