"""Task selection FC1–FC5 (CAD framework paper, Eq. 1–5), applied iteratively.

`M` is a stack of STE matrices, shape [F, K, K] (one K×K ROC-AUC matrix per model f; M[f, i, j] = the expert of
task i evaluated on task j). Each pass recomputes all five criteria on the remaining tasks, removes the task
flagged by the most criteria and stops when no task is flagged; every pass's statistics are kept.

Where the paper's prose, its equations and the released framework disagree, `FilterSettings` picks one and names
the other (docs/tabular.md lists them):
- FC1: the equation's strict `M_kk − b_k > γ_l` (default) or `≥` (`fc1_inclusive=True`).
- FC2/FC3: the equations' `|C| ≤ P` is allowed (default, flagged when `> P`); the FC2 prose says "less than P",
  i.e. flagged when `≥ P` (`coverage_strict=True`).
- FC4/FC5: a redundant pair flags both tasks (default, the symmetric definition); the iterative removal then drops
  one of them and the next pass no longer sees a pair. `redundancy="one"` flags only the weaker task of the pair
  (lower best self-performance; on equal values the later one). `redundancy="partners"` (the released code's)
  flags a task once per redundant partner, and every flag counts (CAD 675a9c9
  `src/cadbench/optimization/ste/filtering_criteria.py:126,152` append the partner once per pair, `:236-238` count
  every entry): a task redundant with two others carries two FC4 flags.
- Tie between the most-flagged tasks: `tie="weakest"` (default) removes the one with the lowest best
  self-performance S*_k, then the later one; `tie="last"` / `tie="first"` go by position in the candidate list;
  `tie="priority"` (the released framework's, `filtering_criteria.py:236-248`: the first maximal key of a dict
  filled in list order) removes the one flagged by the earliest criterion (FC1 before FC2 … before FC5), then
  the one appearing first in that criterion's released list: candidate order for FC1–FC3; for FC4/FC5, whose
  lists are built row by row appending the partner (`:126`, `:152`), the task whose earliest partner comes
  first, then the earlier task (one pair: the later task of the pair goes).

The settings are a typed, ranged `ParamTable` (`FRAMEWORK`) with two presets: `suite` (the default, the values
above) and `released` (what the CAD framework's released code runs: γ_l = 0.25 with the inclusive test, δ_r = 0.1,
flags per redundant partner, ties by criterion priority, and the released orderings, W and Borda,
`orderings="released"`, bench.tabular.orderings). `--filter key=value` and the grids resolve through it, so a bad value is one line.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np

from bench.errors import ConfigError
from bench.registry import Bool, Choice, Float, Int, ParamTable
from bench.tabular.orderings import MODES as ORDERING_MODES

CRITERIA = ("fc1", "fc2", "fc3", "fc4", "fc5")
TIES = ("weakest", "last", "first", "priority")

# The suite's defaults stay the default preset: the paper's appendix values are not in the text we have, and δ_r =
# 0.05 sits just above the ROC-AUC sampling noise of test sets of a few hundred records (docs/tabular.md).
FRAMEWORK = ParamTable("tabular framework", params={
    "gamma_l": Float(0.1, 0, 0.5, doc="FC1: minimum gain of M_kk over the random baseline"),
    "baseline": Float(0.5, 0, 1, doc="b_k: ROC-AUC of a random ranking"),
    "gamma_t": Float(0.9, 0, 1, doc="FC2: retained fraction of the best specialist that covers"),
    "p_t": Int(2, 0, doc="FC2: most other tasks allowed to cover a task"),
    "gamma_d": Float(0.9, 0, 1, doc="FC3: relative dominance threshold"),
    "p_d": Int(2, 0, doc="FC3: most tasks a task may dominate"),
    "delta_r": Float(0.05, 0, 1, doc="FC4/FC5: mean absolute profile difference of a redundant pair"),
    "fc1_inclusive": Bool(False, doc="FC1 test ≥ instead of Eq. 1's >"),
    "coverage_strict": Bool(False, doc="FC2/FC3 flag at |C| ≥ P (the FC2 prose) instead of > P (Eq. 2/3)"),
    "redundancy": Choice("both", ("both", "one", "partners"),
                         doc="a redundant pair flags both tasks or the weaker one; partners: once per partner"),
    "tie": Choice("weakest", TIES, doc="which of the most-flagged tasks is removed"),
    # not a filtering value, but the same preset switches it: the orderings, W and Borda after filtering
    "orderings": Choice("suite", ORDERING_MODES, doc="orderings, Kendall's W and Borda: the suite's (exact drift "
                                                     "paths, tie-corrected W) or the released code's")},
    presets={"suite": {}, "released": {"gamma_l": 0.25, "fc1_inclusive": True, "delta_r": 0.1,
                                        "redundancy": "partners", "tie": "priority", "orderings": "released"}},
    default_preset="suite")


@dataclass(frozen=True)
class FilterSettings:
    # the defaults are FRAMEWORK's (its suite preset): one source of the values
    gamma_l: float = FRAMEWORK.params["gamma_l"].default  # FC1: minimum gain over the random baseline
    baseline: float = FRAMEWORK.params["baseline"].default  # b_k: ROC-AUC of a random ranking
    gamma_t: float = FRAMEWORK.params["gamma_t"].default  # FC2: fraction of the best specialist that covers
    p_t: int = FRAMEWORK.params["p_t"].default  # FC2: most other tasks allowed to cover a task
    gamma_d: float = FRAMEWORK.params["gamma_d"].default  # FC3: relative dominance threshold
    p_d: int = FRAMEWORK.params["p_d"].default  # FC3: most tasks a task may dominate
    delta_r: float = FRAMEWORK.params["delta_r"].default  # FC4/FC5: redundancy threshold
    fc1_inclusive: bool = FRAMEWORK.params["fc1_inclusive"].default
    coverage_strict: bool = FRAMEWORK.params["coverage_strict"].default
    redundancy: str = FRAMEWORK.params["redundancy"].default  # "both" | "one" | "partners"
    tie: str = FRAMEWORK.params["tie"].default  # "weakest" | "last" | "first" | "priority"
    orderings: str = FRAMEWORK.params["orderings"].default  # bench.tabular.orderings MODES: "suite" | "released"
    criteria: tuple = CRITERIA  # which criteria are applied
    preset: str = "suite"  # the FRAMEWORK preset the values started from (recorded in the manifest)

    @classmethod
    def resolve(cls, overrides: dict | None = None, preset: str | None = None) -> "FilterSettings":
        """The FRAMEWORK preset (None: suite) with `overrides` on top, each checked (type and range)."""
        return cls(**FRAMEWORK.resolve(overrides, preset), preset=preset or FRAMEWORK.default_preset)

    def __post_init__(self):
        FRAMEWORK.resolve({k: getattr(self, k) for k in FRAMEWORK.params})  # types and ranges, one line each
        bad = set(self.criteria) - set(CRITERIA)
        if bad:
            raise ConfigError(f"unknown filtering criteria {sorted(bad)} (valid: {', '.join(CRITERIA)})")

    def to_dict(self) -> dict:
        d = asdict(self)
        d["criteria"] = list(self.criteria)
        return d


def _check(M) -> np.ndarray:
    M = np.asarray(M, dtype=np.float64)
    if M.ndim == 2:
        M = M[None]
    if M.ndim != 3 or M.shape[1] != M.shape[2]:
        raise ConfigError(f"STE matrices must have shape [models, K, K], got {M.shape}")
    if not np.isfinite(M).all():
        raise ConfigError("STE matrices contain NaN/inf (a task whose test set has one class?)")
    return M


def criteria(M, s: FilterSettings = FilterSettings()) -> dict:
    """All five criteria on one task set: per-task values and flags (each a length-K array)."""
    M = _check(M)
    F, K, _ = M.shape
    diag = np.einsum("fkk->fk", M)  # [F, K]
    best = diag.max(0)  # S*_k
    off = ~np.eye(K, dtype=bool)
    gain = diag - s.baseline
    fc1 = ~((gain >= s.gamma_l) if s.fc1_inclusive else (gain > s.gamma_l)).any(0)
    ratio = M / best[None, None, :]  # ratio[f, i, k] = M^f_{i,k} / S*_k
    incoming = ((ratio >= s.gamma_t) & off).sum(1).max(0)  # max_f |C_k^f|: column k, rows i ≠ k
    outgoing = ((ratio >= s.gamma_d) & off).sum(2).max(0)  # max_f |D_k^f|: row k, columns i ≠ k
    fc2 = incoming >= s.p_t if s.coverage_strict else incoming > s.p_t
    fc3 = outgoing >= s.p_d if s.coverage_strict else outgoing > s.p_d
    src, tgt = _profile_diffs(M)
    fc4, fc5 = _redundant(src, best, s), _redundant(tgt, best, s)
    flags = {"fc1": fc1, "fc2": fc2, "fc3": fc3, "fc4": fc4, "fc5": fc5}
    for name in CRITERIA:
        if name not in s.criteria:
            flags[name] = np.zeros(K, dtype=bool)
    np.fill_diagonal(src, np.inf)
    np.fill_diagonal(tgt, np.inf)
    return {"best_self": best, "gain": gain.max(0), "incoming": incoming, "outgoing": outgoing,
            "source_min_diff": src.min(1) if K > 1 else np.full(K, np.inf),
            "target_min_diff": tgt.min(1) if K > 1 else np.full(K, np.inf), **flags}


def _profile_diffs(M: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Eq. 4/5: mean over models of (1/K) Σ_m |M_km − M_jm| (rows: source profile), columns for targets; [K, K]."""
    src = np.abs(M[:, :, None, :] - M[:, None, :, :]).mean(3).mean(0)
    tgt = np.abs(M[:, :, :, None] - M[:, :, None, :]).mean(1).mean(0)
    return src, tgt


