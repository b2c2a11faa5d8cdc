"""The packages a project publishes: what its packaging metadata ships in the distribution.

Modules of a published package run under whatever policy the package's users pick, whatever the
repository's own tool scripts set (see ``programs.module_facts``). Read from pyproject.toml
(setuptools, hatch, poetry and flit tables, else the build tools' default discovery), setup.py
(``packages=`` lists, ``find_packages``/``find_namespace_packages``, ``package_dir``, ``py_modules``)
and setup.cfg. Only the project root's own metadata counts: a folder with its own is another project.
"""

from __future__ import annotations

import ast
import configparser
import fnmatch
import os
import re
from dataclasses import dataclass
from pathlib import Path

# setuptools' flat-layout discovery skips these top-level folders (FlatLayoutPackageFinder.DEFAULT_EXCLUDE)
_NOT_SHIPPED = frozenset(
    {
        "ci",
        "bin",
        "debian",
        "doc",
        "docs",
        "documentation",
        "manpages",
        "news",
        "newsfragments",
        "changelog",
        "test",
        "tests",
        "unit_test",
        "unit_tests",
        "example",
        "examples",
        "scripts",
        "tools",
        "util",
        "utils",
        "python",
        "build",
        "dist",
        "venv",
        "env",
        "requirements",
        "tasks",
        "fabfile",
        "site_scons",
        "benchmark",
        "benchmarks",
        "exercise",
        "exercises",
        "htmlcov",
    }
)


@dataclass(frozen=True)
class Distribution:
    name: str  # the distribution's name ("keras-hub")
    metadata: str  # the file that says what it ships ("pyproject.toml")
    folders: frozenset[str]  # package folders it ships (normalized absolute paths), subpackages included
    modules: frozenset[str] = frozenset()  # single-file modules it ships (``py_modules``)

    def ships(self, path: Path) -> bool:
        key = os.path.normpath(path)
        return os.path.dirname(key) in self.folders or key in self.modules


def published(root: Path) -> Distribution | None:
    """What the packaging metadata at ``root`` ships; None when it has none (or ships nothing found)."""
    for name, reader in (("pyproject.toml", _pyproject), ("setup.py", _setup_py), ("setup.cfg", _setup_cfg)):
        path = root / name
        if path.is_file():
            found = reader(path, root)
            if found is not None and (found.folders or found.modules):
                return found
    return None


def unpacked_wheel(root: Path) -> Distribution | None:
    """An unpacked wheel at ``root``: its ``*.dist-info/RECORD`` lists every file it ships. Its modules are there for
    the package's users (none is dead code); which policy they run under stays the library-context reading's."""
    for record in sorted(root.glob("*.dist-info/RECORD")):
        folders, modules = set(), set()
        for line in record.read_text(encoding="utf-8", errors="replace").splitlines():
            file = line.split(",", 1)[0]
            if not file.endswith(".py") or ".dist-info/" in file or file.startswith(".."):
                continue
            path = os.path.normpath(root / file)
            (folders.add(os.path.dirname(path)) if "/" in file else modules.add(path))
        if folders or modules:
            name = record.parent.name.removesuffix(".dist-info").rsplit("-", 1)[0]
            return Distribution(name, record.relative_to(root).as_posix(), frozenset(folders), frozenset(modules))
    return None


def _normalized(name: str) -> str:
    return re.sub(r"[-_.]+", "_", name).lower()


# --- finding packages --------------------------------------------------------------------


def _package_folders(base: Path, namespaces: bool) -> dict[str, Path]:
    """Dotted name -> folder of every package under ``base`` (folders with an ``__init__.py``, or with
    ``namespaces`` any folder holding Python files below it)."""
    found: dict[str, Path] = {}
    for folder, subdirs, names in os.walk(base):
        here = Path(folder)
        subdirs[:] = sorted(d for d in subdirs if d.isidentifier() and d != "__pycache__")
        if here == base:
            continue
        if "__init__.py" in names or namespaces:
            found[".".join(here.relative_to(base).parts)] = here
        elif not namespaces:
            subdirs[:] = []  # find_packages stops at a folder that is not a package
    return found


def _find(base: Path, include=("*",), exclude=(), namespaces: bool = False) -> set[Path]:
    include, exclude = list(include) or ["*"], list(exclude)
    return {
        folder
        for name, folder in _package_folders(base, namespaces).items()
        if any(fnmatch.fnmatchcase(name, p) for p in include) and not any(fnmatch.fnmatchcase(name, p) for p in exclude)
    }


