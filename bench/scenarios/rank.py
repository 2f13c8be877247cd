"""Difficulty ranking from a single-task-expert (STE) table (InCLAD §3, App. E, Tables 8–13).

Per method, concepts are ranked by ROC-AUC, hardest (lowest ROC-AUC) = rank 1, tied ROC-AUCs sharing their
average rank. A concept's difficulty is its rank averaged over the methods. hard_to_easy sorts by:

  1. average rank, ascending;
  2. maximum per-method rank, ascending: among equal averages, the concept that even its most favourable
     method ranks low is the harder one;
  3. median per-method ROC-AUC, ascending;
  4. concept name.

Keys 2–3 reproduce every tie in the published Tables 9–13 (DAGM Class2/Class1 and Class7/Class10/Class6, MPDD
tubes/bracket_white, MVTec AD metal_nut/hazelnut, VisA pcb2/candle, cashew/pipe_fryum, chewinggum/pcb4);
"lower average ROC-AUC first" reproduces only 4 of those 7 tie groups (docs/scenarios.md).
easy_to_hard is the exact reverse of hard_to_easy; random is a seeded permutation of the sorted concept names.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
from scipy.stats import ConstantInputWarning, rankdata, spearmanr

from bench.config import NO_BACKBONE
from bench.errors import ConfigError
from bench.registry import names
from bench.report import render
from bench.report.render import frame_markdown

STE_COLUMNS = ["dataset", "concept", "method", "backbone", "roc_auc"]
RANDOM_SEED = 0  # the seed of the random ordering in every manifest this suite writes


def read_ste(path) -> pd.DataFrame:
    """An STE table (CSV: dataset, concept, method, backbone, roc_auc), validated."""
    path = Path(path)
    try:
        df = pd.read_csv(path, dtype={"dataset": str, "concept": str, "method": str, "backbone": str},
                         keep_default_na=False)
    except FileNotFoundError:
        raise ConfigError(f"{path}: STE table not found (expected a CSV with columns {', '.join(STE_COLUMNS)})") \
            from None
    except (pd.errors.ParserError, pd.errors.EmptyDataError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{path}: unreadable STE table ({exc})") from None
    return validate_ste(df, str(path))


def validate_ste(df: pd.DataFrame, where: str) -> pd.DataFrame:
    missing = [c for c in STE_COLUMNS if c not in df.columns]
    if missing:
        raise ConfigError(f"{where}: STE table lacks columns {missing} (expected {', '.join(STE_COLUMNS)})")
    if df.empty:
        raise ConfigError(f"{where}: STE table has no rows")
    df = df[STE_COLUMNS].copy()
    df["roc_auc"] = pd.to_numeric(df["roc_auc"], errors="coerce")
    bad = df[~np.isfinite(df["roc_auc"]) | (df["roc_auc"] < 0) | (df["roc_auc"] > 1)]
    if not bad.empty:
        r = bad.iloc[0]
        raise ConfigError(f"{where}: roc_auc of {r['dataset']}/{r['concept']}/{r['method']} is not a number in "
                          f"[0, 1] (a one-class test set gives NaN; such a concept cannot be ranked)")
    for col in ("dataset", "concept", "method", "backbone"):
        if (df[col].str.strip() == "").any():
            raise ConfigError(f"{where}: empty {col} in the STE table")
    dup = df.duplicated(["dataset", "concept", "method", "backbone"])
    if dup.any():
        r = df[dup].iloc[0]
        raise ConfigError(f"{where}: {r['dataset']}/{r['concept']}/{r['method']}/{r['backbone']} appears twice")
    return df.reset_index(drop=True)


def method_order(methods) -> list[str]:
    """The registry's order (PatchCore, PaDiM, CFA first: InCLAD's column order), then any other method by name."""
    known = [m for m in names() if m in set(methods)]
    return known + sorted(set(methods) - set(known))


def label(method: str) -> str:
    return render.label("model", method)


@dataclass
class Ranking:
    """One dataset's difficulty table, rows hardest first."""

    dataset: str
    methods: list[str]
    table: pd.DataFrame  # index concept; <method> (ROC-AUC), rank_<method>, avg_rank, max_rank, avg/median_roc_auc

    @property
    def hard_to_easy(self) -> list[str]:
        return list(self.table.index)

    @property
    def easy_to_hard(self) -> list[str]:
        return self.hard_to_easy[::-1]

    def orderings(self, seed: int = RANDOM_SEED) -> dict:
        return {"easy_to_hard": {"tasks": self.easy_to_hard}, "hard_to_easy": {"tasks": self.hard_to_easy},
                "random": {"tasks": random_order(self.hard_to_easy, seed), "seed": seed}}

    def difficulty(self) -> list[dict]:
        """The manifest's difficulty section (hardest first)."""
        return [{"task": c, "avg_roc_auc": round(float(r["avg_roc_auc"]), 6),
                 "avg_rank": round(float(r["avg_rank"]), 6), "roc_auc": {m: float(r[m]) for m in self.methods}}
                for c, r in self.table.iterrows()]


def random_order(tasks, seed: int) -> list[str]:
    """A permutation of the sorted names, so it depends on the task set and the seed only."""
    names = sorted(tasks)
    return [names[i] for i in np.random.default_rng(seed).permutation(len(names))]


