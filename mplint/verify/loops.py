"""Training loops of a PyTorch or Keras script, each with its own step cap.

The script is compiled with each ``for``/``while`` loop wrapped so that it can be ended from
inside: a step past a loop's cap raises ``LoopCapped``, which only that loop's wrapper catches, and
the script goes on after the loop (to its next training loop). A step belongs to the outermost loop
of the script running when it is taken (the epoch loop around a batch loop; a GAN's one loop with
two optimizers), told apart by the loop's line and the script lines that called into it."""

from __future__ import annotations

import ast
import builtins
import functools
import importlib.abc
import importlib.machinery
import os
import sys
import threading
import types
from typing import NamedTuple

from mplint.engine.imports import dotted_name as _dotted

NAME = "__mplint_loops__"
_local = threading.local()


class LoopCapped(BaseException):
    """Ends one loop. A BaseException, so that the script's ``except Exception`` lets it through."""

    def __init__(self, frame, line: int):
        super().__init__(f"mplint verify: the loop at line {line} reached its step cap")
        self.frame, self.line = frame, line


def _active() -> list:
    if not hasattr(_local, "active"):
        _local.active = []
    return _local.active


def enter(line: int) -> None:
    _active().append((sys._getframe(1), line))


def leave(line: int) -> None:
    frame, active = sys._getframe(1), _active()
    for i in range(len(active) - 1, -1, -1):
        if active[i][0] is frame and active[i][1] == line:
            del active[i]
            return


def caught(exc: BaseException, line: int) -> bool:
    """Whether ``exc`` ends the loop at ``line`` of the calling frame; else it goes on up, and the
    loop is remembered as the outermost it escaped so far."""
    frame = sys._getframe(1)
    if isinstance(exc, LoopCapped) and exc.frame is frame and exc.line == line:
        return True
    _local.escaped = (exc, os.path.basename(frame.f_code.co_filename), line)
    return False


def escaped(exc: BaseException) -> tuple[str, int] | None:
    """The outermost loop (file name, line) that ``exc`` escaped, or None when it was raised outside loops."""
    last = getattr(_local, "escaped", None)
    return last[1:] if last is not None and last[0] is exc else None


_WRAPPER = f"""\
{NAME}.enter(0)
try:
    pass
except BaseException as {NAME}_exc:
    if not {NAME}.caught({NAME}_exc, 0):
        raise
finally:
    {NAME}.leave(0)
"""


class _WrapLoops(ast.NodeTransformer):
    def _wrap(self, node):
        self.generic_visit(node)
        wrapper = ast.parse(_WRAPPER).body
        for new in wrapper:
            for sub in ast.walk(new):
                if isinstance(sub, ast.Constant) and sub.value == 0:
                    sub.value = node.lineno
                if "lineno" in sub._attributes:  # tracebacks and line events keep the loop's line
                    sub.lineno, sub.end_lineno = node.lineno, node.lineno
                    sub.col_offset, sub.end_col_offset = node.col_offset, node.col_offset
        wrapper[1].body = [node]
        return wrapper

    visit_For = visit_While = _wrap


_FRAMEWORKS = frozenset({"torch", "tensorflow", "keras", "tf_keras"})


def _imports_a_framework(tree) -> bool:
    for node in ast.walk(tree):
        if isinstance(node, ast.Import) and any(alias.name.split(".")[0] in _FRAMEWORKS for alias in node.names):
            return True
        if isinstance(node, ast.ImportFrom) and not node.level and (node.module or "").split(".")[0] in _FRAMEWORKS:
            return True
    return False


def _wrapped(source, path: str, always: bool = False):
    """The code of a file with its loops wrapped when it imports a framework (or ``always``), else None."""
    tree = ast.parse(source, path)
    return compile(_WrapLoops().visit(tree), path, "exec") if always or _imports_a_framework(tree) else None


class _WrappingLoader(importlib.machinery.SourceFileLoader):
    def get_code(self, fullname):  # always from the source: a cached .pyc would hold unwrapped loops
        source = self.get_data(self.path)
        try:
            code = _wrapped(source, self.path, always=True)  # a trainer module need not import torch
        except (SyntaxError, ValueError, RecursionError):
            code = None
        return code if code is not None else self.source_to_code(source, self.path)

    def exec_module(self, module):
        setattr(module, NAME, sys.modules[__name__])
        super().exec_module(module)


class _SiblingModules(importlib.abc.MetaPathFinder):
    """Modules of the script's folder (a ``trainer.py`` beside ``train.py``) get their loops wrapped too."""

    def __init__(self, folder: str):
        self.folder = folder + os.sep

    def find_spec(self, name, path=None, target=None):
        spec = importlib.machinery.PathFinder.find_spec(name, path)
        origin = getattr(spec, "origin", None) or ""
        if (
            spec is None
            or not origin.endswith(".py")
            or not _within(origin, self.folder)
            or not isinstance(spec.loader, importlib.machinery.SourceFileLoader)
        ):
            return None
        spec.loader = _WrappingLoader(spec.loader.name, spec.loader.path)
        return spec


