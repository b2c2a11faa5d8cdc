"""NVIDIA NGC container releases (``nvcr.io/nvidia/tensorflow:YY.MM-tf2-py3``, ``nvcr.io/nvidia/pytorch:YY.MM-py3``)
and the framework version each ships, from NVIDIA's container release notes.

Each row is the first release ``YY.MM`` that ships a version; later releases ship the same until the next row.
``source`` is the release-notes page that states it ("container image version YY.MM is based on ..."). PyTorch
containers ship a pre-release build of main (``1.9.0a0+df837d0``): its API lies between the previous release and
the named one, so it counts as older than ``1.9.0`` and newer than ``1.8``.
"""

from __future__ import annotations

from typing import NamedTuple

_TF_NOTES = "https://docs.nvidia.com/deeplearning/frameworks/tensorflow-release-notes/rel_{}.html"
_PT_NOTES = "https://docs.nvidia.com/deeplearning/frameworks/pytorch-release-notes/rel_{}.html"


class Release(NamedTuple):
    since: tuple[int, int]  # (YY, MM) of the first container release that ships ``version``
    version: str
    source: str


def _rows(notes: str, rows: list[tuple[str, str]]) -> tuple[Release, ...]:
    out = []
    for tag, version in rows:
        yy, mm = tag.split(".")
        out.append(Release((int(yy), int(mm)), version, notes.format(f"{yy}-{mm}")))
    return tuple(out)


# The tf2 flavour (``YY.MM-tf2-py3``); the tf1 flavour ships TensorFlow 1.15 throughout.
TENSORFLOW2 = _rows(_TF_NOTES, [
    ("19.10", "2.0.0"), ("20.01", "2.1.0"), ("20.06", "2.2.0"), ("20.09", "2.3.0"), ("20.10", "2.3.1"),
    ("21.02", "2.4.0"), ("21.06", "2.5.0"), ("21.09", "2.6.0"), ("21.12", "2.7.0"), ("22.03", "2.8.0"),
    ("22.06", "2.9.1"), ("22.10", "2.10.0"), ("23.01", "2.11.0"), ("23.04", "2.12.0"), ("23.07", "2.13.0"),
    ("23.11", "2.14.0"), ("24.02", "2.15.0"), ("24.07", "2.16.1"), ("25.01", "2.17.0"),
])
TENSORFLOW1 = "1.15.0"

# ``YY.MM-py3`` (``-py2`` before 19.xx).
PYTORCH = _rows(_PT_NOTES, [
    ("19.03", "1.1.0a0"), ("19.05", "1.1.0a0"), ("19.09", "1.2.0a0"), ("19.10", "1.3.0a0"), ("20.01", "1.4.0a0"),
    ("20.03", "1.5.0a0"), ("20.06", "1.6.0a0"), ("20.08", "1.7.0a0"), ("20.11", "1.8.0a0"), ("21.03", "1.9.0a0"),
    ("21.07", "1.10.0a0"), ("21.11", "1.11.0a0"), ("22.03", "1.12.0a0"), ("22.06", "1.13.0a0"), ("22.12", "1.14.0a0"),
    ("23.03", "2.0.0a0"), ("23.05", "2.0.0"), ("23.06", "2.1.0a0"), ("23.11", "2.2.0a0"), ("24.02", "2.3.0a0"),
    ("24.05", "2.4.0a0"), ("24.08", "2.5.0a0"), ("24.11", "2.6.0a0"), ("25.02", "2.7.0a0"), ("25.05", "2.8.0a0"),
    ("25.09", "2.9.0a0"), ("25.12", "2.10.0a0"),
])


def shipped(table: tuple[Release, ...], release: tuple[int, int]) -> Release | None:
    """The row in force at container release ``release`` (None before the table's first)."""
    found = [row for row in table if row.since <= release]
    return found[-1] if found else None
