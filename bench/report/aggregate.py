"""`make aggregate` / `make verify`: publish every table and figure from the run files, and check them later.

`aggregate` writes, under outputs/<dataset>/ (outputs/all/ for DATASET=all):
  tables/table2.{md,tex,csv}        InCLAD Table 2 (+ the runs behind each cell)
  tables/per_method.{md,tex,csv}    the same metrics per model × backbone
  tables/timing.{md,tex,csv}        InCLAD Tables 4-5 style execution times
  tables/routing.{md,csv}           task-bank routing (when runs hold routing data)
  tables/multi_selection.{md,csv}   the MultiDataset method selection (when MultiDataset runs exist)
  tables/heatmaps.csv, figures/heatmap_*.{png,pdf}   Appendix F heatmaps and the values behind them
  tables/runs.csv, tables/missing.csv                one row per run used / per incomplete or failed run
  tables/manifest.json              what was published from which inputs (SHA-256 of every file both ways)
  tables/tabular_table2.{md,csv}, tables/validation.{md,csv}   tabular-track runs (bench/report/tabular.py)
  tables/tabular_heatmaps.csv, figures/heatmap_*_record.{png,pdf}   R heatmaps of the tabular runs
  tables/cl_vs_ncl.csv, tables/friedman.csv, tables/friedman_ranks.csv   paired tests (bench/report/stats.py)
  report/index.html                 one static page of all of it (bench/report/html.py; not in the manifest)
Each table's name, columns, row keys and labels are declared once in bench/report/specs.py (a TableSpec), which
the CSV writing here, `verify`, the markdown and LaTeX renderers and the page read.
The image tables and heatmaps are made from the image runs; tabular runs have no backbone or pixel level.
`verify` recomputes all of it from the run files and reports every cell that differs from what was published.
"""

from __future__ import annotations

import io
import json
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from bench import results
from bench.config import SEED_RANGE, check_int
from bench.errors import BenchError
from bench.io import file_sha256, locked, recorded_paths, write_text_atomic
from bench.report import heatmaps as hm
from bench.report import html, paper, specs, stats
from bench.report.bootstrap import DRAWS, INTERVAL_METRICS, run_intervals
from bench.report.collect import Collection, collect
from bench.report.render import MULTI, label, provenance_lines
from bench.report.routing import routing_markdown, routing_table
from bench.report.table2 import (per_method, per_method_latex, per_method_markdown, select_methods,
                                 selection_markdown, table2, to_latex, to_markdown)
from bench.report.timing import timing_latex, timing_markdown, timing_table

PIXEL_NOTE = ("Pixel ROC-AUC is not verifiable from the file: the per-pixel scores are not stored, so unlike the "
              "image metrics it is not recomputed from the run files' scores.")
MANIFEST = "tables/manifest.json"
PUBLISH_LOCK = ".publish.lock"  # under outputs/<dataset>/: held while a publication is written (bench.io.locked)
# resamples × the largest test set's float64 weights are held at once (bench/report/bootstrap.py): 10^5 × 1,000
# images is 0.8 GB
MAX_BOOTSTRAP = 100_000
MANIFEST_VERSION = 1
@dataclass
class Options:
    bootstrap: int = 1000  # resamples for the image ROC-AUC_CL interval in runs.csv; 0: none
    bootstrap_seed: int = 0
    select_by: str = "image-cl"
    select_top: int = 3
    per_method_heatmaps: bool = False
    figure_formats: tuple = ("png", "pdf")  # empty: heatmap values (heatmaps.csv) only, no drawing
    paper_figures: bool = False  # also the PNG and PDF of the report's per-method figures (`make figures`)
    pool: str = "entries"  # the paper comparison's reading of Table 2's pooling judged (bench.report.choices.POOLS)
    own_paper_tables: bool = False  # edited data/paper tables are the user's: accept them (their digests recorded)

    def __post_init__(self):
        # also what a manifest read back by `verify` holds: a crafted one is one line too
        check_int("bootstrap", self.bootstrap, 0, MAX_BOOTSTRAP)
        check_int("bootstrap_seed", self.bootstrap_seed, *SEED_RANGE)
        check_int("select_top", self.select_top, 1, 10**4)


