"""One declared spec per published table: its file stem, the columns that identify a row, every CSV column with
the one label each renderer shows it under, and (long metric tables) the metrics its rows hold.

The aggregator writes a CSV through its spec (`TableSpec.csv_text`: column order, yes/no flags turned into text),
`verify` names a mismatching row by the spec's keys, and the markdown, LaTeX and HTML renderers take headers and
metric names from the same spec, so a new column or metric is one entry here. Each renderer names the columns it
lays out itself (its PLACED tuple); any other column the spec declares it shows after them under the column's label
(`unplaced`: a column of a flat table, `extra_text` inside each cell of a pivot), so a column added here reaches
every form in `formats` (tests/report/test_table_specs.py checks that for every spec). runs.csv is `variable`: its
columns are the runs' own, each labelled by its name unless declared (RUN_SHOWN: those the page shows). Table 2's metrics are declared
apart from the per-method table's: adding a metric to the breakdown leaves the published Table 2 layout as it is
(tests/report/test_table_specs.py pins that layout).

Renderers look a spec up at call time (`specs.TABLE2`, not a copy taken at import), so what is declared here is
what every output shows.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

import pandas as pd

from bench.report.render import latex_escape
from bench.tabular.filtering import CRITERIA
from bench.tabular.orderings import FAMILIES


class Format(enum.Enum):
    """A form a table is written in: tables/<name>.csv, .md, .tex, and the page (report/index.html)."""

    CSV = "csv"
    MARKDOWN = "md"
    LATEX = "tex"
    HTML = "html"


class Kind(enum.Enum):
    TEXT = "text"
    NUMBER = "number"
    COUNT = "count"
    FLAG = "flag"  # a real bool in the frame (pandas "boolean" where it may be undecided); text only in the CSV


@dataclass(frozen=True)
class Column:
    name: str  # the CSV column (and the frame's)
    label: str  # the header every renderer shows, and the name of a metric row
    latex: str = ""  # the label in LaTeX where it needs markup; empty: the label, escaped
    kind: Kind = Kind.TEXT
    flag_text: tuple[str, str] = ("True", "False")  # FLAG: the CSV text of true and false (undecided: empty)


@dataclass(frozen=True)
class TableSpec:
    name: str  # file stem under tables/: <name>.csv, .md, .tex
    title: str
    keys: tuple[Column, ...]  # identify a row (verify names a mismatching cell by them)
    values: tuple[Column, ...] = ()  # the other CSV columns, in order; empty: the frame's own (runs.csv)
    metrics: tuple[Column, ...] = ()  # long metric tables: the metric of each row block, in this order
    formats: tuple[Format, ...] = (Format.CSV,)  # where the table is written (tests render each)
    # runs.csv only: its columns are collect's, per level and provenance field, so the frame's own columns are
    # written in the frame's order; a column not declared here is labelled by its name (the rule for the rest)
    variable: bool = False

    @property
    def csv(self) -> str:
        return f"tables/{self.name}.csv"

    @property
    def columns(self) -> tuple[Column, ...]:
        return self.keys + self.values

    def column(self, name: str) -> Column:
        for c in (*self.columns, *self.metrics):
            if c.name == name:
                return c
        if self.variable:
            return Column(name, name)
        raise KeyError(f"{self.name}: no column or metric {name!r}")

    def unplaced(self, placed) -> tuple[Column, ...]:
        """The declared columns a renderer does not place itself. Every renderer shows them after its own (a flat
        table as columns, a pivot inside each cell: `extra_text`), so a column added to a spec reaches every
        form of the table under its one label."""
        placed = set(placed)
        return tuple(c for c in self.columns if c.name not in placed)

    def extra_text(self, row, placed, latex: bool = False) -> str:
        """The unplaced columns of one row as " (label value; ...)" for a pivot's cell; "" when there are none."""
        parts = [f"{self.latex(c.name) if latex else c.label} {cell_text(c, row.get(c.name))}"
                 for c in self.unplaced(placed)]
        return f" ({'; '.join(parts)})" if parts else ""

    def label(self, name: str) -> str:
        return self.column(name).label

    def latex(self, name: str) -> str:
        c = self.column(name)
        return c.latex or latex_escape(c.label)

    def metric_names(self) -> tuple[str, ...]:
        return tuple(m.name for m in self.metrics)

    def frame(self, df: pd.DataFrame) -> pd.DataFrame:
        """`df`'s columns in the declared order; a frame with no columns as it is. A column declared and not
        computed, or computed and not declared, is a programming error: said here, not dropped from the CSV."""
        if self.variable or df.columns.empty:
            return df
        names = [c.name for c in self.columns]
        if set(names) != set(df.columns):
            raise ValueError(f"{self.name}: declared columns {sorted(set(names) - set(df.columns))} not computed, "
                             f"computed columns {sorted(set(df.columns) - set(names))} not declared (specs.py)")
        return df[names]

    def csv_text(self, df: pd.DataFrame) -> str:
        df = self.frame(df)
        flags = {c.name: c for c in self.columns if c.kind is Kind.FLAG and c.name in df.columns}
        if flags:
            df = df.assign(**{name: [flag_text(v, c) for v in df[name]] for name, c in flags.items()})
        return df.to_csv(index=False, lineterminator="\n")


