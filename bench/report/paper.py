"""Our numbers beside InCLAD's published ones: `tables/paper_comparison.{md,csv}` and `tables/paper_timing.csv`.

The published Tables 2, 4 and 5 ship as data (data/paper/, with their citation). A Table 2 cell of ours is computed
by `table2.table2` — the suite's Table 2 aggregation — over the runs of the paper's methods only (the nine; the
MultiDataset rows: CFA, PaSTe and PaDiM, the paper's selection). It is *compared* only when it measures what the
paper measured; otherwise it says "not comparable: <every reason>":
  - a real dataset with a published cell (not the synthetic benchmark);
  - each run on torchvision-style ImageNet weights (its weights id carries the backbone's `tv_in1k`/`tv2_in1k`
    tag; detectors that read raw images have no backbone weights);
  - each run made with the `inclad` preset (`config.preset`), at the paper's input size of its detector
    (`ModelSpec.image_size`), with exactly the hyperparameters that preset resolves to (quick settings differ);
  - every method present: the nine detectors (MultiDataset: three), each on both backbones where it has one.
A compared cell gives the difference to the published mean and whether ours lies in the published band
(mean ± std, ours rounded to the paper's three decimals); BWT rows carry ours both as Eq. 2 and as released.
Timings compare as ours / published, with both machines named: the paper's hardware is stated per paper, not
per run, and its pipeline differs (docs/reports.md), so a ratio is a scale, not a check.
"""

from __future__ import annotations

import csv
import json
import re
from collections import Counter

import numpy as np
import pandas as pd

from bench.config import BACKBONES, NO_BACKBONE, RunConfig
from bench.errors import BenchError, ConfigError
from bench.registry import INCLAD_MODELS
from bench.report.render import COLUMNS, MULTI, PAPER_DIR, label, markdown_table, sort_frame
from bench.report.table2 import table2
from bench.report.timing import format_duration, timing_table

PAPER = "InCLAD (Marcjan, Wilk-Kołodziejczyk, Corizzo; arXiv 2610.15032v1)"
# InCLAD App. D.2, in our words; it does not say which run used which machine
PAPER_HARDWARE = ("an HPC system with NVIDIA H100 80 GB and NVIDIA L40 GPUs (Intel Xeon Platinum 8462Y+ nodes, "
                  "512 GB RAM) and two workstations; the paper does not say which run used which")
PRESET = "inclad"
# bench.features.IMAGENET_TAG is what `--weights imagenet` stages; timm also names torchvision's second recipe
# (tv2_in1k). Named here so the report needs no torch import (a test checks the two agree).
IMAGENET_TAGS = ("tv_in1k", "tv2_in1k")
PAPER_MULTI_MODELS = ("cfa", "paste", "padim")  # Table 2's MultiDataset rows pool these three
METRICS = ("roc_auc_cl", "bwt")  # what Table 2 publishes; our BWT as released rides along on the bwt rows
TIMING_BACKBONE = {"inclad_table4.csv": "wide_resnet50_2", "inclad_table5.csv": NO_BACKBONE}
_DURATION = re.compile(r"^(?:(\d+)m (\d+)s|(\d+(?:\.\d)?)s)$")


# ------------------------------------------------------------------ the published tables

def _read(name: str) -> list[dict]:
    path = PAPER_DIR / name
    try:
        with open(path, newline="") as f:
            return list(csv.DictReader(f))
    except OSError as e:
        raise BenchError(f"{path}: cannot read the published table ({e.strerror})") from None


def published_table2() -> pd.DataFrame:
    """InCLAD Table 2, long: dataset, ordering, metric, level, protocol, mean, std (one row per printed cell)."""
    rows = [{"dataset": r["dataset"], "ordering": r["ordering"], "metric": r["metric"], "level": level,
             "protocol": protocol, "mean": float(r[f"{level}_{protocol}"]),
             "std": float(r[f"{level}_{protocol}_std"])}
            for r in _read("inclad_table2.csv") for level, protocol in COLUMNS]
    return pd.DataFrame(rows)