def _listed(root: Path, packages, package_dir: dict) -> set[Path]:
    """Folders of packages named in a ``packages`` list, through ``package_dir``."""
    out = set()
    for name in packages:
        if not isinstance(name, str):
            continue
        for prefix in sorted(package_dir, key=len, reverse=True):
            if prefix == "" or name == prefix or name.startswith(prefix + "."):
                rest = name[len(prefix) :].lstrip(".")
                base = root / package_dir[prefix]
                out.add(base.joinpath(*rest.split(".")) if rest else base)
                break
        else:
            out.add(root.joinpath(*name.split(".")))
    return {p for p in out if p.is_dir()}


def _tree(folder: Path) -> set[Path]:
    """A folder and its subfolders (hatch and poetry ship whole trees)."""
    found = set()
    for here, subdirs, _ in os.walk(folder):
        subdirs[:] = [d for d in subdirs if d != "__pycache__"]
        found.add(Path(here))
    return found


def _auto(root: Path, name: str) -> set[Path]:
    """The build tools' defaults: the package named like the distribution (hatch, poetry, flit), else
    setuptools' discovery (``src/``, else the top-level packages not in ``_NOT_SHIPPED``)."""
    wanted = _normalized(name) if name else ""
    for base in (root / "src", root):
        if wanted and (base / wanted / "__init__.py").is_file():
            return _find(base, [wanted, f"{wanted}.*"])
    if (root / "src").is_dir():
        return _find(root / "src")
    top = (
        [
            p
            for p in root.iterdir()
            if p.is_dir() and p.name.isidentifier() and p.name not in _NOT_SHIPPED and (p / "__init__.py").is_file()
        ]
        if root.is_dir()
        else []
    )
    return set().union(*(_find(root, [p.name, f"{p.name}.*"]) for p in top))


def _distribution(name: str, metadata: str, folders: set[Path], modules: set[Path] = frozenset()) -> Distribution:
    return Distribution(
        name or "this project",
        metadata,
        frozenset(os.path.normpath(p) for p in folders),
        frozenset(os.path.normpath(p) for p in modules),
    )


# --- readers -----------------------------------------------------------------------------


def _pyproject(path: Path, root: Path) -> Distribution | None:
    try:
        import tomllib
    except ModuleNotFoundError:  # Python < 3.11
        import tomli as tomllib
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError):
        return None
    tool = data.get("tool", {}) if isinstance(data.get("tool"), dict) else {}
    project = data.get("project") if isinstance(data.get("project"), dict) else {}
    poetry = tool.get("poetry") if isinstance(tool.get("poetry"), dict) else {}
    name = str(project.get("name") or poetry.get("name") or "")
    if not (project or poetry or "build-system" in data):
        return None  # a pyproject.toml that only configures tools
    setuptools = tool.get("setuptools") if isinstance(tool.get("setuptools"), dict) else {}
    packages = setuptools.get("packages")
    package_dir = setuptools.get("package-dir") if isinstance(setuptools.get("package-dir"), dict) else {}
    if isinstance(packages, list):
        return _distribution(name, path.name, _listed(root, packages, package_dir))
    if isinstance(packages, dict) and isinstance(packages.get("find"), dict):
        find = packages["find"]
        folders = set()
        for where in find.get("where", ["."]):
            folders |= _find(
                root / where, find.get("include", ["*"]), find.get("exclude", []), find.get("namespaces", True)
            )
        return _distribution(name, path.name, folders)
    wheel = (
        tool.get("hatch", {}).get("build", {}).get("targets", {}).get("wheel", {})
        if isinstance(tool.get("hatch"), dict)
        else {}
    )
    if isinstance(wheel, dict) and isinstance(wheel.get("packages"), list):
        return _distribution(
            name, path.name, set().union(*(_tree(root / p) for p in wheel["packages"] if isinstance(p, str)))
        )
    if isinstance(poetry.get("packages"), list):
        folders = set()
        for entry in poetry["packages"]:
            if isinstance(entry, dict) and isinstance(entry.get("include"), str):
                folders |= _tree(root / str(entry.get("from", ".")) / entry["include"])
        return _distribution(name, path.name, folders)
    flit = tool.get("flit", {}).get("module", {}) if isinstance(tool.get("flit"), dict) else {}
    if isinstance(flit, dict) and isinstance(flit.get("name"), str):
        name = name or flit["name"]
        return _distribution(name, path.name, _auto(root, flit["name"]))
    return _distribution(name, path.name, _auto(root, name))


