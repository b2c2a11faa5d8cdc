"""What dependency manifests say about the frameworks a folder runs: requirements files (``-r`` includes, ``-c``
constraints) read with ``packaging``, PEP 621 and Poetry tables with ``tomllib``, the ``install_requires`` of the
project's own packaging script (a ``setup()`` call, evaluated for constants, names and ``+``), setup.cfg, conda
environment files, Pipfiles, and the ``Requires-Dist`` of an unpacked distribution's PKG-INFO/METADATA. Parsing
only: which of them governs a program is ``mplint.project.pins``'s."""

from __future__ import annotations

import ast
import configparser
import re
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING

from mplint.knowledge.trainer_versions import STACKS, stack_of

if TYPE_CHECKING:  # packaging is imported when a pin file is read: most warm runs read none
    from packaging.specifiers import SpecifierSet
    from packaging.version import Version

TF_PACKAGES = {
    "tensorflow",
    "tensorflow-cpu",
    "tensorflow-gpu",
    "tensorflow-macos",
    "tf-nightly",
    "tf-nightly-gpu",
    "tf-nightly-cpu",
    "tensorflow-intel",
    "intel-tensorflow",
    "tensorflow-aarch64",
}


@cache
def sample_versions(package: str) -> tuple[Version, ...]:
    """Versions a specifier is tested against (plus the versions it names itself)."""
    from packaging.version import Version

    if package == "keras":
        return tuple(Version(v) for v in ("2.4.0", "2.15.0", "3.0.0", "3.20.0", "4.0.0"))
    if (stack := stack_of(package)) is not None:  # a trainer stack: its minor releases
        return tuple(Version(v) for v in STACKS[stack].samples)
    return tuple(Version(f"2.{minor}.0") for minor in range(0, 40))  # TF1 only where a pin names it


@cache
def torch_samples() -> tuple[Version, ...]:
    """Versions a torch specifier is tested against (plus the versions it names itself)."""
    from packaging.version import Version

    return tuple(Version(v) for v in [*(f"1.{m}.0" for m in range(14)), *(f"2.{m}.0" for m in range(31))])


# --- readers, one per kind of file ------------------------------------------------------------


