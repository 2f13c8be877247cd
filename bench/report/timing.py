"""Execution-time tables like InCLAD Tables 4-5: train and eval wall time per dataset × model × backbone, Naive
(NCL) vs Continual (CL), mean ± population std across orderings (a run's time = the sum over its steps; seeds of
one ordering are averaged first). Durations read "58.7s (± 1.2s)", "4m 59s (± 0.7s)", "112m 29s (± 5m 0s)"."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from bench.config import NO_BACKBONE
from bench.report import specs
from bench.report.render import METHOD, label, latex_escape, markdown_table, sort_frame

PHASES = (("train", "Train"), ("eval", "Eval"))
PROTOCOLS = (("ncl", "Naive"), ("cl", "Continual"))


def format_duration(seconds: float) -> str:
    """InCLAD's style: under a minute one decimal ("58.7s"), else whole minutes and seconds ("112m 29s")."""
    if seconds is None or not math.isfinite(seconds) or seconds < 0:
        return "–"
    if round(seconds, 1) < 60:
        return f"{seconds:.1f}s"
    minutes, secs = divmod(math.floor(seconds + 0.5), 60)
    return f"{minutes}m {secs}s"


def format_timing(mean: float, std: float, n: int) -> str:
    if n == 0:
        return "–"
    return format_duration(mean) if n == 1 else f"{format_duration(mean)} (± {format_duration(std)})"


def timing_table(runs: pd.DataFrame) -> pd.DataFrame:
    """Long table: one row per dataset × method × phase × protocol with mean_s, std_s (population, across
    orderings), n_orderings and n_runs."""
    rows = []
    keys = ["dataset", *METHOD]
    for key, g in runs.groupby(keys, sort=True):
        for phase, _ in PHASES:
            for protocol, _ in PROTOCOLS:
                sub = g[g["protocol"] == protocol]
                per_ordering = sub.groupby("ordering")[f"{phase}_s"].mean().to_numpy(dtype=float)
                per_ordering = per_ordering[np.isfinite(per_ordering)]
                rows.append({**dict(zip(keys, key)), "phase": phase, "protocol": protocol,
                             "mean_s": float(per_ordering.mean()) if per_ordering.size else np.nan,
                             "std_s": float(per_ordering.std()) if per_ordering.size else np.nan,
                             "n_orderings": int(per_ordering.size), "n_runs": int(len(sub))})
    long = pd.DataFrame(rows)
    if long.empty:
        return long
    phase_rank = {p: i for i, (p, _) in enumerate(PHASES)}
    protocol_rank = {p: i for i, (p, _) in enumerate(PROTOCOLS)}
    long = long.assign(_p=long["phase"].map(phase_rank), _q=long["protocol"].map(protocol_rank))
    long = sort_frame(long.sort_values(["_p", "_q"], kind="stable"), keys)
    return long.drop(columns=["_p", "_q"])


def _rows(long: pd.DataFrame):
    """((dataset, model, backbone, weights, phase), {protocol: record}) in table order."""
    out: dict[tuple, dict] = {}
    for rec in long.to_dict("records"):
        out.setdefault((rec["dataset"], rec["model"], rec["backbone"], rec["weights"], rec["phase"]), {})[
            rec["protocol"]] = rec
    return out.items()


# InCLAD reports detectors on a pretrained backbone (Table 4) apart from those without one (Table 5)
SECTIONS = (("Execution times", "detectors on a pretrained backbone (InCLAD Table 4)"),
            ("Execution times without a backbone", "detectors that read raw images (InCLAD Table 5)"))


def _sections(long: pd.DataFrame):
    """(title, what, rows, show_backbone) for each non-empty half of the long table."""
    if long.empty:
        return [(*SECTIONS[0], long, True)]
    without = long["backbone"] == NO_BACKBONE
    halves = [(SECTIONS[0], long[~without], True), (SECTIONS[1], long[without], False)]
    return [(title, what, part, show) for (title, what), part, show in halves if len(part)]


def _header(show_backbone: bool, show_weights: bool) -> list[str]:
    """The key columns' labels (specs.TIMING), without those a section leaves out."""
    shown = {"backbone": show_backbone, "weights": show_weights, "protocol": False}  # protocols are the columns
    return [c.label for c in specs.TIMING.keys if shown.get(c.name, True)]


# the columns the timing renderings place; any other column specs.TIMING declares is shown inside each cell
PLACED = ("dataset", "model", "backbone", "weights", "phase", "protocol", "mean_s", "std_s", "n_orderings", "n_runs")


def timing_markdown(long: pd.DataFrame, footer: list[str] | None = None) -> str:
    show_weights = long["weights"].nunique() > 1 if len(long) else False
    lines = []
    for title, what, part, show_backbone in _sections(long):
        rows = []
        for (dataset, model, backbone, weights, phase), cells in _rows(part):
            rows.append([label("dataset", dataset), label("model", model)] + ([backbone] if show_backbone else [])
                        + ([weights] if show_weights else []) + [dict(PHASES)[phase]]
                        + [format_timing(r["mean_s"], r["std_s"], r["n_orderings"])
                           + specs.TIMING.extra_text(r, PLACED) if (r := cells.get(p)) else "–" for p, _ in PROTOCOLS])
        header = _header(show_backbone, show_weights) + [name for _, name in PROTOCOLS]
        lines += [f"## {title}", "", f"{what[0].upper()}{what[1:]}.", ""] + markdown_table(header, rows) + [""]
    lines += ["Wall time of a whole run (sum over steps; CUDA synchronised), mean (± population std) across "
              "orderings, a method's seeds averaged per ordering first; no ± when one ordering. Naive = NCL, "
              "Continual = CL (replay for the gradient-trained detectors). Orderings and runs per cell: timing.csv."]
    if not show_weights and len(long):
        lines.append(f"Weights: {long['weights'].iloc[0]}.")
    return "\n".join(lines + [""] + (footer or [])) + "\n"


def timing_latex(long: pd.DataFrame, footer: list[str] | None = None) -> str:
    show_weights = long["weights"].nunique() > 1 if len(long) else False
    lines = ["% Execution times (InCLAD Tables 4-5 style): mean (± population std) across orderings.",
             "% Generated by `python -m bench aggregate`, checked by `make verify`."]
    lines += [f"% {line}" for line in footer or []]
    for title, what, part, show_backbone in _sections(long):
        k = 3 + show_backbone + show_weights
        lines += [f"% {title}: {what}", r"\begin{tabular}{" + "l" * k + "cc}", r"\toprule",
                  " & ".join(_header(show_backbone, show_weights) + [name for _, name in PROTOCOLS]) + r" \\",
                  r"\midrule"]
        previous = None
        for (dataset, model, backbone, weights, phase), cells in _rows(part):
            if previous is not None and dataset != previous:
                lines.append(r"\midrule")
            shown = [latex_escape(label("dataset", dataset)) if dataset != previous else "",
                     latex_escape(label("model", model))] + ([latex_escape(backbone)] if show_backbone else [])
            shown += ([latex_escape(weights)] if show_weights else []) + [dict(PHASES)[phase]]
            cells_text = [format_timing(r["mean_s"], r["std_s"], r["n_orderings"]).replace("±", r"$\pm$")
                          + specs.TIMING.extra_text(r, PLACED, latex=True) if (r := cells.get(p)) else "--"
                          for p, _ in PROTOCOLS]
            lines.append(" & ".join(shown + [c.replace("–", "--") for c in cells_text]) + r" \\")
            previous = dataset
        lines += [r"\bottomrule", r"\end{tabular}"]
    return "\n".join(lines) + "\n"
