"""The single datasets' readers, and the one validated read every dataset's index goes through: `bench.data.
read_index` for a run, and the multi-dataset stream for each of its members (bench/data/multi.py), which is why
this table lives apart from the package's __init__ (that imports the stream's reader; the stream imports this)."""

from __future__ import annotations

import pandas as pd

from bench.data import readers, reuse
from bench.data.index import validate_index

READERS = {
    "synthetic": lambda root: readers.read_mvtec(root, dataset="synthetic"),  # written in the MVTec AD layout
    "mvtec": readers.read_mvtec,
    "visa": readers.read_visa,
    "btad": readers.read_btad,
    "mpdd": readers.read_mpdd,
    "dagm": readers.read_dagm,
}


def read_validated(dataset: str, root, reader) -> pd.DataFrame:
    """`reader(root)`'s index, validated; read once per `reuse_reads()` block (bench/data/reuse.py), afresh
    otherwise."""
    memo, key = reuse.indexes(), (dataset, str(root))
    if memo is not None and key in memo:
        return memo[key].copy()
    index = validate_index(reader(root), str(root))
    if memo is not None:
        memo[key] = index.copy()
    return index


def read_single(dataset: str, root) -> pd.DataFrame:
    """The index of one of READERS' datasets (not the multi-dataset stream)."""
    return read_validated(dataset, root, READERS[dataset])
