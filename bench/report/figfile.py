"""Writing one figure file: whole or not at all, and a full disk is one line, not a backend's traceback."""

from __future__ import annotations

from pathlib import Path
from typing import Callable

from bench.errors import BenchError
from bench.io import atomic_path


def plain(text) -> str:
    """`text` as matplotlib is to draw it, literally: every `$` escaped, so a task or method name holding `$...$`
    is not parsed as mathtext (where a malformed expression fails the drawing)."""
    return str(text).replace("$", r"\$")


AGGREGATE_REMEDY = "free space there (or publish the values only: --figures none) and run aggregate again"


def write_figure(path: Path, write: Callable[[Path], None], remedy: str = AGGREGATE_REMEDY) -> None:
    """`write(tmp)` draws the file into a fresh temp file beside `path` (bench.io.atomic_path), which then replaces
    `path`. An OSError on the way (a full disk, a quota) is one BenchError naming the file and `remedy` (what the
    command writing it lets the user do); the temp file is gone and a previous `path` is kept as it was."""
    try:
        with atomic_path(path) as tmp:
            write(tmp)
    except OSError as e:
        raise BenchError(f"{path}: cannot write the figure ({e.strerror or e}); {remedy}; the previous file is kept"
                         ) from None
