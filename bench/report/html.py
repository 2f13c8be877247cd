"""One static page per result set: outputs/<dataset>/report/index.html (docs/reports.md, "The HTML report").

Made by `aggregate` from the very tables it publishes (the CSV texts of `build`, so every number on the page is a
CSV cell, shown rounded and carried at full precision in the cell's `data-value`) and from the run files already
collected (each method's R matrices, routing, memory and loss curves). No script, no web font, no CDN: it opens
from file:// after an rsync; links are relative (../tables/*.csv, ../figures/*.png). Its own figures (the
critical-difference diagrams, PNG and PDF; with `paper_figures`, every per-method heatmap and curve too) go to
report/figures/; a file whose bytes did not change is not rewritten. report/.bench-owned.json lists every file the
suite wrote there: one a new aggregation no longer makes is removed, and no other file ever is (a user's notes, an
older page). A report folder that is a symlink is refused (check_report_folder): following it would write, and
remove, in a folder the suite does not own.
"""

from __future__ import annotations

import csv
import decimal
import html as html_lib
import io
import json
import re
from pathlib import Path

import jinja2
from markupsafe import escape
import numpy as np
import pandas as pd
from matplotlib import colormaps

from bench.errors import BenchError
from bench.io import recorded_paths, write_text_atomic
from bench.report import cdd, construction, specs
from bench.report import curves as curves_draw
from bench.report import heatmaps as hm
from bench.report.paper import COMPARISON_PLACED
from bench.report.render import METHOD, label
from bench.report.table2 import PER_METHOD_PLACED, T2_PLACED
from bench.tabular.filtering import CRITERIA

REPORT = "report"
PAGE = "index.html"
OWNED = ".bench-owned.json"  # under report/: the files this suite wrote there, the only ones it ever removes
TEMPLATE = Path(__file__).with_name("templates") / "report.html.j2"
VIRIDIS = colormaps["viridis"]
# paper_comparison.csv's verdict of a compared cell, best first: (column, CSS class, text); the first that says
# "yes" wins, none: outside. Columns another version of the comparison does not write are skipped.
VERDICTS = (("in_band", "inside", "inside the published band (mean ± std)"),
            ("within_se", "within-se", "within the published standard error"))


def _yes(text) -> bool:
    return str(text).strip().lower() in ("yes", "true")


def _read(text: str) -> pd.DataFrame:
    """A published CSV as strings (what the file says, digit for digit)."""
    return pd.read_csv(io.StringIO(text), dtype=str, keep_default_na=False) if text.strip() else pd.DataFrame()


def _number(text: str) -> float | None:
    try:
        return float(text)
    except (TypeError, ValueError):
        return None


def _fmt(text: str, digits: int = 3) -> str:
    """A CSV cell for reading: floats to `digits` decimals, integers and words as written, NaN as –."""
    x = _number(text)
    if x is None or text.strip().lstrip("-").isdigit():
        return text
    return "–" if not np.isfinite(x) else f"{x:.{digits}f}"


def cell(text, value=None, cls: str = "", title: str = "") -> dict:
    return {"text": text, "value": value, "cls": cls, "title": title}


def num(df_row: dict, col: str, digits: int = 3, ci: tuple[str, str] | None = None) -> dict:
    """A number from a CSV row, with its interval `[low, high]` when the row has the two columns."""
    raw = df_row.get(col, "")
    text = _fmt(raw, digits)
    if ci and ci[0] in df_row and _number(df_row[ci[0]]) is not None and np.isfinite(_number(df_row[ci[0]])):
        text += f" [{_fmt(df_row[ci[0]], digits)}, {_fmt(df_row[ci[1]], digits)}]"
    return cell(text, raw, "num")


def table(title: str, csv: str | None, header: list[str], rows: list[list[dict]], note: str = "",
          href: str | None = None) -> dict:
    """`csv`: a published table under ../tables/ (or `href`: a CSV the report wrote itself, under tables/)."""
    return {"kind": "table", "title": title, "csv": csv, "href": href or (f"../tables/{csv}" if csv else None),
            "header": header, "rows": rows, "note": note}


def rest_header(spec: specs.TableSpec, placed) -> list[str]:
    """The labels of the columns `spec` declares and a page table does not place: shown after its own."""
    return [c.label for c in spec.unplaced(placed)]


def rest_cells(spec: specs.TableSpec, placed, r: dict) -> list[dict]:
    """Those columns' cells of one CSV row, each as its kind reads (specs.cell_text)."""
    return [cell(specs.cell_text(c, r.get(c.name, "")), r.get(c.name, ""),
                 "num" if c.kind in (specs.Kind.NUMBER, specs.Kind.COUNT) else "") for c in spec.unplaced(placed)]


def para(text: str, cls: str = "") -> dict:
    return {"kind": "p", "text": text, "cls": cls}


def _method_name(row: dict) -> str:
    backbone = row.get("backbone", "")
    return label("model", row["model"]) + (f" · {backbone} ({row.get('weights', '')})" if backbone else "")


# ---------------------------------------------------------------- sections


# The columns each page table places (or leaves to its CSV); any other column its spec declares is shown after them.
# The comparison places what paper_comparison.md does (paper.COMPARISON_PLACED)
MISSING_PLACED = ("path", "run_name", "run_key", "status", "steps_done", "n_tasks", "dataset", "model", "backbone",
                  "protocol", "ordering", "seed", "error")
CL_VS_NCL_PLACED = ("level", "metric", "model", "backbone", "weights", "n_blocks", "ncl_mean", "cl_mean",
                    "median_difference", "statistic", "p", "p_holm", "test", "correction", "note")
FRIEDMAN_PLACED = ("level", "protocol", "metric", "n_blocks", "n_methods", "statistic", "p", "test", "correction",
                   "post_hoc", "alpha", "critical_difference", "left_out", "note")
RANKS_PLACED = ("level", "protocol", "metric", "model", "backbone", "weights", "mean_rank", "n_blocks")
TABULAR_TABLE2_PLACED = ("dataset", "ordering", "model", "metric", "protocol", "value", "ci_low", "ci_high", "method",
                         "block", "ci_low_long", "ci_high_long", "block_long", "conclusion_changes",
                         "stratified_tasks", "n_seeds", "seed_values", "fm_matrix", "scores_replaced")


