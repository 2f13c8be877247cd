"""The paper's numbers beside ours, for the stream-assembly page (bench.assembly.paper holds the numbers and the
comparability check).

Every published cell of Tables 4, 6, 8 and 9 gets a row: the published value, ours where an analysis of the set
computed the same quantity, and whether the two are comparable — "comparable" only when the corpus, budgets,
subsampling rule, scale, feature set, non-finite policy, split and (for a scorer's cell) the detector's settings
are the released ones, otherwise "not comparable: …" with every reason (`paper.comparability`). On a corpus with
the paper's structure at another scale (the synthetic week) the identities that hold at any scale are shown beside
the paper's values: held-out records, shared records and their share, the round robin's attack-free rows
(`paper.identities`), the relocation identity (attacks leaving the first arm's held-out slice = those moved to the
second arm's train + validation), and the pooling identity of a pooled arm.
"""

from __future__ import annotations

import math

import pandas as pd

from bench.assembly import paper
from bench.assembly.aggregate_analyses import Outcome, Study
from bench.errors import BenchError

TABLES = ("assembly_table4.csv", "assembly_table6.csv", "assembly_table8.csv", "assembly_table9.csv")
NAN = math.nan


def _scorer_of(study: Study, detector: str):
    """Our scorer for the paper's detector name: the detector itself, or its released preset."""
    return next((sc for sc in study.scorers if sc.name in (detector, f"{detector}:released")), None)


def _pick(df: pd.DataFrame | None, column: str, **where) -> float:
    if df is None or df.empty or any(k not in df.columns for k in where):
        return NAN
    mask = pd.Series(True, index=df.index)
    for k, v in where.items():
        mask &= df[k].astype(str) == str(v)
    hit = df.loc[mask, column] if column in df.columns else pd.Series(dtype=float)
    return float(hit.mean()) if len(hit) else NAN


def _arm_counts(study: Study, arm: str, metric: str) -> float:
    s = next((sc.streams[arm] for sc in study.scorers if arm in sc.streams), None)
    if s is None:
        return NAN
    y = s.y[s.test()]
    return {"records": float(y.size), "attacks": float(y.sum()), "prevalence": float(y.mean())}.get(metric, NAN)


def ours(cell: paper.PaperCell, study: Study, tables: dict[str, pd.DataFrame]) -> float:
    """Our value of a published cell, NaN where the set computed no such quantity."""
    sc = _scorer_of(study, cell.scorer) if cell.scorer else None
    name = sc.name if sc else cell.scorer
    if cell.file == "assembly_table4.csv":
        if not cell.scorer:
            return _arm_counts(study, cell.arm, cell.metric)
        return _pick(tables.get("heldout_values"), "value", slice=f"heldout|{cell.arm}", scorer=name, metric="ap")
    if cell.file == "assembly_table6.csv":
        if not cell.scorer:
            col = {"records": "shared_records", "attacks": "shared_attacks"}.get(cell.metric, cell.metric)
            return _pick(tables.get("shared_summary"), col)
        return _pick(tables.get("shared_values"), cell.metric, scorer=name, history=cell.arm, batch=cell.batch)
    if cell.file == "assembly_table8.csv":
        bocpd = _scorer_of(study, "bocpd")
        run = f"branches|{bocpd.name if bocpd else 'bocpd'}|{cell.arm}"
        if cell.metric == "share":
            return _pick(tables.get("branch_binding"), "share", scorer=bocpd.name if bocpd else "bocpd",
                         arm=cell.arm, branch=cell.batch)
        return _pick(tables.get("branch_values"), "value", slice=run, scorer=cell.batch, metric=cell.metric)
    if cell.file == "assembly_table9.csv":
        levels = tables.get("prevalence_levels")
        if cell.metric == "chance":
            return _pick(levels, "chance", level=cell.level)
        return _pick(levels, "ap", level=cell.level, scorer=name)
    return NAN


def _comparability(study: Study) -> tuple[paper.Comparability, dict[str, paper.Comparability]]:
    corpus = paper.comparability(study.manifest, study.split)
    per = {}
    for sc in study.scorers:
        setting = paper.DetectorSetting(sc.spec.detector, sc.spec.preset, sc.spec.params())
        per[sc.name] = paper.comparability(study.manifest, study.split, [setting])
    return corpus, per


