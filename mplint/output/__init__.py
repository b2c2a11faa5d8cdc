"""Output formats. Each module renders a finished ``RunReport``; rules know nothing of them.

A format's module is imported when it is used: SARIF needs the whole rule catalog, text none.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable

_MODULES = {"text": "text", "json": "json_format", "github": "github", "sarif": "sarif"}
FORMAT_NAMES = tuple(_MODULES)


def renderer(name: str) -> Callable:
    """The ``render(report, stream, **options)`` function of a format."""
    return importlib.import_module(f"mplint.output.{_MODULES[name]}").render
