"""The single datasets' readers, and the one validated read every dataset's index goes through: `bench.data.
read_index` for a run, and the multi-dataset stream for each of its members (bench/data/multi.py), which is why
this table lives apart from the package's __init__ (that imports the stream's reader; the stream imports this)."""

from __future__ import annotations

import pandas as pd

from bench.data import readers, reuse
from bench.data.index import validate_index
from bench.datasets import BUILT_IN, DatasetSpec, get
from bench.errors import ConfigError, DatasetError

# The built-in single datasets' readers, from their registrations (bench.datasets; the streams are not here)
READERS = {s.name: s.load_reader() for s in BUILT_IN if s.track == "image" and not s.stream}


def reader_of(dataset: str):
    """The reader of a single image dataset: READERS', else a plugin's (loaded now); ConfigError listing the valid
    names otherwise (the streams included: they are read by their own code)."""
    if dataset in READERS:
        return READERS[dataset]
    spec = get(dataset, "image")
    if spec.stream:
        raise ConfigError(f"{dataset} is a multi-dataset stream, not a single dataset")
    return spec.load_reader()


def read_validated(dataset: str, root, reader) -> pd.DataFrame:
    """`reader(root)`'s index, validated; read once per `reuse_reads()` block (bench/data/reuse.py), afresh
    otherwise."""
    memo, key = reuse.indexes(), (dataset, str(root))
    if memo is not None and key in memo:
        return memo[key].copy()
    index = _read(get(dataset, "image"), root, reader)
    if memo is not None:
        memo[key] = index.copy()
    return index


def _read(spec: DatasetSpec, root, reader) -> pd.DataFrame:
    """`reader(root)`'s index, validated, the root checked first. A DatasetError that does not say what was
    expected ends with the registration's layout text, so a reader is understood without quoting its layout
    itself (the built-in ones do, where the part of it that is missing is what they name)."""
    try:
        if not spec.stream:  # a stream's root is a roots file, checked by its reader
            readers.check_root(root, spec.layout)
        return validate_index(reader(root), str(root))
    except DatasetError as e:
        if not spec.layout or "(expected " in str(e):
            raise
        raise DatasetError(f"{e} (expected {spec.layout})") from None


def read_single(dataset: str, root) -> pd.DataFrame:
    """The index of one single dataset (a built-in of READERS or a plugin; not the multi-dataset stream)."""
    return read_validated(dataset, root, reader_of(dataset))
