"""NVIDIA NGC container releases (``nvcr.io/nvidia/pytorch:YY.MM-py3``, ``nvcr.io/nvidia/tensorflow:YY.MM-tf1-py3``)
and the framework version each ships, as NVIDIA's own pages state it.

How the table was verified: every row was read, with its release number and version, in a stored copy of the page
its ``source`` names (NVIDIA's container release notes, "PyTorch container image version YY.MM is based on ...", and
NVIDIA's ``NVIDIA/tensorflow`` release page, "NVIDIA TensorFlow release YY.MM is based on TensorFlow 1.15.5"). Rows
an earlier version of this table carried from memory (every TensorFlow 2 release, and PyTorch 19.03-25.09) are gone:
the stored release notes of those releases did not show the version. A row is added only with a page that states it.

A tag between two rows is bounded by them (``between``): NVIDIA's containers move forward with their framework, so a
release ships no older a version than an earlier release and no newer one than a later release. A tag before the
first row has only an upper bound, after the last only a lower one. The TensorFlow 2 flavour (``YY.MM-tf2-py3``) has
no verified row: it is TensorFlow 2, any minor version.

PyTorch containers ship a pre-release build of main (``1.4.0a0+a5b4d78``): its API lies between the previous release
and the named one, so it counts as older than ``1.4.0`` and newer than ``1.3``.
"""

from __future__ import annotations

from typing import NamedTuple

_PT_NOTES = "https://docs.nvidia.com/deeplearning/frameworks/pytorch-release-notes/"
_NV_TF1 = "https://github.com/NVIDIA/tensorflow/releases"


class Release(NamedTuple):
    release: tuple[int, int]  # (YY, MM) of the container release
    version: str  # the framework version it ships, as the source gives it (local build label dropped)
    source: str  # the page that says so


PYTORCH = (
    Release((20, 2), "1.4.0a0", _PT_NOTES + "rel_20-02.html"),  # "based on PyTorch 1.4.0a0+a5b4d78"
    Release((25, 12), "2.10.0a0", _PT_NOTES + "rel-25-12.html"),  # "based on 2.10.0a0+b4e4ee81d3"
)

# The tf1 flavour (``YY.MM-tf1-py3``): NVIDIA's TensorFlow 1.15 builds.
TENSORFLOW1 = tuple(
    Release((yy, mm), "1.15.5", f"{_NV_TF1}/tag/v1.15.5%2Bnv{yy}.{mm:02d}" if (yy, mm) == (22, 9) else _NV_TF1)
    for yy, mm in ((22, 9), (22, 11), (22, 12), (23, 1), (23, 2), (23, 3))
)


class Bounds(NamedTuple):
    """What the table says of one release: the oldest and newest version it may ship (None: no bound that way),
    and the rows that give them."""

    oldest: str | None
    newest: str | None
    rows: tuple[Release, ...]

    @property
    def exact(self) -> bool:
        return self.oldest is not None and self.oldest == self.newest


def between(table: tuple[Release, ...], release: tuple[int, int]) -> Bounds:
    """The versions container release ``release`` may ship: a row's own version, else the versions of the rows
    around it (an empty table bounds nothing)."""
    for row in table:
        if row.release == release:
            return Bounds(row.version, row.version, (row,))
    before = [row for row in table if row.release < release]
    after = [row for row in table if row.release > release]
    low, high = (before[-1] if before else None), (after[0] if after else None)
    return Bounds(low.version if low else None, high.version if high else None,
                  tuple(row for row in (low, high) if row is not None))
