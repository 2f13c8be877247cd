"""InCLAD Table 2: ROC-AUC_CL and BWT per dataset × ordering, image/pixel × NCL/CL, mean ± std over runs."""

from __future__ import annotations

import numpy as np
import pandas as pd

METRICS = (("roc_auc_cl", "ROC-AUC_CL ↑"), ("bwt", "BWT ↑"))
COLUMNS = (("image", "ncl"), ("image", "cl"), ("pixel", "ncl"), ("pixel", "cl"))


def table2(runs: pd.DataFrame) -> pd.DataFrame:
    """Long table: one row per dataset × ordering × metric × level × protocol with mean, std (population)
    and n over the complete runs (methods × backbones × seeds) behind the cell; NaN run values are counted."""
    runs = runs[runs["status"] == "complete"]
    rows = []
    for (dataset, ordering), g in runs.groupby(["dataset", "ordering"], sort=True):
        for metric, label in METRICS:
            for level, protocol in COLUMNS:
                values = g.loc[g["protocol"] == protocol, f"{level}_{metric}"].to_numpy(dtype=float)
                finite = values[np.isfinite(values)]
                rows.append({"dataset": dataset, "ordering": ordering, "metric": label, "level": level,
                             "protocol": protocol, "mean": finite.mean() if finite.size else np.nan,
                             "std": finite.std() if finite.size else np.nan, "n": finite.size,
                             "n_nan": values.size - finite.size})
    return pd.DataFrame(rows)


def format_cell(mean: float, std: float, n: int) -> str:
    if n == 0 or not np.isfinite(mean):
        return "–"
    return f"{mean:.3f}" if n == 1 else f"{mean:.3f} ± {std:.3f}"


def to_markdown(long: pd.DataFrame) -> str:
    header = "| Dataset | Ordering | Metric | Image NCL | Image CL | Pixel NCL | Pixel CL |"
    lines = [header, "|" + "---|" * 7]
    for (dataset, ordering, metric), g in long.groupby(["dataset", "ordering", "metric"], sort=False):
        cells = []
        for level, protocol in COLUMNS:
            r = g[(g["level"] == level) & (g["protocol"] == protocol)].iloc[0]
            cells.append(format_cell(r["mean"], r["std"], r["n"]))
        lines.append(f"| {dataset} | {ordering} | {metric} | " + " | ".join(cells) + " |")
    n_runs = long.groupby(["dataset", "ordering", "level", "protocol"])["n"].max()
    lines.append("")
    lines.append(f"Cells: mean ± population std over {int(n_runs.min())}–{int(n_runs.max())} complete run(s) each.")
    return "\n".join(lines)
