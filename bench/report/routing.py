"""Routing of task-bank methods (InCLAD App. C): how often a test image is scored by its own task's bank.

Only runs whose file holds `routing/own_fraction` count (task-bank protocols). Per dataset × method × ordering,
seeds averaged: the overall routing accuracy (all evaluations of the run), the mean own-bank share after the
last step, and the worst-routed task then.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from bench.report.render import METHOD, label, markdown_table, sort_frame


def routing_table(runs: pd.DataFrame, details: dict) -> pd.DataFrame:
    if "routing_accuracy" not in runs:
        return pd.DataFrame()
    routed = runs[runs["routing_accuracy"].notna()]
    rows = []
    keys = ["dataset", *METHOD, "ordering", "protocol"]
    for key, g in routed.groupby(keys, sort=True):
        finals = np.stack([details[k]["routing/own_fraction"][-1] for k in g["run_key"]])
        final = np.nanmean(finals, axis=0)  # per task, over seeds
        worst = int(np.nanargmin(final))
        tasks = details[g["run_key"].iloc[0]]["tasks"]
        rows.append({**dict(zip(keys, key)), "routing_accuracy": float(g["routing_accuracy"].mean()),
                     "final_own_share": float(np.nanmean(final)), "worst_task": tasks[worst],
                     "worst_task_own_share": float(final[worst]), "n_runs": int(len(g))})
    return sort_frame(pd.DataFrame(rows), ["dataset", "model", "backbone", "weights", "ordering"]) if rows \
        else pd.DataFrame()


def routing_markdown(long: pd.DataFrame, footer: list[str] | None = None) -> str:
    rows = [[label("dataset", r["dataset"]), label("model", r["model"]), r["backbone"], r["weights"],
             label("ordering", r["ordering"]), r["protocol"].upper(), f"{r['routing_accuracy']:.3f}",
             f"{r['final_own_share']:.3f}", f"{r['worst_task']} ({r['worst_task_own_share']:.3f})", str(r["n_runs"])]
            for r in long.to_dict("records")]
    header = ["Dataset", "Model", "Backbone", "Weights", "Ordering", "Protocol", "Routing accuracy",
              "Own-bank share, last step", "Worst task, last step", "Runs"]
    lines = ["## Task-bank routing", ""] + markdown_table(header, rows) + [
        "", "Routing accuracy: share of all test images, over every evaluation of the run, scored by their own "
            "task's bank. Own-bank share: mean over tasks after the last step. Seeds averaged."]
    return "\n".join(lines + [""] + (footer or [])) + "\n"