@dataclass
class Item:
    """One published file: text (CSV, markdown, LaTeX) or a figure drawn from a heatmap."""

    name: str  # path under outputs/<dataset>/
    text: str | None = None
    heatmap: hm.Heatmap | None = None


def _spec_items(spec: specs.TableSpec, frame: pd.DataFrame, markdown=None, latex=None,
                footer: list[str] | None = None) -> list[Item]:
    """A table's CSV (through its spec) and, where it has them, its markdown and LaTeX renderings, all of the
    frame in the spec's columns (a column declared and not computed is refused here, before any is written)."""
    frame = spec.frame(frame)
    items = [Item(spec.csv, spec.csv_text(frame))]
    items += [Item(f"tables/{spec.name}.md", markdown(frame, footer))] if markdown else []
    return items + ([Item(f"tables/{spec.name}.tex", latex(frame, footer))] if latex else [])


INTERVALS = "derived/intervals"  # where interval_deriver leaves a run's bootstrap intervals in its details entry


def interval_deriver(options: Options, known: dict | None = None):
    """`collect`'s derive: each image run's bootstrap intervals (runs.csv), computed while its scores are still
    in memory. `known`: {file SHA-256: intervals} published before with the same resamples and seed, taken as
    they are (the bootstrap is deterministic given the file), so a new run costs only its own."""
    known = known or {}

    def derive(run: dict, sha256: str) -> None:
        if options.bootstrap > 0 and results.track(run) == "image":
            run[INTERVALS] = known.get(sha256) or run_intervals(run, options.bootstrap, options.bootstrap_seed)

    return derive


def _with_intervals(runs: pd.DataFrame, details: dict, options: Options) -> pd.DataFrame:
    """runs.csv's bootstrap columns: image_<metric>_ci_low/high of ROC-AUC_CL, BWT (both forms) and FM, from one set of
    resamples per run: those `interval_deriver` stored, else computed here from the scores."""
    if options.bootstrap <= 0 or not len(runs):
        return runs
    bounds = [details[k].get(INTERVALS) or run_intervals(details[k], options.bootstrap, options.bootstrap_seed)
              for k in runs["run_key"]]
    return runs.assign(**{f"image_{m}_ci_{side}": [b[m][i] for b in bounds]
                          for m in INTERVAL_METRICS for i, side in enumerate(("low", "high"))})


def build(c: Collection, options: Options) -> tuple[list[Item], dict]:
    """Everything `aggregate` publishes, in memory, plus the selection record for the manifest."""
    image = c.runs["track"] == "image"
    tabular = c.runs[~image]
    runs = _with_intervals(c.runs[image], c.details, options)
    n_missing = len(c.missing)
    items = [*_spec_items(specs.RUNS, pd.concat([runs, tabular]) if len(tabular) else runs),
             *_spec_items(specs.MISSING, c.missing)]
    if len(tabular):
        items += _tabular_items(tabular, c.details, options, n_missing)
    if not len(runs):
        return items, {"multi_selection": None}
    # R/pixel cannot be checked as R/image is (collect.check_scores): pixel maps are not stored
    pixel_note = ([PIXEL_NOTE] if "pixel_roc_auc_cl" in runs and runs["pixel_roc_auc_cl"].notna().any() else [])
    footer = provenance_lines(runs, n_missing) + pixel_note

    multi_items, selection_record = _multi_selection(c, runs, options)
    multi_models = selection_record["models"] if selection_record else None
    items += multi_items + _table2_items(runs, selection_record, n_missing, pixel_note)

    items += _spec_items(specs.PER_METHOD, per_method(runs), per_method_markdown, per_method_latex, footer)

    cl_ncl, (fr, ranks) = stats.cl_vs_ncl(runs), stats.friedman(runs)
    items += [*_spec_items(specs.CL_VS_NCL, cl_ncl), *_spec_items(specs.FRIEDMAN, fr),
              *_spec_items(specs.FRIEDMAN_RANKS, ranks)]

    items += _spec_items(specs.TIMING, timing_table(runs), timing_markdown, timing_latex, footer)

    paper_tables = paper.table_digests(options.own_paper_tables)  # an edited published table stops here
    pc = paper.comparison(runs, c.details, options.pool, options.own_paper_tables)
    pt = specs.PAPER_TIMING.frame(paper.timing_comparison(runs, c.details, options.own_paper_tables))
    # paper_comparison.md holds both tables: the timing one follows the comparison
    items += [*_spec_items(specs.PAPER_COMPARISON, pc, lambda f, foot: paper.to_markdown(f, pt, foot), footer=footer),
              *_spec_items(specs.PAPER_TIMING, pt)]

    rt = routing_table(runs, c.details)
    if len(rt):
        routed = runs[runs["routing_accuracy"].notna()]
        items += _spec_items(specs.ROUTING, rt, routing_markdown, footer=provenance_lines(routed, n_missing))

    maps = hm.heatmaps(runs, c.details, multi_models, options.per_method_heatmaps)
    items += _spec_items(specs.HEATMAPS, hm.heatmap_frame(maps))
    items += [Item(f"figures/{h.stem}.{fmt}", heatmap=h) for h in maps for fmt in options.figure_formats]
    return items, {"multi_selection": selection_record, "paper_tables": paper_tables}


