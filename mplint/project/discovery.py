"""Which files to check: walk folders, skip excluded and git-ignored paths."""

from __future__ import annotations

import fnmatch
import functools
import os
import re
import stat
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # pathspec is imported only for patterns that need it (.gitignore files, path globs)
    import pathspec

DEFAULT_EXCLUDE = (
    ".bzr",
    ".direnv",
    ".eggs",
    ".git",
    ".hg",
    ".mypy_cache",
    ".nox",
    ".pants.d",
    ".pytype",
    ".ruff_cache",
    ".svn",
    ".tox",
    ".venv",
    "venv",
    "__pypackages__",
    "_build",
    "buck-out",
    "build",
    "dist",
    "node_modules",
    "site-packages",
    "__pycache__",
    ".ipynb_checkpoints",
    ".mplint_cache",
    ".pytest_cache",
    ".hypothesis",
)
SUFFIXES = (".py", ".ipynb")


@dataclass(frozen=True)
class SourcePath:
    path: Path  # as found (absolute)
    display: str  # what users see: relative to the working directory when inside it


@dataclass
class Discovery:
    files: list[SourcePath]
    errors: list[str]  # paths that do not exist or cannot be listed
    skipped: list[str] = field(default_factory=list)  # given paths that hold nothing to check, and why


_PYTHON_SHEBANG = re.compile(rb"#![^\n]*\bpython[0-9.]*\b")
NOT_PYTHON = "not a Python file (.py), notebook (.ipynb) or script with a python shebang; skipped"


def is_python_script(path: Path) -> bool:
    """A file without a Python suffix that is Python all the same: its first line runs it with python (what
    pre-commit's ``types: [python]`` passes too)."""
    try:
        with open(path, "rb") as f:
            return bool(_PYTHON_SHEBANG.match(f.readline(256)))
    except OSError:
        return True  # unreadable: checking it says why (MP000)


def _plural(n: int, word: str) -> str:
    return f"{n} {word}{'' if n == 1 else 's'}"


def display_path(path: Path, cwd: Path) -> str:
    try:
        return path.relative_to(cwd).as_posix()
    except ValueError:
        return path.as_posix()


# A pattern without a slash (but a trailing one), negation, escape, class or "**" matches a file or
# folder by its name at any depth: fnmatch on the name says what gitignore's rules would.
_NAME_PATTERN = re.compile(r"[^/!\\\[#\s]+/?")


class _NamePatterns:
    """The default excludes and most configured ones, matched by name without pathspec."""

    def __init__(self, patterns: list[str]):
        def either(names):
            return re.compile("|".join(fnmatch.translate(n) for n in names) or "(?!)")

        self.any = either([p for p in patterns if not p.endswith("/")])
        self.folder = either([p.rstrip("/") for p in patterns])

    def match_file(self, rel: str) -> bool:
        name = rel.rstrip("/").rsplit("/", 1)[-1]
        return bool((self.folder if rel.endswith("/") else self.any).match(name))


def _spec(patterns: Iterable[str]) -> pathspec.PathSpec | _NamePatterns:
    return _compiled(tuple(patterns))


@functools.lru_cache(maxsize=512)
def _compiled(patterns: tuple[str, ...]) -> pathspec.PathSpec | _NamePatterns:
    """The matcher of a list of patterns, built once per process: a run discovers each nested project again, and
    the language server discovers at every configuration change, with the same .gitignore files."""
    if all(_NAME_PATTERN.fullmatch(p) and "**" not in p for p in patterns):
        return _NamePatterns(patterns)
    import pathspec

    return pathspec.GitIgnoreSpec.from_lines(patterns)


def _gitignore(folder: Path) -> pathspec.PathSpec | None:
    try:
        text = (folder / ".gitignore").read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None
    return _spec(text.splitlines())


def _matches(excluded, path: Path, root: Path, is_dir: bool) -> bool:
    """The path (relative to the project root) or its name matches an exclude pattern."""
    try:
        rel = path.relative_to(root).as_posix()
    except ValueError:
        rel = path.name
    slash = "/" if is_dir else ""
    return excluded.match_file(rel + slash) or excluded.match_file(path.name + slash)


def _excluded_or_inside(excluded, path: Path, root: Path) -> bool:
    """``path`` or a folder above it (up to the project root) is excluded: what ``--force-exclude`` asks of a given path."""
    if _matches(excluded, path, root, path.is_dir()):
        return True
    return any(
        _matches(excluded, folder, root, True) for folder in path.parents if folder != root and root in folder.parents
    )


def is_excluded(
    path: Path, root: Path, exclude: Iterable[str] | None = None, extend_exclude: Iterable[str] = ()
) -> bool:
    """Whether the excludes skip ``path`` even when it is named explicitly (``--force-exclude``)."""
    excluded = _spec([*(DEFAULT_EXCLUDE if exclude is None else exclude), *extend_exclude])
    return _excluded_or_inside(excluded, Path(os.path.abspath(path)), root.resolve())