def rank_concepts(scores: pd.DataFrame, dataset: str = "", where: str = "STE table") -> Ranking:
    """`scores`: concept × method ROC-AUC (index = concept). Every cell must be present."""
    methods = method_order(scores.columns)
    scores = scores[methods]
    holes = scores.isna().stack()
    if holes.any():
        concept, method = holes[holes].index[0]
        raise ConfigError(f"{where}: {dataset}: no ROC-AUC for concept {concept!r} with method {method!r} "
                          f"(every method must score every concept)")
    table = scores.astype(float).copy()
    for m in methods:
        table[f"rank_{m}"] = rankdata(scores[m].to_numpy(), method="average")
    ranks = table[[f"rank_{m}" for m in methods]].to_numpy()
    table["avg_rank"] = ranks.mean(axis=1)
    table["max_rank"] = ranks.max(axis=1)
    table["avg_roc_auc"] = scores.to_numpy().mean(axis=1)
    table["median_roc_auc"] = np.median(scores.to_numpy(), axis=1)
    # rounded so that equal rank sums compare equal whatever the summation order
    key = table["avg_rank"].round(9)
    order = sorted(range(len(table)), key=lambda i: (key.iloc[i], table["max_rank"].iloc[i],
                                                     table["median_roc_auc"].iloc[i], table.index[i]))
    table = table.iloc[order]
    table.index.name = "concept"
    return Ranking(dataset, methods, table)


def rank_ste(ste: pd.DataFrame, backbone: str | None = None, where: str = "STE table") -> dict[str, Ranking]:
    """{dataset: Ranking} for every dataset of an STE table (one backbone: pick it when several are present).
    Experts without a backbone (raw-image detectors) join whichever backbone is ranked."""
    backbone_less = ste["backbone"] == NO_BACKBONE
    if backbone is not None:
        if backbone not in set(ste["backbone"]):
            have = ", ".join(sorted(set(ste["backbone"])))
            raise ConfigError(f"{where}: backbone {backbone!r} is not in the STE table (it has: {have})")
        ste = ste[(ste["backbone"] == backbone) | backbone_less]
    out = {}
    for dataset, g in ste.groupby("dataset", sort=True):
        backbones = sorted(set(g["backbone"]) - {NO_BACKBONE})
        if len(backbones) > 1:
            raise ConfigError(f"{where}: {dataset} has several backbones ({', '.join(backbones)}); "
                              f"choose one with --backbone")
        scores = g.pivot(index="concept", columns="method", values="roc_auc")
        out[dataset] = rank_concepts(scores, dataset, where)
    return out


def spearman_table(rankings: dict[str, Ranking]) -> pd.DataFrame:
    """Pairwise Spearman correlation of the methods' concept ROC-AUCs per dataset (Table 8 layout)."""
    rows = []
    for dataset, r in rankings.items():
        row = {"dataset": dataset}
        for i, a in enumerate(r.methods):
            for b in r.methods[i + 1:]:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore", ConstantInputWarning)  # constant scores: NaN, said in the table
                    rho = spearmanr(r.table[a], r.table[b]).statistic if len(r.table) > 1 else np.nan
                row[f"{label(a)} vs {label(b)}"] = float(rho)
        rows.append(row)
    return pd.DataFrame(rows)


def ordering_frame(r: Ranking) -> pd.DataFrame:
    """Tables 9–13 layout: Rank, Concept, Avg. ROC-AUC, Avg. Rank, one ROC-AUC column per method."""
    t = r.table
    out = pd.DataFrame({"Rank": np.arange(1, len(t) + 1), "Concept": t.index, "Avg. ROC-AUC": t["avg_roc_auc"].values,
                        "Avg. Rank": t["avg_rank"].values})
    for m in r.methods:
        out[label(m)] = t[m].values
    return out


def markdown(df: pd.DataFrame, digits: dict[str, int] | None = None, default_digits: int = 4) -> str:
    """A GitHub table; float columns with `digits[col]` (else `default_digits`) decimals, NaN as render.MISSING."""
    return "\n".join(frame_markdown(df, default_digits, digits))


def write_tables(rankings: dict[str, Ranking], out: Path) -> list[Path]:
    """<dataset>_ordering.{md,csv} per dataset and spearman.{md,csv}; returns the paths written."""
    out.mkdir(parents=True, exist_ok=True)
    written = []
    for dataset, r in rankings.items():
        frame = ordering_frame(r)
        written.append(out / f"{dataset}_ordering.csv")
        frame.to_csv(written[-1], index=False)
        written.append(out / f"{dataset}_ordering.md")
        written[-1].write_text(f"{dataset}: hard-to-easy ordering (easy-to-hard is its reverse)\n\n"
                               + markdown(frame, {"Avg. Rank": 2}) + "\n")
    spearman = spearman_table(rankings)
    written.append(out / "spearman.csv")
    spearman.to_csv(written[-1], index=False)
    written.append(out / "spearman.md")
    written[-1].write_text("Pairwise Spearman rank correlation of the single-task experts' concept ROC-AUCs\n\n"
                           + markdown(spearman, default_digits=3) + "\n")
    return written
