"""`make aggregate DATASET=<corpus>-assembly`: the assembly audit and the per-run table of a result set, as CSV,
markdown and one HTML page (outputs/<set>/report/).

Per run (one row per run file), on its held-out slice (the test segment [i_va, n) of its arm): records, attacks,
the chance level p (prevalence), AP (scikit-learn's step-wise average precision), the expected AP of a uniformly
random ranking of that slice (`bench.metrics.expected_random_ap`), the normalised AP (AP − p) / (1 − p), and
AUC-ROC; for a batch detector its batch (size, SHA-256 of the record ids) and whether its scores depend on the
batch (ECOD). The table never subtracts APs of different arms: their slices hold different records at different
prevalences, so only each AP beside its own chance level is reported.

The audit (bench.assembly.audit) is recomputed from the corpus the runs recorded (its spec and manifest digest;
the data must be where the runs read it): split sizes, per-segment composition, held-out windows, attack run
lengths, the held-out overlap and split transitions between arms, and the pooling identity or the precondition
that fails.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from bench.assembly import arms as arm_registry, audit as audit_mod, runs, store
from bench.assembly.specs import LEFT_TO_CSV, MARKDOWN_PLACED, RUN_COLUMNS, RUNS
from bench.errors import BenchError, DatasetError
from bench.io import write_text_atomic
from bench.report.specs import cell_text

REPORT = "report"
PAGE = "index.html"


def heldout_metrics(y: np.ndarray, score: np.ndarray) -> dict:
    """p, AP, the random-ranking AP, (AP − p)/(1 − p) and AUC-ROC of one held-out slice (NaN where one class)."""
    from sklearn.metrics import average_precision_score, roc_auc_score

    from bench.metrics import expected_random_ap

    n, k = len(y), int(np.sum(y))
    p = k / n if n else math.nan
    if k in (0, n):
        return {"test_records": n, "test_attacks": k, "p": p, "ap": math.nan, "random_ap": math.nan,
                "ap_normalised": math.nan, "auc_roc": math.nan}
    ap = float(average_precision_score(y, score))
    return {"test_records": n, "test_attacks": k, "p": p, "ap": ap, "random_ap": float(expected_random_ap(n, k)),
            "ap_normalised": (ap - p) / (1 - p), "auc_roc": float(roc_auc_score(y, score))}


def run_row(path: Path) -> dict:
    s = store.read_run(path)
    a = store.run_attrs(path)
    test = s.test()
    row = {"corpus": s.corpus, "arm": s.arm, "detector": s.detector, "preset": s.preset, "seed": s.seed,
           "kind": s.kind.value, "n": s.n, "i_tr": s.bounds[0], "i_va": s.bounds[1],
           **heldout_metrics(s.y[test], s.score[test]),
           "batch_size": s.batch.size if s.batch else None, "batch_ids_sha256": s.batch.ids_sha256 if s.batch else "",
           "batch_dependent": bool(a.get("batch_dependent", False)), "corpus_sha256": s.corpus_sha256,
           "run_key": a["run_key"], "git_commit": a.get("git_commit", ""), "file": path.name}
    return {k: row[k] for k in RUN_COLUMNS}


def run_table(files: list[Path]) -> pd.DataFrame:
    rows = [run_row(p) for p in files]
    order = {name: i for i, name in enumerate(arm_registry.ARMS)}
    df = pd.DataFrame(rows, columns=list(RUN_COLUMNS))
    df["batch_size"] = df["batch_size"].astype("Int64")  # empty (online detectors) stays empty, not NaN
    df["_arm"] = df["arm"].map(lambda a: (order.get(a, len(order)), a))
    return df.sort_values(["corpus", "detector", "preset", "_arm", "seed"]).drop(columns="_arm").reset_index(drop=True)


@dataclass(frozen=True)
class AuditGroup:
    """The runs of one corpus (spec and digest) and split rule: one audit over the arms they used."""

    spec: runs.CorpusSpec
    corpus_sha256: str
    split: dict
    arms: tuple[str, ...]


def audit_groups(files: list[Path]) -> list[AuditGroup]:
    groups: dict = {}
    for path in files:
        a = store.run_attrs(path)
        spec = json.loads(a["spec"])
        key = (json.dumps(spec["corpus"], sort_keys=True), a["corpus_sha256"], json.dumps(spec["split"]))
        groups.setdefault(key, []).append(a["arm"])
    order = {name: i for i, name in enumerate(arm_registry.ARMS)}
    out = []
    for (corpus, sha, split), names in groups.items():
        ordered = tuple(sorted(set(names), key=lambda a: (order.get(a, len(order)), a)))
        out.append(AuditGroup(runs.CorpusSpec.from_dict(json.loads(corpus)), sha, json.loads(split), ordered))
    return out


def compute_audit(group: AuditGroup) -> audit_mod.AssemblyAudit:
    """The audit of a group's arms on its corpus, rebuilt from the recorded spec; DatasetError when the data is
    not there or is no longer what the runs read."""
    from bench.assembly.records import SplitRule

    corpus, sha = runs.load_corpus(group.spec)
    if sha != group.corpus_sha256:
        raise DatasetError(f"{group.spec.root}: the corpus built there now (manifest {sha[:12]}) is not the one the "
                           f"runs scored ({group.corpus_sha256[:12]}): its files changed; re-run the grid")
    arms = [arm_registry.make_arm(corpus, name) for name in group.arms]
    return audit_mod.audit(corpus, arms, SplitRule(**group.split))


def run_markdown(df: pd.DataFrame) -> str:
    from bench.report.render import markdown_table, value_text

    cols = list(MARKDOWN_PLACED)
    rest = RUNS.unplaced((*MARKDOWN_PLACED, *LEFT_TO_CSV))
    rows = [[value_text(r[c]) if c != "batch_ids_sha256" else str(r[c])[:12] for c in cols]
            + [cell_text(c, r[c.name]) for c in rest] for r in df.to_dict("records")]
    head = [f"# {RUNS.title}", "",
            "p: the slice's attack prevalence (AP's chance level); random AP: the expected AP of a uniformly random "
            "ranking of the slice; normalised: (AP − p)/(1 − p). APs of different arms are not subtracted: each arm's "
            "held-out slice holds other records at another prevalence. batch-dependent: the detector's scores change "
            "with the other records of the batch they were scored in (named by its size and digest).", ""]
    return "\n".join(head + markdown_table([*(RUNS.label(c) for c in cols), *(c.label for c in rest)], rows)) + "\n"


@dataclass(frozen=True)
class AnalysisPart:
    """One study's analyses as the page shows them: settings, outcomes, where their tables went, and figures."""

    study: object  # aggregate_analyses.Study
    settings: object  # aggregate_analyses.Settings
    outcomes: list
    folder: Path
    figures: dict  # outcome key -> [analysis_figures.Figure]