def _pairs(diff: np.ndarray, s: FilterSettings) -> np.ndarray:
    return (diff < s.delta_r) & ~np.eye(len(diff), dtype=bool)


def _redundant(diff: np.ndarray, best: np.ndarray, s: FilterSettings) -> np.ndarray:
    pair = _pairs(diff, s)
    if s.redundancy == "both":
        return pair.any(1)
    if s.redundancy == "partners":
        return pair.sum(1)
    flags = np.zeros(len(best), dtype=bool)
    for k, j in zip(*np.nonzero(np.triu(pair))):  # k < j: flag the weaker, the later on equal strength
        flags[k if best[k] < best[j] else j] = True
    return flags


def _list_positions(M: np.ndarray, s: FilterSettings) -> dict:
    """{criterion: each task's first position in the released code's list of that criterion} (the order
    `tie="priority"` breaks ties in): the task's index for FC1–FC3 (they walk the concepts in order); for
    FC4/FC5 (index of its earliest redundant partner, own index), flattened, since `filtering_criteria.py:126`
    and `:152` append concept2 while walking concept1 (K·K for a task without a partner: it is not listed)."""
    K = M.shape[1]
    own = np.arange(K)
    out = {name: own for name in ("fc1", "fc2", "fc3")}
    for name, diff in zip(("fc4", "fc5"), _profile_diffs(M)):
        pair = _pairs(diff, s)
        out[name] = np.where(pair.any(0), pair.argmax(0) * K + own, K * K)
    return out