def overview(runs: pd.DataFrame, missing: pd.DataFrame, dataset: str) -> dict:
    blocks = [para(f"{len(runs)} complete run(s) used, {len(missing)} missing or failed (never averaged in). "
                   "Every number on this page is a cell of a CSV table under ../tables/, made by `make aggregate` "
                   "from the run files listed in ../tables/manifest.json; `make verify` recomputes them.")]
    rows = []
    for key, g in runs.groupby(["dataset", "track", "model", "backbone", "weights"], sort=False, dropna=False):
        rows.append([cell(label("dataset", key[0])), cell(key[1]), cell(label("model", key[2])),
                     cell(str(key[3]) if pd.notna(key[3]) else ""), cell(str(key[4]) if pd.notna(key[4]) else ""),
                     cell(", ".join(sorted(g["ordering"].unique()))), cell(", ".join(sorted(g["protocol"].unique()))),
                     cell(", ".join(str(s) for s in sorted(g["seed"].unique()))), cell(str(len(g)), len(g), "num")])
    blocks.append(table("What ran: dataset × method, with the orderings, protocols and seeds of its runs",
                        _file(specs.RUNS),
                        ["dataset", "track", "model", "backbone", "weights", "orderings", "protocols", "seeds",
                         "runs"], rows))
    if len(missing):
        spec = specs.MISSING
        mrows = [[cell(m["path"]), cell(m["status"], cls=f"status-{m['status']}"),
                  cell(f"{m['steps_done']}/{m['n_tasks']}"), cell(label("model", m["model"])), cell(m["protocol"]),
                  cell(m["ordering"]), cell(str(m["seed"])),
                  cell((str(m["error"]).strip().splitlines() or [""])[-1]), *rest_cells(spec, MISSING_PLACED, m)]
                 for m in missing.to_dict("records")]
        blocks.append(table("Missing and failed runs (with their last error line)", _file(spec),
                            [*_header(spec, ["path", "status", "steps_done", "model", "protocol", "ordering", "seed",
                                             "error"]), *rest_header(spec, MISSING_PLACED)], mrows))
    else:
        blocks.append(para("No missing or failed runs."))
    blocks.append(table("Provenance", _file(specs.RUNS), ["what", "values (runs)"], _provenance_rows(runs)))
    return {"id": "overview", "title": f"Overview: {label('dataset', dataset) if dataset != 'all' else 'all datasets'}",
            "blocks": blocks}


def _counts(series: pd.Series) -> str:
    values = series.replace("", np.nan).dropna().astype(str)
    if values.empty:
        return "not recorded"
    return ", ".join(f"{v} ({n})" for v, n in values.value_counts().sort_index().items())


def _provenance_rows(runs: pd.DataFrame) -> list[list[dict]]:
    dirty = int((runs["git_dirty"].astype(int) == 1).sum())
    lines = [("commits", _counts(runs["git_commit"].astype(str).str[:12]) + (f"; {dirty} from a dirty tree" if dirty
                                                                            else "")),
             ("containers", _counts(runs["container_image"]) if "container_image" in runs else "not recorded"),
             ("hardware (device)", _counts(runs["device"]) if "device" in runs else "not recorded"),
             ("hosts", str(runs["host"].nunique())),
             ("CPU threads", _counts(runs["cpu_threads"]) if "cpu_threads" in runs else "not recorded"),
             ("total train time", f"{runs['train_s'].sum():.1f} s over {len(runs)} runs"),
             ("total eval time", f"{runs['eval_s'].sum():.1f} s")]
    return [[cell(k), cell(v)] for k, v in lines]


def finding(r: dict) -> tuple[str, str, str]:
    """(CSS class, verdict, reason) of one paper_comparison.csv row. BWT rows are judged as released (the form the
    published BWT was computed in), as paper.summary_lines counts them; the reason says what was compared."""
    if not _yes(r.get("comparable")):
        return "not-comparable", "not comparable", r.get("reason", "") or "no reason recorded"
    suffix = "_released" if r.get("metric") == "bwt" else ""
    ours, mean, std = (_number(r.get(c)) for c in (f"ours{suffix}", "published_mean", "published_std"))
    if ours is None or mean is None or std is None or not np.isfinite(ours):
        return "not-comparable", "not comparable", "no value of ours or no published cell"
    form = " (BWT as released)" if suffix else ""
    n = _number(r.get("n_pooled"))
    band = f"ours{form} {ours:.3f} against the published {mean:.3f} ± {std:.3f}"
    se = (f"one standard error ({std / np.sqrt(n):.4f} = std / √{n:g})" if n and n > 0 else "one standard error")
    gap = f"|ours − published| = {abs(round(ours, 3) - mean):.3f}"
    for col, cls, verdict in VERDICTS:
        if _yes(r.get(f"{col}{suffix}")):
            why = (f"{band}: inside the band {mean - std:.3f} to {mean + std:.3f}" if col == "in_band"
                   else f"{band}: outside the band, but {gap} is within {se}")
            return cls, verdict, why
    return "outside", "outside the published band", f"{band}: outside the band, and {gap} exceeds {se}"


# paper_comparison.csv's columns the page shows as they are (spec labels), before its composite ones
COMPARED = ("dataset", "ordering", "metric", "level", "protocol", "ours", "ours_released")


def comparison(tables: dict) -> dict | None:
    pc = _table(tables, specs.PAPER_COMPARISON.csv)
    if pc is None:
        return None
    rows, notes = [], {}
    for r in pc.to_dict("records"):
        cls, verdict, why = finding(r)
        n = notes.setdefault(why, len(notes) + 1)
        mark = f"finding {cls}"  # every compared cell of the row wears the finding; the reason on hover
        published = (f"{_fmt(r['published_mean'])} ± {_fmt(r['published_std'])}" if r.get("published_mean") else "–")
        shown = [num(r, "ours"), num(r, "ours_released"), cell(published, r.get("published_mean", ""), "num"),
                 num(r, "difference" if r.get("metric") != "bwt" else "difference_released")]
        rows.append([cell(label("dataset", r["dataset"])), cell(label("ordering", r["ordering"])), cell(r["metric"]),
                     cell(r["level"]), cell(r["protocol"]),
                     *[{**c, "cls": f"{c['cls']} {mark}", "title": why} for c in shown],
                     cell(f"{verdict} [{n}]", cls=f"verdict {mark}", title=why),
                     *rest_cells(specs.PAPER_COMPARISON, COMPARISON_PLACED, r)])
    source = pc["published_source"].iloc[0] if "published_source" in pc else ""
    blocks = [para(f"Published column: {source}.", "warn" if "the user's table" in source else "")] if source else []
    blocks += [para("Each of our Table 2 cells (the paper's methods only) beside InCLAD's published one; every "
                   "compared cell is coloured by what the comparison found: inside the band (mean ± std), within "
                   "one standard error, outside, or not comparable. BWT rows are judged as released (the form the "
                   "published BWT was computed in; their difference is ours as released − published). The reason "
                   "of each finding is on hover and in the numbered notes under the table."),
              table("Table 2 beside the published one", _file(specs.PAPER_COMPARISON),
                    [*(specs.PAPER_COMPARISON.label(n) for n in COMPARED), "published", "difference", "verdict",
                     *rest_header(specs.PAPER_COMPARISON, COMPARISON_PLACED)], rows)]
    blocks += [para(f"[{n}] {why}", "note") for why, n in notes.items()]
    blocks += _table2_block(tables)
    return {"id": "table2", "title": "Table 2", "blocks": blocks}


def _long_rows(spec: specs.TableSpec, frame: pd.DataFrame, keys: list[str], counts: list[str],
               placed: tuple[str, ...]) -> list[list[dict]]:
    """A long metric table's rows: its keys (datasets, models and orderings by their labels, a metric by its
    spec label), mean ± std, the count columns, then the columns the spec declares beyond `placed`."""
    def key_cell(r: dict, k: str) -> dict:
        if k == "metric":
            return cell(spec.label(r[k]) if r[k] in spec.metric_names() else r[k])
        if k == "model":
            return cell(_method_name(r))
        return cell(label(k, r[k]) if k in ("dataset", "ordering") else r[k])

    n = "n_methods" if "n_methods" in counts else counts[0]
    return [[*(key_cell(r, k) for k in keys), _mean_std({**r, "n_methods": r[n]}),
             *(cell(r[c], r[c], "num") for c in counts), *rest_cells(spec, placed, r)]
            for r in frame.to_dict("records")]


