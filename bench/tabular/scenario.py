"""The whole CAD framework chain for one dataset: candidates → STE matrices → FC1–FC5 → six orderings per model
→ Kendall's W per candidate and family → the selected candidate → Borda consensus → release.

Layout under `out`: candidates/<candidate>/index/ (record index), candidates/<candidate>/ste/<model>.h5 (STE
runs, ordinary run files), and release/ with data.csv (task_id, task, split, label, record_id), orderings.json
(the six consensus orderings, task names) and manifest.json (settings, filtering passes of every candidate, W per
candidate × family, Borda sums, per-model orderings, STE matrices with their run keys, SHA-256 of every input
file), plus report.md and figures/ (STE heatmaps, filtering and W tables, consensus orderings; report.py).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd

from bench.errors import ConfigError
from bench.io import write_text_atomic
from bench.tabular import cic
from bench.tabular.detectors import CONSTRUCTION_MODELS
from bench.tabular.discovery import DiscoverySettings, discover
from bench.tabular.filtering import FilterSettings, iterative_filter, removals
from bench.tabular.orderings import FAMILIES, ORDERINGS, concordance, model_orderings, select_candidate
from bench.tabular.preprocess import PrepSettings, build_index, load_index
from bench.tabular.ste import read_matrix, ste_run

MODELS = CONSTRUCTION_MODELS  # phase 1 of the paper


def multi_table(roots: dict[str, Path | None], seed: int = 0) -> cic.RawTable:
    """Several datasets as one table (multi-dataset scenarios). Adds the metadata columns `dataset` (natural split
    `natural:dataset`: each dataset one task) and `dataset_day` (`natural:dataset_day`: each dataset decomposed by
    capture day); clustering candidates decompose the union, or each dataset on its own (`within="dataset"`)."""
    if len(roots) < 2:
        raise ConfigError(f"a multi-dataset scenario needs at least two datasets (got {', '.join(roots) or 'none'})")
    frames, files, counts, reading = [], [], {}, {}
    for name, root in roots.items():
        t = raw_table(name, root, seed)
        f = t.frame
        frames.append(f.assign(dataset=name, dataset_day=name + "/" + f["day"].astype(str),
                               source=name + "/" + f["source"]))
        files += t.files
        counts[name] = t.counts
        if t.reading:
            reading[name] = t.reading
    return cic.RawTable(pd.concat(frames, ignore_index=True), files, {"per_dataset": counts}, reading)


def raw_table(dataset: str, root: Path | None, seed: int = 0) -> cic.RawTable:
    if dataset == "synthetic":
        from bench.tabular.synthetic import SYNTHETIC_ROOT, generate

        root = Path(root or SYNTHETIC_ROOT)
        if not (root / "synthetic.json").is_file():
            generate(root, seed=seed)
        return cic.read_cicids2017(root)
    if root is None:
        raise ConfigError(f"--root is required for {dataset} (the folder holding its CSV files)")
    return cic.read(dataset, root)


def evaluate_candidate(name: str, index_dir: Path, ste_dir: Path, models, seed: int, hparams: dict,
                       fs: FilterSettings, log=print) -> dict:
    matrices, run_keys, tasks = [], {}, None
    for model in models:
        # the construction models run the framework preset's values (bench tabular scenarios --framework-preset),
        # and their files record that preset's name, not the model's default
        path = ste_run(index_dir, model, ste_dir / f"{model}.h5", seed=seed, hparams=hparams.get(model),
                       preset=fs.preset, log=log)
        t, M, attrs = read_matrix(path)
        if tasks is not None and t != tasks:
            raise ConfigError(f"{path}: tasks {t} differ from the other models' {tasks}")
        tasks = t
        matrices.append(M)
        run_keys[model] = attrs["run_key"]
    M = np.stack(matrices)
    filt = iterative_filter(M, tasks, fs)
    keep = filt["kept_index"]
    per_model = {m: model_orderings(M[f][np.ix_(keep, keep)], mode=fs.orderings) for f, m in enumerate(models)}
    conc = concordance(per_model, fs.orderings) if len(keep) >= 2 else None
    kept = filt["kept"]
    return {
        "candidate": name, "tasks": tasks, "kept": kept, "removed": filt["removed"], "passes": filt["passes"],
        "ste": {m: M[f].tolist() for f, m in enumerate(models)}, "ste_run_keys": run_keys,
        "family_w": conc["family_w"] if conc else {f: None for f in FAMILIES},
        "w": conc["w"] if conc else {o: None for o in ORDERINGS},
        "mean_w": conc["mean_w"] if conc else None,
        "model_orderings": {m: {o: [kept[i] for i in per_model[m][o]] for o in ORDERINGS} for m in models},
        "oriented_drift": ({o: {m: [kept[i] for i in p] for m, p in conc["oriented"][o].items()}
                            for o in conc["oriented"]} if conc else {}),
        "consensus": {o: [kept[i] for i in conc["consensus"][o]] for o in ORDERINGS} if conc else {},
        "borda_points": {o: dict(zip(kept, conc["borda_points"][o])) for o in ORDERINGS} if conc else {},
    }


def construct(dataset: str, out: Path, *, root: Path | None = None, candidates: list[DiscoverySettings] | None = None,
              models=MODELS, seed: int = 0, hparams: dict | None = None, prep: PrepSettings = PrepSettings(),
              fs: FilterSettings = FilterSettings(), roots: dict | None = None, log=print) -> dict:
    """Run the chain; returns the manifest (also written to out/release/manifest.json). `dataset="multi"` takes
    `roots` ({dataset: root}) instead of `root`."""
    out = Path(out)
    raw = multi_table(roots or {}, seed) if dataset == "multi" else raw_table(dataset, root, seed)
    candidates = candidates or [DiscoverySettings()]
    names = [c.name for c in candidates]
    if len(set(names)) != len(names):
        raise ConfigError(f"candidate splits must differ (got {names})")
    if len(models) < 2 and len(candidates) > 1:
        raise ConfigError(f"models {', '.join(models)}: choosing between {len(candidates)} candidate splits needs "
                          f"Kendall's W across at least two models; give two or more --models, or one candidate")
    results, index_meta = {}, {}
    for cand in candidates:  # every candidate's tasks are checked before any model runs
        meta = build_index(dataset, raw, lambda df, c=cand: discover(df, c), prep,
                           out / "candidates" / cand.name / "index", cand.to_dict())
        check_enough_tasks(cand, meta)
        index_meta[cand.name] = meta
        log(f"candidate {cand.name}: {len(meta['tasks'])} tasks ({', '.join(meta['tasks'])})")
    if len(models) < 2:
        log(f"note: one model ({models[0]}): Kendall's W is undefined; the orderings are {models[0]}'s own")
    for cand in candidates:
        cdir = out / "candidates" / cand.name
        results[cand.name] = evaluate_candidate(cand.name, cdir / "index", cdir / "ste", models, seed,
                                                hparams or {}, fs, log)
        r = results[cand.name]
        # the record of every pass, written before select_candidate can refuse the candidates
        write_text_atomic(cdir / "filtering.json", json.dumps(_finite(
            {"kept": r["kept"], "removed": r["removed"], "passes": r["passes"]}), indent=1) + "\n")
        mean_w = "undefined" if r["mean_w"] is None or not np.isfinite(r["mean_w"]) else f"{r['mean_w']:.3f}"
        log(f"candidate {cand.name}: kept {_tasks(r['kept'])}; {'; '.join(removals(r['passes'])) or 'none removed'}"
            f"; mean W {mean_w} (record: {cdir / 'filtering.json'})")
    mean_w = {c: (r["mean_w"] if r["mean_w"] is not None else float("nan")) for c, r in results.items()}
    chosen = select_candidate(mean_w, {c: len(r["kept"]) for c, r in results.items()})
    manifest = release(out / "release", dataset, chosen, results, index_meta, out / "candidates" / chosen / "index",
                       {"seed": seed, "models": list(models), "hparams": hparams or {}, "filter": fs.to_dict(),
                        "preprocessing": prep.to_dict(), "candidates": [c.to_dict() for c in candidates]})
    from bench.tabular.report import write_report

    report = write_report(manifest, out / "release")
    log(f"selected {chosen}: {results[chosen]['kept']}; orderings in {out / 'release' / 'orderings.json'}, "
        f"report {report}")
    return manifest


def _tasks(names: list[str]) -> str:
    """'1 task (a)', '3 tasks (a, b, c)', '0 tasks'."""
    listed = f" ({', '.join(names)})" if names else ""
    return f"{len(names)} task{'' if len(names) == 1 else 's'}{listed}"


def check_enough_tasks(cand: DiscoverySettings, meta: dict) -> None:
    """Refuse, before any model runs, a candidate split that leaves fewer than two tasks: no ordering, no W."""
    kept = meta["tasks"]
    if len(kept) >= 2:
        return
    dropped = meta["task_discovery"].get("dropped", {})
    why = (f"dropped below --min-normal {cand.min_normal} / --min-anomalous {max(cand.min_anomalous, 1)}: "
           + ", ".join(f"{t} ({d['normal']} normal, {d['anomalous']} anomalous)" for t, d in dropped.items())
           if dropped else "the records hold no other task")
    raise ConfigError(f"candidate {cand.name}: kept {len(kept)} task{'' if len(kept) == 1 else 's'} "
                      f"({', '.join(kept) or 'none'}; {why}); a scenario needs at least two: lower the minimum "
                      f"sizes or use another candidate, e.g. --candidates kmeans:nearest:3")


def release(folder: Path, dataset: str, chosen: str, results: dict, index_meta: dict, index_dir: Path,
            settings: dict) -> dict:
    r = results[chosen]
    index, _, meta = load_index(index_dir)
    kept = r["kept"]
    rows = index[index["task"].isin(kept)]
    task_id = {t: i for i, t in enumerate(kept)}
    data = pd.DataFrame({"task_id": rows["task"].map(task_id), "task": rows["task"], "split": rows["split"],
                         "label": rows["label"], "record_id": rows["record_id"]})
    orderings = {o: r["consensus"][o] for o in ORDERINGS}
    manifest = {
        "dataset": dataset, "selected_candidate": chosen, "tasks": kept, "settings": settings,
        "files_sha256": meta["files_sha256"], "index_sha256": meta["index_sha256"],
        "preprocessing_counts": meta["counts"], "task_sizes": {t: meta["tasks"][t] for t in kept},
        "w_table": {c: {**x["family_w"], "mean": x["mean_w"]} for c, x in results.items()},
        "candidates": results,
        "task_discovery": {c: m["task_discovery"] for c, m in index_meta.items()},
        "orderings": orderings,
    }
    folder.mkdir(parents=True, exist_ok=True)
    write_text_atomic(folder / "data.csv", data.to_csv(index=False))
    write_text_atomic(folder / "orderings.json", json.dumps(orderings, indent=1) + "\n")
    manifest = _finite(manifest)
    write_text_atomic(folder / "manifest.json", json.dumps(manifest, indent=1, allow_nan=False) + "\n")
    return manifest


def _finite(x):
    """JSON-safe copy: numpy scalars/arrays as Python values, NaN/inf (an undefined W) as null."""
    if isinstance(x, dict):
        return {str(k): _finite(v) for k, v in x.items()}
    if isinstance(x, (list, tuple, np.ndarray)):
        return [_finite(v) for v in x]
    if isinstance(x, np.generic):
        x = x.item()
    if isinstance(x, float) and not np.isfinite(x):
        return None
    return x