def cells_frame(study: Study, tables: dict[str, pd.DataFrame]) -> pd.DataFrame:
    corpus, per = _comparability(study)
    rows = []
    for name in TABLES:
        for c in paper.load(name):
            sc = _scorer_of(study, c.scorer) if c.scorer else None
            verdict = per[sc.name] if sc else corpus
            if c.scorer and sc is None:
                text = f"not comparable: the set ran no {c.scorer}" + (
                    "" if corpus.comparable else "; " + corpus.text().removeprefix("not comparable: "))
            else:
                text = verdict.text()
            value = ours(c, study, tables)
            rows.append({"table": name.removesuffix(".csv").removeprefix("assembly_"), "cell": c.cell, "arm": c.arm,
                         "scorer": c.scorer, "batch": c.batch, "level": c.level, "metric": c.metric,
                         "published": c.value, "ours": value,
                         "difference": value - c.value if text == "comparable" else NAN,
                         "comparability": text, "origin": c.origin, "source": c.source})
    return pd.DataFrame(rows)


def _relocation_rows(audit) -> list[dict]:
    cells = {c.cell: c.value for c in paper.load("assembly_text.csv")}
    out = []
    for pair in audit.pairs[:1]:
        to_train, to_val = int(pair.attack_transitions[2, 0]), int(pair.attack_transitions[2, 1])
        paper_sum = cells["id.relocated_to_train"] + cells["id.relocated_to_validation"]
        out.append({"quantity": f"attacks leaving {pair.arm_a}'s held-out slice = those in {pair.arm_b}'s train + "
                                "validation (counts depend on the attack schedule: not scaled)",
                    "ours": pair.attacks_moved_out, "ours_at_paper_scale": NAN, "paper": cells["id.relocated"],
                    "paper_cell": "id.relocated", "holds": pair.attacks_moved_out == to_train + to_val
                    and cells["id.relocated"] == paper_sum})
    return out


def _pooling_rows(audit) -> list[dict]:
    if audit.pooling is None:
        return []
    cells = {c.cell: c.value for c in paper.load("assembly_text.csv")}
    parts = [cells[f"id.litnet_{k}_prevalence"] for k in ("udp_flood", "spam", "blaster_worm")]
    paper_holds = abs(sum(parts) / len(parts) - cells["id.litnet_pooled_prevalence"]) < 5e-6
    return [{"quantity": "pooled held-out prevalence = held-out-weighted mean of the per-capture ones",
             "ours": float(audit.pooling.pooled), "ours_at_paper_scale": float(audit.pooling.weighted_mean),
             "paper": cells["id.litnet_pooled_prevalence"], "paper_cell": "id.litnet_pooled_prevalence",
             "holds": bool(audit.pooling.holds) and paper_holds}]


def identities_frame(audit) -> tuple[pd.DataFrame, str]:
    """The scale-free identities beside the paper's values; an empty frame and why when the audit has none."""
    rows, why = [], []
    if audit.pairs:
        try:
            rows += [r.__dict__ for r in paper.identities(audit)]
        except (BenchError, IndexError, KeyError) as e:
            why.append(f"the split and overlap identities: {e}")
        rows += _relocation_rows(audit)
    rows += _pooling_rows(audit)
    if not rows:
        why.append("the audit holds neither a pair of arms over the whole corpus nor a pooled arm")
    return pd.DataFrame(rows), "; ".join(why)


def comparison(study: Study, outcomes: list[Outcome], audit) -> Outcome:
    tables = {name: df for o in outcomes for name, df in o.tables.items()}
    corpus, per = _comparability(study)
    verdicts = pd.DataFrame([{"scope": "corpus and split", "comparable": corpus.comparable, "text": corpus.text()}]
                            + [{"scope": f"scorer {k}", "comparable": v.comparable, "text": v.text()}
                               for k, v in per.items()])
    out = {"paper_comparability": verdicts, "paper_cells": cells_frame(study, tables)}
    notes = [f"Corpus and split: {corpus.text()}.",
             "Ours uses the lowest seed of each seeded detector; the paper's HST on the round robin is the mean of "
             "three seeds."]
    if audit is not None:
        ids, why = identities_frame(audit)
        if not ids.empty:
            out["paper_identities"] = ids
        if why:
            notes.append(f"Identities not shown: {why}.")
    else:
        notes.append("Identities not shown: the audit was not computed (see the audit section).")
    return Outcome("paper", "The paper's numbers beside ours", out, notes=tuple(notes))