def _header(spec: specs.TableSpec, names: list[str]) -> list[str]:
    """The spec's labels of `names`; "model" stands for the method (model · backbone (weights)) the page shows."""
    return ["method" if n == "model" else spec.label(n) for n in names]


def _long_header(spec: specs.TableSpec, keys: list[str], counts: list[str], placed: tuple[str, ...]) -> list[str]:
    return [*_header(spec, keys), "mean ± std", *_header(spec, counts), *rest_header(spec, placed)]


def _table2_block(tables: dict) -> list[dict]:
    spec = specs.TABLE2
    t2 = _table(tables, spec.csv)
    if t2 is None:
        return []
    keys, counts = ["dataset", "ordering", "metric", "level", "protocol"], ["n_runs", "n_methods"]
    return [table("Table 2, every method (seeds averaged within a method, then mean ± population std across "
                  "methods)", _file(spec), _long_header(spec, keys, counts, T2_PLACED),
                  _long_rows(spec, t2, keys, counts, T2_PLACED))]


def _mean_std(r: dict) -> dict:
    if _number(r.get("mean")) is None or not np.isfinite(_number(r["mean"])):
        return cell("–", r.get("mean", ""), "num")
    text = _fmt(r["mean"]) + (f" ± {_fmt(r['std'])}" if _number(r.get("std")) is not None and
                              np.isfinite(_number(r["std"])) and r.get("n_methods", r.get("n", "1")) != "1" else "")
    return cell(text, r["mean"], "num")


def _file(spec: specs.TableSpec) -> str:
    """A published table's file name, as the page links it under ../tables/."""
    return f"{spec.name}.csv"


def _table(tables: dict, name: str) -> pd.DataFrame | None:
    df = tables.get(name)
    return df if df is not None and len(df) else None


def _p(text: str) -> str:
    x = _number(text)
    return "–" if x is None or not np.isfinite(x) else (f"{x:.2e}" if x < 1e-3 else f"{x:.3f}")


def statistics(tables: dict, figures: list[dict]) -> dict | None:
    w, f = _table(tables, specs.CL_VS_NCL.csv), _table(tables, specs.FRIEDMAN.csv)
    if w is None and f is None:
        return None
    blocks = [para("Blocks are dataset × ordering; a method's seeds are averaged within a block first, so seeds "
                   "are not counted as independent evidence. Every p-value names its test, its number of blocks and "
                   "its correction.")]
    if w is not None:
        rows = [[cell(r["level"]), cell(_method_name(r)), cell(r["n_blocks"], r["n_blocks"], "num"),
                 num(r, "ncl_mean"), num(r, "cl_mean"), num(r, "median_difference"),
                 cell(_p(r["p"]), r["p"], "num"), cell(_p(r["p_holm"]), r["p_holm"], "num"),
                 cell(f"{r['test']}, {r['n_blocks']} blocks, {r['correction']} over the level's methods"),
                 cell(r["note"]), *rest_cells(specs.CL_VS_NCL, CL_VS_NCL_PLACED, r)] for r in w.to_dict("records")]
        blocks.append(table(specs.CL_VS_NCL.title, _file(specs.CL_VS_NCL), [*_header(
            specs.CL_VS_NCL, ["level", "model", "n_blocks", "ncl_mean", "cl_mean", "median_difference", "p", "p_holm",
                              "test", "note"]), *rest_header(specs.CL_VS_NCL, CL_VS_NCL_PLACED)], rows))
    if f is not None:
        rows = [[cell(r["level"]), cell(r["protocol"]), cell(r["n_blocks"], r["n_blocks"], "num"),
                 cell(r["n_methods"], r["n_methods"], "num"), num(r, "statistic"), cell(_p(r["p"]), r["p"], "num"),
                 num(r, "critical_difference"),
                 cell(f"{r['test']}, {r['n_blocks']} blocks, correction: {r['correction']}, post-hoc "
                      f"{r['post_hoc']} at α = {r['alpha']}"),
                 cell("; ".join(x for x in (r["note"], f"left out (not in every block): {r['left_out']}"
                                            if r["left_out"] else "") if x)),
                 *rest_cells(specs.FRIEDMAN, FRIEDMAN_PLACED, r)] for r in f.to_dict("records")]
        blocks.append(table(specs.FRIEDMAN.title, _file(specs.FRIEDMAN), [*_header(
            specs.FRIEDMAN, ["level", "protocol", "n_blocks", "n_methods", "statistic", "p", "critical_difference",
                             "test", "note"]), *rest_header(specs.FRIEDMAN, FRIEDMAN_PLACED)], rows))
    ranks = _table(tables, specs.FRIEDMAN_RANKS.csv)
    if ranks is not None:
        rows = [[cell(r["level"]), cell(r["protocol"]), cell(_method_name(r)), num(r, "mean_rank", 2),
                 cell(r["n_blocks"], r["n_blocks"], "num"), *rest_cells(specs.FRIEDMAN_RANKS, RANKS_PLACED, r)]
                for r in ranks.to_dict("records")]
        blocks.append(table("Average ranks of the Friedman tests (rank 1: the highest ROC-AUC_CL in a block)",
                            _file(specs.FRIEDMAN_RANKS),
                            [*_header(specs.FRIEDMAN_RANKS, ["level", "protocol", "model", "mean_rank", "n_blocks"]),
                             *rest_header(specs.FRIEDMAN_RANKS, RANKS_PLACED)], rows))
    for fig in figures:
        blocks.append({"kind": "figure", **fig})
    if not figures:
        blocks.append(para("No critical-difference diagram: no Friedman test was run (too few blocks or methods, "
                           "or no differences to test; see the notes above).", "warn"))
    return {"id": "statistics", "title": "Significance", "blocks": blocks}


def cd_figures(tables: dict, directory: Path) -> list[dict]:
    """Draw one critical-difference diagram per Friedman test that was run; the report's figure entries."""
    f, ranks = _table(tables, specs.FRIEDMAN.csv), _table(tables, specs.FRIEDMAN_RANKS.csv)
    out = []
    if f is None or ranks is None:
        return out
    for r in f.to_dict("records"):
        cd, p = _number(r["critical_difference"]), _number(r["p"])
        if cd is None or p is None or not (np.isfinite(cd) and np.isfinite(p)):
            continue  # no test was run (too few blocks or methods, or no differences to test): no diagram
        sub = ranks[(ranks["level"] == r["level"]) & (ranks["protocol"] == r["protocol"])].to_dict("records")
        stem = f"cd_{r['level']}_{r['protocol']}"
        title = (f"{r['level']} ROC-AUC_CL, {r['protocol'].upper()}: average ranks over {r['n_blocks']} blocks; "
                 f"Friedman p = {_p(r['p'])}, Nemenyi α = {r['alpha']}")
        cdd.save([_method_name(s) for s in sub], [float(s["mean_rank"]) for s in sub], cd, title, directory / stem)
        caveat = ("" if float(r["p"]) < float(r["alpha"]) else f" The Friedman test does not reject equal ranks "
                  f"(p = {_p(r['p'])} ≥ {r['alpha']}): the diagram shows the ranks, not a difference.")
        out.append({"png": f"figures/{stem}.png", "pdf": f"figures/{stem}.pdf",
                    "caption": f"Critical-difference diagram ({r['level']}, {r['protocol'].upper()}): methods joined "
                               f"by a red bar are not significantly different (Nemenyi, CD = {cd:.2f})." + caveat})
    return out