def parse_duration(text: str) -> float:
    """Seconds of a duration as the paper prints it: "58.7s", "6m 32s"."""
    m = _DURATION.match(text)
    if not m:
        raise BenchError(f"duration {text!r}: expected the paper's form, e.g. 58.7s or 6m 32s")
    return float(m.group(3)) if m.group(3) else 60.0 * int(m.group(1)) + int(m.group(2))


def published_timing() -> pd.DataFrame:
    """InCLAD Tables 4-5, long: dataset, model, backbone, phase, protocol (ncl = Naive, cl = Continual),
    published (as printed), mean_s, std_s, table. Cells the paper leaves empty are absent."""
    rows = []
    for name, backbone in TIMING_BACKBONE.items():
        for r in _read(name):
            for protocol, column in (("ncl", "naive"), ("cl", "continual")):
                if r[column]:
                    rows.append({"dataset": r["dataset"], "model": r["model"], "backbone": backbone,
                                 "phase": r["phase"], "protocol": protocol,
                                 "published": f"{r[column]} (± {r[column + '_std']})",
                                 "mean_s": parse_duration(r[column]), "std_s": parse_duration(r[column + "_std"]),
                                 "table": f"Table {name[-5]}"})
    return pd.DataFrame(rows)


# ------------------------------------------------------------------ why a run or a cell is not comparable

def _spec(model: str):
    from bench.registry import get  # late: the detectors import torch, which only this check needs

    return get(model)


def run_reasons(config: RunConfig, weights_id: str) -> list[tuple[str, str]]:
    """(category, detail) of every way this run differs from the paper's setting (empty: it matches)."""
    spec, image = _spec(config.model), config.image
    out = []
    if spec.inputs == "features" and not any(weights_id.startswith(f"{image.backbone}.{tag}:")
                                             for tag in IMAGENET_TAGS):
        out.append(("weights", f"weights={image.weights}" if image.weights in ("none", "imagenet")
                    else "weights from a file"))
    if config.preset != PRESET:
        out.append(("preset", "no preset recorded (made before presets)" if config.preset is None
                    else f"preset={config.preset}"))
    if image.image_size != spec.image_size:
        out.append(("image size", f"{config.model} at {image.image_size} px, the paper's {spec.image_size}"))
    try:
        inclad = spec.resolve(preset=PRESET)
    except ConfigError:
        out.append(("hyperparameters", f"{config.model} has no {PRESET} preset"))
        return out
    differ = [f"{k}={json.dumps(config.hparams.get(k))}" for k in sorted(set(inclad) | set(config.hparams))
              if config.hparams.get(k) != inclad.get(k)]
    if differ:
        out.append(("hyperparameters", f"{config.model}: {', '.join(differ[:3])}{' …' if len(differ) > 3 else ''}"))
    return out


REASON_TEXT = {"weights": "{}", "preset": "{}", "image size": "image size {}",
               "hyperparameters": "hyperparameters differ from the inclad preset ({})"}


def _run_reason_text(configs: list[tuple[RunConfig, str]]) -> list[str]:
    """Per category, its details with how many of the runs they hit: "weights=none (24 of 24 runs)"."""
    found: dict[str, Counter] = {}
    for config, weights_id in configs:
        for category, detail in run_reasons(config, weights_id):
            found.setdefault(category, Counter())[detail] += 1
    out = []
    for category, template in REASON_TEXT.items():
        if category in found:
            details = sorted(found[category])
            n = sum(found[category].values())
            shown = "; ".join(details[:3]) + (" …" if len(details) > 3 else "")
            out.append(f"{template.format(shown)} ({n} of {len(configs)} runs)")
    return out