def _multi_selection(c: Collection, runs: pd.DataFrame, options: Options) -> tuple[list[Item], dict | None]:
    """Where MultiDataset runs are present: InCLAD's method selection (its table) and the selection record (the
    models whose runs Table 2's MultiDataset rows pool, and whether the rule could be applied); else nothing."""
    if not (runs["dataset"] == MULTI).any():
        return [], None
    source = c.reference if c.dataset == MULTI else runs[runs["dataset"] != MULTI]
    selection = select_methods(source, options.select_by, options.select_top)
    multi_models = (list(selection.loc[selection["selected"], "model"]) if len(selection)
                    else sorted(runs.loc[runs["dataset"] == MULTI, "model"].unique()))
    record = {"select_by": options.select_by, "top": options.select_top, "models": multi_models,
              "rule_applied": bool(len(selection))}
    sel_footer = [provenance_lines(source, 0)[0].replace("Rests on", "The ranking rests on")] if len(source) else []
    def markdown(frame: pd.DataFrame, footer: list[str]) -> str:
        return (selection_markdown(frame, options.select_by, options.select_top, multi_models)
                + ("\n" + "\n".join(footer) + "\n" if footer else ""))

    return _spec_items(specs.MULTI_SELECTION, selection, markdown, footer=sel_footer), record


def _table2_items(runs: pd.DataFrame, selection_record: dict | None, n_missing: int,
                  pixel_note: list[str]) -> list[Item]:
    """Table 2 (CSV, markdown, LaTeX); its MultiDataset rows pool the selected methods' runs only."""
    multi_models = selection_record["models"] if selection_record else None
    in_table2 = runs if multi_models is None else runs[(runs["dataset"] != MULTI) | runs["model"].isin(multi_models)]
    t2_footer = provenance_lines(in_table2, n_missing) + pixel_note
    if multi_models is not None:
        names = ", ".join(label("model", m) for m in multi_models)
        t2_footer.insert(0, f"MultiDataset rows pool {names}, selected by InCLAD's rule (multi_selection.md)."
                         if selection_record["rule_applied"] else f"MultiDataset rows pool every method present "
                         f"({names}): no single-dataset results to apply InCLAD's selection rule to.")
    return _spec_items(specs.TABLE2, table2(runs, multi_models or []), to_markdown, to_latex, t2_footer)


