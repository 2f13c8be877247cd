"""The tabular track's scenario constructions, as the report shows them (bench/tabular/scenario.py writes them).

A construction folder (`bench tabular scenarios --out`, default outputs/<dataset>/tabular) holds
candidates/<candidate>/filtering.json (kept, removed and every FC1–FC5 pass; written before the candidates are
compared, so it is there even when the selection refused them) and, once a candidate was selected,
release/manifest.json (W per candidate × family, per-model orderings, Borda consensus and points, STE matrices).
The report finds the folders its tabular runs were made from (a run's recorded root is
<folder>/candidates/<candidate>/index) and the dataset's default folder, and turns them into five long tables:
tasks (kept / removed, in which pass, by which criteria), filtering (every pass's statistics), W, orderings and
STE matrices. A folder with filtering records and no release is shown as stopped after filtering.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd

from bench.errors import ProvenanceError
from bench.report import specs
from bench.tabular.filtering import CRITERIA
from bench.tabular.orderings import FAMILIES, ORDERINGS

FILTERING = "filtering.json"
MANIFEST = Path("release") / "manifest.json"
PASS_STATS = ("best_self", "gain", "incoming", "outgoing", "source_min_diff", "target_min_diff")


def _scenario_root(root: str, outputs: Path) -> Path | None:
    """The construction folder of a run's recorded root (an index folder under candidates/), or None."""
    for p in (Path(root), Path(outputs).parent / root):
        if p.parent.name and p.parent.parent.name == "candidates" and (p.parent.parent.parent).is_dir():
            return p.parent.parent.parent.resolve()
    return None


def folders(outputs: Path, dataset: str, runs: pd.DataFrame, details: dict) -> list[Path]:
    """Every construction folder behind this result set: the dataset's default (every dataset's for "all") and
    those the tabular runs name, in a stable order; only folders holding a filtering record or a release."""
    outputs = Path(outputs)
    found = set(outputs.glob("*/tabular")) if dataset == "all" else {outputs / dataset / "tabular"}
    found = {p.resolve() for p in found}
    tab = runs[runs["track"] == "tabular"] if len(runs) else runs
    for key in (tab["run_key"] if len(tab) else []):
        try:
            root = json.loads(details[key]["attrs"]["config"]).get("root")
        except (KeyError, TypeError, ValueError):
            continue
        if isinstance(root, str) and (folder := _scenario_root(root, outputs)) is not None:
            found.add(folder)
    return sorted(p for p in found if (p / MANIFEST).is_file() or any((p / "candidates").glob(f"*/{FILTERING}")))


def _json(path: Path, what: str) -> dict:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError) as e:
        raise ProvenanceError(f"{path}: not a readable {what} ({type(e).__name__}: {e})"[:300]) from None
    if not isinstance(data, dict):
        raise ProvenanceError(f"{path}: expected a JSON object ({what}), got {type(data).__name__}")
    return data


def read(folder: Path) -> dict:
    """{"folder", "manifest" (None before a release), "candidates": {name: filtering record}}; a candidate of the
    release without a filtering.json takes its passes from the manifest."""
    folder = Path(folder)
    manifest = _json(folder / MANIFEST, "scenario release manifest") if (folder / MANIFEST).is_file() else None
    cands = {p.parent.name: _json(p, "filtering record (kept, removed, passes)")
             for p in sorted((folder / "candidates").glob(f"*/{FILTERING}"))}
    for name, c in ((manifest or {}).get("candidates") or {}).items():
        cands[name] = {**cands.get(name, {}), **c}  # the release's record is the fuller one (W, orderings, STE)
    for name, c in cands.items():
        if not isinstance(c.get("passes"), list) or not isinstance(c.get("kept"), list):
            raise ProvenanceError(f"{folder / 'candidates' / name / FILTERING}: expected lists 'kept' and 'passes'")
    return {"folder": folder, "manifest": manifest, "candidates": cands}