def per_method(tables: dict, runs: pd.DataFrame, details: dict, drawn: dict, figs: OwnFigures) -> dict | None:
    """`drawn`: the heatmap files `aggregate` drew (per method with --per-method-heatmaps), linked beside each
    method's own: {(dataset, ordering, protocol, level, model, backbone, weights): [{"href", "format"}]}; where
    `aggregate` drew none, the method's heatmap is registered in `figs` (its paper figures under report/figures/)."""
    rc = _table(tables, specs.RUNS.csv)
    if rc is None:
        return None
    rc = rc[rc["track"] == "image"]
    if rc.empty:
        return None
    rows = [[cell(label("dataset", r["dataset"])), cell(_method_name(r)), cell(label("ordering", r["ordering"])),
             cell(r["protocol"]), cell(r["seed"]),
             *[num(r, c.name, ci=(f"{c.name}_ci_low", f"{c.name}_ci_high")) for c in specs.RUN_SHOWN]]
            for r in rc.to_dict("records")]
    blocks = [table("Every run: intervals are stratified bootstraps over its test images (the same resample of a "
                    "test set at every step; seeds, training data and order are not resampled)", _file(specs.RUNS),
                    [*_header(specs.RUNS, ["dataset", "model", "ordering", "protocol", "seed"]),
                     *[c.label for c in specs.RUN_SHOWN]], rows)]
    spec = specs.PER_METHOD
    pm = _table(tables, spec.csv)
    if pm is not None:
        keys, counts = ["dataset", "model", "ordering", "metric", "level", "protocol"], ["n_runs"]
        blocks.append(table("Per method: mean ± population std over seeds", _file(spec),
                            _long_header(spec, keys, counts, PER_METHOD_PLACED),
                            _long_rows(spec, pm, keys, counts, PER_METHOD_PLACED)))
    image = runs[runs["track"] == "image"]
    for key, g in image.groupby(["dataset", *METHOD], sort=False):
        name = f"{label('dataset', key[0])} · {_method_name(dict(zip(['dataset', *METHOD], key)))}"
        blocks.append({"kind": "details", "summary": name,
                       "parts": _method_parts(g, details, drawn, figs)})
    return {"id": "methods", "title": "Per method", "blocks": blocks}


def _mean_over(arrays: list[np.ndarray]) -> np.ndarray:
    stack = np.stack(arrays).astype(float)
    finite = np.isfinite(stack)
    with np.errstate(invalid="ignore"):
        return np.where(finite, stack, 0).sum(0) / finite.sum(0)


def _method_parts(g: pd.DataFrame, details: dict, drawn: dict, figs: OwnFigures) -> list[dict]:
    """Per ordering × protocol: the method's own R heatmap (image level, seeds averaged), R[i, j] over steps i for
    each task j, and where the runs hold them the routing accuracy, bank memory and training loss over steps."""
    parts = []
    for (ordering, protocol), sub in g.groupby(["ordering", "protocol"], sort=False):
        runs = [details[k] for k in sub["run_key"]]
        tasks = runs[0]["tasks"]
        runs = [r for r in runs if r["tasks"] == tasks]  # a custom ordering's other task lists: their own cell
        R = _mean_over([r["R/image"] for r in runs])
        title = f"{label('ordering', ordering)} · {protocol.upper()} · {len(runs)} seed(s)"
        method = tuple(g[list(METHOD)].iloc[0])
        files = drawn.get((g["dataset"].iloc[0], ordering, protocol, "image", *method), [])
        name = "_".join(_slug(x) for x in (g["dataset"].iloc[0], *method, ordering, protocol))
        stem = "curve_" + name
        if {f["format"] for f in files} < {"PNG", "PDF"}:  # aggregate drew no per-method PNG and PDF (no
            # --per-method-heatmaps, or not both formats): the report's own, linked where they exist
            files = figs.heatmap(_own_heatmap(f"heatmap_{name}_image", g["dataset"].iloc[0], ordering, protocol,
                                             method, tasks, R, runs))
        part = {"title": title, "heatmap": _heatmap(R, tasks), "files": files, "curves": []}
        curve = lambda kind, *a: part["curves"].append(_curve(f"{stem}_{kind}", figs, *a))  # noqa: E731
        curve("forgetting", [(tasks[j], list(range(j, len(tasks))), R[j:, j]) for j in range(len(tasks))],
              "after learning task i", "image ROC-AUC of task j", (0.5, 1.0))
        if all("routing/own_fraction" in r for r in runs):
            own = _mean_over([r["routing/own_fraction"] for r in runs])
            curve("routing", [("own-bank share", list(range(len(tasks))),
                               [np.nanmean(own[i, :i + 1]) for i in range(len(tasks))])],
                  "after learning task i", "routing accuracy", (0.0, 1.0))
        if all("memory/state_bytes" in r for r in runs) and protocol == "cl":
            mem = _mean_over([r["memory/state_bytes"] for r in runs]) / 1e6
            curve("memory", [("state", list(range(len(tasks))), mem)], "after learning task i",
                  "bank / state memory (MB)", None)
        if all("train/loss" in r for r in runs):
            loss = _mean_over([r["train/loss"] for r in runs])
            ys = loss[np.isfinite(loss)]
            curve("loss", [("loss", list(range(len(ys))), ys)], "epoch (all steps in order)", "training loss",
                  None)
        parts.append(part)
    return parts


def _own_heatmap(stem: str, dataset: str, ordering: str, protocol: str, method: tuple, tasks: list, R: np.ndarray,
                 runs: list[dict]) -> hm.Heatmap:
    """One method's image-level R (its seeds averaged) as bench.report.heatmaps draws the published ones."""
    n = len(tasks)
    mean = R.astype(float).copy()
    mean[np.triu_indices(n, 1)] = np.nan
    n_runs = np.sum([np.isfinite(r["R/image"]) for r in runs], axis=0).astype(int)
    n_runs[np.triu_indices(n, 1)] = 0
    return hm.Heatmap(stem, dataset, ordering, protocol, "image", *method, list(tasks), mean, n_runs, 1)


# {stem: digest of what the figure was drawn from} of the report's own paper figures (curves and per-method
# heatmaps) that exist: an unchanged one is not drawn again, a changed one is removed or redrawn, never left stale
CURVE_DIGESTS = "curve_digests.json"
FORMATS = curves_draw.FORMATS  # every figure of the report's own, for papers


def _slug(x) -> str:
    return "".join(ch if ch.isalnum() or ch in "-." else "-" for ch in str(x)) or "-"


