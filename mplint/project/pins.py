"""The target TensorFlow/Keras of a program, read from the nearest dependency pins above it: which manifests, images
and documents govern a folder (``mplint.project.manifests`` and ``mplint.project.images`` read them), how their
ranges and the code's own version evidence intersect, and the generation that leaves."""

from __future__ import annotations

import os
import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from mplint.knowledge.trainer_versions import stack_of
from mplint.project.generation import Generation
from mplint.project.images import (
    compose_files,
    dockerfile_requirements,
    dockerfiles,
    installed_folders,
    readme_requirements,
    readmes,
    system_files,
    systems_requirements,
)
from mplint.project.launchers import launcher_folders
from mplint.project.manifests import (
    READERS,
    TF_PACKAGES,
    Requirement,
    allowed_versions,
    family_of,
    metadata_files,
    metadata_requirements,
    parse_requirement,
    read_text,
    requirement_files,
    requirements_file,
    sample_versions,
    toml_table,
    torch_samples,
)

if TYPE_CHECKING:
    from packaging.version import Version


@dataclass(frozen=True)
class Pinned:
    """One requirement on TensorFlow, Keras or tf-keras, and the file that states it."""

    requirement: Requirement
    where: str  # file name, relative to the project root


def pin_sources(
    folder: Path, parsed: dict | None = None, root: Path | None = None
) -> Iterable[tuple[str, list[Requirement]]]:
    """(file name, requirements) of each pin source in ``folder``, most specific first, and, with the project's
    ``root``, the Dockerfiles above it that ``pip install`` the folder (a sub-package installed into the image of
    its parent's Dockerfile runs in that image). ``parsed`` keeps each file's requirements for the rest of a run
    (the same folders are asked for every program)."""
    parsed = {} if parsed is None else parsed

    def read(path: Path, reader):
        return _read_once(parsed, path, reader)

    if root is not None:
        yield from _installing_dockerfiles(folder, root, read)

    for path in requirement_files(folder):
        yield path.name if path.parent == folder else f"requirements/{path.name}", read(path, requirements_file)
    for name, reader in READERS:
        if (folder / name).is_file():
            yield name, read(folder / name, reader)
    for path in metadata_files(folder):
        yield path.relative_to(folder).as_posix(), read(path, metadata_requirements)
    for path in dockerfiles(folder):
        image, requirements = read(path, dockerfile_requirements)
        if image or requirements:
            yield f"{image or 'its image'} in {path.relative_to(folder).as_posix()}", requirements


def _installing_dockerfiles(folder: Path, root: Path, read) -> Iterable[tuple[str, list[Requirement]]]:
    """The Dockerfiles above ``folder`` that install it: up to the project's root, or, for a project nested in a
    repository (a sub-package with its own packaging script), up to the repository's top."""
    folder = folder.resolve()
    for above in folders_up_to(folder.parent, repository_top(root) or root):
        for path in dockerfiles(above):
            if folder in read(path, installed_folders):
                image, requirements = read(path, dockerfile_requirements)
                if image or requirements:  # the file by its absolute path: readers place it in the project
                    yield f"{image or 'its image'} (installing {folder.name}/) in {path}", requirements


def repository_top(folder: Path) -> Path | None:
    """The nearest folder at or above ``folder`` that holds ``.git``."""
    for above in (folder, *folder.parents):
        if (above / ".git").exists():
            return above
    return None


def folders_up_to(start: Path, top: Path) -> Iterable[Path]:
    """``start`` and the folders above it, nearest first, up to ``top`` (inclusive); none where ``start`` lies
    outside ``top``."""
    folder = start
    while folder.is_relative_to(top) and folder != folder.parent:
        yield folder
        if folder == top:
            break
        folder = folder.parent


def documented_sources(folder: Path, parsed: dict | None = None) -> Iterable[tuple[str, list[Requirement]]]:
    """Evidence for a framework that no pin source of the folder names: the images of the Dockerfiles in its
    ``docker/``-like subfolders (an application folder's container; not where the folder packages a distribution,
    whose users install it anywhere the package admits: there it is a development image), then what the folder's
    README documents (``readme_requirements``: "<what> in README.md"), then the systems a benchmark submission
    describes (``systems/*.json``: the framework each ran)."""
    parsed = {} if parsed is None else parsed
    if not _packages_a_distribution(folder):
        for path in dockerfiles(folder, subfolders=True):
            image, requirements = _read_once(parsed, path, dockerfile_requirements)
            if image or requirements:
                yield f"{image or 'its image'} in {path.relative_to(folder).as_posix()}", requirements
    for path in readmes(folder):
        for what, requirements in _read_once(parsed, path, readme_requirements):
            yield f"{what} in {path.name}", requirements
    yield from systems_requirements(folder, lambda path, reader: _read_once(parsed, path, reader))