def read_text(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return ""


@dataclass(frozen=True)
class Requirement:
    """What the pins read of a PEP 508 requirement: the project's name as written, its version specifier and
    how the requirement reads (packaging's ``str(Requirement)``: extras and markers included)."""

    name: str
    specifier: SpecifierSet
    shown: str

    def __str__(self) -> str:
        return self.shown


def parse_requirement(spec: str) -> Requirement | None:
    return _parsed_requirement(spec.strip())


# A name and version clauses, nothing else: most lines of pin files. Such a line is read with packaging's
# SpecifierSet alone; any other goes through its whole PEP 508 parser, whose import compiles its tokenizer's
# patterns (about 20 ms, a tenth of an editor's first diagnostics). tests/test_targets.py holds both to the same
# answers.
_PLAIN = re.compile(
    r"([A-Za-z0-9](?:[A-Za-z0-9._-]*[A-Za-z0-9])?)\s*"
    r"((?:===|~=|==|!=|<=|>=|<|>)\s*[A-Za-z0-9_.*+!-]+(?:\s*,\s*(?:===|~=|==|!=|<=|>=|<|>)\s*[A-Za-z0-9_.*+!-]+)*)?"
)


@cache
def _parsed_requirement(spec: str) -> Requirement | None:
    """One parse per distinct string: a project's pin files repeat the same lines (``-r`` includes, a
    requirements file per sub-project)."""
    from packaging.specifiers import InvalidSpecifier, SpecifierSet

    plain = _PLAIN.fullmatch(spec)
    if plain is not None:
        try:
            specifier = SpecifierSet(plain.group(2) or "")
        except InvalidSpecifier:
            return None  # as packaging's parser answers such a line
        return Requirement(plain.group(1), specifier, f"{plain.group(1)}{specifier}")
    from packaging.requirements import InvalidRequirement
    from packaging.requirements import Requirement as Parsed

    try:
        parsed = Parsed(spec)
    except InvalidRequirement:
        return None
    return Requirement(parsed.name, parsed.specifier, str(parsed))


def requirements_file(path: Path, seen: set[Path] | None = None) -> list[Requirement]:
    """A pip requirements file with its ``-r`` includes and ``-c`` constraints."""
    seen = seen if seen is not None else set()
    if path in seen or not path.is_file():
        return []
    seen.add(path)
    found: list[Requirement] = []
    text = read_text(path).replace("\\\n", " ")
    for raw in text.splitlines():
        line = re.split(r"\s+#", raw, maxsplit=1)[0].strip()
        if not line or line.startswith("#"):
            continue
        include = re.match(r"^(?:-r|--requirement|-c|--constraint)[\s=]+(\S+)", line)
        if include:
            found += requirements_file(path.parent / include.group(1), seen)
            continue
        if line.startswith("-"):
            continue  # -e, --index-url, -f ...
        line = re.split(r"\s+--", line, maxsplit=1)[0]  # --hash=... options
        req = parse_requirement(line)
        if req is not None:
            found.append(req)
    return found


def toml_table(path: Path) -> dict:
    try:
        import tomllib
    except ModuleNotFoundError:  # Python < 3.11
        import tomli as tomllib
    try:
        return tomllib.loads(read_text(path))
    except Exception:
        return {}


def _pyproject(path: Path) -> list[Requirement]:
    data = toml_table(path)
    project = data.get("project", {})
    specs = list(project.get("dependencies", []))
    for name, extra in project.get("optional-dependencies", {}).items():
        if not is_development_extra(name):
            specs.extend(extra)
    poetry = data.get("tool", {}).get("poetry", {})
    tables = [poetry.get("dependencies", {}), poetry.get("dev-dependencies", {})]
    tables += [group.get("dependencies", {}) for group in poetry.get("group", {}).values()]
    for table in tables:
        for name, spec in table.items():
            specs.append(f"{name}{_loose_spec(spec)}")
    return [r for r in map(parse_requirement, specs) if r is not None]


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
    data = toml_table(path)
    specs = [
        f"{name}{_loose_spec(spec)}"
        for table in ("packages", "dev-packages")
        for name, spec in data.get(table, {}).items()
    ]
    return [r for r in map(parse_requirement, specs) if r is not None]


# Extras that pin the maintainers' own tools (``dev``, ``test``, ``docs``): often a frozen, older environment than the
# one users install the package into, so they bound no framework range.
_DEVELOPMENT_EXTRA = re.compile(r"(?i)^(?:dev|devel|develop|development|test|tests|testing|doc|docs|lint|ci)$")


def is_development_extra(name: str) -> bool:
    return bool(_DEVELOPMENT_EXTRA.match(name.strip()))


def _setup_cfg(path: Path) -> list[Requirement]:
    parser = configparser.ConfigParser()
    try:
        parser.read_string(read_text(path))
    except configparser.Error:
        return []
    specs = parser.get("options", "install_requires", fallback="").splitlines()
    if parser.has_section("options.extras_require"):
        for name, value in parser.items("options.extras_require"):
            if not is_development_extra(name):
                specs += value.splitlines()
    return [r for r in map(parse_requirement, (s for s in specs if s.strip())) if r is not None]


def _conda(path: Path) -> list[Requirement]:
    import yaml

    try:
        data = yaml.safe_load(read_text(path)) or {}
    except yaml.YAMLError:
        return []
    specs: list[str] = []
    for item in data.get("dependencies", []) if isinstance(data, dict) else []:
        if isinstance(item, str):  # conda: name=2.8 or name=2.8.* or name>=2.8
            specs.append(conda_spec(item))
        elif isinstance(item, dict):
            specs += [s for s in item.get("pip", []) if isinstance(s, str)]
    out = []
    for spec in specs:
        req = parse_requirement(spec if not re.search(r"==[\d.]+$", spec) or spec.count(".") > 1 else spec + ".*")
        if req is not None:
            out.append(req)
    return out


def conda_spec(item: str) -> str:
    """A conda package spec as a pip one: ``pytorch=1.10`` -> ``torch==1.10`` (conda's PyTorch package is
    ``pytorch``), ``tensorflow-gpu=2.4.1`` -> ``tensorflow-gpu==2.4.1``."""
    spec = re.sub(r"^([\w.-]+)=(?!=)", r"\1==", item.split("::")[-1]).replace(" ", "")
    return re.sub(r"^pytorch(?=[=<>!~]|$)", "torch", spec)


def _setup_py(path: Path) -> list[Requirement]:
    """``install_requires``/``extras_require`` of a packaging script: a module that calls ``setup()``."""
    try:
        tree = ast.parse(read_text(path))
    except (SyntaxError, ValueError):
        return []
    names: dict[str, object] = {}
    calls = []
    for stmt in _top_statements(tree.body):
        if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name):
            value = _evaluate(stmt.value, names)
            if value is not None:
                names[stmt.targets[0].id] = value
        elif isinstance(stmt, ast.AugAssign) and isinstance(stmt.op, ast.Add) and isinstance(stmt.target, ast.Name):
            value = _evaluate(ast.BinOp(ast.Name(stmt.target.id), ast.Add(), stmt.value), names)
            if value is not None:  # reqs += [...]
                names[stmt.target.id] = value
        elif isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Subscript):
            container, key = _evaluate(stmt.targets[0].value, names), _evaluate(stmt.targets[0].slice, names)
            if isinstance(container, dict) and isinstance(key, str):  # requirements["gpu"] = [...]
                container[key] = _evaluate(stmt.value, names)
        elif isinstance(stmt, ast.Expr) and _list_growth(stmt.value, names):
            continue
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
                specs += [
                    v
                    for name, extra in value.items()
                    if isinstance(extra, list) and not is_development_extra(str(name))
                    for v in extra
                    if isinstance(v, str)
                ]
    return [r for r in map(parse_requirement, specs) if r is not None]


