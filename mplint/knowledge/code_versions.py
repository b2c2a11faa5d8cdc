"""Names whose use in code bounds the framework versions the code can run on: its own version evidence.

A module that imports ``torch._six`` (removed in torch 2.0) runs on torch < 2.0 only, one that uses ``tf.contrib``
(removed in TF 2.0) on TensorFlow 1 only, one that calls ``torch.compile`` (new in torch 2.0) on torch >= 2.0. Only
uses that surely run bound anything: an import or use under a ``try`` or an ``if`` (a compatibility shim, a version
test) says nothing. No name a rule flags is here: a rule's own construct never decides whether that rule fires.
"""

from __future__ import annotations

from typing import NamedTuple

from mplint.knowledge.api_versions import TORCH


class CodeBound(NamedTuple):
    package: str  # tensorflow | torch
    specifier: str  # PEP 440
    what: str  # for messages: why the code bounds the range
    source: str


_SIX = "pytorch/pytorch#94709 (Remove torch._six), first released in torch 2.0.0"
_CONTRIB = "TensorFlow 2.0.0 release notes: tf.contrib has been deprecated, and functionality moved or removed"
_TF1_ONLY = (
    "TensorFlow 2.0.0 API (tensorflow.org/versions/r2.0/api_docs/python/tf): no tf.Session, tf.InteractiveSession or "
    "tf.placeholder, which remain as tf.compat.v1.*"
)

# Qualified names (a module or an attribute path) -> the bound their use puts on the range.
BY_NAME: dict[str, CodeBound] = {
    "torch._six": CodeBound("torch", "<2.0", "uses torch._six, which torch 2.0 removed", _SIX),
    "tensorflow.contrib": CodeBound("tensorflow", "<2", "uses tf.contrib, which TF 2.0 removed", _CONTRIB),
    # TF 1's graph-mode entry points, which TF 2 keeps only under tf.compat.v1: a program that builds a Session
    # or a placeholder through the top-level namespace runs on TF 1.
    **{
        f"tensorflow.{name}": CodeBound("tensorflow", "<2", f"uses tf.{name}, which TF 2.0 removed", _TF1_ONLY)
        for name in ("Session", "InteractiveSession", "placeholder")
    },
    "torch.compile": CodeBound(
        "torch", ">=2.0", "calls torch.compile, which torch 2.0 added", "torch 2.0.0 torch/__init__.py: def compile"
    ),
    # The newer AMP spellings (MPT502's replacements, never its findings) exist from the versions api_versions gives.
    **{
        name: CodeBound("torch", f">={row.since}", f"uses {name}, which torch {row.since} added", row.source)
        for name, row in TORCH.items()
        if name.startswith(("torch.autocast", "torch.amp."))
    },
}


def bound_of(qualified: str) -> CodeBound | None:
    """The bound a use of ``qualified`` (``torch._six.inf``, ``tensorflow.contrib.layers.conv2d``) puts on the
    range: the entry for it or for a module it lies in."""
    parts = qualified.split(".")
    for end in range(len(parts), 0, -1):
        found = BY_NAME.get(".".join(parts[:end]))
        if found is not None:
            return found
    return None