def _name(folder: Path, outputs: Path) -> str:
    try:
        return Path(folder).relative_to(Path(outputs).resolve().parent).as_posix()
    except ValueError:
        return Path(folder).as_posix()


def _flagged_by(p: dict, k: int) -> str:
    """The criteria that flag task k in pass p, with a count above 1 (flags per redundant partner) as ×n."""
    out = []
    for c in CRITERIA:
        v = (p.get(c) or [0] * (k + 1))[k]
        if v:
            out.append(c.upper() + (f"×{int(v)}" if not isinstance(v, bool) and int(v) > 1 else ""))
    return ", ".join(out)


def _value(v):
    return np.nan if v is None else v


def frames(constructions: list[dict], outputs: Path) -> dict[str, pd.DataFrame]:
    """The report's construction tables: {csv name: frame}."""
    tasks, passes, w, orders, ste = [], [], [], [], []
    for con in constructions:
        folder, manifest = _name(con["folder"], outputs), con["manifest"]
        chosen = (manifest or {}).get("selected_candidate", "")
        for cand, rec in con["candidates"].items():
            base = {"construction": folder, "candidate": cand, "selected": cand == chosen}
            removed_in = {}
            for n, p in enumerate(rec["passes"], 1):
                for k, task in enumerate(p.get("tasks", [])):
                    passes.append({**base, "pass": n, "task": task,
                                   **{c: int(_value((p.get(c) or [0] * (k + 1))[k]) or 0) for c in CRITERIA},
                                   "flags": int(p["flags"][k]),
                                   **{s: _value(p[s][k]) if s in p else np.nan for s in PASS_STATS},
                                   "removed": p.get("removed") == task})
                    if p.get("removed") == task:
                        removed_in[task] = (n, _flagged_by(p, k))
            listed = rec.get("tasks") or (rec["passes"][0]["tasks"] if rec["passes"] else rec["kept"])
            for task in listed:
                n, by = removed_in.get(task, (None, ""))
                tasks.append({**base, "task": task, "status": "kept" if task in rec["kept"] else "removed",
                              "removed_in_pass": n if n is not None else np.nan, "removed_by": by})
            if manifest is None:
                continue
            row = (manifest.get("w_table") or {}).get(cand, {})
            w.append({**base, "tasks_kept": len(rec["kept"]),
                      **{f"w_{f}": _value(row.get(f)) for f in FAMILIES}, "w_mean": _value(row.get("mean"))})
            for model, M in (rec.get("ste") or {}).items():
                M = np.asarray(M, dtype=float)
                for i in range(len(M)):
                    for j in range(len(M)):
                        ste.append({**base, "model": model, "i": i, "j": j, "expert": rec["tasks"][i],
                                    "evaluated": rec["tasks"][j], "roc_auc": M[i, j]})
            for o in ORDERINGS:
                per_w = _value((rec.get("w") or {}).get(o))
                if rec.get("consensus", {}).get(o):
                    points = rec.get("borda_points", {}).get(o, {})
                    orders.append({**base, "ordering": o, "source": "consensus (Borda)", "w": per_w,
                                   "order": " → ".join(rec["consensus"][o]),
                                   "borda_points": " ".join(f"{t}:{points.get(t, float('nan')):g}"
                                                            for t in rec["consensus"][o])})
                for model, by_o in (rec.get("model_orderings") or {}).items():
                    orders.append({**base, "ordering": o, "source": model, "w": per_w,
                                   "order": " → ".join(by_o.get(o, [])), "borda_points": ""})
    data = {specs.SCENARIO_TASKS: tasks, specs.SCENARIO_FILTERING: passes, specs.SCENARIO_W: w,
            specs.SCENARIO_ORDERINGS: orders, specs.SCENARIO_STE: ste}
    out = {f"{spec.name}.csv": spec.frame(pd.DataFrame(rows, columns=[c.name for c in spec.columns]))
           for spec, rows in data.items()}
    out["scenario_tasks.csv"]["removed_in_pass"] = out["scenario_tasks.csv"]["removed_in_pass"].astype("Int64")
    return out