def _undecided(value) -> bool:
    try:
        return value is None or value is pd.NA or bool(pd.isna(value))
    except (TypeError, ValueError):
        return False


def cell_text(column: Column, value, digits: int = 3) -> str:
    """One value as a rendered table shows it, by the column's kind: a flag in its text, a number to `digits`
    decimals, a count as an integer, undecided as "–"."""
    if column.kind is Kind.FLAG:
        return flag_text(value, column) or "–"
    if _undecided(value) or value == "":
        return "–"
    try:
        number = float(value)
    except (TypeError, ValueError):
        return str(value)
    if column.kind is Kind.COUNT and float(number).is_integer():
        return str(int(number))
    return f"{number:.{digits}f}" if column.kind is Kind.NUMBER else str(value)


def flag_text(value, column: Column) -> str:
    """A flag's text: the frame's bool, or the text a published CSV holds (the page reads CSVs as text)."""
    if isinstance(value, str):  # as read back from a CSV: "True"/"False", "yes"/"no", "" undecided
        if value.strip().lower() not in ("true", "yes", "false", "no"):
            return value
        value = value.strip().lower() in ("true", "yes")
    if _undecided(value):
        return ""
    return column.flag_text[0] if bool(value) else column.flag_text[1]


def _cols(kind: Kind, *pairs: tuple[str, str]) -> tuple[Column, ...]:
    return tuple(Column(name, label, kind=kind) for name, label in pairs)


def _text(*pairs: tuple[str, str]) -> tuple[Column, ...]:
    return _cols(Kind.TEXT, *pairs)


# Every metric a long table may hold, with its one label (markdown, HTML) and LaTeX form. "bwt" is InCLAD Eq. 2;
# "bwt_released" the consecutive-difference average of InCLAD's released code (≈ 2/N × Eq. 2, docs/reports.md).
METRIC = {m.name: m for m in (
    Column("roc_auc_cl", "ROC-AUC_CL ↑", r"ROC-AUC$_{\mathrm{CL}}$ $\uparrow$", Kind.NUMBER),
    Column("bwt", "BWT ↑", r"BWT $\uparrow$", Kind.NUMBER),
    Column("bwt_released", "BWT (as released) ↑", r"BWT (as released) $\uparrow$", Kind.NUMBER),
    Column("forgetting", "FM ↓", r"FM $\downarrow$", Kind.NUMBER),
)}

# the value columns of a long metric table, after its keys
_CELL = _text(("level", "level"), ("protocol", "protocol"))
_DATASET, _ORDERING, _METRIC = _text(("dataset", "dataset"), ("ordering", "ordering"), ("metric", "metric"))
_METHOD = _text(("model", "model"), ("backbone", "backbone"), ("weights", "weights"))

# InCLAD Table 2 as published: these three metrics, in this order (pinned by tests/report/test_table_specs.py)
TABLE2 = TableSpec(
    "table2", "Table 2: ROC-AUC_CL and BWT", keys=(_DATASET, _ORDERING, _METRIC, *_CELL),
    values=(*_cols(Kind.NUMBER, ("mean", "mean"), ("std", "std")),
            *_cols(Kind.COUNT, ("n_runs", "runs"), ("n_methods", "methods"), ("n_nan", "NaN runs"),
                   ("r_nan_cells", "undefined R cells"))),
    metrics=(METRIC["roc_auc_cl"], METRIC["bwt"], METRIC["bwt_released"]), formats=tuple(Format))

