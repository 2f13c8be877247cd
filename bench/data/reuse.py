"""Reuse of dataset reads within one planning pass.

Expanding a grid prepares every run of it (a hundred or more for a full InCLAD grid), and each preparation reads
the dataset index and checks every image and mask header of its tasks. On a cluster's shared file system that is
the same directory walk and the same ten thousand header reads again for each run. Inside `reuse_reads()` each
(dataset, root) index is read once and each split's files checked once; outside it every call reads afresh, so a
long-lived process never works from a stale index.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

_indexes: dict | None = None  # (dataset, root) -> validated index, while a reuse_reads() block is open
_checked: dict | None = None  # (root, image paths, mask paths) of splits whose headers were read and agreed -> sizes


@contextmanager
def reuse_reads() -> Iterator[None]:
    global _indexes, _checked
    outer = _indexes is not None
    if not outer:
        _indexes, _checked = {}, {}
    try:
        yield
    finally:
        if not outer:
            _indexes, _checked = None, None


def indexes() -> dict | None:
    """The open block's index memo, or None outside one."""
    return _indexes


def checked() -> dict | None:
    """The open block's splits already checked (→ their image sizes), or None outside one."""
    return _checked
