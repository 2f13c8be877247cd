"""Shared presentation: display names, row order, cell formatting, and the markdown / LaTeX (booktabs) grids.

Everything here is deterministic text (no dates, no host names), so `make verify` can re-render a table from the
result files and compare it with the published one byte for byte.
"""

from __future__ import annotations

import csv
import functools
import hashlib
from pathlib import Path

import numpy as np
import pandas as pd

from bench.config import DATASETS
from bench.datasets import BUILT_IN

MULTI = "multi"  # the MultiDataset stream: tasks named "<dataset>/<concept>"
METHOD = ("model", "backbone", "weights")  # what a "method" is when cells average "across methods and backbones"

# Image/pixel × NCL/CL: the four value columns of Table 2 and of the per-method table.
COLUMNS = (("image", "ncl"), ("image", "cl"), ("pixel", "ncl"), ("pixel", "cl"))
COLUMN_LABELS = ("Image NCL", "Image CL", "Pixel NCL", "Pixel CL")

DATASET_LABELS = {s.name: s.label for s in BUILT_IN if s.track == "image"}  # their registrations' (bench.datasets)
ORDERING_LABELS = {"easy_to_hard": "Easy-to-Hard", "hard_to_easy": "Hard-to-Easy", "random": "Random",
                   "alphabetical": "Alphabetical", "custom": "Custom"}
PAPER_DIR = Path(__file__).resolve().parents[2] / "data" / "paper"  # the paper's tables, transcribed
# the models' row order: the order InCLAD's timing tables list them in (Tables 4 then 5)
PAPER_MODEL_TABLES = ("inclad_table4.csv", "inclad_table5.csv")


def model_labels() -> dict[str, str]:
    """Each image detector's table label (ModelSpec.label). The registry imports the detectors, hence torch: the
    first table that names a model pays for it."""
    from bench.registry import specs

    return {name: spec.label for name, spec in specs().items()}


def model_order() -> tuple[str, ...]:
    """The paper's models in its timing tables' row order, then every other registered detector in the
    registry's order."""
    listed = _paper_models()
    return (*listed, *(m for m in model_labels() if m not in listed))


@functools.cache
def _paper_models() -> tuple[str, ...]:
    listed: dict[str, None] = {}
    for name in PAPER_MODEL_TABLES:
        with open(PAPER_DIR / name, newline="") as f:
            listed.update((row["model"], None) for row in csv.DictReader(f))
    return tuple(listed)


def _dataset_label(name) -> str:
    """A built-in dataset's table label from the table; only another name asks the registry (a plugin's
    DatasetSpec.label), so the labels of a page's thousands of rows cost no plugin look-up."""
    if name in DATASET_LABELS:
        return DATASET_LABELS[name]
    from bench.datasets import specs

    spec = specs("image").get(name)
    return spec.label if spec is not None else str(name)


def label(kind: str, value) -> str:
    if kind == "dataset":
        return _dataset_label(value)
    table = {"ordering": lambda: ORDERING_LABELS, "model": model_labels}
    return table[kind]().get(value, str(value)) if kind in table else str(value)


def rank(kind: str, value) -> tuple:
    """Sort key: the papers' order first (datasets: bench.config.DATASETS', orderings: ORDERING_LABELS',
    models: `model_order`), anything else alphabetically after it."""
    order = {"dataset": lambda: DATASETS, "ordering": lambda: tuple(ORDERING_LABELS), "model": model_order}
    order = order[kind]() if kind in order else ()
    return (order.index(value), "") if value in order else (len(order), value)


def sort_frame(df: pd.DataFrame, cols: list[str]) -> pd.DataFrame:
    if df.empty:
        return df.reset_index(drop=True)
    ranks = {c: {v: rank(c, v) for v in df[c].unique()} for c in cols}  # once per value, not per row
    keys = df[cols].apply(lambda r: tuple(ranks[c][r[c]] for c in cols), axis=1)
    return df.assign(_key=keys).sort_values("_key", kind="stable").drop(columns="_key").reset_index(drop=True)


@functools.cache
def drawing_code(module: str) -> str:
    """The source of drawing module `module` and matplotlib's version: what a figure's digest includes, so that a
    change to either redraws the figure instead of leaving an old drawing in place. Read once per process
    (inspect reads and tokenises the file; a campaign's report takes hundreds of digests)."""
    import importlib
    import inspect

    import matplotlib

    return inspect.getsource(importlib.import_module(module)) + "\nmatplotlib " + matplotlib.__version__


def short_hash(text: str, n: int = 8) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:n]


def format_cell(mean: float, std: float, n: int, n_nan: int = 0) -> str:
    """`0.812 ± 0.031`; one contributor: no ±; none: `–`; NaN contributors counted in brackets."""
    if n == 0 or not np.isfinite(mean):
        text = "–"
    else:
        text = f"{mean:.3f}" if n == 1 else f"{mean:.3f} ± {std:.3f}"
    return text + (f" [{n_nan} NaN]" if n_nan else "")


def latex_escape(text: str) -> str:
    text = text.replace("\\", "\x00")  # first, so the backslashes added below stay
    for ch in "_&%#${}":
        text = text.replace(ch, "\\" + ch)
    return text.replace("\x00", r"\textbackslash{}")


