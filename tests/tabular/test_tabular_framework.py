"""The CAD framework's own steps on hand-made matrices: FC1–FC5, Held–Karp, Kendall's W, Borda."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from scipy.stats import friedmanchisquare

from bench.errors import ConfigError
from bench.tabular.filtering import FilterSettings, criteria, iterative_filter
from bench.tabular.orderings import (borda, concordance, held_karp, heuristic_path, kendall_w, model_orderings,
                                     path_cost, positions_to_ranks, select_candidate)


def block(K: int, diag: float = 0.95, off: float = 0.55) -> np.ndarray:
    M = np.full((K, K), off)
    np.fill_diagonal(M, diag)
    return M


# ---- FC1: self-learnability --------------------------------------------------------------------------------

def test_fc1_flags_a_task_no_model_learns_and_its_boundary_is_strict():
    M = block(4)
    M[2, 2] = 0.75  # gain 0.25 = γ_l exactly (both exact in binary): not above it
    M2 = M.copy()
    M2[2, 2] = 0.8  # the second model learns it
    s = FilterSettings(gamma_l=0.25, p_t=5, p_d=5, delta_r=0)
    assert criteria(M, s)["fc1"].tolist() == [False, False, True, False]
    assert criteria(np.stack([M, M2]), s)["fc1"].tolist() == [False] * 4  # ∃ f
    inclusive = FilterSettings(gamma_l=0.25, p_t=5, p_d=5, delta_r=0, fc1_inclusive=True)
    assert not criteria(M, inclusive)["fc1"].any()


# ---- FC2 / FC3: incoming coverage and outgoing dominance ---------------------------------------------------

def test_fc2_counts_covering_experts_against_the_best_specialist():
    M = block(5)
    M[[0, 1, 2], 4] = 0.9 * 0.95  # exactly γ_t of S*_4 = 0.95: covers (≥)
    s = FilterSettings(gamma_t=0.9, p_t=3, p_d=9, delta_r=0)
    c = criteria(M, s)
    assert c["incoming"].tolist() == [0, 0, 0, 0, 3]
    assert not c["fc2"].any()  # 3 ≤ P_t = 3 (Eq. 2)
    assert criteria(M, FilterSettings(gamma_t=0.9, p_t=3, p_d=9, delta_r=0, coverage_strict=True))["fc2"][4]
    M[0, 4] = 0.9 * 0.95 - 1e-9  # just below: no longer covers
    assert criteria(M, FilterSettings(gamma_t=0.9, p_t=2, p_d=9, delta_r=0))["incoming"][4] == 2


def test_fc2_takes_the_worst_model_and_the_best_specialist_over_models():
    A, B = block(4), block(4)
    B[3, 3] = 0.99  # S*_3 comes from model B
    A[[0, 1], 3] = 0.95  # 0.95/0.99 ≥ 0.9 under model A
    c = criteria(np.stack([A, B]), FilterSettings(gamma_t=0.9, p_t=1, p_d=9, delta_r=0))
    assert c["incoming"][3] == 2 and c["fc2"].tolist() == [False, False, False, True]


def test_fc3_flags_a_dominating_task():
    M = block(5)
    M[1, [0, 2, 3, 4]] = 0.93  # expert of task 1 reaches ≥ 0.9 × every other specialist
    c = criteria(M, FilterSettings(gamma_d=0.9, p_d=3, p_t=9, delta_r=0))
    assert c["outgoing"].tolist() == [0, 4, 0, 0, 0]
    assert c["fc3"].tolist() == [False, True, False, False, False]
    assert not criteria(M, FilterSettings(gamma_d=0.9, p_d=4, p_t=9, delta_r=0))["fc3"].any()


# ---- FC4 / FC5: redundancy ---------------------------------------------------------------------------------

def test_fc4_source_redundancy_flags_both_or_the_weaker():
    M = block(4)
    M[3] = M[1]  # identical rows: task 3's expert behaves like task 1's ...
    M[3, 3], M[1, 1] = 0.9, 0.95  # ... except on the diagonal entries
    M[3, 1], M[1, 3] = 0.95, 0.9
    c = criteria(M, FilterSettings(delta_r=0.01, p_t=9, p_d=9))
    assert c["fc4"].tolist() == [False, True, False, True]
    assert c["source_min_diff"][1] == pytest.approx(0.0)
    one = criteria(M, FilterSettings(delta_r=0.01, p_t=9, p_d=9, redundancy="one"))
    assert one["fc4"].tolist() == [False, False, False, True]  # S*_3 = 0.9 < S*_1 = 0.95
    # the boundary is strict: a mean difference equal to δ_r is not redundant
    M2 = block(3)
    M2[2] = M2[1] + 0.03
    M2[2, 2] = M2[1, 1]
    d = np.abs(M2[1] - M2[2]).mean()
    assert not criteria(M2, FilterSettings(delta_r=d, p_t=9, p_d=9))["fc4"].any()
    assert criteria(M2, FilterSettings(delta_r=d + 1e-9, p_t=9, p_d=9))["fc4"][1:].all()


def test_fc5_target_redundancy_uses_columns():
    M = block(4)
    M[:, 2] = M[:, 0]  # every expert solves tasks 0 and 2 alike
    c = criteria(M, FilterSettings(delta_r=0.01, p_t=9, p_d=9))
    assert c["fc5"].tolist() == [True, False, True, False]
    assert not c["fc4"].any()


# ---- iterative removal -------------------------------------------------------------------------------------

def test_iterative_filter_recomputes_after_each_removal():
    M = block(5)
    M[4] = M[3]  # task 4 duplicates task 3 (as a source and a target)
    M[:, 4] = M[:, 3]
    M[4, 4] = M[3, 3] = M[3, 4] = M[4, 3] = 0.95
    M[2, 2] = 0.52  # task 2 is unlearnable
    res = iterative_filter(M, list("abcde"), FilterSettings(p_t=9, p_d=9, delta_r=0.02))
    # d and e are flagged twice (FC4 and FC5), c once (FC1): e goes first (the later of an equal pair), then the
    # recomputed pass no longer sees d as redundant and removes c
    assert res["removed"] == ["e", "c"] and res["kept"] == ["a", "b", "d"]
    assert res["passes"][0]["flags"] == [0, 0, 1, 2, 2] and res["passes"][1]["flags"] == [0, 0, 1, 0]
    assert res["passes"][-1]["removed"] is None and len(res["passes"]) == 3
    assert res["passes"][0]["fc1"] == [False, False, True, False, False]
    both = iterative_filter(M, list("abcde"), FilterSettings(p_t=9, p_d=9, delta_r=0.02, criteria=("fc1",)))
    assert both["removed"] == ["c"]  # criteria can be switched off


def test_tie_rules():
    M = block(4)
    M[[1, 3], [1, 3]] = 0.55  # two unlearnable tasks, equal flags and equal strength
    names = list("abcd")
    first = iterative_filter(M, names, FilterSettings(p_t=9, p_d=9, delta_r=0, tie="first"))
    last = iterative_filter(M, names, FilterSettings(p_t=9, p_d=9, delta_r=0, tie="last"))
    assert first["removed"] == ["b", "d"] and last["removed"] == ["d", "b"]
    M[1, 1] = 0.52  # weaker: the default rule removes it first
    assert iterative_filter(M, names, FilterSettings(p_t=9, p_d=9, delta_r=0))["removed"] == ["b", "d"]


def test_bad_settings_and_matrices():
    with pytest.raises(ConfigError, match="redundancy"):
        FilterSettings(redundancy="all")
    with pytest.raises(ConfigError, match="NaN"):
        criteria(np.full((2, 2), np.nan))
    with pytest.raises(ConfigError, match="task names"):
        iterative_filter(block(3), ["a", "b"])


# ---- orderings ---------------------------------------------------------------------------------------------

def brute_force(D, maximize):
    costs = {p: path_cost(D, p) for p in itertools.permutations(range(len(D)))}
    return (max if maximize else min)(costs.values())


@pytest.mark.parametrize("n", [1, 2, 3, 5, 8])
def test_held_karp_equals_brute_force(n):
    rng = np.random.default_rng(n)
    for _ in range(3 if n < 8 else 1):
        A = rng.random((n, n))
        D = (A + A.T) / 2
        for maximize in (False, True):
            path = held_karp(D, maximize)
            assert sorted(path) == list(range(n))
            assert path_cost(D, path) == pytest.approx(brute_force(D, maximize))


def test_heuristic_is_a_valid_path_no_worse_than_nearest_neighbour_and_exact_on_a_line():
    x = np.array([0.0, 5.0, 1.0, 3.0, 2.0, 4.0])
    D = np.abs(x[:, None] - x[None, :])
    path = heuristic_path(D)
    assert path_cost(D, path) == pytest.approx(5.0)  # the sorted line
    assert path_cost(D, held_karp(D)) == pytest.approx(5.0)


def test_above_the_exact_limit_the_heuristic_gives_valid_paths():
    rng = np.random.default_rng(7)
    M = rng.random((7, 7))
    o = model_orderings(M, max_exact=5)
    D = 1 - (M + M.T) / 2
    for name, maximize in (("smooth_drift", False), ("abrupt_drift", True)):
        assert sorted(o[name]) == list(range(7))
        exact = brute_force(D, maximize)
        assert (path_cost(D, o[name]) >= exact - 1e-9) if not maximize else (path_cost(D, o[name]) <= exact + 1e-9)


def test_six_orderings_follow_eq_6_to_8():
    M = np.array([[0.9, 0.8, 0.5, 0.5], [0.8, 0.7, 0.6, 0.5], [0.5, 0.6, 0.99, 0.8], [0.5, 0.5, 0.8, 0.6]])
    o = model_orderings(M)
    assert o["curriculum_up"] == [2, 0, 1, 3] and o["curriculum_down"] == [3, 1, 0, 2]
    g = [(0.8 + 0.5 + 0.5) / 3, (0.8 + 0.6 + 0.5) / 3, (0.5 + 0.6 + 0.8) / 3, (0.5 + 0.5 + 0.8) / 3]
    assert np.allclose(o["generalization"], g)
    assert o["generalization_up"] == [0, 3, 1, 2]  # equal values keep candidate order (stable) ...
    assert o["generalization_down"] == [2, 1, 3, 0]  # ... and down mirrors up
    D = 1 - (M + M.T) / 2
    assert path_cost(D, o["smooth_drift"]) == pytest.approx(brute_force(D, False))
    assert path_cost(D, o["abrupt_drift"]) == pytest.approx(brute_force(D, True))


# ---- Kendall's W and Borda ---------------------------------------------------------------------------------

def test_kendall_w_with_ties_equals_friedman():
    rng = np.random.default_rng(0)
    from scipy.stats import rankdata
    for m, n in [(3, 5), (4, 7), (6, 4)]:
        values = rng.integers(0, 3, size=(m, n)).astype(float)  # many ties
        ranks = np.stack([rankdata(v) for v in values])
        chi2 = friedmanchisquare(*values.T).statistic
        assert kendall_w(ranks) == pytest.approx(chi2 / (m * (n - 1)))
    assert kendall_w(np.stack([np.arange(1, 6)] * 3)) == pytest.approx(1.0)


def test_a_path_and_its_reverse_give_w_one_after_the_direction_fix():
    path = [3, 0, 4, 1, 2]
    assert kendall_w(np.stack([positions_to_ranks(path), positions_to_ranks(path[::-1])])) == pytest.approx(0)
    per_model = {f: {"smooth_drift": p, "abrupt_drift": p, "curriculum_up": path, "curriculum_down": path[::-1],
                     "generalization_up": path, "generalization_down": path[::-1],
                     "difficulty": positions_to_ranks(path), "generalization": positions_to_ranks(path)}
                 for f, p in (("ae", path), ("iforest", path[::-1]), ("ae1svm", path))}
    c = concordance(per_model)
    assert c["w"]["smooth_drift"] == pytest.approx(1.0) and c["mean_w"] == pytest.approx(1.0)
    assert c["consensus"]["smooth_drift"] == path


def test_borda_tie_rule():
    order, points = borda([[0, 1, 2], [1, 0, 2]])  # 0 and 1 tie on points and on best position
    assert points.tolist() == [3, 3, 0] and order == [0, 1, 2]
    order, points = borda([[2, 0, 1, 3], [0, 1, 3, 2], [1, 2, 0, 3]])
    # points: 0 → 2+3+1 = 6, 1 → 1+2+3 = 6, 2 → 3+0+2 = 5, 3 → 0+1+0 = 1; 0 and 1 both have best position 0
    assert points.tolist() == [6, 6, 5, 1] and order == [0, 1, 2, 3]
    order, _ = borda([[1, 2, 0], [0, 2, 1], [2, 1, 0], [2, 0, 1]])  # 2 leads; 1 and 0 tie on points (3 each)
    assert order == [2, 0, 1]


def test_candidate_selection():
    assert select_candidate({"day": 0.4, "kmeans": 0.7, "gmm": 0.7}, {"day": 5, "kmeans": 4, "gmm": 6}) == "gmm"
    assert select_candidate({"a": float("nan"), "b": 0.1}, {"a": 1, "b": 3}) == "b"
