"""The synthetic CIC-format week: deterministic, written atomically, read by the suite's own CICIDS2017 reader, with
the paper's day structure."""

from __future__ import annotations

import json

import pytest
from asm_streams import week  # noqa: F401  (fixture)

from bench.assembly.synthetic import ATTACK_LABEL, budgets, generate
from bench.errors import ConfigError
from bench.tabular.cic import read_cicids2017


def file_bytes(root):
    return {p.name: p.read_bytes() for p in sorted((root / "TrafficLabelling").iterdir())}


def test_deterministic_from_the_seed(week, tmp_path):
    again = generate(tmp_path / "again", K=1, seed=1)
    assert file_bytes(again) == file_bytes(week[1])
    other = generate(tmp_path / "other", K=1, seed=2)
    assert file_bytes(other) != file_bytes(week[1])


def test_written_atomically_with_its_record(week):
    files = sorted(p.name for p in week[1].rglob("*") if p.is_file())
    assert not [f for f in files if ".tmp" in f]
    record = json.loads((week[1] / "synthetic.json").read_text())
    assert record["K"] == 1 and record["budgets"] == budgets(1) and record["scale"] == 0.001


def test_read_by_the_suites_cicids2017_reader_with_the_day_structure(week):
    table = read_cicids2017(week[2]).frame
    assert sorted(table["day"].unique()) == ["Friday", "Monday", "Thursday", "Tuesday", "Wednesday"]
    assert (table["timestamp"] != "").all()
    by_day = table.groupby("day")
    prevalence = by_day["label"].mean()
    assert prevalence["Monday"] == 0  # a benign Monday
    assert prevalence["Friday"] == prevalence.max()  # a dense Friday
    for day in ("Tuesday", "Wednesday", "Thursday"):  # mid-week attacks early in the day
        first = by_day.get_group(day).query("label == 1")["timestamp"].min()
        assert first < f"{first[:10]}T11:00:00"
    assert "Web Attack - Brute Force" in set(table["attack"])  # the cp1252 en dash, cleaned by the reader
    assert set(ATTACK_LABEL.values()) - {"Web Attack \u2013 Brute Force"} <= set(table["attack"])


@pytest.mark.parametrize("K", [0, 1.5])
def test_scale_must_be_a_positive_integer(tmp_path, K):
    with pytest.raises(ConfigError, match="K="):
        generate(tmp_path, K=K)
