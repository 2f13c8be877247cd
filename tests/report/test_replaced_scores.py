"""Scores the tabular `released` preset replaced are said wherever its results are (issue 46 §4): the run's summary,
runs.csv, tabular Table 2 (CSV and markdown) and the page, per run. The counts were only inside the result file."""

from __future__ import annotations

import h5py
import numpy as np
import pandas as pd
import pytest

from helpers import small_tabular_index

from bench.cli import main


@pytest.fixture(scope="module")
def index(tmp_path_factory):
    return small_tabular_index(tmp_path_factory.mktemp("replaced-index"))


def test_released_runs_say_how_many_scores_were_replaced_in_every_table(index, tmp_path, monkeypatch, capsys):
    from bench.tabular.protocols import Naive

    real = Naive.predict

    def half_nan(self, split, idx):
        """A detector's scores with every other one NaN (patched where the track asks for a cell's scores: the
        pointwise audit, which scores other records, is not what is under test)."""
        s = np.asarray(real(self, split, idx), dtype=float).copy()
        s[::2] = np.nan
        return s

    monkeypatch.setattr(Naive, "predict", half_nan)
    monkeypatch.chdir(tmp_path)
    counts = {}
    for seed in (0, 1):
        assert main(["tabular", "run", "--index", str(index), "--model", "iforest", "--quick", "--preset",
                     "released", "--tasks", "Monday,Tuesday", "--seed", str(seed)]) == 0
        summary = capsys.readouterr().out
        path = next(f for f in (tmp_path / "outputs").glob("*/runs/*.h5") if f not in counts.values())
        with h5py.File(path, "r") as f:  # the count the track recorded, read here without the suite's readers
            n, records = int(f["nonfinite/record"][()].sum()), f["scores/value"].size
        assert 0 < n < records
        assert f"{n} non-finite record score(s) replaced" in summary
        counts[seed] = n
    dataset = next((tmp_path / "outputs").glob("*/runs")).parent.name
    assert main(["aggregate", "--dataset", dataset, "--bootstrap", "20", "--figures", "none"]) == 0
    tables = tmp_path / "outputs" / dataset / "tables"
    runs = pd.read_csv(tables / "runs.csv")
    assert sorted(zip(runs["seed"], runs["scores_replaced"])) == sorted(counts.items())
    t2 = pd.read_csv(tables / "tabular_table2.csv", dtype=str, keep_default_na=False)
    per_run = f"0:{counts[0]} 1:{counts[1]}"
    assert (t2["scores_replaced"] == per_run).all()
    md = (tables / "tabular_table2.md").read_text()
    assert per_run in md and "(r)" in md and "Non-finite record scores replaced" in md
    page = (tmp_path / "outputs" / dataset / "report" / "index.html").read_text()
    assert per_run in page and "Non-finite record scores replaced" in page
    assert main(["verify", "--dataset", dataset]) == 0


def test_runs_that_replaced_nothing_say_nothing(tmp_path, index, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert main(["tabular", "run", "--index", str(index), "--model", "iforest", "--quick", "--preset", "released",
                 "--tasks", "Monday,Tuesday"]) == 0
    assert "replaced" not in capsys.readouterr().out
    dataset = next((tmp_path / "outputs").glob("*/runs")).parent.name
    assert main(["aggregate", "--dataset", dataset, "--bootstrap", "0", "--figures", "none"]) == 0
    tables = tmp_path / "outputs" / dataset / "tables"
    assert pd.read_csv(tables / "runs.csv")["scores_replaced"].tolist() == [0]
    assert "(r)" not in (tables / "tabular_table2.md").read_text()