def _read_once(parsed: dict, path: Path, reader):
    """``reader(path)``, kept in ``parsed`` for the rest of the run."""
    key = (path, reader)  # one file may be read two ways (a Dockerfile: its image, the folders it installs)
    if key not in parsed:
        parsed[key] = reader(path)
    return parsed[key]


def _packages_a_distribution(folder: Path) -> bool:
    """A packaging script or a ``pyproject.toml`` with a ``[project]`` or ``[tool.poetry]`` table."""
    from mplint.project.config import is_packaging_script

    if is_packaging_script(folder / "setup.py"):
        return True
    data = toml_table(folder / "pyproject.toml") if (folder / "pyproject.toml").is_file() else {}
    return "project" in data or "poetry" in data.get("tool", {})


def pin_files(folders: Iterable[Path]) -> set[Path]:
    """Every file the pin finder may read for ``folders``: their pin sources and the files those include
    (``-r``/``-c``, at any depth). Found by name and a textual scan, so that a cache key needs no parser."""
    found: set[Path] = set()
    todo: list[Path] = []
    for folder in folders:
        todo += requirement_files(folder) + metadata_files(folder) + dockerfiles(folder) + readmes(folder)
        todo += dockerfiles(folder, subfolders=True) + system_files(folder)
        todo += [c for d in dockerfiles(folder) + dockerfiles(folder, subfolders=True) for c in compose_files(d)]
        todo += [folder / name for name, _ in READERS if (folder / name).is_file()]
    while todo:
        path = todo.pop()
        if path in found or not path.is_file():
            continue
        found.add(path)
        if path.suffix in (".txt", ".in", ".yml", ".yaml") or path.name.startswith("requirements"):
            for include in re.findall(
                r"(?:^|\s)(?:-r|--requirement|-c|--constraint)[\s=]+([^\s#]+)", read_text(path), re.M
            ):
                todo.append((path.parent / include).resolve())
    return found


def _merged(found: list[tuple[Requirement, str]], names: set[str]) -> tuple[Requirement, str] | None:
    """All requirements on one package (constraints, and every source of a folder: an image and the pins beside
    it) intersected as one, and where they come from (every source that bounds it)."""
    matching = [(r, w) for r, w in found if r.name.lower().replace("_", "-") in names]
    if not matching:
        return None
    from packaging.specifiers import SpecifierSet

    specifier = SpecifierSet()
    for req, _ in matching:
        specifier &= req.specifier
    bounding = [(r, w) for r, w in matching if r.specifier] or matching[:1]
    req = bounding[0][0]
    where = " and ".join(dict.fromkeys(w if not _pinned_in(w) else f"{w} pins {r}" for r, w in bounding))
    if len(bounding) == 1:
        where = bounding[0][1]
    return Requirement(req.name, specifier, f"{req.name}{specifier}"), where


_TF1_SAMPLES = tuple(f"1.{minor}.0" for minor in range(16))


def _admitted(req: Requirement, family: str) -> list[Version]:
    """The versions ``req`` admits among the samples; TensorFlow 1 only where it admits no TensorFlow 2 (a pin
    ``tensorflow<2.8`` is a TF 2 range, ``tensorflow<2`` or a TF1 image one of TF 1)."""
    if family == "torch":
        return allowed_versions(req, torch_samples())
    if stack_of(family) is not None:
        return allowed_versions(req, sample_versions(family))
    allowed = allowed_versions(req, sample_versions("keras" if family == "keras" else "tensorflow"))
    if family == "tensorflow" and (not allowed or max(allowed).major < 2):
        from packaging.version import Version

        allowed = allowed_versions(req, tuple(Version(v) for v in _TF1_SAMPLES))
    return allowed