# The breakdown Table 2 hides: its own metric list, free to grow without touching Table 2's
PER_METHOD = TableSpec(
    "per_method", "Per-method ROC-AUC_CL and BWT", keys=(_DATASET, *_METHOD, _ORDERING, _METRIC, *_CELL),
    values=(*_cols(Kind.NUMBER, ("mean", "mean"), ("std", "std")),
            *_cols(Kind.COUNT, ("n_runs", "seeds"), ("n_nan", "NaN runs"))),
    metrics=(METRIC["roc_auc_cl"], METRIC["bwt"], METRIC["bwt_released"]), formats=tuple(Format))

TIMING = TableSpec(
    "timing", "Execution times", keys=_text(("dataset", "Dataset"), ("model", "Model"), ("backbone", "Backbone"),
                                             ("weights", "Weights"), ("phase", "Time"), ("protocol", "Protocol")),
    values=(*_cols(Kind.NUMBER, ("mean_s", "mean (s)"), ("std_s", "std (s)")),
            *_cols(Kind.COUNT, ("n_orderings", "orderings"), ("n_runs", "runs"))),
    formats=(Format.CSV, Format.MARKDOWN, Format.LATEX))

# runs.csv: its columns are collect's (provenance, one set of metric columns per level a run holds, the bootstrap
# intervals), so its rule is `variable`: the frame's columns in the frame's order, each labelled by its name unless
# declared. `RUN_SHOWN` are those the page shows, each with its label (the [95 % CI] ones carry <name>_ci_low/high
# columns beside them).
RUNS = TableSpec("runs", "Every run", keys=_text(("run_key", "run")), variable=True,
                 formats=(Format.CSV, Format.HTML))
RUN_SHOWN = (
    Column("image_roc_auc_cl", "image ROC-AUC_CL [95 % CI]", kind=Kind.NUMBER),
    Column("image_bwt", "image BWT [95 % CI]", kind=Kind.NUMBER),
    Column("image_bwt_released", "image BWT (as released) [95 % CI]", kind=Kind.NUMBER),
    Column("image_forgetting", "image FM [95 % CI]", kind=Kind.NUMBER),
    Column("pixel_roc_auc_cl", "pixel ROC-AUC_CL", kind=Kind.NUMBER),
    Column("pixel_bwt", "pixel BWT", kind=Kind.NUMBER),
)
MISSING = TableSpec(
    "missing", "Missing and failed runs", keys=_text(("path", "file")),
    values=(*_text(("run_name", "run name"), ("run_key", "run key"), ("status", "status")),
            *_cols(Kind.COUNT, ("steps_done", "steps done"), ("n_tasks", "tasks")),
            *_text(("dataset", "dataset"), ("model", "model"), ("backbone", "backbone"), ("protocol", "protocol"),
                   ("ordering", "ordering")), *_cols(Kind.COUNT, ("seed", "seed")), *_text(("error", "error"))),
    formats=(Format.CSV, Format.HTML))

_JUDGED = (("in_band", "in band"), ("in_band_released", "in band (BWT as released)"), ("within_se", "within 1 SE"),
           ("within_se_released", "within 1 SE (BWT as released)"))
PAPER_COMPARISON = TableSpec(
    "paper_comparison", "Table 2 beside the published one", keys=(_DATASET, _ORDERING, _METRIC, *_CELL),
    values=(*_text(("pool", "pool")),
            *_cols(Kind.NUMBER, ("ours", "ours"), ("ours_released", "ours (BWT as released)"),
                   ("ours_other_pool", "ours (other pooling)"),
                   ("ours_other_pool_released", "ours (other pooling, BWT as released)")),
            *_cols(Kind.COUNT, ("n_methods", "methods"), ("n_runs", "runs")),
            *_cols(Kind.NUMBER, ("published_mean", "published mean"), ("published_std", "published std")),
            *_cols(Kind.COUNT, ("n_pooled", "published pool")),
            *_cols(Kind.NUMBER, ("difference", "difference"), ("difference_released", "difference (as released)")),
            *(Column(n, label, kind=Kind.FLAG, flag_text=("yes", "no")) for n, label in _JUDGED),
            Column("comparable", "comparable", kind=Kind.FLAG),
            *_text(("reason", "reason"), ("published_source", "published source"))),
    formats=(Format.CSV, Format.MARKDOWN, Format.HTML))
