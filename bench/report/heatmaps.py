"""Task-transition heatmaps like InCLAD Appendix F: the lower triangle of R per dataset × ordering × protocol ×
level, averaged over methods (a method's seeds first, then across methods and backbones, as in Table 2; the
MultiDataset stream over the selected methods only), optionally one per method. Rows: after learning task i;
columns: evaluated task j. Drawn with matplotlib's Agg canvas (no display, no pyplot global state)."""

from __future__ import annotations

import hashlib
import os
import sys
import warnings
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from bench.errors import BenchError
from bench.report.figfile import plain, write_figure
from bench.report.render import METHOD, MULTI, drawing_code, label, short_hash

LEVELS = ("image", "pixel")
PROTOCOLS = ("ncl", "cl")
ALL = "all"  # model/backbone/weights of an averaged heatmap
ANNOTATE_MAX_TASKS = 15  # beyond this, numbers in the cells become unreadable


@dataclass
class Heatmap:
    stem: str  # file name without extension
    dataset: str
    ordering: str
    protocol: str
    level: str
    model: str
    backbone: str
    weights: str
    tasks: list
    mean: np.ndarray  # [N, N], NaN above the diagonal and where no run has a value
    n_runs: np.ndarray  # [N, N] runs with a finite value behind each cell
    n_methods: int


def _average(runs: pd.DataFrame, details: dict, level: str, n: int) -> tuple[np.ndarray, np.ndarray]:
    """Seeds of a method averaged first, then the mean across methods; NaN cells skipped and counted."""
    method_means, n_runs = [], np.zeros((n, n), dtype=int)
    for _, g in runs.groupby(list(METHOD), sort=True):
        stack = np.stack([details[k][f"R/{level}"] for k in g["run_key"]])
        finite = np.isfinite(stack)
        n_runs += finite.sum(0)
        with np.errstate(invalid="ignore"):
            method_means.append(np.where(finite, stack, 0).sum(0) / finite.sum(0))
    stack = np.stack(method_means)
    finite = np.isfinite(stack)
    with np.errstate(invalid="ignore"):
        mean = np.where(finite, stack, 0).sum(0) / finite.sum(0)
    mean[np.triu_indices(n, 1)] = np.nan
    n_runs[np.triu_indices(n, 1)] = 0
    return mean, n_runs


def _slug(text: str) -> str:
    return "".join(c if c.isalnum() or c in "-._" else "-" for c in text)


def heatmaps(runs: pd.DataFrame, details: dict, multi_models: list[str] | None = None,
             per_method: bool = False, levels=LEVELS, protocols=PROTOCOLS) -> list[Heatmap]:
    """Every heatmap to publish. Runs of one dataset × ordering with different task lists (custom orderings) get
    one heatmap per task list, told apart by a hash of the list in the name. `levels` and `protocols`: the image
    track's by default; the tabular reports pass ("record",) and their four strategies."""
    out = []
    for (dataset, ordering), g in runs.groupby(["dataset", "ordering"], sort=True):
        task_lists = {tuple(details[k]["tasks"]) for k in g["run_key"]}
        for tasks in sorted(task_lists):
            same = g[[tuple(details[k]["tasks"]) == tasks for k in g["run_key"]]]
            suffix = f"_{short_hash(chr(10).join(tasks))}" if len(task_lists) > 1 else ""
            base = f"heatmap_{_slug(dataset)}_{_slug(ordering)}{suffix}"
            pooled = same[same["model"].isin(multi_models)] if dataset == MULTI and multi_models is not None else same
            groups = [((ALL, ALL, ALL), pooled, "")]
            if per_method:
                groups += [(key, m, "_" + "_".join(_slug(x) for x in key)) for key, m in same.groupby(list(METHOD))]
            for (model, backbone, weights), members, method_suffix in groups:
                for protocol in protocols:
                    sub = members[members["protocol"] == protocol]
                    if sub.empty:
                        continue
                    for level in levels:
                        mean, n_runs = _average(sub, details, level, len(tasks))
                        out.append(Heatmap(f"{base}_{protocol}_{level}{method_suffix}", dataset, ordering, protocol,
                                           level, model, backbone, weights, list(tasks), mean, n_runs,
                                           sub.groupby(list(METHOD)).ngroups))
    return out


