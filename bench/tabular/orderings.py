"""Six orderings per model (CAD framework paper, Eq. 6–8), Kendall's W across models, Borda consensus.

- Smooth / abrupt drift: the minimum / maximum-cost open Hamiltonian path over D = 1 − (M_ij + M_ji)/2, exact by
  Held–Karp (dynamic programming over subsets, vectorised over all subsets of one size; 2^K·K memory, fine to
  ~20 tasks). Above `max_exact` tasks a heuristic: the best nearest-neighbour path over every start (what the
  released framework does at any size) improved by 2-opt until no reversal helps.
- Curriculum up/down on d_i = 1 − M_ii; generalization up/down on g_i = mean off-diagonal row value. Equal values
  keep the candidate's task order in "up" (stable sort); "down" is the exact reverse of "up".
- Kendall's W with the tie correction. Curriculum and generalization rank tasks by their criterion values
  (average ranks for values equal to 12 decimals, hence ties); drift ranks tasks by path position. A path and its
  reverse cost the same, so a model's drift answer has no direction: W is taken over the orientation of the models' paths that
  maximises it (the first model's path is kept as it is; 2^(m−1) combinations), and Borda uses those orientations.
- Borda: a task at position p (0-based) of a model's ordering gets K − 1 − p points; the consensus sorts by total
  points, ties broken by the better best position in any model, then by candidate task order.

`mode="released"` (the framework preset `released`, setting `orderings`) does instead what the CAD framework's
released code does (CAD 675a9c9 `src/cadbench/optimization/ste/ste_optimization.py`, `split_selection.py`,
`scripts/optimization/optimize_by_ste.py`): drift by the greedy nearest / farthest neighbour from every start, the
first start with the best cost kept, no 2-opt (`ste_optimization.py:71-119`); curriculum and generalization sorted
stably on the raw values in each direction, so "down" keeps the candidate order among ties and is not the reverse
of "up" (`:30-53`); W = 12 SS / (m²(n³ − n)) on list positions, no tie correction, no orientation of the drift
paths, 0.0 with fewer than two models or tasks (`split_selection.py:32-84`); Borda by ascending 1-based rank sums,
ties in the first model's order (`:87-116`); the models in the released STE files' name order, AE1SVM,
Autoencoder, Isolation Forest (`optimize_by_ste.py:116-118`: a sorted glob).
"""

from __future__ import annotations

import itertools

import numpy as np

ORDERINGS = ("smooth_drift", "abrupt_drift", "curriculum_up", "curriculum_down", "generalization_up",
             "generalization_down")
# Up/down orderings of one criterion are reverses of each other and have the same W: one family each.
FAMILIES = {"smooth_drift": ("smooth_drift",), "abrupt_drift": ("abrupt_drift",),
            "curriculum": ("curriculum_up", "curriculum_down"),
            "generalization": ("generalization_up", "generalization_down")}
MAX_EXACT = 20
MODES = ("suite", "released")
# the released STE files' name order (AE1_SVM, Autoencoder, IsolationForest): its W reference and Borda ties
RELEASED_MODEL_ORDER = ("ae1svm", "autoencoder", "iforest")


def path_cost(D: np.ndarray, path) -> float:
    path = np.asarray(path)
    return float(D[path[:-1], path[1:]].sum())


def held_karp(D: np.ndarray, maximize: bool = False) -> list[int]:
    """Exact min (or max) cost open Hamiltonian path over the square cost matrix D (any start, any end)."""
    D = np.asarray(D, dtype=np.float64)
    n = len(D)
    if n <= 2:
        return list(range(n))
    C = -D if maximize else D
    full = 1 << n
    dp = np.full((full, n), np.inf)
    parent = np.full((full, n), -1, dtype=np.int8 if n < 128 else np.int16)
    dp[1 << np.arange(n), np.arange(n)] = 0.0
    masks = np.arange(full)
    popcount = np.zeros(full, dtype=np.int8)
    for b in range(n):
        popcount += (masks >> b) & 1
    for size in range(2, n + 1):
        layer = masks[popcount == size]
        for j in range(n):
            m = layer[(layer >> j) & 1 == 1]
            prev = m ^ (1 << j)
            cand = dp[prev] + C[:, j][None, :]  # dp[prev, i] is inf when i is not in prev
            best = cand.argmin(1)
            dp[m, j] = cand[np.arange(len(m)), best]
            parent[m, j] = best
    end = int(dp[full - 1].argmin())
    path, mask = [end], full - 1
    while len(path) < n:
        j = path[-1]
        i = int(parent[mask, j])
        mask ^= 1 << j
        path.append(i)
    return path[::-1]


