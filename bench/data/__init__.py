"""Dataset registry: `read_index(name, root)` returns the validated sample index of any supported dataset."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from bench.config import DATASETS  # noqa: F401 - importable from here, as tests and callers do
from bench.data.datasets import READERS as _READERS  # noqa: F401 - the built-in readers (tests patch them)
from bench.data.datasets import read_validated, reader_of
from bench.data.multi import MULTI, read_multi


def read_index(dataset: str, root) -> pd.DataFrame:
    """The sample index of `dataset` staged at `root` (paths in it are relative to `root`; the multi-dataset
    stream's `root` is a roots file); read once per `reuse_reads()` block (bench/data/reuse.py), afresh otherwise."""
    if dataset == MULTI:
        return read_validated(dataset, root, read_multi)
    return read_validated(dataset, root, reader_of(dataset))  # a built-in's or a plugin's; else ConfigError


def generation_record(dataset: str, root) -> bytes | None:
    """The bytes that identify a generated dataset's content beyond its file list (synthetic.json: generator
    version, parameters and what it measured on the images), or None for datasets read as released."""
    if dataset != "synthetic":
        return None
    path = Path(root) / "synthetic.json"
    return path.read_bytes() if path.is_file() else None