class OwnFigures:
    """The report's own figures: per method × ordering × protocol its R heatmap and its curves. The page shows
    them inline (an HTML table, SVG) and their values go to report/tables/; their PNG and PDF for papers are drawn
    only when asked (`draw`: `make figures`, `aggregate --paper-figures`), because matplotlib takes 0.1-0.4 s a
    figure and a campaign has over a thousand of them. Without `draw`, the files drawn before from the same values
    are kept and linked; any other is removed, so the page never links a figure of other values."""

    def __init__(self, directory: Path, draw: bool):
        self.directory, self.draw = Path(directory), draw
        index = self.directory / CURVE_DIGESTS
        try:
            self.before = json.loads(index.read_text()) if index.is_file() else {}
        except ValueError:
            self.before = {}  # a damaged index only costs a redraw (or an absent link)
        self.curves, self.maps = [], []
        self.present = {}  # {stem: digest} of the figures whose files exist once `save` has run
        self._pending = []  # what is still to draw, as calls
        self._curve_painter = self._heatmap_painter = None  # built at the first figure drawn: often none is

    def _add(self, stem: str, digest, draw) -> bool:
        """Whether the figure's files will exist after `save`; `digest()` gives what it is drawn from."""
        if not self.draw and stem not in self.before:
            return False  # never drawn: not even its digest is needed
        digest = digest()
        files = [self.directory / f"{stem}.{fmt}" for fmt in FORMATS]
        if self.before.get(stem) == digest and all(f.is_file() for f in files):
            self.present[stem] = digest
        elif self.draw:
            self.present[stem] = digest
            self._pending.append(draw)
        return stem in self.present

    def curve(self, c: dict) -> bool:
        self.curves.append(c)
        return self._add(c["stem"], lambda: curves_draw.digest(c), lambda: self._draw_curve(c))

    def heatmap(self, h: hm.Heatmap) -> list[dict]:
        """The links to `h`'s PNG and PDF: none where they are not drawn."""
        self.maps.append(h)
        drawn = self._add(h.stem, lambda: hm.digest(h, FORMATS), lambda: self._draw_heatmap(h))
        return [{"href": f"figures/{h.stem}.{fmt}", "format": fmt.upper()} for fmt in FORMATS] if drawn else []

    def _draw_curve(self, c: dict) -> None:
        self._curve_painter = self._curve_painter or curves_draw.Painter()
        self._curve_painter.draw(c, self.directory)

    def _draw_heatmap(self, h: hm.Heatmap) -> None:
        self._heatmap_painter = self._heatmap_painter or hm.Painter()
        hm.save(h, self.directory, FORMATS, self._heatmap_painter)

    def save(self) -> set[Path]:
        """Draw what is pending and write the index of what exists; the files this leaves (for the caller's
        removal of everything else under report/)."""
        for draw in self._pending:
            draw()
        index = self.directory / CURVE_DIGESTS
        text = json.dumps(self.present, indent=1, sort_keys=True) + "\n"
        if not index.is_file() or index.read_text() != text:
            write_text_atomic(index, text)
        return {self.directory / f"{stem}.{fmt}" for stem in self.present for fmt in FORMATS} | {index}


def _curve(stem: str, figs: OwnFigures, series: list[tuple], xlabel: str, ylabel: str, yrange) -> dict:
    """A curve as inline SVG, its values in report/tables/curves.csv (figure, series, x, y), its PNG and PDF
    (report/figures/<stem>.png|pdf) linked where they are drawn."""
    values = pd.DataFrame([{"figure": stem, "series": str(name), "x": int(x), "y": float(y)}
                           for name, sx, sy in series for x, y in zip(sx, sy) if np.isfinite(y)],
                          columns=["figure", "series", "x", "y"])
    drawn = figs.curve({"stem": stem, "series": series, "xlabel": xlabel, "ylabel": ylabel, "yrange": yrange,
                       "values": values})
    return {"svg": _svg(series, xlabel, ylabel, yrange), "png": f"figures/{stem}.png" if drawn else None,
            "pdf": f"figures/{stem}.pdf" if drawn else None, "csv": "tables/curves.csv"}


def _heatmap(R: np.ndarray, tasks: list) -> dict:
    """An HTML-table heatmap of the lower triangle, coloured as the PNG heatmaps (viridis over 0.5-1)."""
    rows = []
    for i in range(len(tasks)):
        cells = []
        for j in range(len(tasks)):
            v = R[i, j]
            if j > i or not np.isfinite(v):
                cells.append({"text": "", "style": ""})
                continue
            rgb = VIRIDIS((min(max(v, 0.5), 1.0) - 0.5) / 0.5)[:3]
            colour = "#%02x%02x%02x" % tuple(int(255 * c) for c in rgb)
            cells.append({"text": f"{v:.2f}", "style": f"background:{colour};color:{'#000' if v > 0.8 else '#fff'}",
                          "title": f"R[{i},{j}]: after {tasks[i]}, on {tasks[j]}: {v:.4f}"})
        rows.append({"task": tasks[i], "cells": cells})
    return {"tasks": tasks, "rows": rows}


def _svg(series: list[tuple], xlabel: str, ylabel: str, yrange) -> str:
    """A small line chart as inline SVG (no script): one polyline per series, its name on hover."""
    w, h, left, bottom = 360, 200, 46, 34
    xs = [x for _, sx, _ in series for x in sx]
    ys = [float(y) for _, _, sy in series for y in sy if np.isfinite(y)]
    if not ys:
        return ""
    lo, hi = yrange if yrange else (min(ys), max(ys))
    lo, hi = min(lo, min(ys)), max(hi, max(ys))
    hi = hi if hi > lo else lo + 1
    x_max = max(max(xs), 1)
    px = lambda x: left + (w - left - 8) * x / x_max  # noqa: E731
    py = lambda y: 8 + (h - bottom - 8) * (hi - y) / (hi - lo)  # noqa: E731
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" role="img" '
           f'aria-label="{escape(ylabel)}">',
           f'<rect x="{left}" y="8" width="{w - left - 8}" height="{h - bottom - 8}" fill="none" stroke="#999"/>',
           f'<text x="{left - 4}" y="12" text-anchor="end" font-size="10">{hi:.2f}</text>',
           f'<text x="{left - 4}" y="{h - bottom}" text-anchor="end" font-size="10">{lo:.2f}</text>',
           f'<text x="{left}" y="{h - bottom + 14}" font-size="10">0</text>',
           f'<text x="{w - 8}" y="{h - bottom + 14}" text-anchor="end" font-size="10">{x_max}</text>',
           f'<text x="{(w + left) / 2}" y="{h - 4}" text-anchor="middle" font-size="11">'
           f'{escape(xlabel)}</text>',
           f'<text x="12" y="{(h - bottom) / 2}" text-anchor="middle" font-size="11" '
           f'transform="rotate(-90 12 {(h - bottom) / 2})">{escape(ylabel)}</text>']
    for n, (name, sx, sy) in enumerate(series):
        rgb = VIRIDIS(n / max(len(series) - 1, 1) * 0.9)[:3]
        colour = "#%02x%02x%02x" % tuple(int(255 * c) for c in rgb)
        points = " ".join(f"{px(x):.1f},{py(float(y)):.1f}" for x, y in zip(sx, sy) if np.isfinite(y))
        out.append(f'<polyline fill="none" stroke="{colour}" stroke-width="1.5" points="{points}">'
                   f'<title>{escape(str(name))}</title></polyline>')
    return "\n".join(out + ["</svg>"])