def heuristic_path(D: np.ndarray, maximize: bool = False) -> list[int]:
    """Nearest-neighbour paths from every start, the best one improved by 2-opt (segment reversals)."""
    D = np.asarray(D, dtype=np.float64)
    C = -D if maximize else D
    n = len(C)
    best, best_cost = None, np.inf
    for start in range(n):
        path, left = [start], set(range(n)) - {start}
        while left:
            nxt = min(left, key=lambda j: (C[path[-1], j], j))
            path.append(nxt)
            left.remove(nxt)
        cost = path_cost(C, path)
        if cost < best_cost - 1e-12:
            best, best_cost = path, cost
    improved = True
    while improved:
        improved = False
        for i in range(n - 1):
            for k in range(i + 1, n):
                cand = best[:i] + best[i:k + 1][::-1] + best[k + 1:]
                cost = path_cost(C, cand)
                if cost < best_cost - 1e-12:
                    best, best_cost, improved = cand, cost, True
    return best


def released_greedy_path(D: np.ndarray, maximize: bool) -> list[int]:
    """The released greedy path (ste_optimization.py:71-95): from every start the nearest (farthest) unvisited task,
    the lowest index among equals; the path of the first start with the lowest (highest) summed distance."""
    D = np.asarray(D, dtype=np.float64)
    n = len(D)
    best, best_cost = None, None
    for start in range(n):
        path, cost = [start], 0.0
        while len(path) < n:
            left = [j for j in range(n) if j not in path]
            nxt = min(left, key=lambda j: -D[path[-1], j] if maximize else D[path[-1], j])
            cost += D[path[-1], nxt]
            path.append(nxt)
        if best_cost is None or (cost > best_cost if maximize else cost < best_cost):
            best, best_cost = path, cost
    return best


def drift_path(D: np.ndarray, maximize: bool, max_exact: int = MAX_EXACT) -> list[int]:
    return held_karp(D, maximize) if len(D) <= max_exact else heuristic_path(D, maximize)


def model_orderings(M: np.ndarray, max_exact: int = MAX_EXACT, mode: str = "suite") -> dict:
    """The six orderings of one model's K×K STE matrix (task indices), plus the criterion values behind them."""
    M = np.asarray(M, dtype=np.float64)
    K = len(M)
    D = 1 - (M + M.T) / 2
    if mode == "released":
        return _released_orderings(M, D)
    # Rounded so that values equal up to float noise (sums of the same numbers in another order) count as ties.
    d = np.round(1 - np.diag(M), 12)
    g = np.round(M[~np.eye(K, dtype=bool)].reshape(K, K - 1).mean(1), 12) if K > 1 else np.zeros(K)
    up_d, up_g = np.argsort(d, kind="stable"), np.argsort(g, kind="stable")
    down_d, down_g = up_d[::-1], up_g[::-1]  # mirror images, also where values tie
    return {"smooth_drift": drift_path(D, False, max_exact), "abrupt_drift": drift_path(D, True, max_exact),
            "curriculum_up": up_d.tolist(), "curriculum_down": down_d.tolist(),
            "generalization_up": up_g.tolist(), "generalization_down": down_g.tolist(),
            "difficulty": d, "generalization": g, "distance": D}


