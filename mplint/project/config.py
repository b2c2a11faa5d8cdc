"""Configuration: ``[tool.mplint]`` in pyproject.toml or ``.mplint.yaml``, found upward from the paths.

Unknown keys and bad values are errors that name the key and suggest a
close match. YAML is read with ``yaml.safe_load`` only: a config cannot run code.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from mplint.engine.registry import unknown_selectors
from mplint.knowledge.policies import POLICY_NAMES as POLICIES

YAML_NAMES = (".mplint.yaml", ".mplint.yml")
# What makes a folder a project root: packaging metadata, dependency pins (requirements files, conda
# environments, Pipfiles, Dockerfiles: each names what its programs run on), an mplint config, a repository.
_ROOT_MARKERS = (
    "pyproject.toml",
    "setup.cfg",
    "requirements.txt",
    ".git",
    *YAML_NAMES,
    "environment.yml",
    "environment.yaml",
    "Pipfile",
    "Dockerfile",
)
_ROOT_MARKER_GLOBS = ("requirements*.txt", "*.Dockerfile")


class ConfigError(Exception):
    pass


@dataclass
class Config:
    select: list[str] | None = None
    ignore: list[str] = field(default_factory=list)
    extend_select: list[str] = field(default_factory=list)
    per_file_ignores: dict[str, list[str]] = field(default_factory=dict)
    exclude: list[str] | None = None
    extend_exclude: list[str] = field(default_factory=list)
    respect_gitignore: bool = True
    force_exclude: bool = False  # the excludes apply to paths given explicitly too
    keras: int | None = None
    target: str | None = None  # tf1 | tf2.3 | keras2 | keras3
    policy: str | None = None
    unsafe_fixes: bool = False
    docs_url: str | None = None  # base of the rule pages' URLs ({docs-url}/rules/MP101.md)
    source: Path | None = None  # the file it came from
    root: Path = field(default_factory=Path.cwd)  # project root: config dir, else nearest marker


def _str_list(key: str, value, where: str) -> list[str]:
    if isinstance(value, str) or not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ConfigError(f"{where}: '{key}' must be a list of strings, got {value!r}")
    return list(value)


def _rules(key: str, value, where: str) -> list[str]:
    values = _str_list(key, value, where)
    bad = unknown_selectors(values)
    if bad:
        from mplint.catalog import load_catalog

        known = [m.id for m in load_catalog().values()] + [m.name for m in load_catalog().values()]
        hint = _close_matches(bad[0], known, n=1)
        raise ConfigError(
            f"{where}: '{key}' names unknown rule {bad[0]!r}" + (f" (did you mean {hint[0]!r}?)" if hint else "")
        )
    return values


def _bool(key: str, value, where: str) -> bool:
    if not isinstance(value, bool):
        raise ConfigError(f"{where}: '{key}' must be true or false, got {value!r}")
    return value


def _keras(key: str, value, where: str) -> int:
    if value not in (2, 3) or isinstance(value, bool):
        if isinstance(value, str) and value.strip() in ("2", "3"):
            return int(value)
        raise ConfigError(f"{where}: '{key}' must be 2 or 3, got {value!r}")
    return value


def _target(key: str, value, where: str) -> str:
    from mplint.project.generation import TARGETS

    if value not in TARGETS:
        raise ConfigError(f"{where}: '{key}' must be one of {', '.join(TARGETS)}, got {value!r}")
    return value


def _policy(key: str, value, where: str) -> str:
    if value not in POLICIES:
        hint = _close_matches(str(value), POLICIES, n=1)
        raise ConfigError(
            f"{where}: '{key}' must be one of {', '.join(POLICIES)}, got {value!r}"
            + (f" (did you mean {hint[0]!r}?)" if hint else "")
        )
    return value


def _url(key: str, value, where: str) -> str:
    from urllib.parse import urlsplit

    if not isinstance(value, str) or urlsplit(value).scheme not in ("http", "https", "file"):
        raise ConfigError(f"{where}: '{key}' must be an http(s):// or file:// URL, got {value!r}")
    return value


def _per_file(key: str, value, where: str) -> dict[str, list[str]]:
    if not isinstance(value, dict):
        raise ConfigError(f"{where}: '{key}' must be a table of glob = [rules], got {value!r}")
    return {str(glob): _rules(f"{key}.{glob}", rules, where) for glob, rules in value.items()}


_KEYS = {
    "select": ("select", _rules),
    "ignore": ("ignore", _rules),
    "extend-select": ("extend_select", _rules),
    "per-file-ignores": ("per_file_ignores", _per_file),
    "exclude": ("exclude", _str_list),
    "extend-exclude": ("extend_exclude", _str_list),
    "respect-gitignore": ("respect_gitignore", _bool),
    "force-exclude": ("force_exclude", _bool),
    "keras": ("keras", _keras),
    "target": ("target", _target),
    "policy": ("policy", _policy),
    "unsafe-fixes": ("unsafe_fixes", _bool),
    "docs-url": ("docs_url", _url),
}


def parse_config(data, where: str, root: Path) -> Config:
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ConfigError(f"{where}: the mplint config must be a table of settings, got {type(data).__name__}")
    config = Config(source=Path(where), root=root)
    for key, value in data.items():
        if key not in _KEYS and key.replace("_", "-") in _KEYS:
            key = key.replace("_", "-")
        if key not in _KEYS:
            hint = _close_matches(str(key), list(_KEYS), n=1)
            raise ConfigError(f"{where}: unknown setting {key!r}" + (f" (did you mean {hint[0]!r}?)" if hint else ""))
        attr, check = _KEYS[key]
        setattr(config, attr, check(key, value, where))
    return config


def load_file(path: Path) -> Config:
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{path}: cannot read config: {exc}") from exc
    if path.name == "pyproject.toml":
        tomllib = _toml()
        try:
            data = tomllib.loads(text)
        except tomllib.TOMLDecodeError as exc:
            raise ConfigError(f"{path}: invalid TOML: {exc}") from exc
        return parse_config(data.get("tool", {}).get("mplint"), str(path), path.parent)
    try:
        import yaml  # only a project with a .mplint.yaml pays for the YAML parser

        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path}: invalid YAML (only plain YAML is accepted): {exc}") from exc
    return parse_config(data, str(path), path.parent)


def _close_matches(word: str, candidates, n: int = 1) -> list[str]:
    import difflib  # only a bad configuration needs suggestions

    return difflib.get_close_matches(word, candidates, n=n)


def _toml():
    """The TOML parser, imported only for a project that has a pyproject.toml."""
    try:
        import tomllib
    except ModuleNotFoundError:  # Python < 3.11
        import tomli as tomllib
    return tomllib


def _has_tool_section(pyproject: Path) -> bool:
    try:
        text = pyproject.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return False
    tomllib = _toml()
    try:
        return "mplint" in tomllib.loads(text).get("tool", {})
    except tomllib.TOMLDecodeError:
        return "tool.mplint" in text  # broken, but meant for us: load_file reports the TOML error


def find_config(start: Path) -> Path | None:
    start = start.resolve()
    for folder in [start, *start.parents] if start.is_dir() else list(start.parents):
        for name in YAML_NAMES:
            if (folder / name).is_file():
                return folder / name
        if (folder / "pyproject.toml").is_file() and _has_tool_section(folder / "pyproject.toml"):
            return folder / "pyproject.toml"
    return None


def is_marked(folder: Path) -> bool:
    """Whether ``folder`` holds a project marker (pyproject.toml, .git, pins, a packaging ``setup.py``, ...)."""
    return (
        any((folder / marker).exists() for marker in _ROOT_MARKERS)
        or any(next(folder.glob(pattern), None) is not None for pattern in _ROOT_MARKER_GLOBS)
        or is_packaging_script(folder / "setup.py")
    )


# setuptools' or distutils' setup() called: ``from setuptools import setup`` ... ``setup(``, ``setuptools.setup(``
_SETUP_IMPORT = re.compile(
    r"^\s*(?:from\s+(?:setuptools|distutils)[\w.]*\s+import|import\s+(?:setuptools|distutils))", re.M
)
_SETUP_CALL = re.compile(r"(?:^|[^\w.])(?:setuptools\.|distutils\.core\.)?setup\s*\(", re.M)


def is_packaging_script(path: Path) -> bool:
    """A ``setup.py`` that packages the folder: it imports setuptools or distutils and calls ``setup(``. A runtime
    module that happens to be named ``setup.py`` (``utils/setup.py``, an experiment's setup helper) is not one."""
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return False
    return bool(_SETUP_IMPORT.search(text) and _SETUP_CALL.search(text))


def marked_root(start: Path) -> Path | None:
    """The nearest folder at or above ``start`` with a project marker (``is_marked``)."""
    start = start.resolve()
    for folder in [start, *start.parents] if start.is_dir() else list(start.parents):
        if is_marked(folder):
            return folder
    return None


def project_root(start: Path) -> Path:
    """``marked_root``, else the folder itself: an unmarked tree is one project."""
    found = marked_root(start)
    if found is not None:
        return found
    start = start.resolve()
    return start if start.is_dir() else start.parent


def load_config(paths: list[Path], explicit: Path | None = None) -> Config:
    start = paths[0] if paths else Path.cwd()
    found = explicit or find_config(start)
    if found is None:
        return Config(root=project_root(start))
    if not found.is_file():
        raise ConfigError(f"{found}: config file not found")
    return load_file(found)