PAPER_TIMING = TableSpec(
    "paper_timing", "Timing beside the published tables",
    keys=(*_text(("dataset", "dataset")), *_METHOD, *_text(("phase", "phase"), ("protocol", "protocol"))),
    values=(*_cols(Kind.NUMBER, ("ours_s", "ours (mean, s)")), *_cols(Kind.COUNT, ("n_orderings", "orderings")),
            *_text(("published", "published")), *_cols(Kind.NUMBER, ("published_s", "published (s)"),
                                                        ("ratio", "ratio")),
            *_text(("our_hardware", "our hardware"), ("published_hardware", "published hardware")),
            Column("comparable", "comparable", kind=Kind.FLAG), *_text(("reason", "reason"))),
    formats=(Format.CSV, Format.MARKDOWN, Format.HTML))
ROUTING = TableSpec(
    "routing", "Task-bank routing",
    keys=_text(("dataset", "Dataset"), ("model", "Model"), ("backbone", "Backbone"), ("weights", "Weights"),
               ("ordering", "Ordering"), ("protocol", "Protocol"), ("route_by", "Routed by")),
    values=(*_cols(Kind.NUMBER, ("routing_accuracy", "Routing accuracy"),
                   ("final_own_share", "Own-bank share, last step")),
            *_text(("worst_task", "Worst task, last step")),
            *_cols(Kind.NUMBER, ("worst_task_own_share", "worst task's own-bank share")),
            *_cols(Kind.COUNT, ("n_runs", "Runs"))), formats=(Format.CSV, Format.MARKDOWN))
MULTI_SELECTION = TableSpec(
    "multi_selection", "MultiDataset method selection", keys=_text(("model", "Model")),
    values=(*_cols(Kind.NUMBER, ("score", "Mean ROC-AUC_CL")), *_cols(Kind.COUNT, ("n_cells", "Cells"),
                                                                       ("n_runs", "Runs"), ("rank", "Rank")),
            Column("selected", "Selected", kind=Kind.FLAG)),
    formats=(Format.CSV, Format.MARKDOWN))
# the values behind each heatmap figure, lower triangle (bench/report/heatmaps.heatmap_frame)
_HEATMAP_VALUES = (*_text(("dataset", "dataset"), ("ordering", "ordering"), ("protocol", "protocol"),
                          ("level", "level"), ("model", "model"), ("backbone", "backbone"), ("weights", "weights"),
                          ("task_i", "after task"), ("task_j", "task evaluated")),
                   *_cols(Kind.NUMBER, ("value", "value")), *_cols(Kind.COUNT, ("n_runs", "runs")))
_HEATMAP_KEYS = (*_text(("figure", "figure")), *_cols(Kind.COUNT, ("i", "step i"), ("j", "task j")))
HEATMAPS = TableSpec("heatmaps", "Heatmap values", keys=_HEATMAP_KEYS, values=_HEATMAP_VALUES)
# the tabular track's tables name a dataset × ordering a scenario (its published markdown layout, pinned by
# tests/report/test_table_specs.py)
_SCENARIO = _text(("dataset", "Scenario"), ("ordering", "Ordering"))
TABULAR_TABLE2 = TableSpec(
    "tabular_table2", "Tabular Table 2",
    keys=(*_SCENARIO, *_text(("model", "Model"), ("metric", "Metric"), ("protocol", "Strategy"))),
    values=(*_cols(Kind.NUMBER, ("value", "value"), ("ci_low", "95 % CI low"), ("ci_high", "95 % CI high")),
            *_text(("method", "interval")), *_cols(Kind.COUNT, ("block", "block (records)")),
            *_cols(Kind.NUMBER, ("ci_low_long", "long-block CI low"), ("ci_high_long", "long-block CI high")),
            *_cols(Kind.COUNT, ("block_long", "long block (records)")),
            Column("conclusion_changes", "conclusion changes with the block", kind=Kind.FLAG),
            *_text(("stratified_tasks", "stratified test sets")), *_cols(Kind.COUNT, ("n_seeds", "seeds")),
            *_text(("seed_values", "seed values"), ("fm_matrix", "FM matrix"),
                   ("scores_replaced", "non-finite scores replaced (seed:count)"))),
    formats=(Format.CSV, Format.MARKDOWN, Format.HTML))