def _tabular_items(runs: pd.DataFrame, details: dict, options: Options, n_missing: int) -> list[Item]:
    from bench.report import tabular as tb

    footer = provenance_lines(runs, n_missing)
    cells = tb.tabular_cells(runs, details, options.bootstrap, options.bootstrap_seed)
    tasks = specs.TABULAR_TASKS.frame(tb.task_table(runs, details))
    maps = hm.heatmaps(runs, details, per_method=options.per_method_heatmaps, levels=tb.LEVELS,
                       protocols=[p for p, _ in tb.STRATEGIES])

    def table2_markdown(long: pd.DataFrame, footer: list[str]) -> str:
        return tb.table2_markdown(long, footer, tb.run_length_table(runs, details), tb.placement_table(cells), tasks)

    # the test sets' table is written in tabular_table2.md (beside the cells it explains) and in its own CSV
    return [*_spec_items(specs.TABULAR_TABLE2, tb.tabular_table2(cells), table2_markdown, footer=footer),
            *_spec_items(specs.TABULAR_TASKS, tasks),
            *_spec_items(specs.VALIDATION, tb.validation_table(cells), tb.validation_markdown, footer=footer),
            *_spec_items(specs.TABULAR_HEATMAPS, hm.heatmap_frame(maps)),
            *[Item(f"figures/{h.stem}.{fmt}", heatmap=h) for h in maps for fmt in options.figure_formats]]


def _previous(out: Path) -> dict | None:
    try:
        return _read_manifest(out) if (out / MANIFEST).is_file() else None
    except BenchError:
        return None  # an unreadable old manifest is about to be replaced


def aggregate(outputs: Path, dataset: str, options: Options | None = None, log=print) -> Path:
    """Collect, build and write everything; returns the manifest path. Collecting and building only read; the
    publication (tables, figures, manifest, page) is written under the dataset's lock, so two aggregations of
    one dataset publish one after the other and the files are all of one of them."""
    options = options or Options()
    out = Path(outputs) / dataset
    html.check_report_folder(out)
    c = collect(Path(outputs), dataset, interval_deriver(options, _published_intervals(out, _previous(out), options)))
    items, record = build(c, options)
    with locked(out / PUBLISH_LOCK):
        return _publish(out, dataset, c, items, record, options, log)


def _remove_unpublished(out: Path, previous: dict | None, items: list[Item]) -> None:
    """Files published last time and not now would look current: remove them, and only them (a name outside
    tables/ and figures/, as a crafted manifest may hold, is left alone)."""
    recorded = recorded_paths(out, (previous or {}).get("outputs", {}), under=("tables", "figures"))
    for stale in recorded - {out / i.name for i in items}:
        stale.unlink(missing_ok=True)


def _publish(out: Path, dataset: str, c: Collection, items: list[Item], record: dict, options: Options,
             log) -> Path:
    previous = _previous(out)  # read under the lock: the publication this one replaces
    (out / "tables").mkdir(parents=True, exist_ok=True)
    (out / "figures").mkdir(parents=True, exist_ok=True)
    _remove_unpublished(out, previous, items)
    figures, to_draw = {}, []
    drawn = (previous or {}).get("figure_digests", {})
    for item in items:
        if item.text is not None:
            write_text_atomic(out / item.name, item.text)
        elif item.heatmap.stem not in figures:
            stem = item.heatmap.stem
            figures[stem] = hm.digest(item.heatmap, options.figure_formats)
            if figures[stem] != drawn.get(stem) or not _unchanged(out, previous, stem, options.figure_formats):
                to_draw.append(item.heatmap)
    hm.save_all(to_draw, out / "figures", options.figure_formats)
    manifest = {
        "manifest_version": MANIFEST_VERSION, "created_at": results.now(), "dataset": dataset,
        "aggregator": results.provenance(), "options": asdict(options), **record,
        "runs": {"used": len(c.runs), "missing": len(c.missing)},
        "inputs": c.inputs,
        "outputs": {i.name: file_sha256(out / i.name) for i in items},
        "figure_digests": figures,  # what each figure was drawn from: an unchanged one is not drawn again
        "bootstrap_draws": DRAWS,  # how runs.csv's intervals were resampled: others' are not reused
    }
    write_text_atomic(out / MANIFEST, json.dumps(manifest, indent=1, sort_keys=True) + "\n")
    page = html.write_report(out, dataset, c.runs, c.missing, c.details, items, options.paper_figures)
    n_fig = len(figures)
    log(f"{dataset}: {len(c.runs)} complete run(s) used, {len(c.missing)} missing; wrote "
        f"{sum(i.text is not None for i in items)} table files to {out / 'tables'} and {n_fig} heatmap(s) "
        f"({', '.join(options.figure_formats) or 'values only'}) to {out / 'figures'}; report {page}")
    for m in c.missing.to_dict("records"):
        log(f"  missing: {m['path']} ({m['status']}, {m['steps_done']}/{m['n_tasks']} steps)"
            + (f": {m['error']}" if m["error"] else ""))
    return out / MANIFEST