def _generation_of(found: list[tuple[Requirement, str]]) -> Generation | None:
    tf_keras = _merged(found, {"tf-keras"})
    if tf_keras:
        return Generation(2, _evidence(*tf_keras) + " (legacy Keras 2)", "pin-tf-keras")
    keras = _merged(found, {"keras"})
    if keras:
        allowed = allowed_versions(keras[0], sample_versions("keras"))
        if allowed:
            newest, oldest = (3 if v.major >= 3 else 2 for v in (max(allowed), min(allowed)))
            return Generation(newest, _evidence(*keras), "pin-keras", oldest=oldest)
    tf = _merged(found, TF_PACKAGES)
    if tf:
        allowed = _admitted(tf[0], "tensorflow")
        if allowed:
            newest, oldest = max(allowed), min(allowed)
            tf_range = _version_range("TF", oldest, newest, newest >= max(sample_versions("tensorflow")))
            return Generation(
                _tf_generation(newest),
                _evidence(*tf, tf_range),
                "pin-tensorflow",
                str(newest),
                _tf_generation(oldest),
                tf_range,
            )
    return None


_CODE_EVIDENCE = re.compile(r"\S+:\d+ ")  # "utils.py:21 uses torch._six, which torch 2.0 removed"


def is_code_evidence(where: str) -> bool:
    """Whether a requirement's ``where`` is the code's own version evidence (``path:line what``)."""
    return bool(_CODE_EVIDENCE.match(where))


def is_image(where: str) -> bool:
    """Whether a requirement's ``where`` is a container image ("<image> in Dockerfile"), not a pin file or code."""
    return " in " in where and not is_code_evidence(where)


def _pinned_in(where: str) -> bool:
    """Whether ``where`` names a pin file alone (cited as "<file> pins <requirement>"): not an image, not the code's
    own evidence, not several sources together (each already cited)."""
    return not is_image(where) and not is_code_evidence(where) and " pins " not in where


def consistent(found: list[tuple[Requirement, str]], family: str) -> list[tuple[Requirement, str]]:
    """A folder's requirements on one framework, intersected; where they admit no version together (an image and a
    pin that contradict each other), what the Dockerfiles say (the image is what runs), else the first source's."""
    from packaging.specifiers import SpecifierSet

    mine = [(r, w) for r, w in found if family_of(r.name) == family]
    together = SpecifierSet()
    for req, _ in mine:
        together &= req.specifier
    if len(mine) < 2 or _admitted(Requirement(family, together, family), family):
        return mine
    images = [(r, w) for r, w in mine if is_image(w)]
    return images or [(r, w) for r, w in mine if w == mine[0][1]]


def _tf_generation(version: Version) -> int:
    from packaging.version import Version

    return 0 if version < Version("2") else 1 if version < Version("2.4") else 2 if version < Version("2.16") else 3


def _version_range(name: str, oldest: Version, newest: Version, open_above: bool) -> str:
    """``TF 2.4``, ``TF 2.6-2.15``, ``TF >= 2.6``: minor versions, as release notes name them."""
    low, high = f"{oldest.major}.{oldest.minor}", f"{newest.major}.{newest.minor}"
    return f"{name} >= {low}" if open_above else f"{name} {low}" if low == high else f"{name} {low}-{high}"


def _evidence(req: Requirement, where: str, admits: str = "") -> str:
    """``requirements.txt pins tensorflow==2.8.0``; an image: ``nvcr.io/nvidia/tensorflow:21.02-tf2-py3 in Dockerfile: TF 2.4``."""
    if not _pinned_in(where) and admits:
        return f"{where}: {admits}"
    return f"{where} pins {req}"


def _folder_requirements(folder: Path, root: Path, parsed: dict | None = None) -> list[tuple[Requirement, str]]:
    """The requirements on TensorFlow/Keras the folder's pin sources state together (intersected), else those of the
    first README that documents a version; each with where it lies (relative to ``root``)."""

    def where_of(name: str) -> str:
        image, _, file = name.rpartition(" in ")  # "<image> in Dockerfile": the file is what lies in the folder
        path = folder / file  # an absolute file (a Dockerfile above that installs the folder) stays itself
        where = path.relative_to(root).as_posix() if path.is_relative_to(root) else os.path.relpath(path, root)
        return f"{image} in {where}" if image else where

    pins = [(r, where_of(name)) for name, reqs in pin_sources(folder, parsed, root) for r in reqs]
    pins = [item for family in ("tf-keras", "keras", "tensorflow") for item in consistent(pins, family)]
    if _generation_of(pins) is not None:
        return pins
    for name, reqs in documented_sources(folder, parsed):
        documented = [(r, where_of(name)) for r in reqs]
        if _generation_of(documented) is not None:
            return documented
    return []


