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
  (lower best self-performance; on equal values the later one).
- Tie between the most-flagged tasks: `tie="weakest"` (default) removes the one with the lowest best
  self-performance S*_k, then the later one; `tie="last"` / `tie="first"` go by position in the candidate list.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np

from bench.errors import ConfigError

CRITERIA = ("fc1", "fc2", "fc3", "fc4", "fc5")


@dataclass(frozen=True)
class FilterSettings:
    gamma_l: float = 0.1  # FC1: minimum gain over the random baseline (ROC-AUC 0.5)
    baseline: float = 0.5  # b_k: ROC-AUC of a random ranking
    gamma_t: float = 0.9  # FC2: retained fraction of the best specialist that counts as "covering"
    p_t: int = 2  # FC2: most other tasks allowed to cover a task
    gamma_d: float = 0.9  # FC3: relative dominance threshold
    p_d: int = 2  # FC3: most tasks a task may dominate
    delta_r: float = 0.05  # FC4/FC5: mean absolute profile difference below which two tasks are redundant
    fc1_inclusive: bool = False
    coverage_strict: bool = False
    redundancy: str = "both"  # "both" | "one"
    tie: str = "weakest"  # "weakest" | "last" | "first"
    criteria: tuple = CRITERIA  # which criteria are applied

    def __post_init__(self):
        if self.redundancy not in ("both", "one"):
            raise ConfigError(f"redundancy={self.redundancy!r} is not allowed (expected both or one)")
        if self.tie not in ("weakest", "last", "first"):
            raise ConfigError(f"tie={self.tie!r} is not allowed (expected weakest, last or first)")
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
    # Eq. 4/5: mean over models of (1/K) Σ_m |M_km − M_jm| (rows: source profile), columns for targets.
    src = np.abs(M[:, :, None, :] - M[:, None, :, :]).mean(3).mean(0)  # [K, K]
    tgt = np.abs(M[:, :, :, None] - M[:, :, None, :]).mean(1).mean(0)
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


def _redundant(diff: np.ndarray, best: np.ndarray, s: FilterSettings) -> np.ndarray:
    K = len(best)
    pair = (diff < s.delta_r) & ~np.eye(K, dtype=bool)
    if s.redundancy == "both":
        return pair.any(1)
    flags = np.zeros(K, dtype=bool)
    for k, j in zip(*np.nonzero(np.triu(pair))):  # k < j: flag the weaker, the later on equal strength
        flags[k if best[k] < best[j] else j] = True
    return flags


def _pick(counts: np.ndarray, best: np.ndarray, tie: str) -> int:
    tied = np.flatnonzero(counts == counts.max())
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
        drop = _pick(counts, c["best_self"], s.tie)
        stats["removed"] = tasks[keep[drop]]
        passes.append(stats)
        del keep[drop]
    return {"kept": [tasks[i] for i in keep], "kept_index": keep,
            "removed": [p["removed"] for p in passes if p["removed"] is not None], "passes": passes,
            "settings": s.to_dict()}


def _plain(x):
    x = x.item() if isinstance(x, np.generic) else x
    return None if isinstance(x, float) and not np.isfinite(x) else x
