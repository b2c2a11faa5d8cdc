"""Patching a framework as the script imports it: a hook run right after a top-level module's import, and
functions or methods replaced wherever loaded modules hold them. Shared by the TensorFlow/Keras and PyTorch hooks,
and free of both (and of NumPy): a PyTorch-only machine imports it."""

from __future__ import annotations

import functools
import importlib
import importlib.abc
import importlib.util
import sys


class PostImportHook(importlib.abc.MetaPathFinder):
    """Runs ``callbacks[name](module)`` right after the top-level module ``name`` is imported."""

    def __init__(self, callbacks):
        self.callbacks = callbacks

    def find_spec(self, name, path=None, target=None):
        callback = self.callbacks.get(name)
        if callback is None:
            return None
        sys.meta_path.remove(self)
        try:
            spec = importlib.util.find_spec(name)
        finally:
            sys.meta_path.insert(0, self)
        if spec is None or spec.loader is None:
            return None
        execute = spec.loader.exec_module

        def exec_module(module):
            execute(module)
            self.callbacks.pop(name, None)
            callback(module)

        spec.loader.exec_module = exec_module
        return spec


def rebind(prefix: str, original, replacement) -> None:
    """Replace ``original`` by ``replacement`` wherever a loaded module under ``prefix`` holds it."""
    for name, module in list(sys.modules.items()):
        if module is None or not (name == prefix or name.startswith(prefix + ".")):
            continue
        try:
            items = list(vars(module).items())
        except TypeError:
            continue
        for attr, value in items:
            if value is original:
                setattr(module, attr, replacement)


def patch_function(module_name: str, attr: str, make, prefix: str) -> None:
    module = sys.modules.get(module_name) or importlib.import_module(module_name)
    original = getattr(module, attr, None)
    if original is not None:
        rebind(prefix, original, make(original))


def patch_method(cls, attr: str, make) -> None:
    if attr in vars(cls):
        original = vars(cls)[attr]
        setattr(cls, attr, functools.wraps(original)(make(original)))