def required_methods(dataset: str) -> set[tuple[str, str]]:
    """(model, backbone) of every method a published cell of `dataset` pools."""
    models = PAPER_MULTI_MODELS if dataset == MULTI else INCLAD_MODELS
    return {(m, b) for m in models for b in (BACKBONES if _spec(m).inputs == "features" else (NO_BACKBONE,))}


def _method_reasons(dataset: str, runs: pd.DataFrame) -> list[str]:
    need = required_methods(dataset)
    models = sorted({m for m, _ in need})
    have = set(zip(runs["model"], runs["backbone"]))
    present = sorted({m for m, _ in have & need})
    out = []
    if len(present) < len(models):
        missing = ", ".join(label("model", m) for m in models if m not in present)
        out.append(f"{len(present)} of {len(models)} methods (missing: {missing})")
    lacking = Counter(b for m, b in need - have if m in present)
    for backbone, n in sorted(lacking.items()):
        out.append(f"{len(BACKBONES) - 1} of {len(BACKBONES)} backbones ({backbone} missing for {n} "
                   f"method{'s' * (n != 1)})")
    return out


def cell_reasons(dataset: str, published: bool, runs: pd.DataFrame, configs: dict) -> list[str]:
    """Every reason one dataset × ordering × protocol of ours is not comparable (empty: it is)."""
    out = []
    if dataset == "synthetic":
        out.append("synthetic data")
    elif not published:
        out.append("no published cell")
    if not len(runs):  # e.g. a result set with CL runs only: its NCL cells
        return out + ["no runs"]
    out += _run_reason_text([configs[k] for k in runs["run_key"]])
    if dataset != "synthetic" and published:
        out += _method_reasons(dataset, runs)
    return out


# ------------------------------------------------------------------ Table 2 beside the paper's

def _configs(runs: pd.DataFrame, details: dict) -> dict:
    return {k: (RunConfig.from_json(details[k]["attrs"]["config"]), str(details[k]["attrs"]["weights_id"]))
            for k in runs["run_key"]}


def _paper_runs(runs: pd.DataFrame) -> pd.DataFrame:
    """The runs of the methods a published cell pools (the nine; MultiDataset: three)."""
    keep = [m in (PAPER_MULTI_MODELS if d == MULTI else INCLAD_MODELS) for d, m in zip(runs["dataset"], runs["model"])]
    return runs[np.array(keep, dtype=bool)] if len(runs) else runs


def _in_band(ours: float, mean: float, std: float):
    if not np.isfinite(ours):
        return ""
    return "yes" if round(mean - std, 3) <= round(ours, 3) <= round(mean + std, 3) else "no"


def comparison(runs: pd.DataFrame, details: dict) -> pd.DataFrame:
    """One row per dataset × ordering of ours × metric (ROC-AUC_CL, BWT) × level × protocol; see the module doc.
    `runs`: complete image runs (`collect`), `details`: their files by run key."""
    runs = _paper_runs(runs)
    columns = ["dataset", "ordering", "metric", "level", "protocol", "ours", "ours_released", "n_methods", "n_runs",
               "published_mean", "published_std", "difference", "difference_released", "in_band",
               "in_band_released", "comparable", "reason"]
    if not len(runs):
        return pd.DataFrame(columns=columns)
    configs = _configs(runs, details)
    ours = table2(runs, list(PAPER_MULTI_MODELS))
    published = {tuple(r[k] for k in ("dataset", "ordering", "metric", "level", "protocol")): r
                 for r in published_table2().to_dict("records")}
    released = {tuple(r[k] for k in ("dataset", "ordering", "level", "protocol")): r["mean"]
                for r in ours[ours["metric"] == "bwt_released"].to_dict("records")}
    reasons = {}
    rows = []
    for r in ours[ours["metric"].isin(METRICS)].to_dict("records"):
        key = (r["dataset"], r["ordering"], r["metric"], r["level"], r["protocol"])
        pub = published.get(key)
        group = (r["dataset"], r["ordering"], r["protocol"])
        if group not in reasons:
            sub = runs[(runs["dataset"] == group[0]) & (runs["ordering"] == group[1]) & (runs["protocol"] == group[2])]
            reasons[group] = cell_reasons(group[0], (group[0], group[1], "roc_auc_cl", "image", group[2]) in published,
                                          sub, configs)
        why = list(reasons[group]) + ([f"{r['n_nan']} run(s) with an undefined value"] if r["n_nan"] else [])
        rel = released[(r["dataset"], r["ordering"], r["level"], r["protocol"])] if r["metric"] == "bwt" else np.nan
        row = {"dataset": r["dataset"], "ordering": r["ordering"], "metric": r["metric"], "level": r["level"],
               "protocol": r["protocol"], "ours": r["mean"], "ours_released": rel, "n_methods": r["n_methods"],
               "n_runs": r["n_runs"], "published_mean": pub["mean"] if pub else np.nan,
               "published_std": pub["std"] if pub else np.nan, "difference": np.nan, "difference_released": np.nan,
               "in_band": "", "in_band_released": "", "comparable": not why, "reason": "; ".join(why)}
        if pub and not why:
            row.update(difference=r["mean"] - pub["mean"], in_band=_in_band(r["mean"], pub["mean"], pub["std"]))
            if r["metric"] == "bwt":
                row.update(difference_released=rel - pub["mean"],
                           in_band_released=_in_band(rel, pub["mean"], pub["std"]))
        rows.append(row)
    return pd.DataFrame(rows, columns=columns)