def _setup_py(path: Path, root: Path) -> Distribution | None:
    """The literal arguments of the ``setup()`` call of a packaging script."""
    try:
        tree = ast.parse(path.read_text(encoding="utf-8", errors="replace"))
    except (SyntaxError, ValueError, OSError):
        return None
    names: dict[str, object] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            value = _literal(node.value, names, root)
            if value is not None:
                names[node.targets[0].id] = value
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and _called(node) == "setup":
            arguments = {kw.arg: kw.value for kw in node.keywords if kw.arg}
            package_dir = _literal(arguments["package_dir"], names, root) if "package_dir" in arguments else {}
            name = _literal(arguments["name"], names, root) if "name" in arguments else ""
            folders: set[Path] = set()
            if "packages" in arguments:
                value = arguments["packages"]
                found = _literal(value, names, root, package_dir if isinstance(package_dir, dict) else {})
                folders = (
                    found
                    if isinstance(found, set)
                    else _listed(root, found or [], package_dir if isinstance(package_dir, dict) else {})
                )
            modules = _literal(arguments["py_modules"], names, root) if "py_modules" in arguments else []
            base = root / package_dir.get("", ".") if isinstance(package_dir, dict) else root
            files = {base / f"{m}.py" for m in modules or [] if isinstance(m, str)}
            return _distribution(
                name if isinstance(name, str) else "", path.name, folders, {f for f in files if f.is_file()}
            )
    return None


def _called(call: ast.Call) -> str:
    func = call.func
    return func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")


def _literal(node: ast.AST, names: dict, root: Path, package_dir: dict | None = None):
    """Strings, lists, dicts, names bound to them, and ``find_packages(...)`` (as a set of folders)."""
    if isinstance(node, ast.Constant):
        return node.value
    if isinstance(node, ast.Name):
        return names.get(node.id)
    if isinstance(node, (ast.List, ast.Tuple)):
        return [_literal(e, names, root) for e in node.elts]
    if isinstance(node, ast.Dict):
        return {
            _literal(k, names, root): _literal(v, names, root) for k, v in zip(node.keys, node.values) if k is not None
        }
    if isinstance(node, ast.Call) and _called(node) in ("find_packages", "find_namespace_packages"):
        args = {kw.arg: _literal(kw.value, names, root) for kw in node.keywords if kw.arg}
        if node.args:
            args.setdefault("where", _literal(node.args[0], names, root))
        where = args.get("where") or (package_dir or {}).get("", ".")
        return _find(
            root / str(where),
            args.get("include") or ["*"],
            args.get("exclude") or [],
            _called(node) == "find_namespace_packages",
        )
    return None


def _setup_cfg(path: Path, root: Path) -> Distribution | None:
    parser = configparser.ConfigParser(interpolation=None)
    try:
        parser.read(path, encoding="utf-8")
    except (configparser.Error, UnicodeDecodeError):
        return None
    if not parser.has_option("options", "packages") and not parser.has_option("options", "py_modules"):
        return None
    name = parser.get("metadata", "name", fallback="")
    package_dir = _cfg_mapping(parser.get("options", "package_dir", fallback=""))
    packages = parser.get("options", "packages", fallback="").strip()
    if packages in ("find:", "find_namespace:"):
        find = parser["options.packages.find"] if parser.has_section("options.packages.find") else {}
        where = find.get("where", package_dir.get("", ".")).strip() or "."
        folders = _find(
            root / where,
            _cfg_list(find.get("include", "")) or ["*"],
            _cfg_list(find.get("exclude", "")),
            packages == "find_namespace:",
        )
    else:
        folders = _listed(root, _cfg_list(packages), package_dir)
    base = root / package_dir.get("", ".")
    modules = {base / f"{m}.py" for m in _cfg_list(parser.get("options", "py_modules", fallback=""))}
    return _distribution(name, path.name, folders, {m for m in modules if m.is_file()})


def _cfg_list(value: str) -> list[str]:
    return [v.strip() for v in re.split(r"[\n,]", value) if v.strip()]


def _cfg_mapping(value: str) -> dict[str, str]:
    out = {}
    for line in _cfg_list(value):
        key, _, target = line.partition("=")
        out[key.strip()] = target.strip()
    return out
