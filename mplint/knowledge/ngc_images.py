"""NVIDIA NGC container releases (``nvcr.io/nvidia/pytorch:YY.MM-py3``, ``nvcr.io/nvidia/tensorflow:YY.MM-tf1-py3``
and the unflavoured ``YY.MM-py3`` of the TensorFlow 1 years) and the framework version each ships, as NVIDIA's own
pages state it.

How the table was verified: every row was read, with its release number and version, in a stored copy of the page
its ``source`` names, and the comment beside it quotes the sentence. The sources are NVIDIA's container release notes
("PyTorch container image version YY.MM is based on ...", "TensorFlow container image version YY.MM is based on
TensorFlow 1.8.0", and the notes' "NVIDIA PyTorch Container Versions" table, one line per release), NVIDIA's
``NVIDIA/tensorflow`` release pages ("NVIDIA TensorFlow release YY.MM is based on TensorFlow 1.15.5") and release
tags (``v1.15.5+nv22.01``, with the version its packaging script names at the tag), NVIDIA's developer blog, and
NVIDIA's own builds of a framework release, whose version label names the release (the PyTorch wheels NVIDIA publishes
for Jetson under ``developer.download.nvidia.com``, ``torch-2.2.0a0+81ea7a4.nv24.01``: NVIDIA's PyTorch of its 24.01
framework release).
Where the stored text was a public verbatim copy of an NVIDIA page (a repository quoting the notes under their
address), ``source`` is the NVIDIA page and the comment says so. Releases whose stored pages did not show the version
are not in the table: every TensorFlow 2 release, and PyTorch 19.11-20.01, 20.06, 21.01-21.08, 21.10-22.10,
22.12-23.12 and 24.02-25.11 among others. A row is added only with a page or an NVIDIA build that states it.

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
_TF_NOTES = "https://docs.nvidia.com/deeplearning/dgx/tensorflow-release-notes/"
_NV_TF1 = "https://github.com/NVIDIA/tensorflow/releases"


class Release(NamedTuple):
    release: tuple[int, int]  # (YY, MM) of the container release
    version: str  # the framework version it ships, as the source gives it (local build label dropped)
    source: str  # the page that says so


# The 20.12 notes' "NVIDIA PyTorch Container Versions" table (Container Version, Ubuntu, CUDA Toolkit, PyTorch,
# TensorRT), read in a verbatim copy of those notes (github.com/taofuyu/detectron2, DOCKER_INFO.md). Only the lines
# that put a release and its PyTorch version side by side are used; where the table's merged cells leave a release
# without its own PyTorch cell (20.06, 20.01, 19.12, 19.11) it is left to the bounds.
_PT_2012_TABLE = _PT_NOTES + "rel_20-12.html"

PYTORCH = (
    # "PyTorch container image version 19.06 is based on PyTorch 1.1.0 commit 0885dd28 from May 28, 2019"
    # (verbatim copy of the 19.06 notes)
    Release((19, 6), "1.1.0", _PT_NOTES + "rel_19-06.html"),
    Release((19, 8), "1.2.0a0", _PT_2012_TABLE),  # "19.08 | 1.2.0a0 including upstream commits up through 9130ab38"
    Release((19, 9), "1.2.0", _PT_2012_TABLE),  # "19.09 | 1.2.0"
    Release((19, 10), "1.3.0a0", _PT_2012_TABLE),  # "19.10 | NVIDIA CUDA 10.1.243 | 1.3.0a0+24ae9b5"
    # "PyTorch container image version 20.02 is based on PyTorch 1.4.0a0+a5b4d78" (the 20.12 notes' table gives
    # 20.02 as 1.5.0a0+3bbb36e; the release's own page is kept, both lie between 19.10's and 20.03's)
    Release((20, 2), "1.4.0a0", _PT_NOTES + "rel_20-02.html"),
    # "PyTorch container image version 20.03 is based on 1.5.0a0+8f84ded" (verbatim copy of the 20.03 notes; the
    # 20.12 table agrees)
    Release((20, 3), "1.5.0a0", _PT_NOTES + "rel_20-03.html"),
    Release((20, 7), "1.6.0a0", _PT_2012_TABLE),  # "20.07 | NVIDIA CUDA 11.0.194 | 1.6.0a0+9907a3e"
    Release((20, 8), "1.7.0a0", _PT_2012_TABLE),  # "20.08 | 1.7.0a0+6392713"
    Release((20, 9), "1.7.0a0", _PT_2012_TABLE),  # "20.09 | NVIDIA CUDA 11.0.3 | 1.7.0a0+8deb4fe"
    Release((20, 10), "1.7.0a0", _PT_2012_TABLE),  # "20.10 | 1.7.0a0+7036e91"
    Release((20, 11), "1.8.0a0", _PT_2012_TABLE),  # "20.11 | 18.04 | NVIDIA CUDA 11.1.0 | 1.8.0a0+17f8c32"
    # "PyTorch container image version 20.12 is based on 1.8.0a0+1606899" (same copy as the table)
    Release((20, 12), "1.8.0a0", _PT_NOTES + "rel_20-12.html"),
    # "PyTorch container image version 21.09 is based on 1.10.0a0+3fd9dcf" (verbatim copy of the 21.09 notes)
    Release((21, 9), "1.10.0a0", _PT_NOTES + "rel_21-09.html"),
    # "PyTorch container image version 22.11 is based on 1.13.0a0+936e930." (quoted under this address in
    # github.com/cmu-sei/juneberry, docker/cudadev.Dockerfile)
    Release((22, 11), "1.13.0a0", _PT_NOTES + "rel-22-11.html"),
    # NVIDIA's Jetson build of the 24.01 release, torch-2.2.0a0+81ea7a4.nv24.01-cp310-cp310-linux_aarch64.whl
    # (a repository's comment agrees: "In NVIDIA PyTorch container 24.01, the PyTorch version is 2.2.0a0+81ea7a4")
    Release(
        (24, 1),
        "2.2.0a0",
        "https://developer.download.nvidia.com/compute/redist/jp/v60dp/pytorch/"
        "torch-2.2.0a0+81ea7a4.nv24.01-cp310-cp310-linux_aarch64.whl",
    ),
    Release((25, 12), "2.10.0a0", _PT_NOTES + "rel-25-12.html"),  # "based on 2.10.0a0+b4e4ee81d3"
)

# NVIDIA's TensorFlow 1 line: the unflavoured ``YY.MM-py3`` images of the years before the tf1/tf2 split, then the
# tf1 flavour (``YY.MM-tf1-py3``), NVIDIA's TensorFlow 1.15 builds.
TENSORFLOW1 = (
    # "TensorFlow container image version 18.05 is based on TensorFlow 1.7.0."
    Release(
        (18, 5), "1.7.0", "https://docs.nvidia.com/deeplearning/frameworks/tensorflow-release-notes/rel_18.05.html"
    ),
    # "TensorFlow container image version 18.07 is based on TensorFlow 1.8.0."
    Release((18, 7), "1.8.0", _TF_NOTES + "rel_18.07.html"),
    # "TensorFlow container image version 18.10 is based on TensorFlow 1.10.0."
    Release((18, 10), "1.10.0", _TF_NOTES + "rel_18.10.html"),
    # "The NVIDIA TensorFlow 1.15.2 from 20.06 release is based on upstream TensorFlow version 1.15.2." (NVIDIA's
    # release tag v1.15.2+nv20.06 agrees)
    Release((20, 6), "1.15.2", "https://developer.nvidia.com/blog/accelerating-tensorflow-on-a100-gpus/"),
    # NVIDIA's release tags v1.15.5+nvYY.MM in NVIDIA/tensorflow, whose tensorflow/tools/pip_package/setup.py at
    # the tag reads ``_VERSION = '1.15.5'``
    *(
        Release((yy, mm), "1.15.5", f"{_NV_TF1}/tag/v1.15.5%2Bnv{yy}.{mm:02d}")
        for yy, mm in ((21, 12), (22, 1), (22, 2), (22, 3), (22, 4), (22, 5), (22, 6), (22, 8))
    ),
    # "NVIDIA TensorFlow release YY.MM is based on TensorFlow 1.15.5." (22.10 from its release tag, as above)
    *(
        Release(
            (yy, mm),
            "1.15.5",
            f"{_NV_TF1}/tag/v1.15.5%2Bnv{yy}.{mm:02d}" if (yy, mm) in ((22, 9), (22, 10)) else _NV_TF1,
        )
        for yy, mm in ((22, 9), (22, 10), (22, 11), (22, 12), (23, 1), (23, 2), (23, 3))
    ),
)

# The first release whose notes name only the flavoured TensorFlow images ("Container image 20.03-tf1-py3 and
# 20.03-tf2-py3 contains Python 3.6", rel_20-03.html); the 19.10 notes still name ``19.10-py2`` and ``19.10-py3``.
FIRST_FLAVOURED_TENSORFLOW = (20, 3)


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
    return Bounds(
        low.version if low else None,
        high.version if high else None,
        tuple(row for row in (low, high) if row is not None),
    )
