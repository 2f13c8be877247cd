"""The stream-assembly page's figures, as PNG under report/figures/ (matplotlib, Agg; labels are plain text: math
parsing is off, so a "$" or "_" prints as itself). Each figure is drawn from the tables the page shows (or, for the
split-membership picture, from the runs' positions), so it shows nothing a CSV beside it does not hold.

- split membership: per arm, which segment (train, validation, test) each corpus record falls in, records in
  corpus (canonical) order, with the attacks beneath;
- the cut sweep: AP at each cut per arm and scorer, beside the chance level (the slice's prevalence);
- branches against chance: deployed and branch AP with their block-bootstrap intervals, the chance level drawn;
- the prevalence sweep: mean AP per level against the achieved chance level (the diagonal is chance).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

SEGMENT_COLOURS = ("#4c72b0", "#dd8452", "#c44e52")  # train, validation, test
ABSENT = "#f0f0f0"


@dataclass(frozen=True)
class Figure:
    stem: str
    caption: str
    png: str  # path relative to the report folder


def _plt():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _save(fig, directory: Path, stem: str) -> Path:
    """The figure as <stem>.png, whole or not at all (a full disk is one BenchError naming the file)."""
    from bench.report.figfile import write_figure

    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"{stem}.png"
    try:
        write_figure(path, lambda tmp: fig.savefig(tmp, format="png", dpi=110, bbox_inches="tight"),
                     remedy="free space there and run aggregate again")
    finally:
        _plt().close(fig)
    return path


def _rc() -> dict:
    return {"text.parse_math": False, "text.usetex": False, "font.size": 9}


def split_membership(streams: dict, n_rows: int, directory: Path, stem: str) -> Path:
    """`streams`: arm -> a ScoredStream of that arm (its rows and split bounds)."""
    from matplotlib.colors import ListedColormap

    plt = _plt()
    arms = list(streams)
    seg = np.full((len(arms), n_rows), -1.0)
    attack = np.zeros(n_rows)
    for k, arm in enumerate(arms):
        s = streams[arm]
        i_tr, i_va = s.bounds
        for code, (lo, hi) in enumerate(((0, i_tr), (i_tr, i_va), (i_va, s.n))):
            seg[k, s.rows[lo:hi]] = code
        attack[s.rows] = s.y
    with plt.rc_context(_rc()):
        fig, axes = plt.subplots(2, 1, figsize=(9, 0.5 + 0.45 * (len(arms) + 1)), sharex=True,
                                 gridspec_kw={"height_ratios": [len(arms), 1]})
        cmap = ListedColormap([ABSENT, *SEGMENT_COLOURS])
        axes[0].imshow(seg + 1, aspect="auto", interpolation="nearest", cmap=cmap, vmin=0, vmax=3)
        axes[0].set_yticks(range(len(arms)), arms)
        axes[0].set_title("Segment of each record under each arm (records in corpus order): "
                          "blue train, orange validation, red test (held out)")
        axes[1].imshow(attack[None, :], aspect="auto", interpolation="nearest", cmap="Greys", vmin=0, vmax=1)
        axes[1].set_yticks([0], ["attack"])
        axes[1].set_xlabel("corpus record (canonical order: captures by date, time within a capture)")
        return _save(fig, directory, stem)


def cut_sweep(values: pd.DataFrame, directory: Path, stem: str) -> Path:
    plt = _plt()
    arms = list(dict.fromkeys(values["arm"]))
    with plt.rc_context(_rc()):
        fig, axes = plt.subplots(1, len(arms), figsize=(4.6 * len(arms), 3.4), squeeze=False, sharey=True)
        for ax, arm in zip(axes[0], arms):
            g = values[values.arm == arm]
            for scorer, h in g.groupby("scorer", sort=False):
                ax.plot(h["cut_pct"], h["ap"], marker="o", label=f"{scorer} AP")
            chance = g.drop_duplicates("cut_pct")
            ax.plot(chance["cut_pct"], chance["prevalence"], "k--", label="chance (prevalence)")
            ax.set_title(f"arm {arm}")
            ax.set_xlabel("cut (% of the stream before the evaluated slice)")
            ax.set_ylim(0, 1.02)
        axes[0][0].set_ylabel("AP of the slice after the cut")
        axes[0][-1].legend(fontsize=7, loc="best")
        return _save(fig, directory, stem)


def _primary_columns(df: pd.DataFrame) -> tuple[str, str]:
    lo = next(c for c in df.columns if c.startswith("lo_b"))
    return lo, "hi_b" + lo.removeprefix("lo_b")


def branches_vs_chance(values: pd.DataFrame, directory: Path, stem: str) -> Path:
    """AP of the deployed score and each branch with intervals (primary block), per run, chance drawn."""
    plt = _plt()
    ap = values[values.metric == "ap"]
    slices = list(dict.fromkeys(ap["slice"]))
    lo, hi = _primary_columns(ap)
    with plt.rc_context(_rc()):
        fig, axes = plt.subplots(1, len(slices), figsize=(3.8 * len(slices), 3.4), squeeze=False, sharey=True)
        for ax, name in zip(axes[0], slices):
            g = ap[ap.slice == name]
            x = np.arange(len(g))
            err = np.vstack([g["value"] - g[lo], g[hi] - g["value"]]).clip(min=0)
            ax.bar(x, g["value"], yerr=err, capsize=3, color="#4c72b0")
            ax.axhline(g["prevalence"].iloc[0], color="k", ls="--", label="chance (prevalence)")
            ax.set_xticks(x, list(g["scorer"]), rotation=20)
            ax.set_title(name.removeprefix("branches|").replace("|", "\non "))
            ax.set_ylim(0, 1.02)
        axes[0][0].set_ylabel(f"held-out AP, interval at block {lo.removeprefix('lo_b')}")
        axes[0][0].legend(fontsize=7)
        return _save(fig, directory, stem)


def prevalence_sweep(levels: pd.DataFrame, directory: Path, stem: str) -> Path:
    plt = _plt()
    with plt.rc_context(_rc()):
        fig, ax = plt.subplots(figsize=(5.2, 3.8))
        for scorer, g in levels.groupby("scorer", sort=False):
            g = g.sort_values("chance")
            ax.plot(g["chance"], g["ap"], marker="o", label=f"{scorer} AP")
        ax.plot([0, 1], [0, 1], "k--", label="chance (AP = prevalence)")
        ax.set_xlabel("achieved held-out prevalence (the chance level)")
        ax.set_ylabel("mean held-out AP over the draws")
        ax.set_xlim(0, 1), ax.set_ylim(0, 1.02)
        ax.legend(fontsize=7)
        return _save(fig, directory, stem)