def timing(tables: dict) -> dict | None:
    pt = _table(tables, specs.PAPER_TIMING.csv)
    if pt is None:
        return {"id": "timing", "title": "Timing", "blocks": [para("No timing cell of ours has a published "
                                                                       "counterpart (InCLAD Tables 4–5)."),
                                                                  _link_only(_file(specs.TIMING))]}
    names = list(pt.columns)
    header = [specs.PAPER_TIMING.label(c) for c in names]
    rows = [[num(r, c) if _number(r[c]) is not None else cell(r[c]) for c in names] for r in pt.to_dict("records")]
    return {"id": "timing", "title": "Timing beside InCLAD Tables 4–5",
            "blocks": [para("Ratios are ours / published; beside each, both machines: ours (our hardware, each run's "
                            "recorded device) and the paper's (published hardware). The pipelines time different "
                            "work (docs/reports.md), so a ratio gives a scale, not a verdict."),
                       table("Timing beside the published tables", _file(specs.PAPER_TIMING), header, rows),
                       _link_only(_file(specs.TIMING))]}


def _link_only(csv: str) -> dict:
    return para(f'<a href="../tables/{csv}">{csv}</a>: our full timing table (InCLAD Tables 4–5 layout).', "raw")


def _records(text: str) -> str:
    x = _number(text)
    return str(int(x)) if x is not None and np.isfinite(x) else ""


def _chance_cells(r: dict, random_ap: dict) -> list[dict]:
    """The chance level a tabular cell is read against (ROC-AUC 0.5, nPR-AUC 0, FM 0; AP: the random ranking's AP of
    the same cell) and where the cell's interval lies against it."""
    from bench.report import tabular as tb

    metric = r["metric"]
    if metric == "random_ap_cl":
        return [cell("(is a chance level)"), cell("")]
    if metric == "ap_cl":
        raw = random_ap.get((r["dataset"], r["ordering"], r["model"], r["protocol"]), "")
        chance, shown = _number(raw), cell(_fmt(raw), raw, "num")
    else:
        chance = tb.CHANCE.get(metric)
        shown = cell("–" if chance is None else f"{chance:g}", "" if chance is None else chance, "num")
    low, high = _number(r["ci_low"]), _number(r["ci_high"])
    where = tb._conclusion(low, high, chance) if None not in (low, high, chance) else ""
    return [shown, cell(where)]


def _interval_method(r: dict) -> str:
    block = f"block ({_records(r['block'])} records)"
    return {"block": block, "stratified": "stratified",
            "block+stratified": f"{block} + stratified for {r['stratified_tasks']}"}.get(r["method"], r["method"])


def tabular_table2_block(df: pd.DataFrame) -> dict:
    """One row per cell: value with its 95 % interval, its chance level and where the interval lies against it, and
    how the interval was drawn (block length), then the long-block sensitivity interval."""
    from bench.report import tabular as tb

    spec = specs.TABULAR_TABLE2
    random_ap = {(r["dataset"], r["ordering"], r["model"], r["protocol"]): r["value"]
                 for r in df.to_dict("records") if r["metric"] == "random_ap_cl"}
    rows = []
    for r in df.to_dict("records"):
        low = _number(r["ci_low_long"])
        long = cell(f"[{_fmt(r['ci_low_long'])}, {_fmt(r['ci_high_long'])}] (block {_records(r['block_long'])})"
                    if low is not None and np.isfinite(low) else "–", r["ci_low_long"], "num")
        rows.append([cell(r["dataset"]), cell(r["ordering"]), cell(r["model"]),
                     cell(tb.METRIC_NAMES.get(r["metric"], r["metric"]), r["metric"]), cell(r["protocol"]),
                     num(r, "value", ci=("ci_low", "ci_high")), *_chance_cells(r, random_ap),
                     cell(_interval_method(r)), long, cell(r["conclusion_changes"]),
                     cell(r["n_seeds"], r["n_seeds"], "num"), cell(r["seed_values"]), cell(r["fm_matrix"]),
                     cell(r.get("scores_replaced", ""), cls="warn" if r.get("scores_replaced") else ""),
                     *rest_cells(spec, TABULAR_TABLE2_PLACED, r)])
    note = tb.replaced_note(df) if "scores_replaced" in df else ""
    return table("Tabular Table 2: each cell with its 95 % interval beside its chance level (nPR-AUC: 0)",
                 _file(specs.TABULAR_TABLE2),
                 [*(c.label for c in spec.keys), "value [95 % CI]", "chance level", "against chance",
                  spec.label("method"), "long-block interval",
                  *(spec.label(n) for n in ("conclusion_changes", "n_seeds", "seed_values", "fm_matrix",
                                            "scores_replaced")), *rest_header(spec, TABULAR_TABLE2_PLACED)],
                 rows, note=note)


def tabular(tables: dict) -> dict | None:
    names = [(specs.TABULAR_TASKS, "Constructed scenarios: test sets with prevalence and chance-level AP"),
             (specs.TABULAR_TABLE2, None),
             (specs.VALIDATION, "Validation: gaps with their paired block-bootstrap intervals")]
    from bench.report.tabular import CHANCE

    chance = CHANCE["npr_auc_cl"]
    blocks = []
    for spec, title in names:
        df = _table(tables, spec.csv)
        if df is None:
            continue
        if title is None:
            blocks.append(tabular_table2_block(df))
            continue
        cols = [c for c in df.columns if not c.endswith(("_low", "_high")) and c not in ("ci_low", "ci_high")]
        rows = []
        for r in df.to_dict("records"):
            row = []
            for c in cols:
                pair = (("ci_low", "ci_high") if c == "value" else (f"{c}_low", f"{c}_high"))
                row.append(num(r, c, ci=pair) if _number(r[c]) is not None else cell(r[c]))
                if c.endswith("npr_auc_cl"):  # nPR-AUC is read against its chance level: in the same row
                    row.append(cell(f"{chance:g}", chance, "num"))
            rows.append(row)
        header = [h for c in cols for h in ((spec.label(c), "chance level") if c.endswith("npr_auc_cl")
                                            else (spec.label(c),))]
        blocks.append(table(title, _file(spec), header, rows))
    if not blocks:
        return None
    return {"id": "tabular", "title": "Tabular track", "blocks": blocks}


def _own(spec: specs.TableSpec, frame: pd.DataFrame, own: dict) -> pd.DataFrame:
    """Register a table the report publishes itself (report/<spec.csv>); the page shows that CSV's text."""
    text = spec.csv_text(frame)
    own[spec.csv] = text
    return _read(text)


def _construction_outcome(con: dict) -> dict:
    """One construction's outcome in a line: the selected candidate and its tasks, or why there is no release."""
    m, folder = con["manifest"], con["name"]
    if m is None:
        return para(f"{folder}: no release. The construction stopped after filtering (no candidate was selected); "
                    f"the filtering records of {', '.join(con['candidates'])} are shown below, each pass with the "
                    "criteria that flagged its tasks.", "warn")
    return para(f"{folder}: selected candidate {m.get('selected_candidate')} with {len(m.get('tasks', []))} tasks "
                f"({', '.join(m.get('tasks', []))}).")


# the columns each constructed-scenario table places; any other its spec declares is shown after them
SCENARIO_TASKS_PLACED = ("construction", "candidate", "selected", "task", "status", "removed_in_pass", "removed_by")
# the pass statistics other than S* stay in the CSV (the page shows the criteria and the self-score)
SCENARIO_FILTERING_PLACED = ("construction", "candidate", "selected", "pass", "task", *CRITERIA, "flags",
                             "best_self", "gain", "incoming", "outgoing", "source_min_diff", "target_min_diff",
                             "removed")
