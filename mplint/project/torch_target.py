"""The PyTorch version a file targets, from the nearest dependency pins above it.

The MPT rules write different code for different torch versions: ``torch.amp.autocast``/
``torch.amp.custom_fwd`` replace the ``torch.cuda.amp`` spellings from 2.4 (MPT502), and
``torch.amp.GradScaler("cpu"/"cuda")`` exists from 2.3. ``torch_target(path)`` reads the pins of the
project around ``path`` with ``packaging``'s requirement parser: ``requirements*.txt`` and
``requirements/*.txt``, ``pyproject.toml`` (PEP 621 dependencies and extras, Poetry dependencies) and
``setup.cfg`` (``install_requires`` and extras). The search walks up from the file's folder and stops at
the first folder that pins torch or that is a project root (``pyproject.toml``, ``setup.cfg``,
``setup.py``, ``.git``): a project that does not pin torch is unpinned, whatever a parent folder says.

Results are memoised per folder, so a run reads each pin file once. The project facts do not carry the
pin yet (they are keyed for the Keras rules); until they do, a cached result does not notice a pin
changed without the file changing.
"""

from __future__ import annotations

import configparser
import functools
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable

from packaging.requirements import InvalidRequirement, Requirement
from packaging.version import InvalidVersion, Version

# Versions a specifier is tested against (plus the versions it names itself).
_SAMPLES = tuple(Version(v) for v in [*(f"1.{m}.0" for m in range(14)), *(f"2.{m}.0" for m in range(31))])
_PROJECT_ROOT_MARKERS = ("pyproject.toml", "setup.cfg", "setup.py", ".git")
_REQUIREMENT_LINE = re.compile(r"^\s*([A-Za-z0-9][A-Za-z0-9._-]*(?:\[[^\]]*\])?\s*[^#]*)")


@dataclass(frozen=True)
class TorchTarget:
    """What the pins allow: ``minimum``/``newest`` are the lowest/highest torch versions the pin
    admits (None when unpinned, or no bound that way)."""

    pinned: bool
    minimum: Version | None = None
    newest: Version | None = None
    source: str = "no torch pin: the current torch"

    def at_least(self, version: str) -> bool:
        """Whether every version the pin admits is >= ``version`` (true when unpinned: the current torch)."""
        return not self.pinned or (self.minimum is not None and self.minimum >= Version(version))

    def admits_from(self, version: str) -> bool:
        """Whether the pin admits some torch >= ``version`` (true when unpinned)."""
        return not self.pinned or self.newest is None or self.newest >= Version(version)


UNPINNED = TorchTarget(pinned=False)


def torch_target(path: str | Path) -> TorchTarget:
    """The torch target of the file at ``path`` (relative paths count from the working folder)."""
    try:
        folder = Path(path).resolve().parent
    except (OSError, RuntimeError):
        return UNPINNED
    return _target_of_folder(folder)


@functools.lru_cache(maxsize=1024)
def _target_of_folder(folder: Path) -> TorchTarget:
    pins = list(_torch_requirements(folder))
    if pins:
        return _target(pins)
    if folder.parent == folder or any((folder / marker).exists() for marker in _PROJECT_ROOT_MARKERS):
        return UNPINNED
    return _target_of_folder(folder.parent)


def _target(pins: list[tuple[Requirement, str]]) -> TorchTarget:
    allowed = []
    for req, _ in pins:
        candidates = [*_SAMPLES, *_mentioned(req)]
        allowed.append({v for v in candidates if req.specifier.contains(v, prereleases=True)})
    common = set.intersection(*allowed) if allowed else set()
    unbounded_below = all(not any(s.operator in (">=", ">", "==", "~=", "===") for s in req.specifier) for req, _ in pins)
    unbounded_above = all(not any(s.operator in ("<=", "<", "==", "~=", "===") for s in req.specifier) for req, _ in pins)
    source = ", ".join(f"{where} pins {req}" for req, where in pins)
    if not common:
        return TorchTarget(True, None, None, source)
    return TorchTarget(True, None if unbounded_below else min(common), None if unbounded_above else max(common), source)


def _mentioned(req: Requirement) -> list[Version]:
    out = []
    for spec in req.specifier:
        try:
            out.append(Version(spec.version.replace(".*", ".0")))
        except InvalidVersion:
            continue
    return out


def _torch_requirements(folder: Path) -> Iterable[tuple[Requirement, str]]:
    files = sorted(folder.glob("requirements*.txt")) + sorted(folder.glob("requirements/*.txt"))
    for file in files:
        yield from ((r, file.name) for r in _requirements_txt(_read(file)) if _is_torch(r))
    if (folder / "pyproject.toml").is_file():
        yield from ((r, "pyproject.toml") for r in _pyproject(_read(folder / "pyproject.toml")) if _is_torch(r))
    if (folder / "setup.cfg").is_file():
        yield from ((r, "setup.cfg") for r in _setup_cfg(_read(folder / "setup.cfg")) if _is_torch(r))


def _is_torch(req: Requirement) -> bool:
    return req.name.lower() == "torch"


def _parse(specs: Iterable[str]) -> Iterable[Requirement]:
    for spec in specs:
        try:
            yield Requirement(spec.strip())
        except InvalidRequirement:
            continue


def _requirements_txt(text: str) -> Iterable[Requirement]:
    lines = (line.strip() for line in text.splitlines())
    return _parse(m.group(1) for line in lines if line and not line.startswith(("#", "-"))
                  if (m := _REQUIREMENT_LINE.match(line)))


def _pyproject(text: str) -> Iterable[Requirement]:
    try:
        import tomllib
    except ModuleNotFoundError:  # Python < 3.11
        import tomli as tomllib
    try:
        data = tomllib.loads(text)
    except Exception:
        return []
    project = data.get("project", {})
    specs = [*project.get("dependencies", []), *(s for extra in project.get("optional-dependencies", {}).values() for s in extra)]
    poetry = data.get("tool", {}).get("poetry", {})
    groups = [poetry.get("dependencies", {}), *(g.get("dependencies", {}) for g in poetry.get("group", {}).values())]
    for table in groups:
        for name, spec in table.items():
            version = spec if isinstance(spec, str) else spec.get("version", "") if isinstance(spec, dict) else ""
            specs.append(f"{name}{_poetry_spec(version)}")
    return _parse(s for s in specs if isinstance(s, str))


def _poetry_spec(version: str) -> str:
    """Poetry's ``^2.1``/``~2.1``/``2.1.*``/``>=2`` as a PEP 440 specifier."""
    version = version.strip()
    try:
        if not version or version == "*":
            return ""
        if version.startswith("^"):
            base = Version(version[1:])
            return f">={base},<{base.major + 1}" if base.major else f">={base},<0.{base.minor + 1}"
        if version.startswith("~") and not version.startswith("~="):
            base = Version(version[1:])
            return f">={base},<{base.major}.{base.minor + 1}"
    except InvalidVersion:
        return ""
    return version if version[0] in "<>=!~" else f"=={version}"


def _setup_cfg(text: str) -> Iterable[Requirement]:
    parser = configparser.ConfigParser(interpolation=None)
    try:
        parser.read_string(text)
    except configparser.Error:
        return []
    specs = []
    if parser.has_option("options", "install_requires"):
        specs += parser.get("options", "install_requires").splitlines()
    if parser.has_section("options.extras_require"):
        for _, value in parser.items("options.extras_require"):
            specs += value.splitlines()
    return _parse(s.split("#", 1)[0] for s in specs if s.strip())


def _read(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return ""
