"""The multi-dataset stream (InCLAD §3 "Multi-Dataset Scenarios").

Per dataset, concepts are sorted hardest first by the selection criterion (default: average ROC-AUC ascending,
ties by name; `rank`: the dataset's hard-to-easy ordering). A dataset with more than six concepts keeps six:
positions 0, 1 (the two hardest), n-2, n-1 (the two easiest) and floor(n/2)-1, floor(n/2) (0-based): the two
middle concepts when n is even, the median concept and its next-harder neighbour when n is odd. Smaller datasets
keep every concept. The retained tasks, named `<dataset>/<concept>`, are then sorted by average ROC-AUC
(ties by name) into hard_to_easy; easy_to_hard is its exact reverse.

The shipped data/scenarios/multi.json carries two streams: the released InCLAD-MD stream as `easy_to_hard` /
`hard_to_easy` (what InCLAD's Table 2 MultiDataset rows ran; transcribed in data/paper/inclad_streams.csv, not
derivable by this rule: see RELEASED) and the stream of this rule as `<criterion>_easy_to_hard` /
`<criterion>_hard_to_easy` (e.g. `roc_auc_easy_to_hard`), the named alternative.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from bench.errors import ConfigError

if TYPE_CHECKING:
    import pandas as pd

MAX_PER_DATASET = 6
CRITERIA = ("roc_auc", "rank")
RULE = ("per dataset with more than six concepts: the two hardest, the two easiest and the two median-difficulty "
        "concepts (0-based positions floor(n/2)-1 and floor(n/2) of the hardest-first list); smaller datasets: "
        "all; orderings by average ROC-AUC, ties by name")


# Where the released InCLAD-MD stream comes from and how it is built (not by the rule above: docs/scenarios.md)
RELEASED = ("InCLAD-benchmark docs/inclad-md-dataset.md (LukaszMarcjan/InCLAD-benchmark@7901579): per dataset the 2 "
            "easiest, 2 median and 2 hardest concepts by single-task-expert rank, BTAD all 3; dataset blocks BTAD, "
            "MPDD, DAGM, VisA, MVTec AD, easiest first inside each block; hard_to_easy is the exact reverse")


def select(difficulty: pd.DataFrame, criterion: str = "roc_auc") -> pd.DataFrame:
    """`difficulty`: one row per concept with dataset, concept, avg_roc_auc, hard_position (0 = the dataset's
    hardest in its hard-to-easy ordering). Returns the retained rows, hardest first across datasets, with a
    `task` (`<dataset>/<concept>`) and a `role` column (hardest | median | easiest | all)."""
    if criterion not in CRITERIA:
        raise ConfigError(f"unknown selection criterion {criterion!r} (valid: {', '.join(CRITERIA)})")
    if difficulty.duplicated(["dataset", "concept"]).any():
        raise ConfigError("a concept appears twice in the difficulty table")
    import pandas as pd  # here, not at the top: the scenarios parser reads CRITERIA on every `python -m bench`

    kept = []
    for dataset, g in difficulty.groupby("dataset", sort=True):
        key = ["avg_roc_auc", "concept"] if criterion == "roc_auc" else ["hard_position", "concept"]
        g = g.sort_values(key, kind="stable").reset_index(drop=True)
        n = len(g)
        if n <= MAX_PER_DATASET:
            roles = {i: "all" for i in range(n)}
        else:
            roles = {0: "hardest", 1: "hardest", n // 2 - 1: "median", n // 2: "median", n - 2: "easiest",
                     n - 1: "easiest"}
        kept += [{**g.iloc[i].to_dict(), "role": role} for i, role in sorted(roles.items())]
    out = pd.DataFrame(kept)
    out["task"] = out["dataset"] + "/" + out["concept"]
    return out.sort_values(["avg_roc_auc", "task"], kind="stable").reset_index(drop=True)


def orderings(selected: pd.DataFrame, prefix: str = "") -> dict:
    """`easy_to_hard` and `hard_to_easy` of the selected stream, their names prefixed (`roc_auc_` beside the
    released stream)."""
    hard_to_easy = list(selected["task"])
    return {f"{prefix}easy_to_hard": {"tasks": hard_to_easy[::-1]}, f"{prefix}hard_to_easy": {"tasks": hard_to_easy}}