SCENARIO_ORDERINGS_PLACED = ("construction", "candidate", "selected", "ordering", "source", "w", "order",
                             "borda_points")


def _candidate_cell(r: dict) -> dict:
    return cell(r["candidate"] + (" (selected)" if _yes(r["selected"]) else ""))


def _scenario_table(spec: specs.TableSpec, placed: tuple, rows: list[list[dict]], frame: pd.DataFrame,
                    shown: tuple = ()) -> dict:
    """One constructed-scenario table: the labels of the columns its rows show (`shown`; default the placed ones
    but the selection, which shows inside the candidate cell), then every column its spec declares and the page
    does not place."""
    header = [spec.label(c) for c in shown or placed if c != "selected"]
    rows = [row + rest_cells(spec, placed, r) for row, r in zip(rows, frame.to_dict("records"))]
    return table(spec.title, f"{spec.name}.csv", header + rest_header(spec, placed), rows, href=spec.csv)


def _scenario_tasks(t: pd.DataFrame) -> dict:
    rows = [[cell(r["construction"]), _candidate_cell(r), cell(r["task"]),
             cell(r["status"] if r["status"] == "kept" else f"removed in pass {r['removed_in_pass']} by "
                  f"{r['removed_by'] or 'no criterion recorded'}", r["status"], f"task-{r['status']}"),
             cell(r["removed_in_pass"], r["removed_in_pass"], "num"), cell(r["removed_by"])]
            for r in t.to_dict("records")]
    return _scenario_table(specs.SCENARIO_TASKS, SCENARIO_TASKS_PLACED, rows, t)


def _scenario_w(w: pd.DataFrame) -> dict:
    spec = specs.SCENARIO_W
    placed = ("construction", "candidate", "selected", "tasks_kept", *[c.name for c in spec.values
                                                                        if c.name.startswith("w_")])
    rows = [[cell(r["construction"]), _candidate_cell(r), cell(r["tasks_kept"], r["tasks_kept"], "num"),
             *[num(r, c) for c in placed[4:]]] for r in w.to_dict("records")]
    return _scenario_table(spec, placed, rows, w)


def _scenario_orderings(o: pd.DataFrame) -> dict:
    rows = [[cell(r["construction"]), _candidate_cell(r), cell(r["ordering"]), cell(r["source"]), num(r, "w"),
             cell(r["order"]), cell(r["borda_points"])] for r in o.to_dict("records")]
    return _scenario_table(specs.SCENARIO_ORDERINGS, SCENARIO_ORDERINGS_PLACED, rows, o)


def _scenario_filtering(f: pd.DataFrame) -> dict:
    rows = [[cell(r["construction"]), _candidate_cell(r), cell(r["pass"], r["pass"], "num"), cell(r["task"]),
             *[cell("" if r[c] == "0" else "×" if r[c] == "1" else f"×{r[c]}", r[c]) for c in CRITERIA],
             cell(r["flags"], r["flags"], "num"), num(r, "best_self"),
             cell("removed" if _yes(r["removed"]) else "", r["removed"])] for r in f.to_dict("records")]
    return _scenario_table(specs.SCENARIO_FILTERING, SCENARIO_FILTERING_PLACED, rows, f,
                           shown=("construction", "candidate", "pass", "task", *CRITERIA, "flags", "best_self",
                                  "removed"))


def scenario_construction(constructions: list[dict], frames: dict, own: dict) -> dict | None:
    """The tabular track's constructed scenarios: kept / removed tasks with the criterion and pass that removed
    them, Kendall's W per candidate × family, the orderings (per model and the Borda consensus), every pass."""
    if not constructions:
        return None
    shown = {spec.name: _own(spec, frames[f"{spec.name}.csv"], own)
             for spec in (getattr(specs, n) for n in specs.SCENARIO_NAMES)}
    blocks = [_construction_outcome(con) for con in constructions]
    blocks.append(_scenario_tasks(shown["scenario_tasks"]))
    if len(shown["scenario_w"]):
        blocks.append(_scenario_w(shown["scenario_w"]))
    if len(shown["scenario_orderings"]):
        blocks.append(_scenario_orderings(shown["scenario_orderings"]))
    blocks.append(_scenario_filtering(shown["scenario_filtering"]))
    if len(shown["scenario_ste"]):
        ste = specs.SCENARIO_STE
        blocks.append(para(f'<a href="{ste.csv}">{ste.name}.csv</a>: the STE matrices the filtering read (per '
                           "candidate and model: the expert of task i evaluated on task j).", "raw"))
    return {"id": "construction", "title": "Tabular scenarios", "blocks": blocks}


HEATMAP_VALUES = ((specs.HEATMAPS.csv, "the values behind every image-track heatmap (figure, i, j, value, runs "
                                         "behind the cell)"),
                  (specs.TABULAR_HEATMAPS.csv, "the same for the tabular runs' R matrices"))


def heatmap_figures(items) -> dict | None:
    figs = sorted({i.name for i in items if i.heatmap is not None and i.name.endswith(".png")})
    published = {i.name for i in items}
    values = [para(f'<a href="../{name}">{Path(name).name}</a>: {what}.', "raw") for name, what in HEATMAP_VALUES
              if name in published]
    if not figs and not values:
        return None
    blocks = values + [{"kind": "figure", "png": f"../{f}", "pdf": f"../{f[:-4]}.pdf" if any(
        i.name == f"{f[:-4]}.pdf" for i in items) else None, "caption": Path(f).stem} for f in figs]
    return {"id": "heatmaps", "title": "Heatmaps (mean over methods)", "blocks": blocks}


def every_table(items, own: dict) -> dict:
    """A link to every CSV published (with its markdown and LaTeX forms), so none is only reachable by path."""
    names = {i.name for i in items}
    links = []
    for name in sorted(n for n in names if n.startswith("tables/") and n.endswith(".csv")):
        stem = name[:-4]
        forms = [f'<a href="../{escape(stem)}.{ext}">{ext}</a>' for ext in ("md", "tex") if f"{stem}.{ext}" in names]
        links.append(f'<a href="../{escape(name)}">{escape(Path(name).name)}</a>'
                     + (f" ({', '.join(forms)})" if forms else ""))
    links += [f'<a href="{escape(name)}">{escape(Path(name).name)}</a> (this report\'s own)'
              for name in sorted(own) if name.endswith(".csv")]
    return {"id": "csv", "title": "Every table", "blocks": [para(" · ".join(links) or "No table.", "raw")]}


def result_sets(outputs: Path) -> dict:
    links = []
    for page in sorted(Path(outputs).glob(f"*/{REPORT}/{PAGE}")):
        name = page.parent.parent.name
        if name != "all":
            links.append(f'<a href="../../{escape(name)}/{REPORT}/{PAGE}">{escape(label("dataset", name))}</a>')
    text = ("Result sets: " + " · ".join(links) if links
            else "No per-dataset report yet (make aggregate DATASET=&lt;d&gt;).")
    return {"id": "sets", "title": "Every result set", "blocks": [para(text, "raw")]}


# ---------------------------------------------------------------- page