# the validation criteria as gaps (bench/report/tabular.validation_table): each with its 95 % interval beside it
_GAPS = (("feasibility_gap_over_random", "Feasibility: best of MSTE/Cumulative − 0.5"),
         ("feasibility_npr_auc_cl", "Feasibility: its nPR-AUC_CL (chance 0)"),
         ("naive_roc_auc_cl", "Naive ROC-AUC_CL"),
         ("non_triviality_gap", "Non-triviality: best reference − Naive"),
         ("cumulative_minus_naive", "Cumulative (warm) − Naive"), ("cumulative_fresh_minus_naive",
                                                                   "Cumulative (fresh) − Naive"),
         ("mste_minus_naive", "MSTE − Naive"), ("replay_minus_naive", "Replay − Naive"),
         ("forgetting_naive_fm", "Forgetting: Naive FM (Chaudhry)"), ("forgetting_mste_fm", "MSTE FM (Chaudhry)"),
         ("forgetting_naive_fm_released", "Naive FM (CAD 675a9c9 formula)"),
         ("forgetting_mste_fm_released", "MSTE FM (CAD 675a9c9 formula)"))
VALIDATION_GAPS = tuple(name for name, _ in _GAPS)
VALIDATION = TableSpec(
    "validation", "Scenario validation criteria", keys=(*_SCENARIO, *_text(("model", "Model"))),
    values=(*_cols(Kind.NUMBER, ("feasibility_best_strong_roc_auc_cl", "best of MSTE/Cumulative: ROC-AUC_CL")),
            *_text(("feasibility_best_strong", "best of MSTE/Cumulative")),
            *(c for name, label in _GAPS for c in _cols(
                Kind.NUMBER, (name, label), (f"{name}_low", f"{label}: 95 % CI low"),
                (f"{name}_high", f"{label}: 95 % CI high"))),
            *_text(("non_triviality_best_reference", "best reference"),
                   ("forgetting_naive_fm_released_matrix", "Naive FM (CAD 675a9c9 formula): matrix"),
                   ("forgetting_mste_fm_released_matrix", "MSTE FM (CAD 675a9c9 formula): matrix"))),
    formats=(Format.CSV, Format.MARKDOWN, Format.HTML))
TABULAR_HEATMAPS = TableSpec("tabular_heatmaps", "Tabular heatmap values", keys=_HEATMAP_KEYS, values=_HEATMAP_VALUES)
# each constructed scenario's test sets (bench/report/tabular.task_table)
TABULAR_TASKS = TableSpec(
    "tabular_tasks", "Test sets (per task)", keys=(*_SCENARIO, *_text(("task", "Task"))),
    values=(*_cols(Kind.COUNT, ("records", "Records"), ("anomalies", "Anomalies")),
            *_cols(Kind.NUMBER, ("prevalence", "p"), ("random_ap", "Random AP"))),
    formats=(Format.CSV, Format.MARKDOWN, Format.HTML))

# the tabular track's constructed scenarios, as the page publishes them itself under report/tables/
# (bench/report/construction.frames, html.scenario_construction); the candidate's selection rides in every key
_CANDIDATE = (*_text(("construction", "construction"), ("candidate", "candidate")),
              Column("selected", "selected", kind=Kind.FLAG))
SCENARIO_TASKS = TableSpec(
    "scenario_tasks", "Tasks of each candidate: kept, or removed with the pass and the criteria (FC1–FC5) that "
    "removed them", keys=(*_CANDIDATE, *_text(("task", "task"))),
    values=(*_text(("status", "status")), *_cols(Kind.COUNT, ("removed_in_pass", "pass")),
            *_text(("removed_by", "removed by"))), formats=(Format.CSV, Format.HTML))
SCENARIO_FILTERING = TableSpec(
    "scenario_filtering", "Filtering passes: every pass recomputes FC1–FC5 on the remaining tasks and removes the "
    "most-flagged one", keys=(*_CANDIDATE, *_cols(Kind.COUNT, ("pass", "pass")), *_text(("task", "task"))),
    values=(*_cols(Kind.COUNT, *((c, c.upper()) for c in CRITERIA), ("flags", "flags")),
            *_cols(Kind.NUMBER, ("best_self", "S*"), ("gain", "gain"), ("incoming", "incoming"),
                   ("outgoing", "outgoing"), ("source_min_diff", "source min diff"),
                   ("target_min_diff", "target min diff")),
            Column("removed", "removed", kind=Kind.FLAG)), formats=(Format.CSV, Format.HTML))