# ------------------------------------------------------------------ timings beside Tables 4-5

def _hardware(runs: pd.DataFrame) -> str:
    devices = sorted({str(d) or "not recorded" for d in runs["device"]})
    hosts = runs["host"].nunique()
    return f"{', '.join(devices)} ({hosts} host{'s' * (hosts != 1)})"


def timing_comparison(runs: pd.DataFrame, details: dict) -> pd.DataFrame:
    """One row per published timing cell that has runs of ours (dataset × model × backbone × weights × phase ×
    protocol): our mean seconds, the published, ours / published, both machines, and why not comparable."""
    columns = ["dataset", "model", "backbone", "weights", "phase", "protocol", "ours_s", "n_orderings",
               "published", "published_s", "ratio", "our_hardware", "comparable", "reason"]
    pub = published_timing()
    keys = ["dataset", "model", "backbone", "phase", "protocol"]
    published = {tuple(r[k] for k in keys): r for r in pub.to_dict("records")}
    rows = []
    configs = _configs(runs, details) if len(runs) else {}
    for r in (timing_table(runs).to_dict("records") if len(runs) else []):
        p = published.get(tuple(r[k] for k in keys))
        if p is None:
            continue
        sub = runs[(runs["dataset"] == r["dataset"]) & (runs["model"] == r["model"])
                   & (runs["backbone"] == r["backbone"]) & (runs["weights"] == r["weights"])
                   & (runs["protocol"] == r["protocol"])]
        why = _run_reason_text([configs[k] for k in sub["run_key"]])
        rows.append({**{k: r[k] for k in ("dataset", "model", "backbone", "weights", "phase", "protocol")},
                     "ours_s": r["mean_s"], "n_orderings": r["n_orderings"], "published": p["published"],
                     "published_s": p["mean_s"], "ratio": r["mean_s"] / p["mean_s"], "our_hardware": _hardware(sub),
                     "comparable": not why, "reason": "; ".join(why)})
    return sort_frame(pd.DataFrame(rows, columns=columns), ["dataset", "model"]) if rows else pd.DataFrame(
        columns=columns)


# ------------------------------------------------------------------ rendering

def _num(value: float, signed: bool = False) -> str:
    return "–" if not np.isfinite(value) else (f"{value:+.3f}" if signed else f"{value:.3f}")


def footnotes(frame: pd.DataFrame) -> dict[str, int]:
    """Each distinct reason of the not-comparable rows, numbered in table order."""
    out: dict[str, int] = {}
    for reason in frame.loc[~frame["comparable"].astype(bool), "reason"]:
        out.setdefault(reason, len(out) + 1)
    return out


