"""Checkpoints that cannot carry code: atomic `save(path, obj)`, safe `load(path)`.

A checkpoint lies next to its result file, where anyone who can write there could plant one; unpickling it
unrestricted (torch.load with the weights-only guard off) would run whatever its `__reduce__` says. So only plain data is stored —
tensors, numpy arrays (as tensors, marked so they come back as arrays), dicts with string keys, lists, tuples,
str, int, float, bool, None — and files are read with `weights_only=True`, which refuses any other global.
Anything unreadable (truncated, corrupt, another program's file) raises CheckpointError naming the file, and so
does a failed write (a full disk: torch.save raises RuntimeError, not OSError); the old file is then kept intact.
A checkpoint that cannot be used is moved aside (`move_aside`), never deleted: it may be evidence.
`digest(obj)` fingerprints plain data (values, dtypes, shapes), so a checkpoint can carry its own content's digest:
a file whose values were changed (weights zeroed, say) but whose identifying fields were copied is then told apart.
"""

from __future__ import annotations

import hashlib
import os
import time
from pathlib import Path

import numpy as np
import torch

from bench.errors import CheckpointError
from bench.io import atomic_path

FORMAT = "bench-checkpoint"
VERSION = 1
_NDARRAY = "__ndarray__"  # marks a numpy array stored as a tensor


def save(path, obj) -> None:
    """Write `obj` (plain data, see the module doc) atomically: readers see the old file or the new one."""
    path = Path(path)
    try:
        payload = _encode(obj, "")
    except TypeError as e:  # a detector (a plugin's, say) whose state holds objects: its author must change it
        raise CheckpointError(f"{path}: cannot store this state: {e}; a detector's state_dict() holds only plain "
                              "data (bench.testing's contract checks test this before any run)") from None
    try:
        with atomic_path(path) as tmp:
            torch.save({"format": FORMAT, "version": VERSION, "payload": payload}, tmp)
    except (OSError, RuntimeError) as e:  # torch's zip writer reports a full disk as RuntimeError
        reason = e.strerror if isinstance(e, OSError) and e.strerror else str(e).splitlines()[0] if str(e) else ""
        raise CheckpointError(f"{path}: cannot write the checkpoint ({reason or type(e).__name__}); free space "
                              f"there or choose another --out, then run again (the previous checkpoint is kept)"
                              ) from None


def check_storable(obj, what: str) -> None:
    """CheckpointError naming `what` and the first value of `obj` a checkpoint cannot store (an object, a string
    array, a dict with other keys)."""
    try:
        _encode(obj, "")
    except TypeError as e:
        raise CheckpointError(f"{what} cannot be checkpointed: {e}; a detector's state_dict() holds only plain "
                              "data (tensors, numeric arrays, dicts with string keys, lists, numbers, strings)") from None


def move_aside(path) -> Path:
    """Rename an unusable checkpoint to `<path>.bad-<time>` (kept for inspection); returns the new path."""
    path = Path(path)
    stamp = time.strftime("%Y%m%dT%H%M%S")
    bad = path.with_name(f"{path.name}.bad-{stamp}")
    n = 1
    while bad.exists():  # two in one second: keep both
        bad, n = path.with_name(f"{path.name}.bad-{stamp}-{n}"), n + 1
    os.replace(path, bad)
    return bad


def load(path):
    """The object `save` wrote; CheckpointError for anything else (no code is ever run while reading)."""
    path = Path(path)
    try:
        data = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as e:  # truncated zip, foreign pickle, a global outside the allow-list: all one verdict
        # torch's own message advises turning the weights-only guard off: exactly what must not be done here
        raise CheckpointError(f"{path}: not a readable checkpoint: corrupt, truncated, or holding objects other "
                              f"than plain data, which are never unpickled ({type(e).__name__})") from None
    if not isinstance(data, dict) or data.get("format") != FORMAT or "payload" not in data:
        raise CheckpointError(f"{path}: not a bench checkpoint (no '{FORMAT}' header)")
    if data.get("version") != VERSION:
        raise CheckpointError(f"{path}: checkpoint version {data.get('version')!r}, expected {VERSION}")
    return _decode(data["payload"])


def digest(obj) -> str:
    """SHA-256 of plain data (see the module doc): keys, types, dtypes, shapes and values; memory layout and the
    array/tensor distinction ignored (a numpy array and the tensor it is stored as digest alike)."""
    h = hashlib.sha256()
    _feed(h, _encode(obj, ""))
    return h.hexdigest()


def _feed(h, obj) -> None:
    if isinstance(obj, dict):
        if set(obj) == {_NDARRAY}:
            obj = obj[_NDARRAY]
        else:
            h.update(f"dict{len(obj)}(".encode())
            for key in sorted(obj):
                h.update(f"{key!r}:".encode())
                _feed(h, obj[key])
            h.update(b")")
            return
    if isinstance(obj, torch.Tensor):
        t = obj.contiguous()
        h.update(f"tensor:{t.dtype}:{tuple(t.shape)}:".encode())
        h.update(t.reshape(-1).view(torch.uint8).numpy().tobytes())
    elif isinstance(obj, (list, tuple)):
        h.update(f"{type(obj).__name__}{len(obj)}(".encode())
        for v in obj:
            _feed(h, v)
        h.update(b")")
    else:  # None, str, int, float, bool: repr tells them (and 1 from 1.0 from True) apart
        h.update(f"{type(obj).__name__}:{obj!r};".encode())


def _encode(obj, where: str):
    if isinstance(obj, np.ndarray):
        if obj.dtype.kind not in "biuf":
            raise TypeError(f"checkpoint: array {where or '<root>'} has dtype {obj.dtype} (numbers only)")
        # ascontiguousarray returns at least 1-d: a 0-d array (Isolation Forest's fitted offset) would come back as
        # shape (1,), so the state would no longer equal what was saved and a resume would be refused
        return {_NDARRAY: torch.from_numpy(np.ascontiguousarray(obj).reshape(obj.shape))}
    if isinstance(obj, np.generic):
        return obj.item()
    if isinstance(obj, torch.Tensor):
        return obj.detach().cpu()
    if isinstance(obj, dict):
        if not all(isinstance(k, str) for k in obj):
            raise TypeError(f"checkpoint: dict {where or '<root>'} has non-string keys")
        return {k: _encode(v, f"{where}/{k}") for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return type(obj)(_encode(v, f"{where}[{i}]") for i, v in enumerate(obj))
    if obj is None or isinstance(obj, (str, int, float, bool)):
        return obj
    raise TypeError(f"checkpoint: {where or '<root>'} is a {type(obj).__name__} (only plain data is stored)")


def _decode(obj):
    if isinstance(obj, dict):
        if set(obj) == {_NDARRAY} and isinstance(obj[_NDARRAY], torch.Tensor):
            return obj[_NDARRAY].numpy()
        return {k: _decode(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return type(obj)(_decode(v) for v in obj)
    return obj