def _pick(counts: np.ndarray, best: np.ndarray, tie: str, flags: dict, positions: dict) -> int:
    tied = np.flatnonzero(counts == counts.max())
    if tie == "priority":  # the released framework: the earliest criterion that flags one of them decides
        for name in CRITERIA:
            hit = tied[flags[name][tied] > 0]
            if hit.size:
                return int(hit[np.argmin(positions[name][hit])])
    if tie == "first":
        return int(tied[0])
    if tie == "last":
        return int(tied[-1])
    weakest = tied[best[tied] == best[tied].min()]
    return int(weakest[-1])


def iterative_filter(M, tasks: list[str], s: FilterSettings = FilterSettings()) -> dict:
    """Remove the most-flagged task until none is flagged. Returns kept tasks, removed tasks and every pass."""
    M = _check(M)
    if M.shape[1] != len(tasks):
        raise ConfigError(f"{len(tasks)} task names for STE matrices of size {M.shape[1]}")
    keep = list(range(len(tasks)))
    passes = []
    while keep:
        sub = M[:, keep][:, :, keep]
        c = criteria(sub, s)
        counts = sum(c[n].astype(int) for n in CRITERIA)
        stats = {"tasks": [tasks[i] for i in keep],
                 **{k: [_plain(x) for x in v] for k, v in c.items()}, "flags": counts.tolist()}
        if counts.max(initial=0) == 0:
            stats["removed"] = None
            passes.append(stats)
            break
        drop = _pick(counts, c["best_self"], s.tie, c, _list_positions(sub, s))
        stats["removed"] = tasks[keep[drop]]
        passes.append(stats)
        del keep[drop]
    return {"kept": [tasks[i] for i in keep], "kept_index": keep,
            "removed": [p["removed"] for p in passes if p["removed"] is not None], "passes": passes,
            "settings": s.to_dict()}


def removals(passes: list[dict]) -> list[str]:
    """One phrase per pass that removed a task: which task, by which criteria (no Python reprs, for messages)."""
    out = []
    for n, stats in enumerate(passes, start=1):
        if stats["removed"] is None:
            continue
        i = stats["tasks"].index(stats["removed"])
        by = ", ".join(name.upper() for name in CRITERIA if stats[name][i])
        out.append(f"pass {n} removed {stats['removed']} ({by})")
    return out


def _plain(x):
    x = x.item() if isinstance(x, np.generic) else x
    return None if isinstance(x, float) and not np.isfinite(x) else x