def heatmap_frame(maps: list[Heatmap]) -> pd.DataFrame:
    """The values behind every figure, lower triangle only: what `make verify` checks the figures against."""
    rows = []
    for h in maps:
        for i in range(len(h.tasks)):
            for j in range(i + 1):
                rows.append({"figure": h.stem, "dataset": h.dataset, "ordering": h.ordering, "protocol": h.protocol,
                             "level": h.level, "model": h.model, "backbone": h.backbone, "weights": h.weights,
                             "i": i, "j": j, "task_i": h.tasks[i], "task_j": h.tasks[j],
                             "value": float(h.mean[i, j]), "n_runs": int(h.n_runs[i, j])})
    return pd.DataFrame(rows)


def _annotate(ax, h: Heatmap) -> None:
    n = len(h.tasks)
    if n <= ANNOTATE_MAX_TASKS:
        for i in range(n):
            for j in range(i + 1):
                if np.isfinite(h.mean[i, j]):
                    # inside their cells, so out of tight_layout's pass, which would measure every one of them
                    ax.text(j, i, f"{h.mean[i, j]:.2f}", ha="center", va="center", fontsize=7,
                            color="black" if h.mean[i, j] > 0.8 else "white").set_in_layout(False)


def _title(h: Heatmap) -> str:
    n_runs = int(h.n_runs.max())
    runs = f"{n_runs} run{'s' * (n_runs != 1)}"
    who = (f"mean over {h.n_methods} method{'s' * (h.n_methods != 1)}, {runs}" if h.model == ALL
           else f"{label('model', h.model)}{f' {h.backbone} ({h.weights})' if h.backbone else ''}, {runs}")
    return (f"{label('dataset', h.dataset)} · {label('ordering', h.ordering)} · {h.protocol.upper()} · "
            f"{h.level} ROC-AUC\n{who}")


def figure(h: Heatmap) -> Figure:
    n = len(h.tasks)
    size = max(4.0, 0.42 * n + 2.2)
    fig = Figure(figsize=(size + 1.0, size))
    FigureCanvasAgg(fig)
    ax = fig.add_subplot()
    image = ax.imshow(np.ma.masked_invalid(h.mean), cmap="viridis", vmin=0.5, vmax=1.0)
    _annotate(ax, h)
    ticks = [plain(t) for t in h.tasks]
    ax.set_xticks(range(n), ticks, rotation=90, fontsize=7)
    ax.set_yticks(range(n), ticks, fontsize=7)
    ax.set_xlabel("evaluated task j")
    ax.set_ylabel("after learning task i")
    ax.set_title(plain(_title(h)), fontsize=9)
    fig.colorbar(image, ax=ax, extend="min", fraction=0.046, pad=0.04)
    fig.tight_layout()
    # tight_layout leaves a placeholder layout engine behind, and with any engine set every savefig draws the
    # whole figure once more before drawing it for real; the layout is done, so none
    fig.set_layout_engine(None)
    return fig


class Painter:
    """Heatmaps drawn one after another: one of a task list drawn before (a report's per-method heatmaps: one per
    method × ordering × protocol, over a handful of task lists) reuses that Figure, its image, colour bar, ticks and
    layout, and only its cells, numbers and title change. Building a Figure and laying it out is a third of a
    heatmap's time. The layout is the first one's: the titles differ only in the method, centred over the same
    axes."""

    def __init__(self):
        self._figures = {}  # tuple(tasks): Figure; a few dozen at most (datasets × orderings)

    def figure(self, h: Heatmap) -> Figure:
        fig = self._figures.get(tuple(h.tasks))
        if fig is None:
            fig = self._figures[tuple(h.tasks)] = figure(h)
            return fig
        ax = fig.axes[0]
        ax.images[0].set_data(np.ma.masked_invalid(h.mean))
        for text in list(ax.texts):
            text.remove()
        _annotate(ax, h)
        ax.set_title(plain(_title(h)), fontsize=9)
        return fig


