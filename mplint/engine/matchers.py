"""``libcst.matchers``, imported on first use.

Importing it costs about 0.2 s, more than checking a small file; most rules and
most files never need it. Use as ``from mplint.engine import matchers as m``.
"""

import importlib


def __getattr__(name: str):
    return getattr(importlib.import_module("libcst.matchers"), name)