def _released_orderings(M: np.ndarray, D: np.ndarray) -> dict:
    """`model_orderings` as the released code computes them (ste_optimization.py:30-53, 98-119): raw values,
    Python's stable sort in each direction (sorted(reverse=True) keeps equal values in candidate order)."""
    K = len(M)
    d = np.array([1.0 - M[i, i] for i in range(K)])
    g = (np.array([sum(float(M[i, j]) for j in range(K) if j != i) / (K - 1) for i in range(K)]) if K > 1
         else np.full(K, np.nan))
    up = lambda v: sorted(range(K), key=lambda i: v[i])  # noqa: E731
    down = lambda v: sorted(range(K), key=lambda i: v[i], reverse=True)  # noqa: E731
    return {"smooth_drift": released_greedy_path(D, False), "abrupt_drift": released_greedy_path(D, True),
            "curriculum_up": up(d), "curriculum_down": down(d), "generalization_up": up(g),
            "generalization_down": down(g), "difficulty": d, "generalization": g, "distance": D}


def released_w(orders: list[list[int]]) -> float:
    """Kendall's W as released (split_selection.py:32-84): ranks = 1-based list positions, W = 12 SS / (m²(n³ − n))
    without a tie correction; 0.0 with fewer than two models or tasks."""
    m, n = len(orders), len(orders[0]) if orders else 0
    if m < 2 or n < 2:
        return 0.0
    ranks = np.stack([positions_to_ranks(o) for o in orders])
    S = ((ranks.sum(0) - m * (n + 1) / 2) ** 2).sum()
    return float(12 * S / (m ** 2 * (n ** 3 - n)))


def released_borda(orders: list[list[int]]) -> tuple[list[int], np.ndarray]:
    """Borda as released (split_selection.py:87-116): ascending sums of 1-based positions, a stable sort of the first
    model's list, so ties keep its order. (order, points per item) with the suite's points (K − 1 − p summed)."""
    n = len(orders[0])
    sums = np.zeros(n)
    for order in orders:
        sums += positions_to_ranks(order)
    return sorted(orders[0], key=lambda i: sums[i]), len(orders) * n - sums


def _average_ranks(values: np.ndarray) -> np.ndarray:
    from scipy.stats import rankdata

    return rankdata(values, method="average")


def kendall_w(ranks: np.ndarray) -> float:
    """Kendall's coefficient of concordance of m raters over n items, ranks [m, n], with the tie correction."""
    R = np.asarray(ranks, dtype=np.float64)
    m, n = R.shape
    if n < 2 or m < 2:
        return float("nan")
    S = ((R.sum(0) - m * (n + 1) / 2) ** 2).sum()
    T = 0.0
    for row in R:
        _, counts = np.unique(row, return_counts=True)
        T += (counts ** 3 - counts).sum()
    denom = m ** 2 * (n ** 3 - n) - m * T
    return float(12 * S / denom) if denom > 0 else float("nan")


def positions_to_ranks(order) -> np.ndarray:
    """Rank (1-based position) of each task index in an ordering."""
    ranks = np.empty(len(order))
    ranks[np.asarray(order)] = np.arange(1, len(order) + 1)
    return ranks


def oriented_paths(paths: list[list[int]]) -> list[list[int]]:
    """The orientation of each path (first kept) that maximises Kendall's W of their position ranks."""
    if len(paths) < 2:
        return [list(p) for p in paths]
    best, best_w = None, -np.inf
    for flips in itertools.product((False, True), repeat=len(paths) - 1):
        cand = [list(paths[0])] + [list(p[::-1]) if f else list(p) for p, f in zip(paths[1:], flips)]
        w = kendall_w(np.stack([positions_to_ranks(p) for p in cand]))
        if w > best_w + 1e-12:
            best, best_w = cand, w
    return best


def borda(orders: list[list[int]]) -> tuple[list[int], np.ndarray]:
    """Consensus of several orderings of the same n items: (order, points per item)."""
    n = len(orders[0])
    points = np.zeros(n)
    best_pos = np.full(n, n)
    for order in orders:
        pos = np.empty(n, dtype=int)
        pos[np.asarray(order)] = np.arange(n)
        points += n - 1 - pos
        best_pos = np.minimum(best_pos, pos)
    order = sorted(range(n), key=lambda i: (-points[i], best_pos[i], i))
    return order, points


