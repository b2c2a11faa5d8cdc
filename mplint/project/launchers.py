"""The shell scripts that run a folder's code from elsewhere in its repository.

A monorepo may keep its code in one tree and how to run it in another: IntelAI's ``quickstart/<model>/run.sh`` runs
``${MODEL_DIR}/models/<model>/product/train.py`` beside the ``requirements.txt`` its README installs. Where the code's
own folders state no environment, the launcher's folder does (``pins.PinFinder``, ``torch_target.TorchTargets``).
"""

from __future__ import annotations

import os
import re
from pathlib import Path

_SCRIPT_SUFFIXES = (".sh", ".bash")
_SKIPPED = {".git", "node_modules", "__pycache__", ".venv", "venv", "site-packages"}
_SCRIPT_LIMIT = 200_000  # bytes read of one script: launchers are short, a generated script is not one
# A path to a Python file as a shell script writes it: ``${MODEL_DIR}/models/x/train.py``, ``../../src/main.py``.
_PY_PATH = re.compile(r"[\w${}./-]*\.py\b")
_VARIABLE = re.compile(r"^(?:\$\{?\w+\}?/)+")


def launcher_folders(folder: Path, top: Path, memo: dict) -> list[Path]:
    """Folders of the shell scripts under the repository ``top`` that run a Python file of ``folder`` (not
    ``folder`` itself: its own pins are read first). A path resolves against the script's folder, else against
    ``top`` by its longest existing tail of at least two parts (``models/x/train.py`` under ``${MODEL_DIR}``); a bare
    ``train.py`` names only the script's own folder. ``memo`` keeps the repository's index for the run."""
    top = top.resolve()
    index = memo.get(("launchers", top))
    if index is None:
        index = memo[("launchers", top)] = _index(top)
    return sorted(index.get(folder.resolve(), ()))


def _index(top: Path) -> dict[Path, frozenset[Path]]:
    found: dict[Path, set[Path]] = {}
    for script in _scripts(top):
        try:
            with open(script, "rb") as handle:
                text = handle.read(_SCRIPT_LIMIT).decode("utf-8", errors="replace")
        except OSError:
            continue
        for written in set(_PY_PATH.findall(text)):
            target = _resolve(written, script.parent, top)
            if target is not None and target.parent != script.parent:
                found.setdefault(target.parent, set()).add(script.parent)
    return {folder: frozenset(scripts) for folder, scripts in found.items()}


def _scripts(top: Path):
    for here, folders, files in os.walk(top):
        folders[:] = [f for f in folders if f not in _SKIPPED]
        for name in files:
            if name.endswith(_SCRIPT_SUFFIXES):
                yield Path(here) / name


def _resolve(written: str, place: Path, top: Path) -> Path | None:
    if "$" not in written.split("/")[0] and not written.startswith("/"):
        candidate = (place / written).resolve()
        if candidate.is_file() and candidate.is_relative_to(top):
            return candidate
    parts = [p for p in _VARIABLE.sub("", written).split("/") if p not in ("", ".", "..") and "$" not in p]
    for start in range(len(parts) - 1):  # the longest tail first, never a bare file name
        candidate = top.joinpath(*parts[start:])
        if candidate.is_file():
            return candidate.resolve()
    return None