def _published_intervals(out: Path, previous: dict | None, options: Options) -> dict:
    """{file SHA-256: {metric: (low, high)}} of the previous runs.csv, when it was made with the same resamples,
    seed and way of drawing them (bootstrap.DRAWS) and is still the file the manifest records; else {}."""
    name = specs.RUNS.csv
    old = (previous or {}).get("options", {})
    if (not previous or (old.get("bootstrap"), old.get("bootstrap_seed")) != (options.bootstrap, options.bootstrap_seed)
            or previous.get("bootstrap_draws") != DRAWS
            or not (out / name).is_file() or file_sha256(out / name) != previous["outputs"].get(name)):
        return {}
    table = pd.read_csv(out / name, dtype={"file_sha256": str})  # pandas 3 parses floats round-trip
    cols = [f"image_{m}_ci_{side}" for m in INTERVAL_METRICS for side in ("low", "high")]
    if not set(cols) <= set(table.columns):
        return {}
    return {r["file_sha256"]: {m: (r[f"image_{m}_ci_low"], r[f"image_{m}_ci_high"]) for m in INTERVAL_METRICS}
            for r in table.to_dict("records")}


def _unchanged(out: Path, previous: dict | None, stem: str, formats) -> bool:
    """Every format of figure `stem` is still the file the previous aggregation published."""
    published = (previous or {}).get("outputs", {})
    names = [f"figures/{stem}.{fmt}" for fmt in formats]
    return all((out / n).is_file() and published.get(n) == file_sha256(out / n) for n in names)


def _read_manifest(out: Path) -> dict:
    path = out / MANIFEST
    try:
        manifest = json.loads(path.read_text())
    except FileNotFoundError:
        raise BenchError(f"{path}: no manifest (run `make aggregate DATASET={out.name}` first)") from None
    except json.JSONDecodeError as e:
        raise BenchError(f"{path}: not a JSON manifest ({e})") from None
    if manifest.get("manifest_version") != MANIFEST_VERSION:
        raise BenchError(f"{path}: unknown manifest_version {manifest.get('manifest_version')!r} "
                         f"(expected {MANIFEST_VERSION})")
    return manifest


def _read_csv(text: str) -> pd.DataFrame:
    # Strings throughout: a run key such as "1e5..." must not turn into a float.
    return pd.read_csv(io.StringIO(text), dtype=str, keep_default_na=False) if text.strip() else pd.DataFrame()


def _compare_csv(name: str, published: str, new: pd.DataFrame) -> list[str]:
    try:
        old = _read_csv(published)
    except pd.errors.ParserError as e:
        return [f"{name}: unreadable ({e})"]
    if list(old.columns) != list(new.columns):
        return [f"{name}: columns {list(old.columns)} published, {list(new.columns)} recomputed"]
    keys = [k for k in specs.csv_keys().get(name, []) if k in new.columns] or list(new.columns)
    old_rows = {tuple(r[k] for k in keys): r for r in old.to_dict("records")}
    new_rows = {tuple(r[k] for k in keys): r for r in new.to_dict("records")}
    problems = []
    for key in new_rows.keys() - old_rows.keys():
        problems.append(f"{name}: row {_key_text(keys, key)} missing from the published table")
    for key in old_rows.keys() - new_rows.keys():
        problems.append(f"{name}: row {_key_text(keys, key)} published but not recomputed from the run files")
    for key in sorted(new_rows.keys() & old_rows.keys()):
        for col in new.columns:
            a, b = old_rows[key][col], new_rows[key][col]
            if a != b and not _same_number(a, b):
                problems.append(f"{name}: {_key_text(keys, key)}: {col} published {a!r}, recomputed {b!r}")
    return problems