def digest(h: Heatmap, formats=("png", "pdf")) -> str:
    """SHA-256 of everything a drawing of `h` depends on (its values and labels, the formats, this module's
    drawing code and matplotlib's version), so `aggregate` redraws only figures whose digest changed."""
    parts = [repr((h.stem, h.dataset, h.ordering, h.protocol, h.level, h.model, h.backbone, h.weights, h.tasks,
                   h.n_methods, tuple(formats))), drawing_code(__name__),
             h.mean.tobytes().hex(), h.n_runs.tobytes().hex()]
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()


def save(h: Heatmap, directory: Path, formats=("png", "pdf"), painter: Painter | None = None) -> list[Path]:
    """Write one heatmap, each file whole or not at all; PDF without a creation date, so the same values give the
    same file. `painter`: one Painter for a series of heatmaps (those of one task list reuse a Figure)."""
    fig = painter.figure(h) if painter is not None else figure(h)
    paths = []
    for fmt in formats:
        path = Path(directory) / f"{h.stem}.{fmt}"
        write_figure(path, lambda tmp: fig.savefig(tmp, format=fmt, dpi=150,
                                                   metadata={"CreationDate": None} if fmt == "pdf" else None))
        paths.append(path)
    return paths


FORK_MIN = 8  # heatmaps below which a second process costs more than it saves
SECONDS_PER_FIGURE = 20  # a second process that takes longer than this a figure is stuck: its share is redrawn here


def save_all(maps: list[Heatmap], directory: Path, formats=("png", "pdf")) -> None:
    """Write every heatmap of `maps`. On Linux with two or more CPUs and at least FORK_MIN of them, a forked
    process draws every other one while this one draws the rest (the same bytes: a Painter's reused Figure draws
    what a fresh one draws), so a campaign's 60 heatmaps take about half their 20 s. BENCH_REPORT_PROCESSES=1
    draws them all here."""
    maps = list(maps)
    if not _second_process(len(maps)):
        painter = Painter()
        for h in maps:
            save(h, directory, formats, painter)
        return
    import multiprocessing

    ctx = multiprocessing.get_context("fork")  # no re-import of the caller's __main__, no pickling of the maps
    receive, send = ctx.Pipe(duplex=False)
    theirs = maps[1::2]
    child = ctx.Process(target=_draw_share, args=(theirs, directory, formats, send), daemon=True)
    child.start()
    send.close()
    painter = Painter()
    for h in maps[0::2]:
        save(h, directory, formats, painter)
    child.join(timeout=SECONDS_PER_FIGURE * len(theirs))
    if child.is_alive():  # never wait on a stuck process: draw its share here, and say so
        child.kill()
        child.join()
        warnings.warn(f"the second process drawing heatmaps did not finish in {SECONDS_PER_FIGURE * len(theirs)} s; "
                      f"drawing its {len(theirs)} here (BENCH_REPORT_PROCESSES=1 draws them all in one process)")
        for h in theirs:
            save(h, directory, formats, painter)
        return
    error = receive.recv() if receive.poll() else "it exited without a word"
    if child.exitcode != 0 or error is not None:
        raise BenchError(f"drawing heatmaps under {directory} in a second process failed (exit code "
                         f"{child.exitcode}): {error}")


def _second_process(n: int) -> bool:
    if n < FORK_MIN or not sys.platform.startswith("linux") or os.environ.get("BENCH_REPORT_PROCESSES") == "1":
        return False
    return len(os.sched_getaffinity(0)) > 1


def _draw_share(maps: list[Heatmap], directory: Path, formats, conn) -> None:
    """The forked process's share; what went wrong is sent back as one line."""
    stem = "-"  # the figure being drawn when something went wrong
    try:
        painter = Painter()
        for h in maps:
            stem = h.stem
            save(h, directory, formats, painter)
    except BaseException as e:  # noqa: BLE001 (anything: the parent reports it)
        conn.send(f"{stem}: {type(e).__name__}: {e}")
        raise SystemExit(1) from None
    conn.send(None)
