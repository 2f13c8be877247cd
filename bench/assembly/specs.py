"""The stream-assembly report's tables, declared once (bench.report.specs.TableSpec): the per-run table written as
report/runs.csv and runs.md (bench/assembly/report.py) and shown on the page (bench/assembly/page.py), each column
with the one label both renderings show. The analyses' tables (bench/assembly/aggregate_analyses.py) are written
with their frames' own column names as headers, in the CSV and the markdown alike."""

from __future__ import annotations

from bench.report.specs import Column, Format, Kind, TableSpec


def _cols(kind: Kind, *pairs: tuple[str, str]) -> tuple[Column, ...]:
    return tuple(Column(name, label, kind=kind) for name, label in pairs)


# report/runs.{csv,md} and the page's per-run table: every column with the one label the markdown and the page show
RUNS = TableSpec(
    "runs", "Stream-assembly runs: the held-out slice of each run",
    keys=(*_cols(Kind.TEXT, ("corpus", "corpus"), ("arm", "arm"), ("detector", "detector"), ("preset", "preset")),
          *_cols(Kind.COUNT, ("seed", "seed"))),
    values=(*_cols(Kind.TEXT, ("kind", "kind")),
            *_cols(Kind.COUNT, ("n", "records"), ("i_tr", "training ends"), ("i_va", "validation ends"),
                   ("test_records", "held-out records"), ("test_attacks", "attacks")),
            *_cols(Kind.NUMBER, ("p", "p (chance)"), ("ap", "AP"), ("random_ap", "random AP"),
                   ("ap_normalised", "(AP − p)/(1 − p)"), ("auc_roc", "AUC-ROC")),
            *_cols(Kind.COUNT, ("batch_size", "batch")), *_cols(Kind.TEXT, ("batch_ids_sha256", "batch ids SHA-256")),
            Column("batch_dependent", "batch-dependent scores", kind=Kind.FLAG),
            *_cols(Kind.TEXT, ("corpus_sha256", "corpus SHA-256"), ("run_key", "run key"),
                   ("git_commit", "commit"), ("file", "file"))),
    formats=(Format.CSV, Format.MARKDOWN, Format.HTML))
RUN_COLUMNS = tuple(c.name for c in RUNS.columns)
# the columns runs.md places (the others are in runs.csv); any other column RUNS declares is shown after them
MARKDOWN_PLACED = ("corpus", "arm", "detector", "preset", "seed", "test_records", "test_attacks", "p", "ap",
                   "random_ap", "ap_normalised", "auc_roc", "batch_size", "batch_ids_sha256", "batch_dependent")
LEFT_TO_CSV = ("kind", "n", "i_tr", "i_va", "corpus_sha256", "run_key", "git_commit", "file")