def _audit_of(study, audits: list):
    split = {"train": study.split.train, "validation": study.split.validation}
    return next((r for g, _, r, _ in audits if g.corpus_sha256 == study.corpus_sha256 and g.split == split), None)


def draw_figures(study, outcomes: list, out: Path, tag: str) -> dict:
    """The split-membership picture, the cut sweep, branches against chance and the prevalence sweep, each where
    its analysis ran; outcome key -> figures."""
    from bench.assembly import analysis_figures as af

    figdir = out / "figures"
    tables = {k: v for o in outcomes for k, v in o.tables.items() if not v.empty}
    figs: dict = {}

    def add(key: str, stem: str, caption: str, draw) -> None:
        path = draw(figdir, f"{stem}{tag}")
        figs.setdefault(key, []).append(af.Figure(path.stem, caption, path.relative_to(out).as_posix()))

    arms = study.pair() or study.arms
    streams = {a: next(sc.streams[a] for sc in study.scorers if a in sc.streams) for a in arms}
    n_rows = int(max(s.rows.max() for s in streams.values())) + 1
    add("split", "split_membership", "Which segment each record falls in under each arm",
        lambda d, st: af.split_membership(streams, n_rows, d, st))
    if "cut_values" in tables:
        add("cutsweep", "cut_sweep", "AP after each cut, per arm, beside the chance level",
            lambda d, st: af.cut_sweep(tables["cut_values"], d, st))
    if "branch_values" in tables:
        add("branches", "branches", "Deployed score and its branches: AP with intervals against chance",
            lambda d, st: af.branches_vs_chance(tables["branch_values"], d, st))
    if "prevalence_levels" in tables:
        add("prevalence", "prevalence_sweep", "Mean AP per prevalence level against the achieved chance level",
            lambda d, st: af.prevalence_sweep(tables["prevalence_levels"], d, st))
    return figs


def analyse(files: list[Path], out: Path, audits: list, resamples: int, skip=()) -> list[AnalysisPart]:
    """Every analysis each study's runs allow: tables under out/analyses/, figures under out/figures/."""
    import shutil

    from bench.assembly import aggregate_analyses as aa
    from bench.assembly.paper_beside import comparison

    for old in (out / "analyses", out / "figures"):  # a previous aggregate's tables of other runs must not linger
        shutil.rmtree(old, ignore_errors=True)
    studies = aa.load_studies(files)
    parts = []
    for i, study in enumerate(studies):
        aa.attach_corpus(study)
        settings = aa.settings_for(study.n, resamples, skip)
        outcomes = aa.run_all(study, settings)
        outcomes.append(comparison(study, outcomes, _audit_of(study, audits)))
        tag = f"_{i + 1}" if len(studies) > 1 else ""
        folder = out / "analyses" / tag.lstrip("_")
        aa.write_tables(outcomes, folder)
        parts.append(AnalysisPart(study, settings, outcomes, folder, draw_figures(study, outcomes, out, tag)))
    return parts


def aggregate(outputs: Path, dataset: str, resamples: int = 1000, skip=()) -> Path:
    """Write outputs/<dataset>/report/{runs.csv, runs.md, audit/…, analyses/…, figures/…, index.html}; the page's
    path. `resamples`: the bootstrap's (a demo-size corpus uses fewer; the page says how many); `skip`: analyses
    to leave out (aggregate_analyses.TITLES' keys)."""
    runs_dir = Path(outputs) / dataset / "runs"
    files = sorted(runs_dir.glob("*.h5"))
    if not files:
        raise DatasetError(f"{runs_dir}: no assembly run files; run the grid first (`make submit DATASET={dataset} "
                           f"CLUSTER=local`, or `make demo-assembly` for the synthetic week)")
    out = Path(outputs) / dataset / REPORT
    df = RUNS.frame(run_table(files))
    write_text_atomic(out / f"{RUNS.name}.csv", RUNS.csv_text(df))
    write_text_atomic(out / f"{RUNS.name}.md", run_markdown(df))
    audits = []
    groups = audit_groups(files)
    for i, group in enumerate(groups):
        folder = out / "audit" / (f"{i + 1}" if len(groups) > 1 else "")
        try:
            result = compute_audit(group)
        except BenchError as e:  # results copied without their data: the runs' table still stands
            audits.append((group, folder, None, str(e)))
            continue
        audit_mod.write_audit(result, folder)
        audits.append((group, folder, result, ""))
    parts = analyse(files, out, audits, resamples, skip)
    from bench.assembly.page import write_page

    return write_page(out / PAGE, dataset, df, audits, parts)
