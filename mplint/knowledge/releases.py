"""When each framework release came out: the bound a dated container image puts on what it can hold.

An image tagged ``YY.MM`` (``nvcr.io/nvidia/tensorflow:23.03-tf2-py3``, ``merlin-tensorflow:22.12``) was built in
that month, so it holds no framework released after it. The dates are the first upload of each minor release's
first final version to PyPI (``https://pypi.org/pypi/<name>/json``, the earliest ``upload_time`` of the release's
files), which is the day its release tag was published within days: TensorFlow's 2.16.1 (2024-03-09; 2.16.0 was
never uploaded) is the first with Keras 3, 2.9.0 (2022-05-16) the first without ``mixed_precision.experimental``.

PyTorch containers are the exception: NVIDIA ships a pre-release of the *next* torch (``25.12`` holds
``2.10.0a0``, released as 2.10.0 in January 2026), so a PyTorch image admits up to the pre-release of the minor
after the newest released one (``newest_in_image``).

apex has no versioned releases; its AMP was marked deprecated on 2022-10-10 (NVIDIA/apex 48bf0df5, "Deprecate
outdated features": the README's "Deprecated. Use PyTorch AMP" and warnings in ``apex/__init__.py``) and removed on
2025-05-08 (NVIDIA/apex cb65b8ed, "remove old features: amp, ddp, and rnn"). An environment dated before the first
holds an apex whose AMP is its documented API.
"""

from __future__ import annotations

import re
from typing import NamedTuple

PYPI = "https://pypi.org/pypi/{}/json"


class Release(NamedTuple):
    version: str  # major.minor
    date: tuple[int, int, int]  # first upload to PyPI of its first final version


def _table(rows: str) -> tuple[Release, ...]:
    out = []
    for row in rows.split():
        version, date = row.split("@")
        year, month, day = (int(p) for p in date.split("-"))
        out.append(Release(version, (year, month, day)))
    return tuple(out)


# tensorflow (the ``tensorflow`` project; the -gpu and -cpu variants were uploaded the same days)
TENSORFLOW = _table(
    """
    1.0@2017-02-15 1.1@2017-04-21 1.2@2017-06-15 1.3@2017-08-16 1.4@2017-11-01 1.5@2018-01-26 1.6@2018-03-01
    1.7@2018-03-29 1.8@2018-04-28 1.9@2018-07-10 1.10@2018-08-08 1.11@2018-09-27 1.12@2018-11-06 1.13@2019-02-26
    1.14@2019-06-19 2.0@2019-09-30 1.15@2019-10-16 2.1@2020-01-08 2.2@2020-05-07 2.3@2020-07-27 2.4@2020-12-14
    2.5@2021-05-13 2.6@2021-08-11 2.7@2021-11-04 2.8@2022-02-02 2.9@2022-05-16 2.10@2022-09-06 2.11@2022-11-18
    2.12@2023-03-22 2.13@2023-07-05 2.14@2023-09-26 2.15@2023-11-14 2.16@2024-03-09 2.17@2024-07-11
    2.18@2024-10-25 2.19@2025-03-12 2.20@2025-08-13 2.21@2026-03-06
    """
)

TORCH = _table(
    """
    1.0@2018-12-07 1.1@2019-04-30 1.2@2019-08-08 1.3@2019-10-10 1.4@2020-01-15 1.5@2020-04-21 1.6@2020-07-28
    1.7@2020-10-27 1.8@2021-03-04 1.9@2021-06-15 1.10@2021-10-21 1.11@2022-03-10 1.12@2022-06-28 1.13@2022-10-28
    2.0@2023-03-15 2.1@2023-10-04 2.2@2024-01-30 2.3@2024-04-24 2.4@2024-07-24 2.5@2024-10-17 2.6@2025-01-29
    2.7@2025-04-23 2.8@2025-08-06 2.9@2025-10-15 2.10@2026-01-21 2.11@2026-03-23 2.12@2026-05-13 2.13@2026-07-08
    2.14@2026-09-02 2.15@2026-10-28
    """
)

KERAS = _table(
    """
    2.4@2020-06-17 2.6@2021-08-09 2.7@2021-11-03 2.8@2022-01-31 2.9@2022-05-13 2.10@2022-09-02 2.11@2022-11-14
    2.12@2023-03-20 2.13@2023-06-27 2.14@2023-09-11 2.15@2023-11-07 3.0@2023-11-28 3.1@2024-03-18 3.2@2024-04-08
    3.3@2024-04-22 3.4@2024-06-25 3.5@2024-08-12 3.6@2024-10-03 3.7@2024-11-26 3.8@2025-01-07 3.9@2025-03-04
    3.10@2025-05-19 3.11@2025-07-30 3.12@2025-10-27 3.13@2025-12-17 3.14@2026-04-03 3.15@2026-06-24
    """
)

APEX_AMP_DEPRECATED = (2022, 10)  # NVIDIA/apex 48bf0df5, 2022-10-10
APEX_AMP_REMOVED = (2025, 5)  # NVIDIA/apex cb65b8ed, 2025-05-08

TABLES = {"tensorflow": TENSORFLOW, "torch": TORCH, "keras": KERAS}


def newest_released(framework: str, month: tuple[int, int]) -> str | None:
    """The newest minor version of ``framework`` released by the end of ``month`` ((year, month)); None when none
    was. The order is by version, not by date: TF 1.15 came out after 2.0."""
    released = [r for r in TABLES[framework] if r.date[:2] <= month]
    return max(released, key=lambda r: _key(r.version)).version if released else None


def newest_in_image(framework: str, month: tuple[int, int]) -> str | None:
    """The newest version an image of ``month`` may hold, as a PEP 440 bound's version: the newest release for
    TensorFlow and Keras (``2.11``), the pre-release of the next minor for NVIDIA's PyTorch builds (``2.10.0a0``
    for a month whose newest torch is 2.9)."""
    newest = newest_released(framework, month)
    if newest is None or framework != "torch":
        return newest
    major, minor = _key(newest)
    return f"{major}.{minor + 1}.0a0"


def _key(version: str) -> tuple[int, int]:
    major, minor = version.split(".")[:2]
    return int(major), int(minor)


def image_month(tag: str) -> tuple[int, int] | None:
    """(year, month) of a ``YY.MM`` tag (``23.03-tf2-py3``, ``22.12``), None for any other tag."""
    m = re.match(r"(\d{2})\.(\d{2})(?![\d.])", tag)
    if m is None or not 1 <= int(m.group(2)) <= 12 or not 17 <= int(m.group(1)) <= 40:
        return None
    return 2000 + int(m.group(1)), int(m.group(2))
