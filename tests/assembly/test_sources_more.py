"""The CSE-CIC-IDS2018 corpus source (bench/assembly/cicids2018.py), from tiny files in the release's format."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from bench.assembly import arms
from bench.assembly.corpus import SOURCES, FeatureSet, Subsample, build_corpus
from bench.errors import DatasetError
from bench.tabular.cic import ALIASES_2018, FEATURES

REV_2018 = {v: k for k, v in ALIASES_2018.items()}
# file name → (stamps in file order, labels); the files' dates out of name order, each file's stamps out of order
DAYS = {
    "Wednesday-14-02-2018_TrafficForML_CICFlowMeter.csv": (
        ["14/02/2018 10:00:05", "14/02/2018 09:00:00", "14/02/2018 11:30:00", "14/02/2018 09:30:00",
         "14/02/2018 10:00:05", "14/02/2018 08:00:00"],
        ["Benign", "FTP-BruteForce", "Benign", "SSH-Bruteforce", "Benign", "Benign"]),
    "Friday-02-03-2018_TrafficForML_CICFlowMeter.csv": (
        ["02/03/2018 10:10:10", "2018-03-02 08:00:00", "02/03/2018 09:00:00", "02/03/2018 12:00:00"],
        ["Bot", "Benign", "Benign", "Bot"]),
    "Thuesday-20-02-2018_TrafficForML_CICFlowMeter.csv": (
        ["20/02/2018 01:00:00", "20/02/2018 00:30:00", "20/02/2018 02:00:00", "20/02/2018 00:10:00",
         "20/02/2018 03:00:00"],
        ["Benign", "DDoS attacks-LOIC-HTTP", "Benign", "Benign", "DDoS attacks-LOIC-HTTP"]),
}


def frame(stamps, labels, seed):
    X = np.round(np.random.default_rng(seed).normal(size=(len(stamps), len(FEATURES))) * 100, 3)
    f = pd.DataFrame(X, columns=[REV_2018.get(c, c) for c in FEATURES])
    f.insert(1, "Protocol", 6)
    f.insert(2, "Timestamp", stamps)
    f["Label"] = labels
    return f


def write_root(root):
    """The three files: Wednesday's with its header line repeated mid-file, Tuesday's with the 84 columns."""
    root.mkdir(parents=True, exist_ok=True)
    for seed, (name, (stamps, labels)) in enumerate(DAYS.items()):
        f = frame(stamps, labels, seed)
        if name.startswith("Thuesday"):
            for i, c in enumerate(("Flow ID", "Src IP", "Src Port", "Dst IP")):
                f.insert(i, c, 443 if c == "Src Port" else "x")
            assert f.shape[1] == 84
        text = f.to_csv(index=False).splitlines()
        if name.startswith("Wednesday"):
            text.insert(3, text[0])
        (root / name).write_text("\n".join(text) + "\n")
    return root


@pytest.fixture
def root(tmp_path):
    return write_root(tmp_path / "cse-cic-ids2018")


def test_captures_in_date_order_sorted_by_time_with_labels_counted(root):
    c = build_corpus("cicids2018", root)
    assert c.captures == ("2018-02-14", "2018-02-20", "2018-03-02")
    assert np.all(np.diff(c.capture) >= 0) and c.n == 15
    for i in range(3):
        t = c.timestamp[c.capture == i]
        assert np.all(np.diff(t) >= 0)
    assert np.all(np.diff(c.timestamp) >= 0)  # the days do not overlap: the whole corpus is in time order
    m = c.manifest
    assert [s["eligible"] for s in m["captures"]] == [6, 5, 4] == [s["budget"] for s in m["captures"]]
    assert [s["attacks_kept"] for s in m["captures"]] == [2, 2, 2] and int(c.y.sum()) == 6
    assert m["captures"][0]["repeated_header_lines"] == 1 and m["captures"][0]["raw"] == 7
    assert m["rule"] == Subsample.EVEN.value == SOURCES["cicids2018"].rule.value
    # a shared stamp keeps attacks first, then file order; "2018-03-02 08:00:00" is parsed as the other texts
    first = c.timestamp[c.capture == 0]
    assert str(np.datetime64(int(first[0]), "ns"))[:19] == "2018-02-14T08:00:00"
    friday = c.timestamp[c.capture == 2]
    assert str(np.datetime64(int(friday[0]), "ns"))[:19] == "2018-03-02T08:00:00"


def test_feature_sets_and_the_84_column_file(root):
    released = build_corpus("cicids2018", root)
    assert released.feature_names == ("Dst Port", "Protocol", *[REV_2018.get(f, f) for f in FEATURES[1:]])
    assert "Src Port" not in released.feature_names  # the one 84-column file's identities are ignored
    suite = build_corpus("cicids2018", root, features=FeatureSet.SUITE)
    assert len(suite.feature_names) == len(FEATURES)
    assert np.array_equal(suite.y, released.y) and np.array_equal(suite.timestamp, released.timestamp)


def test_scale_budgets_and_rules(root):
    half = build_corpus("cicids2018", root, scale=0.5, rule=Subsample.HEAD)
    assert [s["kept"] for s in half.manifest["captures"]] == [3, 2, 2]
    one = build_corpus("cicids2018", root, budgets={"2018-03-02": 2}, rule=Subsample.EVEN)
    assert one.captures == ("2018-03-02",) and one.n == 2 and int(one.y.sum()) == 1
    with pytest.raises(DatasetError, match="budget 5 records is above the 4 eligible"):
        build_corpus("cicids2018", root, budgets={"2018-03-02": 5})


def test_timestamp_arm_and_round_robin_are_a_permutation(root):
    c = build_corpus("cicids2018", root)
    a, b = arms.timestamp(c), arms.day_round_robin(c)
    check = arms.check_permutation(c, a, b)
    assert check.records == c.n and check.attacks == int(c.y.sum())
    assert not np.array_equal(a.rows, b.rows)  # the round robin interleaves the days


def _edit(root, name, edit):
    path = root / name
    f = pd.read_csv(path, dtype=str, keep_default_na=False)
    f = f[f["Label"] != "Label"]
    edit(f)
    f.to_csv(path, index=False)
    return path


@pytest.mark.parametrize("edit, words", [
    (lambda f: f.pop("Timestamp"), "no Timestamp column"),
    (lambda f: f.__setitem__("Timestamp", ["14/02/2018 10:00:05"] * (len(f) - 1) + ["yesterday noon"]),
     "in no known format"),
    (lambda f: f.__setitem__("Timestamp", [""] + ["14/02/2018 10:00:05"] * (len(f) - 1)), "without a Timestamp"),
    (lambda f: f.__setitem__("Timestamp", ["14/02/2018 10:00:05"] * (len(f) - 1) + ["02/14/2018 10:00:05"]),
     "in no known format"),
    (lambda f: f.__setitem__("Label", ["Benign"] * (len(f) - 1) + ["Benignn"]), "unknown label"),
])
def test_bad_files_are_refused_in_one_line_naming_the_file(root, edit, words):
    path = _edit(root, "Wednesday-14-02-2018_TrafficForML_CICFlowMeter.csv", edit)
    with pytest.raises(DatasetError) as e:
        build_corpus("cicids2018", root)
    assert words in str(e.value) and path.name in str(e.value) and "\n" not in str(e.value)


def test_a_root_without_files_or_a_name_without_a_date(tmp_path):
    with pytest.raises(DatasetError, match="no \\*_TrafficForML_CICFlowMeter.csv files"):
        build_corpus("cicids2018", tmp_path)
    f = frame(["14/02/2018 10:00:05"], ["Benign"], 0)
    f.to_csv(tmp_path / "Wednesday_TrafficForML_CICFlowMeter.csv", index=False)
    with pytest.raises(DatasetError, match="Wednesday_TrafficForML_CICFlowMeter.csv: no capture date"):
        build_corpus("cicids2018", tmp_path)


def test_month_first_stamps_in_a_day_first_file_are_refused(root):
    name = "Friday-02-03-2018_TrafficForML_CICFlowMeter.csv"
    path = _edit(root, name, lambda f: f.__setitem__("Timestamp", ["02/03/2018 09:00:00"] * (len(f) - 1)
                                                     + ["03/02/2018 09:00:00"]))
    with pytest.raises(DatasetError) as e:
        build_corpus("cicids2018", root)
    assert "day and month swapped" in str(e.value) and path.name in str(e.value) and "\n" not in str(e.value)


def test_cic_unsw_nb15_has_no_source_and_says_so_in_one_line(root):
    from bench.errors import ConfigError

    with pytest.raises(ConfigError) as e:
        build_corpus("cicunsw", root)
    assert str(e.value) == "unknown corpus source 'cicunsw' (valid: cicids2017, cicids2018, litnet)"


def test_the_command_line_runs_a_cicids2018_arm(root, tmp_path):
    from bench.assembly.store import read_run
    from bench.cli import main

    out = tmp_path / "out"
    rc = main(["assembly", "run", "--source", "cicids2018", "--root", str(root), "--arm", "day_round_robin",
               "--detector", "iforest", "--quick", "--train", "0.5", "--validation", "0.2", "--outputs", str(out)])
    (path,) = list((out / "cicids2018-assembly" / "runs").glob("*.h5"))
    run = read_run(path)
    assert rc == 0 and len(run.rows) == 15 and sorted(run.rows.tolist()) == list(range(15))
