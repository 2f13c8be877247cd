"""The stream-assembly result set's HTML page (outputs/<set>/report/index.html), rendered with the suite's report
template and table helpers (bench.report.html): what ran, the per-run held-out table, and the assembly audit.
Every number is a cell of a CSV beside the page (runs.csv, audit/*.csv), shown rounded, carried in full in the
cell's data-value."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from bench.assembly import audit as audit_mod
from bench.assembly.specs import RUNS
from bench.io import write_text_atomic
from bench.report.html import cell, para, render_page, rest_cells, rest_header, table
from bench.report.render import MISSING, is_missing, value_text

AUDIT_TITLES = {
    "splits": "Split sizes: records, attacks and prevalence per segment of each arm",
    "composition": "Per-capture (per-day) composition of each segment",
    "windows": "The held-out slice's wall-clock window",
    "run_lengths": "Attack run lengths, in the stream and in the held-out slice",
    "overlap": "Held-out overlap between arms (and the permutation check)",
    "transitions": "Split transitions: where arm a's records (and attacks) sit in arm b",
    "pooling": "Pooling identity of the pooled composite",
    "pooling_preconditions": "Pooling identity: its preconditions",
}


def _num(v, digits: int = 4) -> dict:
    """A number's cell: its text as the markdown shows it (render.value_text), its full value for sorting."""
    if is_missing(v):
        return cell(MISSING, None, "num")
    return cell(value_text(v, digits), repr(float(v)) if isinstance(v, float) else str(v), "num")


def _frame_rows(df: pd.DataFrame) -> list[list[dict]]:
    return [[_num(v) if isinstance(v, (int, float, np.integer)) and not isinstance(v, (bool, np.bool_))
             else cell(str(v)) for v in row] for row in df.itertuples(index=False)]


def overview(df: pd.DataFrame) -> dict:
    rows = []
    for (corpus, detector, preset), g in df.groupby(["corpus", "detector", "preset"], sort=False):
        rows.append([cell(corpus), cell(detector), cell(preset), cell(", ".join(dict.fromkeys(g["arm"]))),
                     cell(", ".join(str(s) for s in sorted(g["seed"].unique()))), _num(len(g))])
    blocks = [para(f"{len(df)} complete run file(s). Every number is a cell of runs.csv or audit/*.csv beside this "
                   "page, made by `make aggregate` from the run files (outputs/<set>/runs/*.h5)."),
              table("What ran", "runs.csv", ["corpus", "detector", "preset", "arms", "seeds", "runs"], rows,
                    href="runs.csv")]
    commits = ", ".join(sorted(set(df["git_commit"].astype(str))))
    blocks.append(para(f"Code: commit(s) {commits}. Corpus manifest digest(s): "
                       f"{', '.join(sorted({s[:12] for s in df['corpus_sha256']}))}."))
    return {"id": "overview", "title": "Overview", "blocks": blocks}


# the columns the page's per-run table places (the batch cell: size, ids digest and whether scores depend on it),
# or leaves to runs.csv; any other column specs.RUNS declares is shown after them
PAGE_PLACED = ("arm", "detector", "preset", "seed", "test_records", "test_attacks", "p", "ap", "random_ap",
               "ap_normalised", "auc_roc", "batch_size", "batch_ids_sha256", "batch_dependent", "corpus", "kind", "n",
               "i_tr", "i_va", "corpus_sha256", "run_key", "git_commit", "file")


def run_section(df: pd.DataFrame) -> dict:
    header = [*(RUNS.label(c) for c in PAGE_PLACED[:12]), *rest_header(RUNS, PAGE_PLACED)]
    rows = []
    for r in df.to_dict("records"):
        batch = "–"
        if isinstance(r["batch_ids_sha256"], str) and r["batch_ids_sha256"]:
            batch = f"{int(r['batch_size'])} records, {r['batch_ids_sha256'][:12]}"
            batch += " (batch-dependent scores)" if r["batch_dependent"] else ""
        rows.append([cell(r["arm"]), cell(r["detector"]), cell(r["preset"]), cell(str(r["seed"])),
                     _num(r["test_records"]), _num(r["test_attacks"]), _num(r["p"]), _num(r["ap"]),
                     _num(r["random_ap"]), _num(r["ap_normalised"]), _num(r["auc_roc"]),
                     cell(batch, cls="batch-dependent" if r["batch_dependent"] else ""),
                     *rest_cells(RUNS, PAGE_PLACED, r)])
    note = ("Each AP stands beside its own chance level: p is the held-out slice's prevalence, random AP the expected "
            "AP of a uniformly random ranking of it, and (AP − p)/(1 − p) puts chance at 0. The arms' held-out slices "
            "hold different records at different prevalences, so APs are never subtracted across arms. A batch "
            "detector scored validation + test as one batch (its size and the SHA-256 of its record ids); a "
            "batch-dependent one (ECOD) would score the same record differently in another batch.")
    return {"id": "runs", "title": "Runs: the held-out slice",
            "blocks": [table("Per run, on its arm's held-out slice", "runs.csv", header, rows, note, href="runs.csv")]}