def with_code_bounds(
    found: list[tuple[Requirement, str]], bounds: Iterable[tuple[str, str, str]]
) -> list[tuple[Requirement, str]]:
    """``found`` and the code's own version evidence ((package, specifier, where)) on one family, intersected where
    they agree; where they contradict each other the pins stand (``consistent`` keeps the first source)."""
    code = [
        (req, where) for package, spec, where in bounds if (req := parse_requirement(f"{package}{spec}")) is not None
    ]
    code = [item for item in code if _narrows(found, item)]
    if not code:
        return found
    families = {family_of(r.name) for r, _ in code}
    kept = [item for item in found if family_of(item[0].name) not in families]
    return kept + [item for family in sorted(families) for item in consistent(found + code, family)]


def _narrows(found: list[tuple[Requirement, str]], bound: tuple[Requirement, str]) -> bool:
    """Whether a code bound excludes some version the requirements ``found`` admit (one that does not is no news)."""
    from packaging.specifiers import SpecifierSet

    family = family_of(bound[0].name)
    together = SpecifierSet()
    for req, _ in found:
        if family_of(req.name) == family:
            together &= req.specifier
    before = _admitted(Requirement(family, together, family), family)
    after = _admitted(Requirement(family, together & bound[0].specifier, family), family)
    return before != after


class PinFinder:
    """The pins nearest above a folder, up to the project root; each folder is read once per run."""

    def __init__(self, root: Path):
        self.root = root.resolve()
        self._folders: dict[Path, list[tuple[Requirement, str]]] = {}
        self.parsed: dict[Path, object] = {}  # each pin file's requirements, shared with the torch targets of the run
        self._above: list[tuple[Requirement, str]] | None = None  # ``_documented_above``, once per run

    def requirements_for(self, folder: Path, launched: bool = True) -> list[tuple[Requirement, str]]:
        """The TensorFlow/Keras requirements of the nearest folder at or above ``folder`` that states any; where none
        does, those of a shell script's folder that runs its code (``launched``: ``mplint.project.launchers``)."""
        folder = start = Path(folder).resolve()
        chain = []
        while True:
            if folder in self._folders:
                found = self._folders[folder]
                break
            chain.append(folder)
            found = _folder_requirements(folder, self.root, self.parsed)
            if found or folder == self.root or not folder.is_relative_to(self.root) or folder.parent == folder:
                break
            folder = folder.parent
        for seen in chain:
            self._folders[seen] = found
        if not found and launched:  # the code's folders state nothing: the folders of the scripts that run it
            top = repository_top(self.root) or self.root
            for place in launcher_folders(start, top, self.parsed):
                found = self.requirements_for(place, launched=False)
                if found:
                    break
            if not found:  # a sub-project of a monorepo: what the repository documents above it
                found = self._documented_above(top)
        return found

    def _documented_above(self, top: Path) -> list[tuple[Requirement, str]]:
        """What the folders above the project's root, up to its repository's top, document (README images and
        install lines, ``docker/`` images, a submission's ``systems/*.json``), nearest first: the environment a
        monorepo describes for the sub-projects whose own pins name no TensorFlow."""
        if self._above is None:
            self._above = []
            for above in folders_up_to(self.root.parent, top):
                for name, reqs in documented_sources(above, self.parsed):
                    image, _, file = name.rpartition(" in ")
                    where = os.path.relpath(above / file, self.root)
                    documented = [(r, f"{image} in {where}" if image else where) for r in reqs]
                    if _generation_of(documented) is not None:
                        self._above = documented
                        return documented
        return self._above

    def target_for(self, folder: Path, code: Iterable[tuple[str, str, str]] = ()) -> Generation | None:
        """The target the pins nearest ``folder`` give, intersected with the code's own version evidence."""
        return _generation_of(with_code_bounds(self.requirements_for(folder), code))

    @staticmethod
    def from_code(code: Iterable[tuple[str, str, str]]) -> Generation | None:
        """The target the code's own version evidence gives alone."""
        return _generation_of(with_code_bounds([], code))


def generation_from_pins(root: Path) -> Generation | None:
    """The pins at the project root."""
    return _generation_of(_folder_requirements(root.resolve(), root.resolve()))