SCENARIO_W = TableSpec(
    "scenario_w", "Kendall's W across the construction models, per candidate × ordering family (the selection "
    "takes the highest mean)", keys=_CANDIDATE,
    values=(*_cols(Kind.COUNT, ("tasks_kept", "tasks kept")),
            *_cols(Kind.NUMBER, *((f"w_{f}", f"W {f}") for f in FAMILIES), ("w_mean", "W mean"))),
    formats=(Format.CSV, Format.HTML))
SCENARIO_ORDERINGS = TableSpec(
    "scenario_orderings", "Orderings: each model's and the Borda consensus (points per task)",
    keys=(*_CANDIDATE, *_text(("ordering", "ordering"), ("source", "from"))),
    values=(*_cols(Kind.NUMBER, ("w", "W")), *_text(("order", "order"), ("borda_points", "Borda points"))),
    formats=(Format.CSV, Format.HTML))
SCENARIO_STE = TableSpec(
    "scenario_ste", "The STE matrices the filtering read (per candidate and model: the expert of task i evaluated "
    "on task j)", keys=(*_CANDIDATE, *_text(("model", "model")), *_cols(Kind.COUNT, ("i", "i"), ("j", "j"))),
    values=(*_text(("expert", "expert"), ("evaluated", "evaluated")), *_cols(Kind.NUMBER, ("roc_auc", "ROC-AUC"))))

# the paired tests (bench/report/stats.py): labels as the page shows them
_TEST = _text(("test", "test"), ("correction", "correction"))
CL_VS_NCL = TableSpec(
    "cl_vs_ncl", "Is CL better than NCL? Paired per method, ROC-AUC_CL",
    keys=(*_text(("level", "level")), _METRIC, *_METHOD),
    values=(*_cols(Kind.COUNT, ("n_blocks", "blocks")),
            *_cols(Kind.NUMBER, ("ncl_mean", "NCL mean"), ("cl_mean", "CL mean"),
                   ("median_difference", "median CL − NCL"), ("statistic", "statistic"), ("p", "p"),
                   ("p_holm", "p (Holm)")),
            *_TEST, *_text(("note", "note"))), formats=(Format.CSV, Format.HTML))
FRIEDMAN = TableSpec(
    "friedman", "Which method is best? Friedman test over the blocks, Nemenyi post-hoc",
    keys=(*_CELL, _METRIC),
    values=(*_cols(Kind.COUNT, ("n_blocks", "blocks"), ("n_methods", "methods")),
            *_cols(Kind.NUMBER, ("statistic", "χ²"), ("p", "p")), *_TEST, *_text(("post_hoc", "post-hoc")),
            *_cols(Kind.NUMBER, ("alpha", "α"), ("critical_difference", "critical difference")),
            *_text(("left_out", "left out"), ("note", "note"))), formats=(Format.CSV, Format.HTML))
FRIEDMAN_RANKS = TableSpec(
    "friedman_ranks", "Average ranks of the Friedman tests", keys=(*_CELL, _METRIC, *_METHOD),
    values=(*_cols(Kind.NUMBER, ("mean_rank", "mean rank")), *_cols(Kind.COUNT, ("n_blocks", "blocks"))),
    formats=(Format.CSV, Format.HTML))

NAMES = ("RUNS", "MISSING", "TABLE2", "PER_METHOD", "TIMING", "PAPER_COMPARISON", "PAPER_TIMING", "ROUTING",
         "MULTI_SELECTION", "HEATMAPS", "TABULAR_TABLE2", "VALIDATION", "TABULAR_HEATMAPS", "TABULAR_TASKS",
         "CL_VS_NCL", "FRIEDMAN", "FRIEDMAN_RANKS")


# the report's own tables (report/tables/): not aggregate's, so not in NAMES (which `verify` reads by key)
SCENARIO_NAMES = ("SCENARIO_TASKS", "SCENARIO_FILTERING", "SCENARIO_W", "SCENARIO_ORDERINGS", "SCENARIO_STE")


def all_specs() -> tuple[TableSpec, ...]:
    """Every declared spec, read now (a spec replaced in a test is the one returned)."""
    return tuple(globals()[n] for n in NAMES)


def csv_keys() -> dict[str, list[str]]:
    """{tables/<name>.csv: the columns that identify a row}: what `verify` names a mismatching cell by."""
    return {s.csv: [c.name for c in s.keys] for s in all_specs()}