def audit_section(index: int, group, folder: Path, result, error: str, base: Path) -> dict:
    title = f"Assembly audit: {group.spec.corpus_name}" + (f" ({index + 1})" if index else "")
    rel = folder.relative_to(base).as_posix()
    blocks = [para(f"Corpus {group.spec.corpus_name} (source {group.spec.source}, scale {group.spec.scale:g}, "
                   f"manifest {group.corpus_sha256[:12]}), arms {', '.join(group.arms)}, split train "
                   f"{group.split['train']}, validation {group.split['validation']}, test the rest.")]
    if result is None:
        blocks.append(para(f"Not computed: {error}", "note"))
        return {"id": f"audit{index}", "title": title, "blocks": blocks}
    for name, df in audit_mod.tables(result).items():
        href = f"{rel}/{name}.csv" if rel not in ("", ".") else f"{name}.csv"
        blocks.append(table(AUDIT_TITLES.get(name, name), f"{name}.csv", [str(c) for c in df.columns],
                            _frame_rows(df), href=href))
    if result.pooling is not None:
        blocks.append(para(result.pooling.statement))
    return {"id": f"audit{index}", "title": title, "blocks": blocks}


TABLE_NOTES = {
    "margins": "Each margin a − b is paired (the same resampled blocks for both scorers); lo_b<L>/hi_b<L>: its "
               "95 % interval with blocks of L records (the first L by the rule: longer than the slice's p90 attack "
               "run; then 250 and longer than the longest run); changes_with_block: the conclusion (the interval "
               "excludes 0) differs between block lengths.",
    "values": "AP beside its chance level (prevalence: the slice's attack share) and (AP − p)/(1 − p); intervals "
              "per block length.",
}


def _table_note(name: str) -> str:
    return next((v for k, v in TABLE_NOTES.items() if name.endswith(k)), "")


def _figure_blocks(figures) -> list[dict]:
    return [{"kind": "figure", "png": f.png, "pdf": None, "caption": f.caption} for f in figures]


def analysis_section(index: int, part, outcome, base: Path) -> dict:
    """One analysis of one study: its notes, the reason it was skipped or its tables, and its figures."""
    suffix = f" ({index + 1})" if index else ""
    blocks = [para(n) for n in outcome.notes]
    if outcome.skipped:
        blocks.append(para(outcome.skipped.capitalize(), "note skipped"))
    rel = part.folder.relative_to(base).as_posix()
    for name, df in outcome.tables.items():
        blocks.append(table(name.replace("_", " "), f"{name}.csv", [str(c) for c in df.columns], _frame_rows(df),
                            _table_note(name), href=f"{rel}/{name}.csv"))
    blocks += _figure_blocks(part.figures.get(outcome.key, []))
    return {"id": f"an-{outcome.key}{index or ''}", "title": outcome.title + suffix, "blocks": blocks}


def analyses_sections(parts: list, base: Path) -> list[dict]:
    sections = []
    for i, part in enumerate(parts):
        st = part.study
        head = [para(f"Corpus {st.corpus_spec.corpus_name} (manifest {st.corpus_sha256[:12]}), arms "
                     f"{', '.join(st.arms)}, scorers {', '.join(sc.name for sc in st.scorers)} (each from its "
                     f"lowest seed). {part.settings.note()}"),
                para("Skipped analyses say why in one line; every table is a CSV under "
                     f"{part.folder.relative_to(base).as_posix()}/ (markdown beside it).")]
        if st.corpus_error:
            head.append(para(f"The corpus could not be rebuilt: {st.corpus_error}", "note"))
        head += _figure_blocks(part.figures.get("split", []))
        sections.append({"id": f"analyses{i or ''}", "title": "Analyses: split membership" + (f" ({i + 1})" if i
                                                                                               else ""),
                         "blocks": head})
        sections += [analysis_section(i, part, o, base) for o in part.outcomes]
    return sections


def write_page(path: Path, dataset: str, df: pd.DataFrame, audits: list, parts: list = ()) -> Path:
    sections = [overview(df), run_section(df)]
    sections += [audit_section(i, g, folder, result, error, path.parent)
                 for i, (g, folder, result, error) in enumerate(audits)]
    sections += analyses_sections(list(parts), path.parent)
    write_text_atomic(path, render_page(dataset, sections, f"bench report: {dataset} (stream assembly)"))
    return path
