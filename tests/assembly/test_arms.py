"""Arms, the permutation check, the positional split, and the sample-accounting identities of the synthetic week,
derived by hand from its construction (bench.assembly.synthetic.DAY_LAYOUT; docs/assembly.md)."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
from asm_streams import corpus1, week  # noqa: F401  (fixtures)

from bench.assembly import arms
from bench.assembly.audit import audit_arm, audit_pair
from bench.assembly.corpus import build_corpus
from bench.assembly.records import Arm, Corpus, SplitRule
from bench.errors import ConfigError


def tiny(capture: list[int], y: list[int], names=("b", "a")) -> Corpus:
    n = len(capture)
    return Corpus(name="t", X=np.zeros((n, 1)), y=np.array(y, np.int8), label=np.zeros(n, np.int16),
                  label_names=("x",), capture=np.array(capture, np.int16), captures=tuple(names),
                  timestamp=np.arange(n, dtype=np.int64), record_id=np.arange(n, dtype=np.int64),
                  feature_names=("f",))


def test_day_round_robin_takes_row_k_of_every_day_that_still_has_one():
    c = tiny([0, 0, 0, 1, 1], [0, 0, 0, 0, 0])
    assert arms.day_round_robin(c).rows.tolist() == [0, 3, 1, 4, 2]


def test_pooled_interleaves_captures_in_name_order():
    c = tiny([0, 0, 1, 1], [0] * 4, names=("udp_flood", "spam"))  # date order ≠ name order
    assert arms.pooled(c).rows.tolist() == [2, 0, 3, 1]
    assert arms.per_capture(c, "spam").rows.tolist() == [2, 3]


def test_timestamp_arm_is_a_stable_time_sort():
    c = replace(tiny([0, 0, 1, 1], [0] * 4), timestamp=np.array([5, 1, 5, 0], np.int64))
    assert arms.timestamp(c).rows.tolist() == [3, 1, 0, 2]


def test_unknown_arm_lists_the_valid_ones():
    with pytest.raises(ConfigError, match="day_round_robin"):
        arms.make_arm(tiny([0], [0]), "shuffled")


def test_the_two_arms_are_an_exact_permutation(corpus1):
    a, b = arms.timestamp(corpus1), arms.day_round_robin(corpus1)
    check = arms.check_permutation(corpus1, a, b)
    assert (check.records, check.attacks) == (1600, 400)
    assert not np.array_equal(a.rows, b.rows)
    assert check.digest == arms.multiset_digest(corpus1, np.arange(corpus1.n))


def test_a_crafted_non_permutation_is_refused_in_one_line(corpus1):
    a = arms.timestamp(corpus1)
    rows = a.rows.copy()
    rows[0] = rows[1]  # one record twice, another missing: same count
    for bad in (Arm("dup", rows), Arm("short", a.rows[:-1])):
        with pytest.raises(ConfigError) as e:
            arms.check_permutation(corpus1, a, bad)
        assert "not a permutation" in str(e.value) and "\n" not in str(e.value)


def test_split_is_the_released_rule_and_configurable(corpus1):
    a = arms.timestamp(corpus1)
    s = arms.split(a)
    assert (s.i_tr, s.i_va, s.n) == (int(0.70 * 1600), int(0.70 * 1600) + int(0.15 * 1600), 1600)
    s = arms.split(a, SplitRule(0.5, 0.25))
    assert (s.i_tr, s.i_va) == (800, 1200)


@pytest.mark.parametrize("rule, empty", [(SplitRule(0.7, 0.3), "test"), (SplitRule(0.999, 0.0005), "validation")])
def test_a_split_leaving_a_segment_empty_is_refused(corpus1, rule, empty):
    with pytest.raises(ConfigError) as e:
        arms.split(arms.timestamp(corpus1), rule)
    assert empty in str(e.value) and f"train={rule.train}" in str(e.value) and "\n" not in str(e.value)


def kept_days(K: int) -> dict[str, np.ndarray]:
    """By hand from the construction: each day's corpus records (attack flags in time order). Every class holds a
    multiple of 6K records and the day keeps 5/6 of them, so the released rule keeps the first 5/6 of each class."""
    from bench.assembly.synthetic import DAY_LAYOUT

    out = {}
    for day, layout in DAY_LAYOUT.items():
        flags = np.concatenate([np.full(b.minutes * K, b.attack) for b in layout])
        keep = {cls: (flags == cls).sum() * 5 // 6 for cls in (True, False)}
        rank = np.where(flags, np.cumsum(flags), np.cumsum(~flags)) - 1  # index within its class
        out[day] = flags[rank < np.where(flags, keep[True], keep[False])]
    return out


@pytest.mark.parametrize("K", [1, 2, 3])
def test_sample_accounting_identities_equal_the_hand_derivation(week, K):
    """u = 10K. Kept days (records): Mon 30u benign; Tue 6u B, 5u A, 19u B; Wed 6u B, 10u A, 19u B; Thu 3u B, 5u A,
    22u B; Fri 12u B, 20u A, 3u B. n = 160u, i_tr = 112u, i_va = 136u (0.7·1600K is exact for these K).
    Timestamp arm: days concatenated (Fri from 125u), so its held-out slice is Friday rows [11u, 35u).
    Round robin: rows k < 30u sit at 5k + day, rows k ≥ 30u (Wed, Fri) at 150u + 2(k − 30u) + (0 Wed, 1 Fri); its
    held-out slice is rows [27.2u, 30u) of Mon, Tue, Thu and [27.2u, 35u) of Wed and Fri."""
    u = 10 * K
    c = build_corpus("cicids2017", week[K], scale=K / 1000)
    days = kept_days(K)
    assert [int(v.size) for v in days.values()] == [30 * u, 30 * u, 35 * u, 30 * u, 35 * u]
    assert np.array_equal(c.y, np.concatenate(list(days.values())).astype(np.int8))
    ts, rr = arms.timestamp(c), arms.day_round_robin(c)
    s = arms.split(ts)
    assert (s.n, s.i_tr, s.i_va) == (160 * u, 112 * u, 136 * u)

    per_day = audit_arm(c, rr).composition[arms.Segment.TEST, :, 0]
    assert per_day.tolist() == [28 * K, 28 * K, 78 * K, 28 * K, 78 * K]  # 2.8u, 2.8u, 7.8u, 2.8u, 7.8u
    assert audit_arm(c, ts).composition[arms.Segment.TEST, :, 0].tolist() == [0, 0, 0, 0, 24 * u]

    p = audit_pair(c, ts, rr)
    assert p.overlap == 78 * K  # Friday rows [27.2u, 35u)
    # Friday row k of the timestamp held-out slice sits at 5k + 4 in the round robin: train for k < 22.4u,
    # validation for k < 27.2u, test after; its attacks are Friday rows [12u, 32u)
    assert p.transitions[2].tolist() == [114 * K, 48 * K, 78 * K]  # [11u, 22.4u), [22.4u, 27.2u), [27.2u, 35u)
    assert p.attack_transitions[2].tolist() == [104 * K, 48 * K, 48 * K]  # [12u, 22.4u), …, [27.2u, 32u)
    # the round robin's held-out records in the timestamp arm: Mon, Tue, Wed rows train; Thu validation; Fri test
    assert p.transitions[:, 2].tolist() == [134 * K, 28 * K, 78 * K]
    assert p.b_attacks_subset_of_a and not p.a_attacks_subset_of_b  # its 4.8u held-out attacks are Friday's
    assert p.attacks_moved_out == 152 * K