def run(script: str) -> None:
    """Run ``script`` as ``__main__``, as ``runpy.run_path`` does; with its loops wrapped when it
    imports torch, TensorFlow or Keras."""
    try:
        with open(script, "rb") as fh:
            code = _wrapped(fh.read(), script)
    except (OSError, SyntaxError, ValueError, RecursionError):
        code = None
    if code is None:
        import runpy  # also raises the error the script itself would

        runpy.run_path(script, run_name="__main__")
        return
    sys.meta_path.insert(0, _SiblingModules(os.path.dirname(os.path.abspath(script))))
    module = types.ModuleType("__main__")
    module.__dict__.update(
        __file__=script, __cached__=None, __loader__=None, __package__=None, __spec__=None, __builtins__=builtins
    )
    setattr(module, NAME, sys.modules[__name__])
    sys.modules["__main__"] = module
    exec(code, module.__dict__)


class Site(NamedTuple):
    """Where a step is taken: the outermost loop of the script's files running (``frame``, ``file``
    and ``line``; None when none runs around it: a library's loop), the lines of the script's files
    calling into that loop (``calls``, (file, line) pairs, outermost first), and the line of the
    script itself that took the step (or called what took it). A tuple: one is made at every step."""

    frame: object
    file: str | None
    line: int | None
    calls: tuple
    step_line: int | None

    @property
    def key(self) -> tuple:
        return self.calls, self.file, self.line


def current(script: str) -> Site:
    """The Site of the step being taken (called from a hook, at every step: one walk up the stack)."""
    first: dict = {}  # id(frame) -> the line of its outermost loop running (the first entered)
    for frame, line in _active():
        first.setdefault(id(frame), line)
    within = _files_within(os.path.dirname(script) + os.sep)
    ours: list = []  # the frames of the script's files, innermost first
    loop, outside = None, 0  # the outermost running loop's frame; ours[outside:] are the frames calling into it
    step_line = None
    frame = sys._getframe(1)
    while frame is not None:
        filename = frame.f_code.co_filename
        if within(filename):
            if step_line is None and filename == script:
                step_line = frame.f_lineno
            ours.append(frame)
        if id(frame) in first:
            loop, outside = frame, len(ours)
        frame = frame.f_back
    if loop is None:
        return Site(None, None, None, tuple(_place(f) for f in ours[-1:]), step_line)
    calls = tuple(_place(f) for f in reversed(ours[outside:]))
    return Site(loop, os.path.basename(loop.f_code.co_filename), first[id(loop)], calls, step_line)


def _within(filename: str, folder: str) -> bool:
    """A file of the script's folder (not ``<frozen runpy>``, which is relative)."""
    return os.path.isabs(filename) and os.path.normpath(filename).startswith(folder)


@functools.lru_cache(maxsize=8)
def _files_within(folder: str):
    """``_within(filename, folder)`` as a function of the file name alone, remembered (asked for every frame of every
    step)."""
    known: dict[str, bool] = {}

    def within(filename: str) -> bool:
        found = known.get(filename)
        if found is None:
            found = known[filename] = _within(filename, folder)
        return found

    return within


def _place(frame) -> tuple[str, int]:
    return os.path.basename(frame.f_code.co_filename), frame.f_lineno


# --- training loops found in the source, for the report of loops a capped run never reached -------


def _optimizers(tree) -> set[str]:
    """Names bound to a torch optimizer's construction (``opt = torch.optim.Adam(...)``)."""
    from mplint.analysis.torch_amp import OPTIMIZER_CLASSES

    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Call):
            called = _dotted(node.value.func) or ""
            if called.rsplit(".", 1)[-1] in OPTIMIZER_CLASSES:
                names.update(t for t in map(_dotted, node.targets) if t)
    return names


def _is_step(call: ast.Call, optimizers: set[str]) -> bool:
    """``scaler.step(optimizer)`` or ``optimizer.step()``, not a learning-rate scheduler's step."""
    from mplint.analysis.torch_amp import _NOT_OPTIMIZER_NAME, _OPTIMIZER_NAME, _SCALER_NAME

    if not (isinstance(call.func, ast.Attribute) and call.func.attr == "step"):
        return False
    receiver = _dotted(call.func.value)
    if receiver is None:
        return False
    last = receiver.rsplit(".", 1)[-1]
    if _SCALER_NAME.search(last):
        return bool(call.args)
    return receiver in optimizers or (bool(_OPTIMIZER_NAME.search(last)) and not _NOT_OPTIMIZER_NAME.search(last))


def training_loops(source: str) -> dict[int, set[int]]:
    """Each training loop of the source, by its line: the outermost loop of its function (or of the
    module) around optimizer steps, else the step's own line; with the lines of its steps."""
    tree = ast.parse(source)
    optimizers = _optimizers(tree)
    loops: dict[int, set[int]] = {}

    def visit(node, loop: int | None) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)):
                visit(child, None)  # a new scope: its loops are its own
                continue
            if isinstance(child, ast.Call) and _is_step(child, optimizers):
                loops.setdefault(loop or child.lineno, set()).add(child.lineno)
            visit(child, loop if loop is not None or not isinstance(child, (ast.For, ast.While)) else child.lineno)

    visit(tree, None)
    return loops


def not_run(source: str, reached: set[int]) -> list[int]:
    """Lines of the training loops of ``source`` none of whose steps ran."""
    try:
        loops = training_loops(source)
    except (SyntaxError, ValueError, RecursionError):
        return []
    return sorted(line for line, steps in loops.items() if not steps & reached)
