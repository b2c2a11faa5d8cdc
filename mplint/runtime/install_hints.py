"""What to install when a framework a runtime function needs is missing: one line that says so, in place of a bare
``ModuleNotFoundError`` from deep inside an import (``mplint verify`` words its refusal the same way)."""

from __future__ import annotations

import importlib.util

RUNTIME_EXTRA = "install mplint's runtime extra (python3 -m pip install \".[runtime]\" in mplint's folder)"
TORCH = (
    "install torch (python3 -m pip install torch; for a CPU-only build add "
    "--index-url https://download.pytorch.org/whl/cpu)"
)


def missing(packages: tuple[str, ...]) -> list[str]:
    """The top-level packages of ``packages`` that this environment cannot import."""
    return [name for name in packages if importlib.util.find_spec(name) is None]


def require(caller: str, needs: str, packages: tuple[str, ...], install: str) -> None:
    """Raise ``ModuleNotFoundError`` saying what ``caller`` needs and what to install, when a package is missing."""
    absent = missing(packages)
    if absent:
        verb = "is" if len(absent) == 1 else "are"
        raise ModuleNotFoundError(
            f"{caller} needs {needs}, and {', '.join(absent)} {verb} not installed in this environment: {install}",
            name=absent[0],
        )