def discover(
    paths: list[Path],
    root: Path,
    exclude: Iterable[str] | None = None,
    extend_exclude: Iterable[str] = (),
    respect_gitignore: bool = True,
    suffixes: tuple[str, ...] = SUFFIXES,
    force_exclude: bool = False,
) -> Discovery:
    """The files under ``paths``. A file or folder named explicitly is checked even when an exclude matches it,
    unless ``force_exclude`` (then it is skipped silently, as pre-commit hooks need)."""
    cwd = Path.cwd().resolve()
    root = root.resolve()
    excluded = _spec([*(DEFAULT_EXCLUDE if exclude is None else exclude), *extend_exclude])
    files: dict[Path, SourcePath] = {}
    errors: list[str] = []

    def is_excluded(path: Path, is_dir: bool) -> bool:
        return _matches(excluded, path, root, is_dir)

    def ignores_above(folder: Path) -> list[tuple[Path, pathspec.PathSpec]]:
        """.gitignore files from the project root down to ``folder``."""
        if not respect_gitignore:
            return []
        chain = []
        try:
            rel_parts = folder.relative_to(root).parts
        except ValueError:
            rel_parts = ()
            base = folder
        else:
            base = root
        for i in range(len(rel_parts) + 1):
            here = base.joinpath(*rel_parts[:i])
            spec = _gitignore(here)
            if spec:
                chain.append((here, spec))
        return chain

    def git_ignored(path: Path, is_dir: bool, chain) -> bool:
        for base, spec in chain:
            try:
                rel = path.relative_to(base).as_posix()
            except ValueError:
                continue
            if spec.match_file(rel + ("/" if is_dir else "")):
                return True
        return False

    skipped: list[str] = []
    force_excluded: list[str] = []
    for given in paths:
        absolute = Path(os.path.abspath(given))
        if not absolute.exists():
            errors.append(f"{given}: no such file or directory")
            continue
        if force_exclude and _excluded_or_inside(excluded, absolute, root):
            force_excluded.append(f"{given}: excluded (--force-exclude)")  # said only when nothing else is checked
            continue
        if absolute.is_file():
            if absolute.name.endswith(suffixes) or is_python_script(absolute):
                files.setdefault(absolute, SourcePath(absolute, display_path(absolute, cwd)))
            else:
                skipped.append(f"{given}: {NOT_PYTHON}")
            continue
        if not absolute.is_dir():
            errors.append(f"{given}: not a regular file or directory (a FIFO, socket or device); skipped")
            continue
        chains = {absolute: ignores_above(absolute)}
        found, others, left_out = 0, 0, 0
        for folder, subdirs, names in os.walk(absolute, onerror=lambda e: errors.append(f"{e.filename}: {e.strerror}")):
            here = Path(folder)
            chain = chains.pop(here, [])
            kept = sorted(
                d for d in subdirs if not is_excluded(here / d, True) and not git_ignored(here / d, True, chain)
            )
            left_out += len(subdirs) - len(kept)
            subdirs[:] = kept
            for d in subdirs:
                spec = _gitignore(here / d) if respect_gitignore else None
                chains[here / d] = chain + [(here / d, spec)] if spec else chain
            for name in sorted(names):
                if not name.endswith(suffixes):
                    others += 1
                    continue
                path = here / name
                if is_excluded(path, False) or git_ignored(path, False, chain):
                    left_out += 1
                    continue
                if _is_special(path):  # reading a FIFO would block the whole run
                    errors.append(f"{display_path(path, cwd)}: not a regular file (a FIFO, socket or device); skipped")
                    continue
                files.setdefault(path, SourcePath(path, display_path(path, cwd)))
                found += 1
        if not found:
            what = [_plural(others, "other file")] if others else []
            what += [f"{left_out} excluded or git-ignored"] if left_out else []
            skipped.append(
                f"{given}: holds no Python file (.py) or notebook (.ipynb)" + (f" ({', '.join(what)})" if what else "")
            )
    return Discovery(
        sorted(files.values(), key=lambda s: s.display), errors, skipped + (force_excluded if not files else [])
    )


def _is_special(path: Path) -> bool:
    """A FIFO, socket or device (through symlinks); broken links are not special: reading them fails fast."""
    try:
        mode = os.stat(path).st_mode
    except OSError:
        return False
    return not stat.S_ISREG(mode) and not stat.S_ISDIR(mode)


def module_name(path: Path) -> tuple[str, bool]:
    """Dotted module name from the package folders around ``path``, and whether it is a package."""
    is_package = path.name == "__init__.py"
    parts = [] if is_package else [path.stem]
    folder = path.parent
    while (folder / "__init__.py").is_file():
        parts.insert(0, folder.name)
        if folder.parent == folder:
            break
        folder = folder.parent
    return ".".join(parts), is_package
