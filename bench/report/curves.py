"""The HTML report's line charts as PNG and PDF (report/figures/curve_*), drawn on one reused Figure.

A report draws hundreds of these (about 810 at 1,000 result files), so the cost per curve matters more than
anything else in `aggregate` at that scale. What they show is fixed by bench.report.html: the series, their
colours and markers, the axis labels, the y range and a legend for 2-12 series. The savings:
- one Figure and canvas for every curve, its lines and legend replaced from one curve to the next: no Figure,
  Axes, ticks and canvas built per curve, and the Agg renderer (with it, matplotlib's text-metrics cache) stays;
- fixed margins instead of tight_layout, which is a whole extra layout pass of every text per figure; they leave
  room for y tick labels such as "100000" or "0.00010" beside the y label (checked by drawing them);
- savefig draws each format once; nothing else draws.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from matplotlib import colormaps

from bench.report.figfile import plain, write_figure
from bench.report.render import drawing_code

VIRIDIS = colormaps["viridis"]
FORMATS = ("png", "pdf")
SIZE = (5.0, 3.2)  # inches
# fractions of the figure: what tight_layout gave for tick labels like 12000 or 0.0008 (left 0.187), plus slack
MARGINS = {"left": 0.19, "right": 0.97, "bottom": 0.185, "top": 0.93}
LEGEND_MAX = 12  # series; beyond this a legend covers the plot


def digest(c: dict) -> str:
    """SHA-256 of what a curve's files depend on: its values and labels, this whole module's source (the drawing
    code, margins and size) and matplotlib's version, so a change to any of them redraws the curve instead of
    leaving an old drawing in place."""
    return hashlib.sha256(json.dumps([c["xlabel"], c["ylabel"], c["yrange"], c["values"].to_csv(index=False),
                                      drawing_code(__name__)]).encode()).hexdigest()


class Painter:
    """Draws curves one after another on the same Figure (not thread-safe: one painter per thread)."""

    def __init__(self):
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure

        self.fig = Figure(figsize=SIZE)
        FigureCanvasAgg(self.fig)
        self.fig.subplots_adjust(**MARGINS)
        self.ax = self.fig.add_subplot()

    def draw(self, c: dict, directory: Path) -> None:
        """Write <directory>/<stem>.png and .pdf of curve `c` (html._curve's dict)."""
        ax = self.ax
        # the last curve's lines and legend out, autoscaling back on; not ax.cla(), which also throws away the
        # tick artists that the next draw would then build again (a quarter of the time of a curve)
        for line in list(ax.lines):
            line.remove()
        if ax.get_legend() is not None:
            ax.get_legend().remove()
        ax.set_autoscale_on(True)
        series = c["series"]
        for n, (name, sx, sy) in enumerate(series):
            ax.plot(list(sx), [float(y) for y in sy], marker="o", markersize=3, label=plain(name),
                    color=VIRIDIS(n / max(len(series) - 1, 1) * 0.9))
        ax.relim()  # the data limits of these lines only (they accumulate otherwise)
        if c["yrange"]:
            ax.set_ylim(*c["yrange"])
        ax.set_xlabel(plain(c["xlabel"]))
        ax.set_ylabel(plain(c["ylabel"]))
        if 1 < len(series) <= LEGEND_MAX:
            ax.legend(fontsize=6)
        for fmt in FORMATS:
            # whole or not at all; no creation date in the PDF: the same values give the same file
            write_figure(Path(directory) / f"{c['stem']}.{fmt}",
                         lambda tmp: self.fig.savefig(tmp, format=fmt, dpi=130,
                                                      metadata={"CreationDate": None} if fmt == "pdf" else None))