def summary_lines(frame: pd.DataFrame) -> list[str]:
    """How many cells were compared and fell in the published band; then every not-comparable reason."""
    compared = frame[frame["comparable"].astype(bool)]
    inside = int((compared["in_band"] == "yes").sum())
    lines = [f"{len(compared)} of {len(frame)} cells compared with {PAPER} Table 2; {inside} of them inside the "
             f"published band (mean ± std)."]
    return lines + [f"[{n}] not comparable: {reason}" for reason, n in footnotes(frame).items()]


def to_markdown(frame: pd.DataFrame, timing: pd.DataFrame, footer: list[str] | None = None) -> str:
    notes = footnotes(frame)
    rows = []
    for r in frame.to_dict("records"):
        bwt = r["metric"] == "bwt"
        if r["comparable"]:
            status = r["in_band"] + (f" / {r['in_band_released']}" if bwt else "")
        else:
            status = f"not comparable [{notes[r['reason']]}]"
        pub = "–" if not np.isfinite(r["published_mean"]) else f"{r['published_mean']:.3f} ± {r['published_std']:.3f}"
        diff = _num(r["difference"], True) + (f" / {_num(r['difference_released'], True)}" if bwt else "")
        rows.append([label("dataset", r["dataset"]), label("ordering", r["ordering"]),
                     "ROC-AUC_CL" if r["metric"] == "roc_auc_cl" else "BWT", r["level"], r["protocol"].upper(),
                     _num(r["ours"]), _num(r["ours_released"]) if bwt else "", pub, diff, status])
    header = ["Dataset", "Ordering", "Metric", "Level", "Protocol", "Ours", "Ours, BWT (as released)", "Published",
              "Ours − published", "In band"]
    lines = ["## Our Table 2 beside InCLAD's", "", *summary_lines(frame)[:1], ""] + markdown_table(header, rows) + [
        "", "Ours: the Table 2 aggregation (mean across methods, a method's seeds averaged first) over the paper's "
            "methods only (the nine; MultiDataset: CFA, PaSTe, PaDiM). Published: InCLAD Table 2 "
            "(data/paper/inclad_table2.csv), mean ± std across methods. In band: ours, rounded to three decimals, "
            "within mean ± std; BWT rows give Eq. 2 / as released (the released code's average, which produced the "
            "published BWT). A cell is compared only with ImageNet weights, the inclad preset, the paper's image "
            "sizes and hyperparameters, a real dataset, and every method on both backbones.", ""]
    lines += [f"[{n}] not comparable: {reason}" for reason, n in notes.items()]
    lines += ["", "## Execution times beside InCLAD Tables 4-5", ""]
    if len(timing):
        trows = [[label("dataset", r["dataset"]), label("model", r["model"]), r["backbone"], r["weights"],
                  r["phase"], "Naive" if r["protocol"] == "ncl" else "Continual", format_duration(r["ours_s"]),
                  r["published"], f"{r['ratio']:.2f}", r["our_hardware"],
                  "yes" if r["comparable"] else f"no: {r['reason']}"] for r in timing.to_dict("records")]
        lines += markdown_table(["Dataset", "Model", "Backbone", "Weights", "Phase", "Protocol", "Ours (mean)",
                                 "Published", "Ours / published", "Our hardware", "Comparable"], trows)
    else:
        lines.append("No run here has a published time (Table 4: WideResNet-50-2 detectors, Table 5: GANomaly and "
                     "EfficientAD, on MVTec, VisA, BTAD, MPDD, DAGM).")
    lines += ["", f"Published hardware: {PAPER_HARDWARE}. Both pipelines time different work (docs/reports.md): a "
                  "ratio is a scale, not a check. Values: paper_timing.csv."]
    return "\n".join(lines + [""] + (footer or [])) + "\n"
