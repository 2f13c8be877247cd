"""Reports of a construction (from its manifest): STE heatmaps per model and candidate, the filtering-statistics
table, the W table (candidate × family) and the six consensus orderings, in release/report.md + release/figures/."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from bench.io import write_text_atomic
from bench.tabular.filtering import CRITERIA
from bench.tabular.orderings import FAMILIES, ORDERINGS


def _cell(v) -> str:
    return "—" if v is None else f"{v:.3f}" if isinstance(v, float) else str(v)


def filtering_table(candidate: dict) -> list[str]:
    lines = ["| pass | task | " + " | ".join(c.upper() for c in CRITERIA) + " | flags | S* | removed |",
             "|---" * (len(CRITERIA) + 5) + "|"]
    for n, p in enumerate(candidate["passes"], 1):
        for k, task in enumerate(p["tasks"]):
            # a count above 1: the task is redundant with that many partners (redundancy=partners)
            marks = " | ".join("" if not p[c][k] else "×" if p[c][k] == 1 else f"×{p[c][k]}" for c in CRITERIA)
            lines.append(f"| {n} | {task} | {marks} | {p['flags'][k]} | {p['best_self'][k]:.3f} | "
                         f"{'removed' if p['removed'] == task else ''} |")
    return lines


def w_table(manifest: dict) -> list[str]:
    fams = list(FAMILIES) + ["mean"]
    lines = ["| candidate | kept | " + " | ".join(fams) + " |", "|---" * (len(fams) + 2) + "|"]
    for c, row in manifest["w_table"].items():
        mark = " (selected)" if c == manifest["selected_candidate"] else ""
        kept = len(manifest["candidates"][c]["kept"])
        lines.append(f"| {c}{mark} | {kept} | " + " | ".join(_cell(row[f]) for f in fams) + " |")
    return lines


def heatmap(tasks: list[str], M: np.ndarray, title: str, path: Path) -> Path:
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    n = len(tasks)
    size = max(4.0, 0.42 * n + 2.2)
    fig = Figure(figsize=(size + 1.0, size))
    FigureCanvasAgg(fig)
    ax = fig.add_subplot()
    image = ax.imshow(M, cmap="viridis", vmin=0.0, vmax=1.0)  # full matrix: cross-evaluation has no blank half
    if n <= 15:
        for i in range(n):
            for j in range(n):
                ax.text(j, i, f"{M[i, j]:.2f}", ha="center", va="center", fontsize=7,
                        color="black" if M[i, j] > 0.6 else "white")
    ax.set_xticks(range(n), tasks, rotation=90, fontsize=7)
    ax.set_yticks(range(n), tasks, fontsize=7)
    ax.set_xlabel("evaluated task j")
    ax.set_ylabel("expert of task i")
    ax.set_title(title, fontsize=9)
    fig.colorbar(image, ax=ax, fraction=0.046, pad=0.04)
    fig.tight_layout()
    fig.savefig(path, dpi=150)
    return path


def write_report(manifest: dict, folder: Path) -> Path:
    folder = Path(folder)
    figures = folder / "figures"
    figures.mkdir(parents=True, exist_ok=True)
    lines = [f"# {manifest['dataset']}: CAD scenario construction", "",
             f"Selected candidate: **{manifest['selected_candidate']}**, tasks: {', '.join(manifest['tasks'])}", "",
             "## Kendall's W (candidate × family)", "", *w_table(manifest), "", "## Consensus orderings (Borda)", ""]
    sel = manifest["candidates"][manifest["selected_candidate"]]
    for o in ORDERINGS:
        points = sel["borda_points"][o]
        lines.append(f"- {o}: " + " → ".join(f"{t} ({points[t]:g})" for t in manifest["orderings"][o]))
    for c, cand in manifest["candidates"].items():
        lines += ["", f"## Filtering passes: {c}", "", *filtering_table(cand), ""]
        for model, M in cand["ste"].items():
            path = heatmap(cand["tasks"], np.asarray(M, dtype=float), f"{manifest['dataset']} · {c} · {model} STE "
                           "ROC-AUC", figures / f"ste_{c}_{model}.png")
            lines.append(f"![{model}](figures/{path.name})")
    out = folder / "report.md"
    write_text_atomic(out, "\n".join(lines) + "\n")
    return out
