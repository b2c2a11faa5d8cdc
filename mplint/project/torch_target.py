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
from mplint.project.launchers import launcher_folders
from mplint.project.manifests import Requirement, torch_samples
from mplint.project.pins import (
    consistent,
    documented_sources,
    folders_up_to,
    is_code_evidence,
    is_image,
    pin_sources,
    repository_top,
    with_code_bounds,
)


class AdmittedReleases:
    """Questions on the releases a package's pins admit, for a dataclass with ``pinned`` and ``minimum``/``newest``
    (None where unpinned, or no bound that way): torch's range and each trainer stack's."""

    pinned: bool
    minimum: Version | None
    newest: Version | None

    def at_least(self, version: str) -> bool:
        """Whether every admitted release is >= ``version`` (false when unpinned: any release may run it)."""
        return self.pinned and self.minimum is not None and self.minimum >= Version(version)

    def admits_from(self, version: str) -> bool:
        """Whether some admitted release is >= ``version`` (true when unpinned)."""
        return not self.pinned or self.newest is None or self.newest >= Version(version)

    def admits_before(self, version: str) -> bool:
        """Whether some admitted release is older than ``version`` (true when unpinned)."""
        return not self.pinned or self.minimum is None or self.minimum < Version(version)


@dataclass(frozen=True)
class TorchTarget(AdmittedReleases):
    """What the pins allow: ``minimum``/``newest`` are the lowest/highest torch versions the pin
    admits (None when unpinned, or no bound that way)."""

    pinned: bool
    minimum: Version | None = None
    newest: Version | None = None
    source: str = "no torch pin: any supported torch"
    # (year, month) of the newest dated container image in the evidence (``nvcr.io/nvidia/pytorch:20.06-py3``): the
    # libraries it bundles (apex) are no newer; None where no dated image says so.
    dated: tuple[int, int] | None = None

    def predates(self, month: tuple[int, int]) -> bool:
        """Whether the environment is dated before ``month``: what it bundles cannot have changed since."""
        return self.dated is not None and self.dated < month

    def admits_span(self, first: str, until: str | None) -> bool:
        """Whether the pin admits some torch from ``first`` up to ``until`` (exclusive; None: no upper end)."""
        return self.admits_from(first) and (until is None or self.admits_before(until))

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

    def __init__(self, parsed: dict | None = None, root: Path | None = None):
        self._folders: dict[Path, list[tuple[Requirement, str]]] = {}
        self._parsed = {} if parsed is None else parsed
        self._root = root  # the project's root: Dockerfiles up to it that install a folder count for it

    def of(self, path: str | Path, code: Iterable[tuple[str, str, str]] = ()) -> TorchTarget:
        """The torch range of the file at ``path``: the nearest pins, intersected with the code's own version
        evidence ``code`` ((package, specifier, "path:line what"), as ``programs.code_bounds`` gives it)."""
        try:
            folder = Path(path).resolve().parent
        except (OSError, RuntimeError):
            return UNPINNED
        pinned = self._requirements_of(folder)
        if not pinned and self._root is not None:  # nothing above the code: the folders of the scripts that run it
            top = repository_top(self._root) or self._root
            for place in launcher_folders(folder, top, self._parsed):
                if pinned := self._requirements_of(place):
                    break
            # a sub-project of a monorepo whose own pins name no torch: what the repository documents above it
            for above in folders_up_to(self._root.parent, top):
                if pinned:
                    break
                pinned = list(_torch_requirements(above, self._parsed, kinds=(documented_sources,)))
        found = with_code_bounds(pinned, [b for b in code if b[0] == "torch"])
        return _target(found) if found else UNPINNED

    def _requirements_of(self, folder: Path) -> list[tuple[Requirement, str]]:
        found = self._folders.get(folder)
        if found is None:
            found = list(_torch_requirements(folder, self._parsed, self._root))
            if not found and self._above(folder):
                found = self._requirements_of(folder.parent)
            self._folders[folder] = found
        return found

    def _above(self, folder: Path) -> bool:
        """Whether the search goes on above ``folder``, which names no torch: up to the run's root, as the TensorFlow
        pins do (a monorepo's sub-project may pin only its other packages, its framework being described above: a
        submission's ``systems/*.json``, a README's image); without a run, up to the nearest project marker."""
        if folder.parent == folder:
            return False
        if self._root is not None:
            return folder != self._root and folder.is_relative_to(self._root)
        return not is_marked(folder)


