"""Dataset registry: `read_index(name, root)` returns the validated sample index of any supported dataset."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from bench.config import DATASETS
from bench.data import readers, reuse
from bench.data.index import validate_index
from bench.errors import choice_error


def _read_multi(roots_file) -> pd.DataFrame:
    """The multi-dataset stream; its `root` is a roots file (bench/data/multi.py)."""
    from bench.data.multi import read_multi  # not at the top: bench.data.multi imports bench.data

    return read_multi(roots_file)


_READERS = {
    "synthetic": lambda root: readers.read_mvtec(root, dataset="synthetic"),  # written in the MVTec AD layout
    "mvtec": readers.read_mvtec,
    "visa": readers.read_visa,
    "btad": readers.read_btad,
    "mpdd": readers.read_mpdd,
    "dagm": readers.read_dagm,
    "multi": _read_multi,
}


def read_index(dataset: str, root) -> pd.DataFrame:
    """The sample index of `dataset` staged at `root` (paths in it are relative to `root`); read once per
    `reuse_reads()` block (bench/data/reuse.py), afresh otherwise."""
    if dataset not in _READERS:
        raise choice_error("dataset", dataset, DATASETS)
    memo, key = reuse.indexes(), (dataset, str(root))
    if memo is not None and key in memo:
        return memo[key].copy()
    index = validate_index(_READERS[dataset](root), str(root))
    if memo is not None:
        memo[key] = index.copy()
    return index


def generation_record(dataset: str, root) -> bytes | None:
    """The bytes that identify a generated dataset's content beyond its file list (synthetic.json: generator
    version, parameters and what it measured on the images), or None for datasets read as released."""
    if dataset != "synthetic":
        return None
    path = Path(root) / "synthetic.json"
    return path.read_bytes() if path.is_file() else None
