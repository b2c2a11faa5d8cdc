"""The target TensorFlow/Keras of a program, read from the nearest dependency pins above it.

Every source is read with a real parser: requirements files (``-r`` includes, ``-c``
constraints) with ``packaging``, PEP 621 and Poetry tables with ``tomllib``, the
``install_requires`` of the project's own packaging script (a ``setup()`` call, evaluated for
constants, names and ``+``), setup.cfg, conda environment files, Pipfiles, and the ``FROM``
image of a Dockerfile (NGC ``YY.MM-tf1/tf2`` tags and official ``tensorflow/tensorflow:X.Y``).
"""

from __future__ import annotations

import ast
import configparser
import re
from dataclasses import dataclass
from pathlib import Path
from functools import cache
from typing import TYPE_CHECKING, Iterable

from mplint.project.generation import Generation

if TYPE_CHECKING:  # packaging is imported when a pin file is read: most warm runs read none
    from packaging.requirements import Requirement
    from packaging.version import Version

_TF_PACKAGES = {"tensorflow", "tensorflow-cpu", "tensorflow-gpu", "tensorflow-macos", "tf-nightly", "tensorflow-intel",
                "intel-tensorflow", "tensorflow-aarch64"}


@cache
def _samples(package: str) -> tuple[Version, ...]:
    """Versions a specifier is tested against (plus the versions it names itself)."""
    from packaging.version import Version

    if package == "keras":
        return tuple(Version(v) for v in ("2.4.0", "2.15.0", "3.0.0", "3.20.0", "4.0.0"))
    return (Version("1.15.0"), *(Version(f"2.{minor}.0") for minor in range(0, 40)))

# NVIDIA's TensorFlow containers (Frameworks Support Matrix): release YY.MM of the tf2 flavour -> TensorFlow.
# The tf1 flavour always ships TensorFlow 1.15.
_NGC_TF2 = [
    ((19, 10), "2.0.0"), ((20, 1), "2.1.0"), ((20, 6), "2.2.0"), ((20, 10), "2.3.1"), ((21, 2), "2.4.0"),
    ((21, 6), "2.5.0"), ((21, 9), "2.6.0"), ((21, 12), "2.7.0"), ((22, 3), "2.8.0"), ((22, 6), "2.9.1"),
    ((22, 10), "2.10.0"), ((23, 1), "2.11.0"), ((23, 4), "2.12.0"), ((23, 7), "2.13.0"), ((23, 11), "2.14.0"),
    ((24, 2), "2.15.0"), ((24, 7), "2.16.1"), ((25, 1), "2.17.0"),
]
_DOCKERFILE = re.compile(r"^(?:Dockerfile(?:[.-].*)?|.*\.[Dd]ockerfile)$")
_FROM = re.compile(r"^\s*FROM\s+(?:--platform=\S+\s+)?(\S+)", re.M | re.I)


@dataclass(frozen=True)
class Pinned:
    """One requirement on TensorFlow, Keras or tf-keras, and the file that states it."""

    requirement: Requirement
    where: str  # file name, relative to the project root


# --- readers, one per kind of file ------------------------------------------------------------