def write_report(out: Path, dataset: str, runs: pd.DataFrame, missing: pd.DataFrame, details: dict, items,
                 paper_figures: bool = False) -> Path:
    """Write outputs/<dataset>/report/index.html (+ figures/cd_*.png|pdf) from the published items;
    `paper_figures`: also draw the PNG and PDF of every per-method figure (OwnFigures)."""
    directory = out / REPORT
    (directory / "figures").mkdir(parents=True, exist_ok=True)
    tables = {i.name: _read(i.text) for i in items if i.text is not None and i.name.endswith(".csv")}
    before = owned_files(directory)
    figures = cd_figures(tables, directory / "figures")
    sections = [overview(runs, missing, dataset)]
    if dataset == "all":
        sections.insert(0, result_sets(out.parent))
    drawn = {}
    for i in (i for i in items if i.heatmap is not None):
        h = i.heatmap
        drawn.setdefault((h.dataset, h.ordering, h.protocol, h.level, h.model, h.backbone, h.weights), []).append(
            {"href": f"../{i.name}", "format": i.name.rsplit(".", 1)[1].upper()})
    # the report's own CSVs (report/tables/), curve figures (report/figures/curve_*) and per-method heatmaps
    own, figs = {}, OwnFigures(directory / "figures", paper_figures)
    cons = []
    for folder in construction.folders(out.parent, dataset, runs, details):
        con = construction.read(folder)
        cons.append({**con, "name": construction._name(folder, out.parent)})
    sections += [s for s in (comparison(tables), statistics(tables, figures),
                             per_method(tables, runs, details, drawn, figs),
                             timing(tables) if specs.TIMING.csv in tables else None, tabular(tables),
                             scenario_construction(cons, construction.frames(cons, out.parent), own),
                             heatmap_figures(items)) if s]
    if figs.curves:
        own["tables/curves.csv"] = pd.concat([c["values"] for c in figs.curves]).to_csv(index=False,
                                                                                         lineterminator="\n")
    if figs.maps:  # the values behind the report's own heatmaps, as tables/heatmaps.csv holds those of aggregate's
        own["tables/method_heatmaps.csv"] = hm.heatmap_frame(figs.maps).to_csv(index=False, lineterminator="\n")
    sections.append(every_table(items, own))
    kept = figs.save()
    page = render_page(dataset, sections, f"bench report: {dataset}")
    path = directory / PAGE
    if not path.is_file() or path.read_text() != page:
        write_text_atomic(path, page)
    for name, text in own.items():
        target = directory / name
        target.parent.mkdir(parents=True, exist_ok=True)
        if not target.is_file() or target.read_text() != text:
            write_text_atomic(target, text)
    written = ({path} | {directory / f[k] for f in figures for k in ("png", "pdf")} | {directory / n for n in own}
               | kept)
    for stale in before - written:
        stale.unlink(missing_ok=True)
    _record_owned(directory, written)
    return path


def check_report_folder(out: Path) -> None:
    """BenchError when outputs/<dataset>/report or a folder under it is a symlink: the suite writes and removes its
    own files only in a folder it owns (link the web folder to the report instead, or copy the report there)."""
    for folder in (out / REPORT, out / REPORT / "figures", out / REPORT / "tables"):
        if folder.is_symlink():
            raise BenchError(f"{folder}: is a symlink (to {Path(folder).readlink()}); refusing to write the report "
                             "through it: make it a plain folder (link your web folder to it instead)")


def render_page(dataset: str, sections: list[dict], title: str) -> str:
    """The page (TEMPLATE) of `sections`: autoescaped, and a name the template uses that a section lacks is an
    error, not an empty cell (StrictUndefined). The image/tabular report and the stream-assembly page share it."""
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(TEMPLATE.parent), autoescape=True,
                             undefined=jinja2.StrictUndefined, keep_trailing_newline=True)
    return env.get_template(TEMPLATE.name).render(dataset=dataset, sections=sections, title=title)


def owned_files(directory: Path) -> set[Path]:
    """The files under report/ the suite recorded as its own (none where no record exists: an older report's files
    are left as they are). A recorded name leaving the folder ('..', absolute) is ignored, not followed."""
    try:
        names = json.loads((directory / OWNED).read_text())["files"]
    except (OSError, ValueError, KeyError, TypeError):
        return set()
    return recorded_paths(directory, names if isinstance(names, list) else [])


def _record_owned(directory: Path, written: set[Path]) -> None:
    text = json.dumps({"files": sorted(str(p.relative_to(directory)) for p in written)}, indent=1) + "\n"
    record = directory / OWNED
    if not record.is_file() or record.read_text() != text:
        write_text_atomic(record, text)


# ---------------------------------------------------------------- verify's reading of the page

_TD = re.compile(r'<td([^>]*)>(.*?)</td>', re.S)
_ATTR = re.compile(r'(class|data-value)="([^"]*)"')
_TAG = re.compile(r"<[^>]+>")


def _numbers(csv_texts) -> np.ndarray:
    """Every finite number in the cells of `csv_texts`, sorted (what a number on the page may be)."""
    values = []
    for text in csv_texts:
        for row in csv.reader(io.StringIO(text)):
            values += [x for x in map(_number, row) if x is not None and np.isfinite(x)]
    return np.unique(np.asarray(values, dtype=float))


def _shown_matches(shown: str, value: float) -> bool:
    """Whether the number a cell shows (its first word, rounded as printed) is its data-value rounded alike."""
    word = shown.split()[0] if shown.split() else ""
    try:
        printed = decimal.Decimal(word)
    except decimal.InvalidOperation:
        return True  # not a number as shown (–, a word, a duration): nothing to compare
    if not printed.is_finite():
        return True
    step = decimal.Decimal(1).scaleb(printed.as_tuple().exponent)  # the last printed digit's place
    return abs(decimal.Decimal(repr(value)) - printed) <= step / 2 + decimal.Decimal("1e-12")


CHANCE_LEVELS = {0.5}  # ROC-AUC's chance level, shown beside the values it is read against


def check_page(out: Path, csv_texts) -> list[str]:
    """Every difference between the measured numbers on outputs/<dataset>/report/index.html and the recomputed
    tables: each table cell's non-integer data-value must be a cell of a recomputed CSV (`csv_texts`) or of the
    report's own tables/*.csv, and the number it shows must be that value as rounded. Empty: the page is
    verified."""
    path = out / REPORT / PAGE
    try:
        page = path.read_text()
    except OSError as e:
        return [f"{path}: cannot read the published page ({e.strerror or e})"]
    own = [p.read_text() for p in sorted((out / REPORT / "tables").glob("*.csv"))]
    known = _numbers([*csv_texts, *own])
    problems = []
    for attrs, inner in _TD.findall(page):
        found = dict(_ATTR.findall(attrs))
        x = _number(html_lib.unescape(found.get("data-value", "")))
        if x is None or not np.isfinite(x) or x == round(x) or x in CHANCE_LEVELS:
            continue  # counts (runs of a method, blocks) and chance levels are not measurements of a table
        shown = html_lib.unescape(_TAG.sub("", inner)).strip()
        at = np.searchsorted(known, x)
        near = [known[i] for i in (at - 1, at) if 0 <= i < len(known)]
        if not any(abs(k - x) <= 1e-12 * max(1.0, abs(x)) for k in near):
            problems.append(f"{path}: the number {found['data-value']} (shown {shown!r}) is in no recomputed table")
        elif "num" in found.get("class", "").split() and not _shown_matches(shown, x):
            problems.append(f"{path}: a cell shows {shown!r} for the recomputed {found['data-value']}")
    return problems
