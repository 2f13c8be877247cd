"""Routing of task-bank methods (InCLAD App. C): how often a test image is scored by its own task's bank.

Only runs whose file holds `routing/own_fraction` count (task-bank protocols). Per dataset × method × ordering ×
routing rule, seeds averaged: the overall routing accuracy (all evaluations of the run), the mean own-bank share
after the last step, and the worst-routed task then. The rule is the run's `route_by` hyperparameter (from its
config): PaDiM-CL and CFA-CL route by the image score by default ("max", InCLAD App. C.2/C.3) and by the mean
patch score on request; PatchCore-CL always by the mean patch distance (App. C.1). Runs of both rules give one
row each, side by side.
"""

from __future__ import annotations

import json

import numpy as np
import pandas as pd

from bench.report import specs
from bench.report.render import METHOD, label, markdown_table, sort_frame


def routing_table(runs: pd.DataFrame, details: dict) -> pd.DataFrame:
    if "routing_accuracy" not in runs:
        return pd.DataFrame()
    routed = runs[runs["routing_accuracy"].notna()]
    routed = routed.assign(route_by=[route_rule(details[k]) for k in routed["run_key"]])
    rows = []
    keys = ["dataset", *METHOD, "ordering", "protocol", "route_by"]
    for key, g in routed.groupby(keys, sort=True):
        finals = np.stack([details[k]["routing/own_fraction"][-1] for k in g["run_key"]])
        final = np.nanmean(finals, axis=0)  # per task, over seeds
        worst = int(np.nanargmin(final))
        tasks = details[g["run_key"].iloc[0]]["tasks"]
        rows.append({**dict(zip(keys, key)), "routing_accuracy": float(g["routing_accuracy"].mean()),
                     "final_own_share": float(np.nanmean(final)), "worst_task": tasks[worst],
                     "worst_task_own_share": float(final[worst]), "n_runs": int(len(g))})
    return sort_frame(pd.DataFrame(rows), ["dataset", "model", "backbone", "weights", "ordering", "route_by"]) \
        if rows else pd.DataFrame()


def route_rule(run: dict) -> str:
    """The image-level aggregate a run routed by: its `route_by` hyperparameter, else the mean (PatchCore-CL's
    fixed rule, and PaDiM's and CFA's before route_by existed)."""
    return json.loads(run["attrs"]["config"]).get("hparams", {}).get("route_by", "mean")


RULE_LABELS = {"max": "image score (max)", "mean": "mean patch score"}


# the columns routing.md places; any other column specs.ROUTING declares is shown after them
PLACED = ("dataset", "model", "backbone", "weights", "ordering", "protocol", "route_by", "routing_accuracy",
          "final_own_share", "worst_task", "worst_task_own_share", "n_runs")


def routing_markdown(long: pd.DataFrame, footer: list[str] | None = None) -> str:
    spec = specs.ROUTING  # the worst task's share is shown beside its name, under one header
    rest = spec.unplaced(PLACED)
    rows = [[label("dataset", r["dataset"]), label("model", r["model"]), r["backbone"], r["weights"],
             label("ordering", r["ordering"]), r["protocol"].upper(), RULE_LABELS.get(r["route_by"], r["route_by"]),
             f"{r['routing_accuracy']:.3f}",
             f"{r['final_own_share']:.3f}", f"{r['worst_task']} ({r['worst_task_own_share']:.3f})", str(r["n_runs"]),
             *(specs.cell_text(c, r[c.name]) for c in rest)] for r in long.to_dict("records")]
    header = [*(spec.label(n) for n in PLACED if n != "worst_task_own_share"), *(c.label for c in rest)]
    lines = [f"## {spec.title}", ""] + markdown_table(header, rows) + [
        "", "Routing accuracy: share of all test images, over every evaluation of the run, scored by their own "
            "task's bank. Own-bank share: mean over tasks after the last step. Seeds averaged. Routed by: the "
            "image-level aggregate whose lowest value picks the bank (image score = map max, InCLAD App. C.2/C.3; "
            "mean patch score, App. C.1); a method run under both rules has a row for each."]
    return "\n".join(lines + [""] + (footer or [])) + "\n"