def _read(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return ""


def _requirement(spec: str) -> Requirement | None:
    from packaging.requirements import InvalidRequirement, Requirement

    try:
        return Requirement(spec.strip())
    except InvalidRequirement:
        return None


def _requirements_file(path: Path, seen: set[Path] | None = None) -> list[Requirement]:
    """A pip requirements file with its ``-r`` includes and ``-c`` constraints."""
    seen = seen if seen is not None else set()
    if path in seen or not path.is_file():
        return []
    seen.add(path)
    found: list[Requirement] = []
    text = _read(path).replace("\\\n", " ")
    for raw in text.splitlines():
        line = re.split(r"\s+#", raw, maxsplit=1)[0].strip()
        if not line or line.startswith("#"):
            continue
        include = re.match(r"^(?:-r|--requirement|-c|--constraint)[\s=]+(\S+)", line)
        if include:
            found += _requirements_file(path.parent / include.group(1), seen)
            continue
        if line.startswith("-"):
            continue  # -e, --index-url, -f ...
        line = re.split(r"\s+--", line, maxsplit=1)[0]  # --hash=... options
        req = _requirement(line)
        if req is not None:
            found.append(req)
    return found


def _toml(path: Path) -> dict:
    try:
        import tomllib
    except ModuleNotFoundError:  # Python < 3.11
        import tomli as tomllib
    try:
        return tomllib.loads(_read(path))
    except Exception:
        return {}


def _pyproject(path: Path) -> list[Requirement]:
    data = _toml(path)
    project = data.get("project", {})
    specs = list(project.get("dependencies", []))
    for extra in project.get("optional-dependencies", {}).values():
        specs.extend(extra)
    poetry = data.get("tool", {}).get("poetry", {})
    tables = [poetry.get("dependencies", {}), poetry.get("dev-dependencies", {})]
    tables += [group.get("dependencies", {}) for group in poetry.get("group", {}).values()]
    for table in tables:
        for name, spec in table.items():
            specs.append(f"{name}{_loose_spec(spec)}")
    return [r for r in map(_requirement, specs) if r is not None]


def _loose_spec(spec) -> str:
    """Poetry's and Pipenv's version strings (``^2.13``, ``~2.13``, ``*``, ``{version = ...}``) as PEP 440."""
    version = spec if isinstance(spec, str) else spec.get("version", "") if isinstance(spec, dict) else ""
    version = version.strip()
    from packaging.version import InvalidVersion, Version

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


def _pipfile(path: Path) -> list[Requirement]:
    data = _toml(path)
    specs = [f"{name}{_loose_spec(spec)}" for table in ("packages", "dev-packages") for name, spec in data.get(table, {}).items()]
    return [r for r in map(_requirement, specs) if r is not None]


def _setup_cfg(path: Path) -> list[Requirement]:
    parser = configparser.ConfigParser()
    try:
        parser.read_string(_read(path))
    except configparser.Error:
        return []
    specs = parser.get("options", "install_requires", fallback="").splitlines()
    if parser.has_section("options.extras_require"):
        for _, value in parser.items("options.extras_require"):
            specs += value.splitlines()
    return [r for r in map(_requirement, (s for s in specs if s.strip())) if r is not None]


def _conda(path: Path) -> list[Requirement]:
    import yaml

    try:
        data = yaml.safe_load(_read(path)) or {}
    except yaml.YAMLError:
        return []
    specs: list[str] = []
    for item in data.get("dependencies", []) if isinstance(data, dict) else []:
        if isinstance(item, str):  # conda: name=2.8 or name=2.8.* or name>=2.8
            specs.append(re.sub(r"^([\w.-]+)=(?!=)", r"\1==", item.split("::")[-1]).replace(" ", ""))
        elif isinstance(item, dict):
            specs += [s for s in item.get("pip", []) if isinstance(s, str)]
    out = []
    for spec in specs:
        req = _requirement(spec if not re.search(r"==[\d.]+$", spec) or spec.count(".") > 1 else spec + ".*")
        if req is not None:
            out.append(req)
    return out


def _setup_py(path: Path) -> list[Requirement]:
    """``install_requires``/``extras_require`` of a packaging script: a module that calls ``setup()``."""
    try:
        tree = ast.parse(_read(path))
    except (SyntaxError, ValueError):
        return []
    names: dict[str, object] = {}
    calls = []
    for stmt in _top_statements(tree.body):
        if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name):
            value = _evaluate(stmt.value, names)
            if value is not None:
                names[stmt.targets[0].id] = value
        elif isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Call):
            func = stmt.value.func
            if (func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")) == "setup":
                calls.append(stmt.value)
    specs: list[str] = []
    for call in calls:
        for kw in call.keywords:
            value = _evaluate(kw.value, names)
            if kw.arg in ("install_requires", "requires") and isinstance(value, list):
                specs += [v for v in value if isinstance(v, str)]
            elif kw.arg == "extras_require" and isinstance(value, dict):
                specs += [v for extra in value.values() if isinstance(extra, list) for v in extra if isinstance(v, str)]
    return [r for r in map(_requirement, specs) if r is not None]


def _top_statements(body: list[ast.stmt]):
    for stmt in body:
        yield stmt
        if isinstance(stmt, ast.If):  # if __name__ == "__main__": setup(...)
            yield from _top_statements(stmt.body)


def _evaluate(node: ast.AST, names: dict):
    """Constants, names bound to constants, lists, dicts and ``+`` of them; None when unknown."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.Name):
        return names.get(node.id)
    if isinstance(node, (ast.List, ast.Tuple)):
        items = [_evaluate(e, names) for e in node.elts]
        return [i for i in items if i is not None]
    if isinstance(node, ast.Dict):
        return {k: _evaluate(v, names) for k, v in zip((_evaluate(k, names) for k in node.keys), node.values) if k is not None}
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        left, right = _evaluate(node.left, names), _evaluate(node.right, names)
        if isinstance(left, str) and isinstance(right, str) or isinstance(left, list) and isinstance(right, list):
            return left + right
    if isinstance(node, ast.JoinedStr):
        parts = [_evaluate(v.value if isinstance(v, ast.FormattedValue) else v, names) for v in node.values]
        return "".join(parts) if all(isinstance(p, str) for p in parts) else None
    return None


def _image_requirement(image: str) -> Requirement | None:
    """The TensorFlow a container image ships, as a requirement (``tensorflow==2.8.*``)."""
    name, _, tag = image.partition(":")
    if name.endswith("nvidia/tensorflow"):
        m = re.match(r"(\d{2})\.(\d{2})-tf([12])", tag)
        if not m:
            return None
        if m.group(3) == "1":
            return _requirement("tensorflow==1.15.*")
        release = (int(m.group(1)), int(m.group(2)))
        shipped = [version for since, version in _NGC_TF2 if since <= release]
        return _requirement(f"tensorflow=={shipped[-1]}") if shipped else None
    if name in ("tensorflow/tensorflow", "docker.io/tensorflow/tensorflow"):
        m = re.match(r"(\d+\.\d+(?:\.\d+)?)", tag)
        return _requirement(f"tensorflow=={m.group(1)}" if m and m.group(1).count(".") == 2 else
                            f"tensorflow=={m.group(1)}.*" if m else "tensorflow")
    m = re.search(r"/tf2?-(?:gpu|cpu)\.(\d+)-(\d+)", name + ":" + tag) or re.search(r"tf2?-(?:gpu|cpu)\.(\d+)-(\d+)", tag)
    if m:  # Google's deep-learning containers: tf2-gpu.2-8, tf-gpu.1-15
        return _requirement(f"tensorflow=={m.group(1)}.{m.group(2)}.*")
    return None


def pin_sources(folder: Path) -> Iterable[tuple[str, list[Requirement]]]:
    """(file name, requirements) of each pin source in ``folder``, most specific first."""
    for path in sorted(folder.glob("requirements*.txt")) + sorted(folder.glob("requirements/*.txt")):
        yield path.name if path.parent == folder else f"requirements/{path.name}", _requirements_file(path)
    readers = (("pyproject.toml", _pyproject), ("setup.py", _setup_py), ("setup.cfg", _setup_cfg),
               ("environment.yml", _conda), ("environment.yaml", _conda), ("Pipfile", _pipfile))
    for name, reader in readers:
        if (folder / name).is_file():
            yield name, reader(folder / name)
    try:
        dockerfiles = sorted(p for p in folder.iterdir() if p.is_file() and _DOCKERFILE.match(p.name))
    except OSError:
        dockerfiles = []
    for path in dockerfiles:
        images = _FROM.findall(_read(path))
        if images:  # the last stage is the one that runs
            requirement = _image_requirement(images[-1])
            yield f"{path.name} (FROM {images[-1]})", [requirement] if requirement else []


# --- from requirements to a target ----------------------------------------------------------


def _allowed(req: Requirement, samples: tuple[Version, ...]) -> list[Version]:
    from packaging.specifiers import InvalidSpecifier
    from packaging.version import InvalidVersion, Version

    mentioned = []
    for spec in req.specifier:
        try:
            mentioned.append(Version(spec.version.replace(".*", ".0")))
        except (InvalidVersion, InvalidSpecifier):
            continue
    return [v for v in (*samples, *mentioned) if req.specifier.contains(v, prereleases=True)]


def _merged(found: list[tuple[Requirement, str]], names: set[str]) -> tuple[Requirement, str] | None:
    """All requirements on one package (constraints included) as one, and the file of the most specific."""
    matching = [(r, w) for r, w in found if r.name.lower().replace("_", "-") in names]
    if not matching:
        return None
    from packaging.requirements import Requirement
    from packaging.specifiers import SpecifierSet

    specifier = SpecifierSet()
    for req, _ in matching:
        specifier &= req.specifier
    req, where = next(((r, w) for r, w in matching if r.specifier), matching[0])
    return Requirement(f"{req.name}{specifier}"), where


def _generation_of(found: list[tuple[Requirement, str]]) -> Generation | None:
    tf_keras = _merged(found, {"tf-keras"})
    if tf_keras:
        return Generation(2, f"{tf_keras[1]} pins {tf_keras[0]} (legacy Keras 2)", "pin-tf-keras")
    keras = _merged(found, {"keras"})
    if keras:
        allowed = _allowed(keras[0], _samples("keras"))
        if allowed:
            return Generation(3 if max(allowed).major >= 3 else 2, f"{keras[1]} pins {keras[0]}", "pin-keras")
    tf = _merged(found, _TF_PACKAGES)
    if tf:
        allowed = _allowed(tf[0], _samples("tensorflow"))
        if allowed:
            newest = max(allowed)
            from packaging.version import Version

            value = 0 if newest < Version("2") else 1 if newest < Version("2.4") else 2 if newest < Version("2.16") else 3
            return Generation(value, f"{tf[1]} pins {tf[0]}", "pin-tensorflow", str(newest))
    return None


def _folder_generation(folder: Path, root: Path) -> Generation | None:
    for name, reqs in pin_sources(folder):
        where = (folder / name).relative_to(root).as_posix() if folder.is_relative_to(root) else name
        found = _generation_of([(r, where) for r in reqs])
        if found is not None:
            return found
    return None


class PinFinder:
    """The pins nearest above a folder, up to the project root; each folder is read once per run."""

    def __init__(self, root: Path):
        self.root = root.resolve()
        self._folders: dict[Path, Generation | None] = {}

    def target_for(self, folder: Path) -> Generation | None:
        folder = Path(folder).resolve()
        chain = []
        while True:
            if folder in self._folders:
                found = self._folders[folder]
                break
            chain.append(folder)
            found = _folder_generation(folder, self.root)
            if found is not None or folder == self.root or not folder.is_relative_to(self.root) or folder.parent == folder:
                break
            folder = folder.parent
        for seen in chain:
            self._folders[seen] = found
        return found


def generation_from_pins(root: Path) -> Generation | None:
    """The pins at the project root."""
    return _folder_generation(root.resolve(), root.resolve())
