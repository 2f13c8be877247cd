"""The assembly audit: the pooling identity in exact arithmetic with its preconditions, run lengths, the held-out
window, the tables and the writer."""

from __future__ import annotations

from fractions import Fraction

import pandas as pd
import pytest
from asm_streams import corpus1, trio, week  # noqa: F401  (fixtures)

from bench.assembly import arms
from bench.assembly.audit import audit, audit_arm, markdown, pooling_identity, run_lengths, tables, write_audit
from bench.assembly.corpus import build_corpus
from bench.assembly.perf import perf_build_audit
from bench.assembly.synthetic import litnet_budgets


def test_pooling_identity_holds_exactly_when_budgets_are_equal(trio):
    """By hand (K = 2, 400 records per capture, held-out rows [340, 400) of each): udp_flood's second attack block,
    rows [320, 370), holds 30 of them; spam's last 10 rows are attacks; blaster_worm's rows [360, 380): 20. Pooled
    (3 × 400 records, i_va = 1020 = 3 × 340): 60 attacks of 180 = 1/3 = (30/60 + 10/60 + 20/60) / 3."""
    c = build_corpus("litnet", trio, budgets=litnet_budgets(2))
    p = pooling_identity(c, arms.pooled(c))
    assert all(pre.holds for pre in p.preconditions)
    assert p.holds and p.pooled == p.weighted_mean == Fraction(1, 3)
    assert isinstance(p.pooled, Fraction)


def test_pooling_identity_is_reported_as_not_holding_when_budgets_differ(trio):
    budgets = {**litnet_budgets(2), "spam": 360}
    c = build_corpus("litnet", trio, budgets=budgets)
    p = pooling_identity(c, arms.pooled(c))
    failed = {pre.name for pre in p.preconditions if not pre.holds}
    assert not p.holds and "equal budgets" in failed
    assert p.statement.startswith("identity not established") and "spam=360" in p.statement
    text = markdown(audit(c, [arms.pooled(c)]))
    assert "identity not established" in text and "weighted mean of per-capture" not in text


def test_run_lengths():
    r = run_lengths([1, 1, 0, 1, 0, 0, 1, 1, 1])
    assert (r.count, r.mean, r.median, r.max) == (3, 2.0, 2.0, 3)
    assert r.p90 == pytest.approx(2.8)  # numpy's linear percentile of (2, 1, 3)
    assert run_lengths([0, 0]).count == 0


def test_heldout_window_and_composition_of_the_timestamp_arm(corpus1):
    """Its held-out slice is Friday's kept rows [110, 350): benign minute 110 (10:50) to the last kept benign minute
    360 + 30 − 1 = 389 (15:29)."""
    a = audit_arm(corpus1, arms.timestamp(corpus1))
    row = tables(audit(corpus1, [arms.timestamp(corpus1)]))["windows"].iloc[0]
    assert (row["heldout_first"], row["heldout_last"]) == ("2017-07-07T10:50:00", "2017-07-07T15:29:00")
    assert a.heldout_captures == 1 and a.records == (1120, 240, 240) and a.attacks == (200, 0, 200)
    assert (a.runs_heldout.count, a.runs_heldout.max) == (1, 200)


def test_writer_writes_every_table_as_csv_and_one_markdown(corpus1, tmp_path):
    result = audit(corpus1, [arms.timestamp(corpus1), arms.day_round_robin(corpus1)])
    written = write_audit(result, tmp_path / "audit")
    names = {p.name for p in written}
    assert {"splits.csv", "composition.csv", "overlap.csv", "transitions.csv", "windows.csv", "run_lengths.csv",
            "audit.md"} == names
    overlap = pd.read_csv(tmp_path / "audit" / "overlap.csv")
    assert overlap.loc[0, "overlap"] == 78 and overlap.loc[0, "overlap_share"] == pytest.approx(0.325)
    assert sorted(p.name for p in (tmp_path / "audit").iterdir()) == sorted(names)  # no temp files left


def test_perf_entry_point_runs_small():
    out = perf_build_audit(3200)
    assert out["records"] == 3200 and out["features"] == 84 and out["overlap"] == 156  # 7.8u, u = 20
