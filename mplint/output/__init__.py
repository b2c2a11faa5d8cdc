"""Output formats. Each module renders a finished ``RunReport``; rules know nothing of them."""

from __future__ import annotations

from typing import Callable

from mplint.output import github, json_format, sarif, text

FORMATS: dict[str, Callable] = {
    "text": text.render,
    "json": json_format.render,
    "github": github.render,
    "sarif": sarif.render,
}