def latex_cell(mean: float, std: float, n: int, n_nan: int = 0) -> str:
    if n == 0 or not np.isfinite(mean):
        text = "--"
    else:
        text = f"${mean:.3f}$" if n == 1 else f"${mean:.3f}\\,{{\\scriptstyle\\pm\\,{std:.3f}}}$"
    return text + (f"\\textsuperscript{{{n_nan}\\,NaN}}" if n_nan else "")


def grid_rows(long: pd.DataFrame, keys: list[str]) -> list[tuple[tuple, dict]]:
    """Pivot a long table (one row per keys × level × protocol) into rows of the four COLUMNS, keeping order."""
    out: dict[tuple, dict] = {}
    for rec in long.to_dict("records"):
        out.setdefault(tuple(rec[k] for k in keys), {})[(rec["level"], rec["protocol"])] = rec
    return list(out.items())


def markdown_table(header: list[str], rows: list[list[str]]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    return lines + ["| " + " | ".join(r) + " |" for r in rows]


MISSING = "–"  # a missing or non-finite value, in every rendered table (format_cell's mark too)


def is_missing(value) -> bool:
    """None, pandas' NA, or a float that is not finite (NaN, ±inf)."""
    return value is None or value is pd.NA or (isinstance(value, (float, np.floating)) and not np.isfinite(value))


def value_text(value, digits: int = 4, significant: bool = False, missing: str = MISSING) -> str:
    """One cell of a rendered frame: a float to `digits` decimals (`significant`: to `digits` significant
    figures), a missing value as `missing`, anything else (text, an integer) as str."""
    if is_missing(value):
        return missing
    if isinstance(value, (float, np.floating)):
        return f"{value:.{digits}{'g' if significant else 'f'}}"
    return str(value)


def frame_markdown(df: pd.DataFrame, digits: int = 4, column_digits: dict[str, int] | None = None,
                   significant: bool = False, missing: str = MISSING) -> list[str]:
    """`df` as markdown table lines under its own column names, each cell by `value_text`: floats to `digits`
    (`column_digits[column]` where given)."""
    column_digits = column_digits or {}
    rows = [[value_text(v, column_digits.get(c, digits), significant, missing) for c, v in zip(df.columns, row)]
            for row in df.itertuples(index=False)]
    return markdown_table([str(c) for c in df.columns], rows)


def latex_grid(key_headers: list[str], rows: list[tuple[list[str], list[str]]], group_col: bool = True) -> list[str]:
    """booktabs tabular: key columns, then Image-level NCL/CL and Pixel-level NCL/CL; `\\midrule` between groups
    of the first key column, whose value is printed once per group (InCLAD Table 2 style)."""
    k = len(key_headers)
    lines = [r"\begin{tabular}{" + "l" * k + "cccc}", r"\toprule",
             " & ".join(key_headers) + r" & \multicolumn{2}{c}{Image-level} & \multicolumn{2}{c}{Pixel-level} \\",
             rf"\cmidrule(lr){{{k + 1}-{k + 2}}}\cmidrule(lr){{{k + 3}-{k + 4}}}",
             " & " * k + r"NCL & CL & NCL & CL \\", r"\midrule"]
    previous = None
    for keys, cells in rows:
        shown = list(keys)
        if group_col:
            if previous is not None and keys[0] != previous:
                lines.append(r"\midrule")
            if keys[0] == previous:
                shown[0] = ""
            previous = keys[0]
        lines.append(" & ".join(shown + cells) + r" \\")
    return lines + [r"\bottomrule", r"\end{tabular}"]


def provenance_lines(runs: pd.DataFrame, n_missing: int) -> list[str]:
    """What a table rests on: run count, commits (with dirty-tree counts), config hashes, missing runs."""
    if runs.empty:
        return [f"Rests on 0 complete runs; {n_missing} run(s) missing (missing.csv)."]
    commits = []
    for commit, g in runs.groupby("git_commit", sort=True):
        state = g["git_dirty"].astype(int)
        dirty, unknown = int((state == 1).sum()), int((state == -1).sum())  # -1: run outside a git checkout
        commits.append(f"{str(commit)[:12]} ({len(g)} run{'s' * (len(g) != 1)}"
                       + (f", {dirty} from a dirty tree" if dirty else "")
                       + (f", {unknown} with unknown tree state" if unknown else "") + ")")
    configs = sorted(runs["config_sha256"].astype(str).unique())
    if len(configs) <= 8:
        config_text = f"config SHA-256 {', '.join(c[:12] for c in configs)}"
    else:
        digest = short_hash("\n".join(configs), 12)
        config_text = f"{len(configs)} config SHA-256s (digest of the sorted list {digest}; each in runs.csv)"
    lines = [f"Rests on {len(runs)} complete run{'s' * (len(runs) != 1)} from commit{'s' * (len(commits) != 1)} "
             f"{', '.join(commits)}; {config_text}.",
             f"{n_missing} run(s) missing (incomplete or failed; listed in missing.csv, never averaged in)."]
    threads = {int(t) for t in runs.get("cpu_threads", pd.Series(dtype=object)) if str(t).isdigit()}
    for steps in runs.get("step_threads", pd.Series(dtype=object)):  # a resumed run's steps may differ
        threads.update(int(t) for t in str(steps).split(",") if t.isdigit())
    threads = sorted(threads)
    if len(threads) > 1:  # on CPU a trained detector's R depends on it (docs/cluster.md, "Threads")
        lines.append(f"Made with {', '.join(map(str, threads))} CPU threads (cpu_threads in runs.csv): on CPU a "
                     "trained detector's numbers depend on the thread count.")
    return lines
