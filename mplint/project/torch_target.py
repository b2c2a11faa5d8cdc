"""The PyTorch version a file targets, from the nearest dependency pins above it.

The MPT rules write different code for different torch versions: ``torch.autocast``/
``torch.amp.custom_fwd`` replace the ``torch.cuda.amp`` spellings from 2.4 (MPT502), and
``torch.amp.GradScaler("cpu"/"cuda")`` exists from 2.3. ``torch_target(path)`` reads the pins of the
project around ``path`` (every source ``mplint.project.pins`` reads: requirements files, pyproject, setup.py,
setup.cfg, conda files, Pipfiles, distribution metadata, Dockerfile images) and, in a folder none of whose pins
names torch, what its README documents (a versioned image, ``pip install torch==...``). The search walks up from
the file's folder and stops at the first folder with such evidence or that is a project root
(``config.marked_root``: packaging metadata, pins, an mplint config, ``.git``): a project that does not pin torch
is unpinned, whatever a parent folder says. Unpinned is not "the current torch": it is every supported torch
(``SUPPORTED``, from the first with ``torch.cuda.amp``), so a fix that writes a newer API is not offered there.

Every pin source is read by ``mplint.project.pins`` (one set of parsers for TensorFlow, Keras and torch);
the pin files' digest is part of the results cache key, so a changed pin is never answered from the cache.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from packaging.version import InvalidVersion, Version

from mplint.project.config import is_marked
from mplint.project.pins import Requirement, documented_sources, pin_sources

# Versions a specifier is tested against (plus the versions it names itself).
_SAMPLES = tuple(Version(v) for v in [*(f"1.{m}.0" for m in range(14)), *(f"2.{m}.0" for m in range(31))])


@dataclass(frozen=True)
class TorchTarget:
    """What the pins allow: ``minimum``/``newest`` are the lowest/highest torch versions the pin
    admits (None when unpinned, or no bound that way)."""

    pinned: bool
    minimum: Version | None = None
    newest: Version | None = None
    source: str = "no torch pin: any supported torch"

    def at_least(self, version: str) -> bool:
        """Whether every version the pin admits is >= ``version`` (false when unpinned: any torch may run it)."""
        return self.pinned and self.minimum is not None and self.minimum >= Version(version)

    def admits_from(self, version: str) -> bool:
        """Whether the pin admits some torch >= ``version`` (true when unpinned)."""
        return not self.pinned or self.newest is None or self.newest >= Version(version)

    @property
    def label(self) -> str:
        """The range: "torch 1.9.0a0", "torch >= 1.7", "torch 1.8-2.3", "any torch >= 1.6" (unpinned)."""
        if not self.pinned:
            return f"any torch >= {SUPPORTED}"
        low, high = self.minimum, self.newest
        if low is None:
            return f"torch <= {_short(high)}" if high is not None else f"torch >= {SUPPORTED}"
        if high is None:
            return f"torch >= {_short(low)}"
        return f"torch {_short(low)}" if low == high else f"torch {_short(low)}-{_short(high)}"

    @property
    def described(self) -> str:
        """The range and its evidence, as messages cite them."""
        return f"{self.label}, from {self.source}" if self.pinned else f"any torch >= {SUPPORTED}: no torch pin"


SUPPORTED = "1.6"  # the first torch with torch.cuda.amp: the oldest an unpinned project may run


def _short(version: Version) -> str:
    return str(version) if version.pre or version.local else f"{version.major}.{version.minor}"


UNPINNED = TorchTarget(pinned=False)


def torch_target(path: str | Path) -> TorchTarget:
    """The torch target of the file at ``path`` (relative paths count from the working folder)."""
    return TorchTargets().of(path)


class TorchTargets:
    """``torch_target`` for the files of one run: each folder is searched once, and each pin file read once
    (``parsed`` may be shared with the run's ``PinFinder``)."""

    def __init__(self, parsed: dict | None = None):
        self._folders: dict[Path, TorchTarget] = {}
        self._parsed = {} if parsed is None else parsed

    def of(self, path: str | Path) -> TorchTarget:
        try:
            folder = Path(path).resolve().parent
        except (OSError, RuntimeError):
            return UNPINNED
        return self._target_of_folder(folder)

    def _target_of_folder(self, folder: Path) -> TorchTarget:
        found = self._folders.get(folder)
        if found is None:
            pins = list(_torch_requirements(folder, self._parsed))
            if pins:
                found = _target(pins)
            elif folder.parent == folder or is_marked(folder):  # a project's root: no pin above it applies
                found = UNPINNED
            else:
                found = self._target_of_folder(folder.parent)
            self._folders[folder] = found
        return found


def _target(pins: list[tuple[Requirement, str]]) -> TorchTarget:
    allowed = []
    for req, _ in pins:
        candidates = [*_SAMPLES, *_mentioned(req)]
        allowed.append({v for v in candidates if req.specifier.contains(v, prereleases=True)})
    common = set.intersection(*allowed) if allowed else set()
    unbounded_below = all(
        not any(s.operator in (">=", ">", "==", "~=", "===") for s in req.specifier) for req, _ in pins
    )
    unbounded_above = all(
        not any(s.operator in ("<=", "<", "==", "~=", "===") for s in req.specifier) for req, _ in pins
    )
    source = ", ".join(_evidence(req, where) for req, where in pins)
    if not common:
        return TorchTarget(True, None, None, source)
    return TorchTarget(True, None if unbounded_below else min(common), None if unbounded_above else max(common), source)


def _evidence(req: Requirement, where: str) -> str:
    """``requirements.txt pins torch>=1.7``; an image: ``nvcr.io/nvidia/pytorch:25.12-py3 in Dockerfile: torch 2.10.0a0``,
    between two verified releases ``nvcr.io/nvidia/pytorch:21.03-py3 in Dockerfile: torch 1.8.0a0-1.10.0a0``."""
    if " in " in where and req.specifier:
        bounds = {s.operator: s.version for s in req.specifier}
        if "==" in bounds:
            return f"{where}: torch {bounds['==']}"
        low, high = bounds.get(">="), bounds.get("<=")
        return (
            f"{where}: torch {low}-{high}"
            if low and high
            else f"{where}: torch >= {low}"
            if low
            else f"{where}: torch <= {high}"
        )
    return f"{where} pins {req}" if req.specifier else f"{where} names torch with no version"


def _mentioned(req: Requirement) -> list[Version]:
    out = []
    for spec in req.specifier:
        try:
            out.append(Version(spec.version.replace(".*", ".0")))
        except InvalidVersion:
            continue
    return out


def _torch_requirements(folder: Path, parsed: dict | None = None) -> Iterable[tuple[Requirement, str]]:
    """Requirements on torch in ``folder``, read by the same parsers as every other pin (``pins.pin_sources``),
    each with where it lies: the file's path in its git repository (a monorepo has many ``requirements.txt``)."""
    place = _place_in_repository(folder)
    for sources in (pin_sources, documented_sources):  # what the README documents counts where no pin names torch
        found = [
            (r, where)
            for where, requirements in sources(folder, parsed)
            for r in requirements
            if r.name.lower() == "torch"
        ]
        for req, where in found:
            image, _, file = where.rpartition(" in ")
            yield req, f"{image} in {place}{file}" if image else f"{place}{where}"
        if found:
            return


def _place_in_repository(folder: Path) -> str:
    """``training/sub/`` for a folder of a git repository (its top holds ``.git``); empty at its top or outside one."""
    for top in [folder, *folder.parents]:
        if (top / ".git").exists():
            return "" if top == folder else f"{folder.relative_to(top).as_posix()}/"
    return ""
