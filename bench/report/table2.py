"""InCLAD Table 2 and its per-method breakdown: ROC-AUC_CL and BWT, image/pixel × NCL/CL.

A Table 2 cell pools the complete runs of one dataset × ordering × protocol: seeds of a method (model × backbone ×
weights) are averaged first, then the cell is the mean ± population std across methods. The MultiDataset rows
pool only the methods InCLAD's rule selects: the `top` best by average single-dataset performance across
datasets, backbones and orderings, computed here from the results (`select_methods`).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from bench.report import specs
from bench.report.choices import SELECT_BY
from bench.report.render import (COLUMN_LABELS, COLUMNS, METHOD, MULTI, format_cell, grid_rows, label, latex_cell,
                                  latex_escape, latex_grid, markdown_table, sort_frame)
from bench.report.specs import TableSpec, cell_text

# Each table's metrics, their labels and CSV columns are its spec's (bench/report/specs.py: TABLE2, PER_METHOD).
# The criterion InCLAD leaves implicit (SELECT_BY, bench.report.choices): here, image-level ROC-AUC_CL of the
# continual (CL) protocol by default — the MultiDataset stream stress-tests the strongest *continual* methods.


# The columns each rendering places (or leaves to the CSV, as the runs behind a cell); any other column its spec
# declares is shown after them (specs.TableSpec.unplaced), inside each cell of a pivot
T2_PLACED = ("dataset", "ordering", "metric", "level", "protocol", "mean", "std", "n_runs", "n_methods", "n_nan",
             "r_nan_cells")
PER_METHOD_PLACED = ("dataset", "model", "backbone", "weights", "ordering", "metric", "level", "protocol", "mean",
                     "std", "n_runs", "n_nan")
SELECTION_PLACED = ("rank", "model", "score", "n_cells", "n_runs", "selected")


def _headers(spec: TableSpec, names: list[str]) -> list[str]:
    return [spec.label(n) for n in names]


def _complete(runs: pd.DataFrame) -> pd.DataFrame:
    return runs[runs["status"] == "complete"] if "status" in runs else runs


def pool(runs: pd.DataFrame, column: str) -> dict:
    """mean ± population std across methods of the seed-averaged `column`, with what it rests on."""
    values = runs[column].to_numpy(dtype=float)
    finite = np.isfinite(values)
    per_method = runs[finite].groupby(list(METHOD), sort=True)[column].mean().to_numpy(dtype=float)
    return {"mean": float(per_method.mean()) if per_method.size else np.nan,
            "std": float(per_method.std()) if per_method.size else np.nan,
            "n_runs": int(finite.sum()), "n_methods": int(per_method.size), "n_nan": int((~finite).sum())}


def select_methods(single: pd.DataFrame, select_by: str = "image-cl", top: int = 3) -> pd.DataFrame:
    """Rank models by mean `select_by` ROC-AUC_CL over single-dataset cells (dataset × backbone × weights ×
    ordering, seeds averaged first); the `top` best are selected. Ties go to the alphabetically first model."""
    level, protocol = SELECT_BY[select_by]
    columns = [c.name for c in specs.MULTI_SELECTION.columns]
    single = _complete(single)
    if single.empty:
        return pd.DataFrame(columns=columns)
    single = single[(single["dataset"] != MULTI) & (single["protocol"] == protocol)]
    column = f"{level}_roc_auc_cl"
    single = single[np.isfinite(single[column].to_numpy(dtype=float))]
    if single.empty:
        return pd.DataFrame(columns=columns)
    cells = single.groupby(["model", "dataset", "backbone", "weights", "ordering"])[column].agg(["mean", "size"])
    per_model = cells.groupby("model").agg(score=("mean", "mean"), n_cells=("mean", "size"), n_runs=("size", "sum"))
    per_model = per_model.reset_index().sort_values(["score", "model"], ascending=[False, True], kind="stable")
    per_model["rank"] = np.arange(1, len(per_model) + 1)
    per_model["selected"] = per_model["rank"] <= top
    return specs.MULTI_SELECTION.frame(per_model.reset_index(drop=True))


def table2(runs: pd.DataFrame, multi_models: list[str] | None = None) -> pd.DataFrame:
    """Long Table 2: one row per dataset × ordering × metric × level × protocol (see `pool` for the columns).

    `multi_models`: the models the MultiDataset rows pool; default: `select_methods` on the same runs."""
    spec = specs.TABLE2
    runs = _complete(runs)
    if multi_models is None and (runs["dataset"] == MULTI).any():
        selection = select_methods(runs)
        multi_models = list(selection.loc[selection["selected"], "model"])
    rows = []
    for (dataset, ordering), g in runs.groupby(["dataset", "ordering"], sort=True):
        if dataset == MULTI:
            g = g[g["model"].isin(multi_models)]
        for metric in spec.metric_names():
            for level, protocol in COLUMNS:
                sub = g[g["protocol"] == protocol]
                # r_nan_cells: undefined R cells (one-class test sets) inside the pooled runs' matrices
                rows.append({"dataset": dataset, "ordering": ordering, "metric": metric, "level": level,
                             "protocol": protocol, **pool(sub, f"{level}_{metric}"),
                             "r_nan_cells": int(sub[f"{level}_nan_cells"].fillna(0).sum()) if len(sub) else 0})
    return spec.frame(_sorted(pd.DataFrame(rows), ["dataset", "ordering"], spec))


def per_method(runs: pd.DataFrame) -> pd.DataFrame:
    """The breakdown Table 2 hides: one row per dataset × model × backbone × weights × ordering × metric ×
    level × protocol, mean ± population std over seeds."""
    spec = specs.PER_METHOD
    runs = _complete(runs)
    keys = ["dataset", *METHOD, "ordering"]
    protocols = runs["protocol"].to_numpy()
    columns = {f"{level}_{metric}": runs[f"{level}_{metric}"].to_numpy(dtype=float)
               for metric in spec.metric_names() for level, _ in COLUMNS}
    rows = []
    # numpy on each group's positions: a campaign has hundreds of groups, and a frame filter per group × metric ×
    # column cost seconds
    for key, positions in sorted(runs.groupby(keys, sort=False).indices.items()):
        mine = {protocol: positions[protocols[positions] == protocol] for _, protocol in COLUMNS}
        for metric in spec.metric_names():
            for level, protocol in COLUMNS:
                values = columns[f"{level}_{metric}"][mine[protocol]]
                finite = values[np.isfinite(values)]
                rows.append({**dict(zip(keys, key)), "metric": metric,
                             "level": level, "protocol": protocol,
                             "mean": float(finite.mean()) if finite.size else np.nan,
                             "std": float(finite.std()) if finite.size else np.nan,
                             "n_runs": int(finite.size), "n_nan": int(values.size - finite.size)})
    return spec.frame(_sorted(pd.DataFrame(rows), ["dataset", "model", "backbone", "weights", "ordering"], spec))


def _sorted(long: pd.DataFrame, keys: list[str], spec: TableSpec) -> pd.DataFrame:
    if long.empty:
        return long
    metric_rank = {m: i for i, m in enumerate(spec.metric_names())}
    column_rank = {c: i for i, c in enumerate(COLUMNS)}
    long = long.assign(_m=long["metric"].map(metric_rank),
                       _c=[column_rank[(lv, p)] for lv, p in zip(long["level"], long["protocol"])])
    long = sort_frame(long.sort_values(["_m", "_c"], kind="stable"), keys)
    return long.drop(columns=["_m", "_c"])


def to_markdown(long: pd.DataFrame, footer: list[str] | None = None) -> str:
    """Table 2 as markdown, then the parallel table of how many runs (methods) stand behind each cell."""
    spec, keys = specs.TABLE2, ["dataset", "ordering", "metric"]
    rows, counts = [], []
    for key, cells in grid_rows(long, keys):
        shown = [label("dataset", key[0]), label("ordering", key[1]), spec.label(key[2])]
        recs = [cells.get(c) for c in COLUMNS]
        rows.append(shown + [format_cell(r["mean"], r["std"], r["n_methods"], r["n_nan"])
                             + spec.extra_text(r, T2_PLACED) if r else "–" for r in recs])
        counts.append(shown + [f"{r['n_runs']} ({r['n_methods']})" + (f" [{r['n_nan']} NaN]" if r["n_nan"] else "")
                               if r else "0" for r in recs])
    header = [*_headers(spec, keys), *COLUMN_LABELS]
    lo, hi = (int(long["n_runs"].min()), int(long["n_runs"].max())) if len(long) else (0, 0)
    lines = [f"## {spec.title}", ""] + markdown_table(header, rows) + [
        "", "Cells: mean ± population std across methods (model × backbone × weights; a method's seeds are "
            f"averaged first), {lo if lo == hi else f'{lo}–{hi}'} complete run(s) per cell; `[k NaN]`: runs whose "
            "value is undefined (NaN), counted, not averaged.",
        "", "Runs (methods) behind each cell:", ""] + markdown_table(header, counts)
    return "\n".join(lines + [""] + (footer or [])) + "\n"


def to_latex(long: pd.DataFrame, footer: list[str] | None = None) -> str:
    spec, keys, rows = specs.TABLE2, ["dataset", "ordering", "metric"], []
    for key, cells in grid_rows(long, keys):
        shown = [latex_escape(label("dataset", key[0])), latex_escape(label("ordering", key[1])), spec.latex(key[2])]
        rows.append((shown, [latex_cell(r["mean"], r["std"], r["n_methods"], r["n_nan"])
                             + spec.extra_text(r, T2_PLACED, latex=True) if (r := cells.get(c))
                             else "--" for c in COLUMNS]))
    comments = ["% InCLAD Table 2: mean ± population std across methods; generated by `python -m bench aggregate`,",
                "% checked by `make verify` (edit the result files, not this file). Runs per cell: table2.csv."]
    return "\n".join(comments + [f"% {line}" for line in footer or []]
                     + latex_grid([spec.latex(k) for k in keys], rows)) + "\n"


def per_method_markdown(long: pd.DataFrame, footer: list[str] | None = None) -> str:
    spec, show_weights = specs.PER_METHOD, long["weights"].nunique() > 1 if len(long) else False
    keys = ["dataset", "model", "backbone", "weights", "ordering", "metric"]
    rows = []
    for key, cells in grid_rows(long, keys):
        shown = [label("dataset", key[0]), label("model", key[1]), key[2]] + ([key[3]] if show_weights else []) + [
            label("ordering", key[4]), spec.label(key[5])]
        rows.append(shown + [format_cell(r["mean"], r["std"], r["n_runs"], r["n_nan"]) + f" (n={r['n_runs']})"
                             + spec.extra_text(r, PER_METHOD_PLACED) if (r := cells.get(c)) else "–"
                             for c in COLUMNS])
    header = _headers(spec, [k for k in keys if show_weights or k != "weights"]) + [*COLUMN_LABELS]
    lines = [f"## {spec.title}", ""] + markdown_table(header, rows) + [
        "", "Cells: mean ± population std over seeds; n = complete runs behind the cell."]
    if not show_weights and len(long):
        lines.append(f"Weights: {long['weights'].iloc[0]}.")
    return "\n".join(lines + [""] + (footer or [])) + "\n"


def per_method_latex(long: pd.DataFrame, footer: list[str] | None = None) -> str:
    spec, show_weights = specs.PER_METHOD, long["weights"].nunique() > 1 if len(long) else False
    keys, rows = ["dataset", "model", "backbone", "weights", "ordering", "metric"], []
    for key, cells in grid_rows(long, keys):
        shown = [latex_escape(label("dataset", key[0])), latex_escape(label("model", key[1])), latex_escape(key[2])]
        shown += ([latex_escape(key[3])] if show_weights else []) + [latex_escape(label("ordering", key[4])),
                                                                     spec.latex(key[5])]
        rows.append((shown, [latex_cell(r["mean"], r["std"], r["n_runs"], r["n_nan"])
                             + spec.extra_text(r, PER_METHOD_PLACED, latex=True) if (r := cells.get(c))
                             else "--" for c in COLUMNS]))
    headers = [spec.latex(k) for k in keys if show_weights or k != "weights"]
    comments = ["% Per-method ROC-AUC_CL and BWT: mean ± population std over seeds; runs per cell: per_method.csv.",
                "% Generated by `python -m bench aggregate`, checked by `make verify`."]
    return "\n".join(comments + [f"% {line}" for line in footer or []] + latex_grid(headers, rows)) + "\n"


def selection_markdown(selection: pd.DataFrame, select_by: str, top: int, models_used: list[str]) -> str:
    level, protocol = SELECT_BY[select_by]
    lines = [f"## {specs.MULTI_SELECTION.title}", "",
             f"InCLAD's rule: rank methods by average single-dataset performance across datasets, backbones and "
             f"orderings; the MultiDataset rows pool the {top} best. Criterion here: {level}-level ROC-AUC_CL, "
             f"{protocol.upper()} protocol, averaged over (dataset × backbone × weights × ordering) cells, a cell's "
             "seeds averaged first.", ""]
    if selection.empty:
        lines.append("No single-dataset results: the rule cannot be applied, so the MultiDataset rows pool every "
                     f"method present ({', '.join(label('model', m) for m in models_used) or 'none'}).")
    else:
        spec = specs.MULTI_SELECTION
        rest = spec.unplaced(SELECTION_PLACED)
        rows = [[str(r["rank"]), label("model", r["model"]), f"{r['score']:.4f}", str(r["n_cells"]),
                 str(r["n_runs"]), "yes" if r["selected"] else "", *(cell_text(c, r[c.name]) for c in rest)]
                for r in selection.to_dict("records")]
        lines += markdown_table([*_headers(spec, list(SELECTION_PLACED)), *(c.label for c in rest)], rows)
    return "\n".join(lines) + "\n"