def _target(pins: list[tuple[Requirement, str]]) -> TorchTarget:
    allowed = []
    for req, _ in pins:
        candidates = [*torch_samples(), *_mentioned(req)]
        allowed.append({v for v in candidates if req.specifier.contains(v, prereleases=True)})
    common = set.intersection(*allowed) if allowed else set()
    unbounded_below = all(
        not any(s.operator in (">=", ">", "==", "~=", "===") for s in req.specifier) for req, _ in pins
    )
    unbounded_above = all(
        not any(s.operator in ("<=", "<", "==", "~=", "===") for s in req.specifier) for req, _ in pins
    )
    source = ", ".join(dict.fromkeys(_evidence(req, where) for req, where in pins))  # a name in several extras: once
    months = [month for _, where in pins if is_image(where) and (month := _image_month(where))]
    dated = max(months) if months else None
    if not common:
        return TorchTarget(True, None, None, source, dated)
    return TorchTarget(
        True, None if unbounded_below else min(common), None if unbounded_above else max(common), source, dated
    )


def _image_month(where: str) -> tuple[int, int] | None:
    """The month of the image of ``where`` ("nvcr.io/nvidia/pytorch:20.06-py3 in Dockerfile")."""
    from mplint.project.images import dated_image_month

    image = where.rsplit(" in ", 1)[0].split(" (installing", 1)[0].rsplit(" over ", 1)[-1]
    return dated_image_month(image)


def _evidence(req: Requirement, where: str) -> str:
    """``requirements.txt pins torch>=1.7``; an image: ``nvcr.io/nvidia/pytorch:25.12-py3 in Dockerfile: torch 2.10.0a0``,
    between two verified releases ``nvcr.io/nvidia/pytorch:21.03-py3 in Dockerfile: torch 1.8.0a0-1.10.0a0``."""
    if is_code_evidence(where):
        return where
    if is_image(where) and req.specifier:
        exact = [s.version for s in req.specifier if s.operator == "=="]
        if exact:
            return f"{where}: torch {exact[0]}"
        lows = [Version(s.version) for s in req.specifier if s.operator == ">="]
        highs = [Version(s.version) for s in req.specifier if s.operator == "<="]
        low, high = (str(max(lows)) if lows else None), (str(min(highs)) if highs else None)
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


def _torch_requirements(
    folder: Path, parsed: dict | None = None, root: Path | None = None, kinds=(pin_sources, documented_sources)
) -> Iterable[tuple[Requirement, str]]:
    """Requirements on torch in ``folder``, read by the same parsers as every other pin (``pins.pin_sources``),
    each with where it lies: the file's path in its git repository (a monorepo has many ``requirements.txt``).
    What the README documents counts where no pin names torch; ``kinds`` may ask for the documented ones alone."""
    place = _place_in_repository(folder)
    for sources in kinds:
        named = sources(folder, parsed, root) if sources is pin_sources else sources(folder, parsed)
        found = consistent([(r, where) for where, requirements in named for r in requirements], "torch")
        for req, where in found:
            image, _, file = where.rpartition(" in ")
            if Path(file).is_absolute():  # a Dockerfile above the folder that installs it
                file = _place_in_repository(Path(file).parent) + Path(file).name
            else:
                file = place + file
            yield req, f"{image} in {file}" if image else f"{place}{where}"
        if found:
            return


def _place_in_repository(folder: Path) -> str:
    """``training/sub/`` for a folder of a git repository (its top holds ``.git``); empty at its top or outside one."""
    top = repository_top(folder)
    return "" if top is None or top == folder else f"{folder.relative_to(top).as_posix()}/"