def concordance(per_model: dict[str, dict], mode: str = "suite") -> dict:
    """W per ordering and family across models, the oriented drift paths, and the Borda consensus orderings."""
    if mode == "released":
        return _released_concordance(per_model)
    models = list(per_model)
    out = {"w": {}, "family_w": {}, "consensus": {}, "borda_points": {}, "oriented": {}}
    for name in ORDERINGS:
        orders = [per_model[f][name] for f in models]
        if name.endswith("drift"):
            orders = oriented_paths(orders)
            out["oriented"][name] = dict(zip(models, orders))
            ranks = np.stack([positions_to_ranks(o) for o in orders])
        else:
            key = "difficulty" if name.startswith("curriculum") else "generalization"
            sign = 1 if name.endswith("up") else -1
            ranks = np.stack([_average_ranks(sign * per_model[f][key]) for f in models])
        out["w"][name] = kendall_w(ranks)
        order, points = borda(orders)
        out["consensus"][name], out["borda_points"][name] = order, points.tolist()
    for fam, names in FAMILIES.items():
        out["family_w"][fam] = out["w"][names[0]]
    vals = [v for v in out["family_w"].values() if np.isfinite(v)]
    out["mean_w"] = float(np.mean(vals)) if vals else float("nan")
    return out


def _released_concordance(per_model: dict[str, dict]) -> dict:
    """`concordance` as released: models in the released order, W on positions, no orientation, released Borda;
    the mean over the four families (curriculum and generalization by their up = asc lists, split_selection.py:14-19)."""
    known = [m for m in RELEASED_MODEL_ORDER if m in per_model]
    models = known + [m for m in per_model if m not in known]
    out = {"w": {}, "family_w": {}, "consensus": {}, "borda_points": {}, "oriented": {}}
    for name in ORDERINGS:
        orders = [per_model[f][name] for f in models]
        out["w"][name] = released_w(orders)
        order, points = released_borda(orders)
        out["consensus"][name], out["borda_points"][name] = order, points.tolist()
    out["family_w"] = {fam: out["w"][names[0]] for fam, names in FAMILIES.items()}
    out["mean_w"] = float(np.mean(list(out["family_w"].values())))
    return out


def select_candidate(mean_w: dict[str, float], n_tasks: dict[str, int]) -> str:
    """The candidate split with the highest mean W; ties: more tasks, then the first in the given order. A lone
    candidate with two or more tasks is taken even without a defined W (one model: nothing to choose between)."""
    from bench.errors import ConfigError

    counts = ", ".join(f"{c}: {n_tasks[c]} task{'' if n_tasks[c] == 1 else 's'}" for c in mean_w)
    eligible = [c for c in mean_w if n_tasks[c] >= 2]
    if not eligible:
        raise ConfigError(f"no candidate split kept two or more tasks after filtering (tasks kept: {counts}); "
                          f"nothing to order: loosen the filtering (--filter) or try other candidates (each "
                          f"candidate's passes: candidates/<name>/filtering.json)")
    if len(mean_w) == 1:
        return eligible[0]
    finite = [c for c in eligible if np.isfinite(mean_w[c])]
    if not finite:
        raise ConfigError(f"no candidate split has a defined Kendall's W (tasks kept: {counts}); every model ranks "
                          f"the tasks alike with ties throughout: use other models or candidates")
    top = max(mean_w[c] for c in finite)
    tied = [c for c in finite if mean_w[c] >= top - 1e-12]
    return max(tied, key=lambda c: (n_tasks[c], -list(mean_w).index(c)))


def check_orderings(orderings: dict, tasks, where: str) -> None:
    """Refuse, before a grid submits anything, a release ordering no run can follow: one over no tasks, one that
    repeats a task, one naming a task the record index lacks (the release and its index disagree)."""
    from bench.errors import ConfigError

    for name, order in orderings.items():
        if not isinstance(order, list) or not order:
            raise ConfigError(f"{where}: ordering {name!r} has no tasks ({order!r}); a continual run needs at least "
                              f"one: rebuild the release with `bench tabular scenarios`")
        if len(set(order)) != len(order):
            raise ConfigError(f"{where}: ordering {name!r} repeats a task ({order}); rebuild the release")
        unknown = sorted(set(order) - set(tasks))
        if unknown:
            raise ConfigError(f"{where}: ordering {name!r} names task(s) {unknown} its record index lacks (has: "
                              f"{', '.join(sorted(tasks))}); the release and its index disagree: rebuild the release")