def _list_growth(call: ast.expr, names: dict) -> bool:
    """``reqs.append("x")`` / ``reqs.extend([...])`` on a list bound by name: applied to it."""
    if not (
        isinstance(call, ast.Call)
        and isinstance(call.func, ast.Attribute)
        and isinstance(call.func.value, ast.Name)
        and isinstance(names.get(call.func.value.id), list)
        and len(call.args) == 1
    ):
        return False
    value = _evaluate(call.args[0], names)
    if call.func.attr == "append" and isinstance(value, str):
        names[call.func.value.id] = [*names[call.func.value.id], value]
    elif call.func.attr == "extend" and isinstance(value, list):
        names[call.func.value.id] = [*names[call.func.value.id], *value]
    return True


def _top_statements(body: list[ast.stmt]):
    """Statements in order, through the blocks packaging scripts wrap ``setup()`` in: ``if __name__ == ...``,
    ``try``/``with``, and the script's own functions (``def do_setup(): setup(...)``)."""
    for stmt in body:
        yield stmt
        if isinstance(stmt, (ast.If, ast.With, ast.FunctionDef)):
            yield from _top_statements(stmt.body)
        elif isinstance(stmt, ast.Try):
            yield from _top_statements([*stmt.body, *stmt.orelse, *stmt.finalbody])


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
        return {
            k: _evaluate(v, names)
            for k, v in zip((_evaluate(k, names) for k in node.keys), node.values)
            if k is not None
        }
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        left, right = _evaluate(node.left, names), _evaluate(node.right, names)
        if isinstance(left, str) and isinstance(right, str) or isinstance(left, list) and isinstance(right, list):
            return left + right
    if isinstance(node, ast.Subscript):  # requirements["install"], EXTRAS["tf"][0]
        container, key = _evaluate(node.value, names), _evaluate(node.slice, names)
        if isinstance(container, dict) and isinstance(key, str):
            return container.get(key)
        if isinstance(container, list) and isinstance(node.slice, ast.Constant) and isinstance(node.slice.value, int):
            return container[node.slice.value] if -len(container) <= node.slice.value < len(container) else None
        return None
    if (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Name)
        and node.func.id in ("dict", "list")
        and not node.args
    ):
        return {kw.arg: _evaluate(kw.value, names) for kw in node.keywords if kw.arg} if node.func.id == "dict" else []
    if isinstance(node, ast.JoinedStr):
        parts = [_evaluate(v.value if isinstance(v, ast.FormattedValue) else v, names) for v in node.values]
        return "".join(parts) if all(isinstance(p, str) for p in parts) else None
    return None


def family_of(name: str) -> str:
    name = name.lower().replace("_", "-")
    return "tensorflow" if name in TF_PACKAGES else name


def metadata_requirements(path: Path) -> list[Requirement]:
    """``Requires-Dist`` of a distribution's PKG-INFO or METADATA (an email-header file)."""
    from email.parser import HeaderParser

    headers = HeaderParser().parsestr(read_text(path))
    return [r for r in map(parse_requirement, headers.get_all("Requires-Dist") or []) if r is not None]


READERS = (
    ("pyproject.toml", _pyproject),
    ("setup.py", _setup_py),
    ("setup.cfg", _setup_cfg),
    ("environment.yml", _conda),
    ("environment.yaml", _conda),
    ("Pipfile", _pipfile),
)


def requirement_files(folder: Path) -> list[Path]:
    return sorted(folder.glob("requirements*.txt")) + sorted(folder.glob("requirements/*.txt"))


def metadata_files(folder: Path) -> list[Path]:
    """An unpacked sdist's PKG-INFO, an unpacked wheel's ``*.dist-info/METADATA``, an ``*.egg-info/PKG-INFO``."""
    found = [folder / "PKG-INFO"] if (folder / "PKG-INFO").is_file() else []
    return found + sorted(
        p for pattern in ("*.dist-info/METADATA", "*.egg-info/PKG-INFO") for p in folder.glob(pattern)
    )


# --- from requirements to a target ----------------------------------------------------------


def allowed_versions(req: Requirement, samples: tuple[Version, ...]) -> list[Version]:
    from packaging.specifiers import InvalidSpecifier
    from packaging.version import InvalidVersion, Version

    mentioned = []
    for spec in req.specifier:
        try:
            mentioned.append(Version(spec.version.replace(".*", ".0")))
        except (InvalidVersion, InvalidSpecifier):
            continue
    return [v for v in (*samples, *mentioned) if req.specifier.contains(v, prereleases=True)]
