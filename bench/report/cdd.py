"""Critical-difference diagram (Demšar 2006, Fig. 1 style): methods on an axis of average rank (1 = best, on the
left), a bar of length CD, and thick lines joining methods the Nemenyi test does not tell apart. Drawn with
matplotlib's Agg canvas like the heatmaps; PDF without a creation date so the same ranks give the same file."""

from __future__ import annotations

import io
from pathlib import Path

from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from bench.report.figfile import plain, write_figure
from bench.report.stats import cliques


def figure(names: list[str], ranks: list[float], cd: float, title: str) -> Figure:
    k = len(names)
    order = sorted(range(k), key=lambda i: ranks[i])
    half = (k + 1) // 2  # the better half labelled on the left, the rest on the right
    room = max(len(n) for n in names) * 0.09 + 0.9  # label width in rank units (the axis spans k − 1 of them)
    fig = Figure(figsize=(2.0 + 0.9 * (k - 1) + 1.1 * room, 1.6 + 0.28 * half))
    FigureCanvasAgg(fig)
    ax = fig.add_axes((0.01, 0.02, 0.98, 0.8))
    ax.set_axis_off()
    ax.set_xlim(1 - room, k + room)
    ax.set_ylim(-(half + 1.5), 2.0)
    ax.hlines(0, 1, k, color="black", lw=1)
    for r in range(1, k + 1):
        ax.vlines(r, 0, 0.25, color="black", lw=1)
        ax.text(r, 0.4, str(r), ha="center", va="bottom", fontsize=8)
    ax.hlines(1.4, 1, 1 + cd, color="black", lw=2)  # the CD bar above the axis, from rank 1
    ax.text(1 + cd / 2, 1.55, f"CD = {cd:.2f}", ha="center", va="bottom", fontsize=8)
    for pos, i in enumerate(order):
        left = pos < half
        y = -(pos + 1 if left else k - pos) * 0.9
        x_text = 0.8 if left else k + 0.2
        ax.vlines(ranks[i], y, 0, color="0.3", lw=0.8)
        ax.hlines(y, min(ranks[i], x_text), max(ranks[i], x_text), color="0.3", lw=0.8)
        ax.text(x_text, y, f"{names[i]} ({ranks[i]:.2f})", ha="right" if left else "left", va="center",
                fontsize=8)
    for n, (a, b) in enumerate(cliques(ranks, cd)):
        lo, hi = sorted(ranks)[a], sorted(ranks)[b]
        ax.hlines(-0.25 - 0.18 * n, lo - 0.03, hi + 0.03, color="tab:red", lw=3)
    fig.suptitle(title, fontsize=9)
    return fig


def save(names: list[str], ranks: list[float], cd: float, title: str, stem: Path) -> list[Path]:
    """`stem`.png and `stem`.pdf, each written (atomically) only when its bytes changed."""
    fig = figure([plain(n) for n in names], ranks, cd, plain(title))
    paths = []
    for fmt in ("png", "pdf"):
        path, buffer = stem.with_suffix(f".{fmt}"), io.BytesIO()
        fig.savefig(buffer, format=fmt, dpi=150, metadata={"CreationDate": None} if fmt == "pdf" else None)
        if not path.is_file() or path.read_bytes() != buffer.getvalue():
            write_figure(path, lambda tmp: tmp.write_bytes(buffer.getvalue()))
        paths.append(path)
    return paths