def _key_text(keys: list[str], key: tuple) -> str:
    return ", ".join(f"{k}={v}" for k, v in zip(keys, key))


def _same_number(a: str, b: str) -> bool:
    try:
        x, y = float(a), float(b)
    except ValueError:
        return False
    return (np.isnan(x) and np.isnan(y)) or abs(x - y) <= 1e-12 * max(1.0, abs(y))


def _compare_text(name: str, published: str, recomputed: str) -> list[str]:
    old, new = published.splitlines(), recomputed.splitlines()
    for n, (a, b) in enumerate(zip(old, new), 1):
        if a != b:
            return [f"{name}: line {n} published {a!r}, recomputed {b!r}"]
    if len(old) != len(new):
        return [f"{name}: {len(old)} lines published, {len(new)} recomputed"]
    return []


def verify(outputs: Path, dataset: str, log=print) -> list[str]:
    """Every difference between what was published and what the run files give now (empty: all verified)."""
    out = Path(outputs) / dataset
    manifest = _read_manifest(out)
    try:
        options = Options(**{**manifest["options"], "figure_formats": tuple(manifest["options"]["figure_formats"])})
    except (TypeError, KeyError) as e:
        raise BenchError(f"{out / MANIFEST}: its options are not this suite's ({type(e).__name__}: {e})") from None
    problems = []
    if options.bootstrap and manifest.get("bootstrap_draws") != DRAWS:  # every interval would differ, each a line
        problems.append(f"{out / MANIFEST}: its intervals were resampled by {manifest.get('bootstrap_draws', 'v1')!r}"
                        f", this code resamples by {DRAWS!r}; rerun `make aggregate DATASET={dataset}`")
        return problems
    c = collect(Path(outputs), dataset, interval_deriver(options))  # every interval recomputed
    then = {e["path"]: e for e in manifest["inputs"]}
    now = {e["path"]: e for e in c.inputs}
    for path in sorted(now.keys() - then.keys()):
        problems.append(f"input {path}: new since aggregation ({now[path]['status']})")
    for path in sorted(then.keys() - now.keys()):
        problems.append(f"input {path}: gone since aggregation")
    for path in sorted(now.keys() & then.keys()):
        if now[path]["sha256"] != then[path]["sha256"]:
            problems.append(f"input {path}: changed since aggregation (sha256 {then[path]['sha256'][:12]} → "
                            f"{now[path]['sha256'][:12]})")
    items, _ = build(c, options)
    published = manifest["outputs"]
    n_cells = 0
    for item in items:
        path = out / item.name
        if item.name not in published:
            problems.append(f"{item.name}: recomputed but not in the manifest")
        if not path.is_file():
            problems.append(f"{item.name}: published file missing")
            continue
        if item.text is None:  # a figure: its values are checked through heatmaps.csv; the file must be unchanged
            if item.name in published and file_sha256(path) != published[item.name]:
                problems.append(f"{item.name}: changed since aggregation")
            continue
        text = path.read_text()
        if item.name.endswith(".csv"):
            recomputed = _read_csv(item.text)
            problems += _compare_csv(item.name, text, recomputed)
            n_cells += recomputed.size
        else:
            problems += _compare_text(item.name, text, item.text)
    for name in sorted(set(published) - {i.name for i in items}):
        problems.append(f"{name}: published but no longer produced by the run files")
    # the page says every number on it is recomputed here: its numbers against the recomputed tables
    problems += html.check_page(out, [i.text for i in items if i.text is not None and i.name.endswith(".csv")])
    if not problems:
        log(f"verified {dataset}: {n_cells} CSV cells and {sum(i.text is not None for i in items)} tables "
            f"recomputed from {len(c.runs)} run(s) match; {sum(i.text is None for i in items)} figure file(s) "
            "unchanged; every number on the report page is a recomputed one")
    return problems
