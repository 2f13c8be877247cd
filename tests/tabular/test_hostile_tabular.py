"""Real files and hostile input on the tabular track: conditions that doom a long job are refused
before any model runs, label and timestamp quirks of re-saved copies, names that become file names, the run key
covering the record index's files."""

from __future__ import annotations

import time

import numpy as np
import pandas as pd
import pytest
from helpers import small_tabular_index
from test_tabular_data import REV_CFM4, values, write_2017

from bench.errors import ConfigError, DatasetError
from bench.tabular import cic
from bench.tabular.cic import FEATURES

WEB = "Web Attack \u2013 XSS"


def run_cli(capsys, *args) -> tuple[int, str, str]:
    from bench.cli import main

    capsys.readouterr()
    code = main([str(a) for a in args])
    out = capsys.readouterr()
    return code, out.out, out.err


def day_files(root, attack_days, n_norm=12, n_anom=4):
    root.mkdir(parents=True, exist_ok=True)
    for k, day in enumerate(("Monday", "Tuesday", "Wednesday")):
        n = n_norm + (n_anom if day in attack_days else 0)
        labels = ["BENIGN"] * n_norm + ["DoS Hulk"] * (n - n_norm)
        write_2017(root / f"{day}-WorkingHours.pcap_ISCX.csv", values(n, k), labels)
    return root


def test_a_one_task_discovery_is_refused_before_any_model_runs(tmp_path, capsys):
    root = day_files(tmp_path / "raw", attack_days={"Tuesday"})
    out = tmp_path / "out"
    start = time.perf_counter()
    code, _, err = run_cli(capsys, "tabular", "scenarios", "--dataset", "cicids2017", "--root", root,
                           "--min-normal", 5, "--min-anomalous", 2, "--quick", "--out", out)
    print(f"one-task discovery refused after {time.perf_counter() - start:.2f} s")
    assert code == 2 and len(err.strip().splitlines()) == 1
    assert "candidate natural-day: kept 1 task (Tuesday" in err and "Monday (12 normal, 0 anomalous)" in err
    assert not list(out.rglob("ste"))  # no STE run started


def test_no_candidate_with_two_tasks_after_filtering_is_one_line():
    from bench.tabular.orderings import select_candidate

    with pytest.raises(ConfigError, match="no candidate split kept two or more tasks after filtering"):
        select_candidate({"a": float("nan"), "b": float("nan")}, {"a": 1, "b": 0})
    assert select_candidate({"a": float("nan")}, {"a": 3}) == "a"  # one model: W undefined, one candidate


def test_one_model_gives_its_own_orderings_and_says_so(tmp_path, capsys):
    import json

    from bench.tabular.synthetic import generate

    root = generate(tmp_path / "raw", seed=0, n_normal=120, n_anomal=30)
    code, out, err = run_cli(capsys, "tabular", "scenarios", "--root", root, "--models", "iforest", "--quick",
                             "--out", tmp_path / "out")
    assert code == 0, err
    assert "one model (iforest): Kendall's W is undefined; the orderings are iforest's own" in out
    manifest = json.loads((tmp_path / "out" / "release" / "manifest.json").read_text())
    cand = manifest["candidates"][manifest["selected_candidate"]]
    assert manifest["orderings"] == {o: cand["model_orderings"]["iforest"][o] for o in manifest["orderings"]}
    code, _, err = run_cli(capsys, "tabular", "scenarios", "--root", root, "--models", "iforest", "--quick",
                           "--candidates", "natural:day,kmeans:nearest:3", "--out", tmp_path / "two")
    assert code == 2 and "at least two models" in err and len(err.strip().splitlines()) == 1


def cfm4_frame(n, stamps=None, labels=None):
    frame = pd.DataFrame(values(n, 3), columns=[REV_CFM4.get(f, f) for f in FEATURES])
    if stamps is not None:
        frame.insert(1, "Timestamp", stamps)
    return frame.assign(Label=labels or ["Benign"] * (n - 1) + ["DoS"])


def test_cicunsw_takes_the_day_from_a_timestamp_and_says_when_there_is_none(tmp_path, capsys):
    with_stamps = tmp_path / "stamped"
    with_stamps.mkdir()
    cfm4_frame(3, ["2017-07-06 12:39:06.818901", "2017-07-06 12:39:07", "2017-07-07 08:00:00.5"]).to_csv(
        with_stamps / "flows.csv", index=False)
    df = cic.read_cicunsw(with_stamps).frame
    assert df["day"].tolist() == ["2017-07-06", "2017-07-06", "2017-07-07"]
    assert df["timestamp"].tolist()[0] == "2017-07-06T12:39:06"
    plain = tmp_path / "plain"
    plain.mkdir()
    cfm4_frame(3).to_csv(plain / "flows.csv", index=False)
    code, _, err = run_cli(capsys, "tabular", "index", "--dataset", "cicunsw", "--root", plain, "--out",
                           tmp_path / "idx")
    assert code == 2 and len(err.strip().splitlines()) == 1
    assert "3 of 3 records have no day (flows.csv" in err and "kmeans:nearest:3" in err and "found {}" not in err


@pytest.mark.parametrize("dash", [b"\xef\xbf\xbd", b"\x96", b"\xe2\x80\x93"], ids=["fffd-utf8", "cp1252", "utf8"])
def test_web_attack_labels_of_resaved_copies_read_as_the_upstream_label(tmp_path, dash):
    path = tmp_path / "Thursday-WorkingHours-Morning-WebAttacks.pcap_ISCX.csv"
    write_2017(path, values(3), ["BENIGN", "Web Attack X XSS", "Web Attack X Sql Injection"])
    path.write_bytes(path.read_bytes().replace(b" X ", b" " + dash + b" "))
    df = cic.read_cicids2017(tmp_path).frame
    assert df["attack"].tolist() == ["BENIGN", "Web Attack - XSS", "Web Attack - Sql Injection"]
    assert df["label"].tolist() == [0, 1, 1]


def test_unknown_labels_are_an_error_listing_them_with_counts_and_the_file(tmp_path):
    path = tmp_path / "Tuesday-WorkingHours.pcap_ISCX.csv"
    write_2017(path, values(6), ["BENIGN", "", "DoS Hulkk", "DoS Hulkk", "Web Att", "FTP?Patator"])
    path.write_bytes(path.read_bytes().replace(b"FTP?Patator", b"FTP\x81Patator"))  # a byte cp1252 leaves undefined
    with pytest.raises(DatasetError) as e:
        cic.read_cicids2017(tmp_path)
    message = str(e.value)
    assert message.startswith("Tuesday-WorkingHours.pcap_ISCX.csv: unknown label(s)") and "\n" not in message
    for shown in ("'DoS Hulkk' ×2", "'(empty)' ×1", "'Web Att' ×1", "'FTP\ufffdPatator' ×1"):
        assert shown in message
    assert "BENIGN" not in message


def write_2018(path, stamps):
    from test_tabular_data import REV_2018

    frame = pd.DataFrame(values(len(stamps), 4), columns=[REV_2018.get(f, f) for f in FEATURES])
    frame.insert(1, "Timestamp", stamps)
    frame.assign(Label=["Benign"] * (len(stamps) - 1) + ["Bot"]).to_csv(path, index=False)


def test_cicids2018_mixed_timestamp_formats_give_one_day_or_a_line_naming_the_file(tmp_path):
    write_2018(tmp_path / "Friday-02-03-2018_TrafficForML_CICFlowMeter.csv",
               ["02/03/2018 08:47:38", "2018-03-02 09:10:11", "02/03/2018 01:02:03 PM", ""])
    df = cic.read_cicids2018(tmp_path).frame
    assert set(df["day"]) == {"2018-03-02"}  # the empty stamp: the date in the file name
    assert df["timestamp"].tolist() == ["2018-03-02T08:47:38", "2018-03-02T09:10:11", "2018-03-02T13:02:03", ""]
    write_2018(tmp_path / "Friday-02-03-2018_TrafficForML_CICFlowMeter.csv", ["02/03/2018 08:47:38", "2.3.18 9h"])
    with pytest.raises(DatasetError, match=r"Friday-02-03-2018_TrafficForML_CICFlowMeter.csv: 1 Timestamp text\(s\) "
                                           r"in no known format, e.g. '2.3.18 9h' \(known: %d/%m/%Y"):
        cic.read_cicids2018(tmp_path)


@pytest.fixture(scope="module")
def small_index(tmp_path_factory):
    return small_tabular_index(tmp_path_factory.mktemp("hostile-index"))


@pytest.mark.parametrize("name", ["../../../x", "a/b", "..", ".", "x y"])
def test_names_that_become_file_names_are_checked(small_index, tmp_path, capsys, name):
    code, _, err = run_cli(capsys, "tabular", "run", "--index", small_index, "--model", "iforest", "--quick",
                           "--tasks", "Monday,Tuesday", "--ordering", name)
    assert code == 2 and "--ordering" in err and "file name" in err and len(err.strip().splitlines()) == 1
    assert not list(tmp_path.iterdir()) and not (small_index.parent / "x").exists()
    code, _, err = run_cli(capsys, "tabular", "index", "--root", small_index.parent / "raw", "--candidate",
                           f"natural:{name}", "--out", tmp_path / "i")
    assert code == 2 and "candidate column" in err and not (tmp_path / "i").exists()


def test_editing_features_changes_the_run_key_and_the_run_recomputes(small_index, tmp_path, capsys):
    import shutil

    from bench import results
    from bench.config import RunConfig, TabularInputs
    from bench.continual.runner import execute, prepare
    from bench.registry import get

    index = tmp_path / "index"
    shutil.copytree(small_index, index)

    def planned():
        cfg = RunConfig(dataset="synthetic", root=str(index), model="iforest", tasks=["Monday", "Tuesday"],
                        protocol="ncl", hparams=dict(get("iforest", "tabular").quick), device="cpu",
                        inputs=TabularInputs())
        return prepare(cfg, out_dir=tmp_path / "runs")

    first = planned()
    execute(first, progress=False, log=lambda s: None)
    assert planned().run_key == first.run_key  # nothing changed: the same run, already complete
    X = np.load(index / "features.npy")
    X[:, 0] += 1.0  # same size, other content
    np.save(index / "features.npy", X)
    second = planned()
    assert second.run_key != first.run_key and second.out != first.out
    execute(second, progress=False, log=lambda s: None)
    assert results.read_run(second.out)["attrs"]["status"] == "complete"
    assert sorted(p.name for p in (tmp_path / "runs").glob("*.h5")) == sorted([first.out.name, second.out.name])


@pytest.mark.parametrize("order, message", [([], "ordering 'smooth_drift' has no tasks"),
                                            (["Monday", "Caturday"], r"names task\(s\) \['Caturday'\] its record "
                                                                      r"index lacks"),
                                            (["Monday", "Monday"], "repeats a task")])
def test_a_grid_over_a_release_no_run_can_follow_is_refused_before_submitting(small_index, tmp_path, capsys,
                                                                              order, message):
    import json
    import re
    import shutil

    root = tmp_path / "scenario"
    shutil.copytree(small_index, root / "candidates" / "natural-day" / "index")
    (root / "release").mkdir()
    (root / "release" / "manifest.json").write_text(json.dumps({"selected_candidate": "natural-day"}))
    (root / "release" / "orderings.json").write_text(json.dumps({"smooth_drift": order,
                                                                 "abrupt_drift": ["Tuesday", "Monday"]}))
    code, out, err = run_cli(capsys, "submit", "--dataset", "tabular-synthetic", "--root", root, "--outputs",
                             tmp_path / "out", "--models", "deepsvdd", "--cluster", "debug", "--profile", "cpu")
    assert code == 2 and len(err.strip().splitlines()) == 1 and re.search(message, err)
    assert str(root / "release" / "orderings.json") in err
    assert not (tmp_path / "out" / "tabular-synthetic" / "runs").exists()


# --- issue 31 §4: tabular input says what is wrong with it ----------------------------------------------------------

@pytest.mark.parametrize("encoding", ["utf-8-sig", "utf-16"])
def test_utf8_bom_and_utf16_files_are_read_not_missing_feature_columns(tmp_path, encoding):
    """A copy re-saved with a byte-order mark: read in that encoding (cp1252 glued "ï»¿" to the first column's name
    or read NUL bytes, and the file came back as "missing feature columns")."""
    labels = ["BENIGN", "BENIGN", WEB, "DoS Hulk"]
    write_2017(tmp_path / "x.csv", values(4), labels)
    text = (tmp_path / "x.csv").read_bytes().decode("cp1252")
    path = tmp_path / "Monday-WorkingHours.pcap_ISCX.csv"
    path.write_bytes(text.encode(encoding))
    (tmp_path / "x.csv").unlink()
    raw = cic.read_cicids2017(tmp_path)
    assert len(raw.frame) == 4 and list(raw.frame["attack"]) == ["BENIGN", "BENIGN", "Web Attack - XSS", "DoS Hulk"]


def test_utf16_without_a_byte_order_mark_is_named_as_an_encoding_problem(tmp_path):
    write_2017(tmp_path / "x.csv", values(2), ["BENIGN", "DoS Hulk"])
    path = tmp_path / "Monday-WorkingHours.pcap_ISCX.csv"
    path.write_bytes((tmp_path / "x.csv").read_bytes().decode("cp1252").encode("utf-16-le"))
    (tmp_path / "x.csv").unlink()
    with pytest.raises(DatasetError, match="Monday-WorkingHours.pcap_ISCX.csv: looks like UTF-16") as err:
        cic.read_cicids2017(tmp_path)
    assert "missing feature columns" not in str(err.value)


def test_values_beyond_float32_are_counted_and_dropped_at_index(tmp_path):
    """1e40 and 1e308 are finite in float64 but inf in features.npy (float32): counted and their rows dropped as
    for ±inf, so no model meets them later as a "divergence"."""
    from bench.tabular.discovery import DiscoverySettings, discover
    from bench.tabular.preprocess import PrepSettings, build_index, load_index

    X = values(24)
    X[3, 0], X[5, 2] = 1e40, -1e308
    (tmp_path / "raw").mkdir()
    write_2017(tmp_path / "raw" / "Monday-WorkingHours.pcap_ISCX.csv", X, ["BENIGN"] * 18 + ["DoS Hulk"] * 6)
    s = DiscoverySettings(min_normal=2, min_anomalous=1)
    meta = build_index("cicids2017", cic.read_cicids2017(tmp_path / "raw"), lambda df: discover(df, s),
                       PrepSettings(), tmp_path / "idx", s.to_dict())
    assert meta["counts"]["float32_overflow_values"] == 2 and meta["counts"]["records_kept"] == 22
    assert np.isfinite(load_index(tmp_path / "idx")[1]).all()


def test_a_negative_seed_and_more_clusters_than_records_are_one_line(tmp_path, capsys):
    root = day_files(tmp_path / "raw", attack_days={"Tuesday", "Wednesday"})
    for extra, message in ((["--seed", -1], "--seed -1 is not allowed (expected an integer ≥ 0)"),
                           (["--candidate", "kmeans:nearest:500"], "36 normal records to cluster, fewer than the "
                                                                   "500 clusters")):
        code, _, err = run_cli(capsys, "tabular", "index", "--dataset", "cicids2017", "--root", root,
                               "--out", tmp_path / "idx", "--min-normal", 2, "--min-anomalous", 1, *extra)
        assert code == 2 and message in err and len(err.strip().splitlines()) == 1, err
    assert not (tmp_path / "idx").exists()


def test_a_full_disk_during_index_names_the_file_and_leaves_no_half_file(tmp_path, monkeypatch):
    import errno

    from bench.tabular import preprocess
    from bench.tabular.discovery import DiscoverySettings, discover

    root = day_files(tmp_path / "raw", attack_days={"Tuesday", "Wednesday"})

    def full(path, text):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(preprocess, "write_text_atomic", full)
    s = DiscoverySettings(min_normal=2, min_anomalous=1)
    with pytest.raises(DatasetError, match=r"idx/index.csv: cannot be written \(No space left on device\)"):
        preprocess.build_index("cicids2017", cic.read_cicids2017(root), lambda df: discover(df, s),
                               preprocess.PrepSettings(), tmp_path / "idx", s.to_dict())
    assert not (tmp_path / "idx" / "index.csv").exists()


def test_month_first_dates_in_a_day_first_file_are_refused_against_the_file_name_date(tmp_path):
    """Friday-02-03-2018 (2 March): "03/02/2018" read day-first is 3 February, a new task made of nothing but the
    mix-up; with day and month swapped it is the file's date, so the file is refused, naming it."""
    write_2018(tmp_path / "Friday-02-03-2018_TrafficForML_CICFlowMeter.csv",
               ["02/03/2018 08:47:38", "03/02/2018 09:10:11"])
    with pytest.raises(DatasetError, match=r"Friday-02-03-2018_TrafficForML_CICFlowMeter.csv: 1 Timestamp\(s\) read "
                                           r"day-first fall on 2018-02-03, the file name's date 2018-03-02 .*"
                                           r"'03/02/2018 09:10:11'.*month-first"):
        cic.read_cicids2018(tmp_path)
    write_2018(tmp_path / "Friday-02-03-2018_TrafficForML_CICFlowMeter.csv",
               ["02/03/2018 08:47:38", "03/03/2018 00:10:11"])  # past midnight: another day, kept
    assert set(cic.read_cicids2018(tmp_path).frame["day"]) == {"2018-03-02", "2018-03-03"}


def test_unparseable_cicids2017_timestamps_are_counted_and_warned(tmp_path):
    """They cost their test sets the stream order (the block bootstrap): counted at read and warned, naming the file."""
    write_2017(tmp_path / "x.csv", values(3), ["BENIGN", "BENIGN", "DoS Hulk"])
    lines = (tmp_path / "x.csv").read_text(encoding="cp1252").splitlines()
    (tmp_path / "x.csv").unlink()
    stamps = ["Timestamp", "5/7/2017 8:59", "5/7/2017 9:01", "later that day"]
    (tmp_path / "Wednesday-workingHours.pcap_ISCX.csv").write_text(
        "\n".join(f"{line},{s}" for line, s in zip(lines, stamps)) + "\n", encoding="cp1252")
    with pytest.warns(UserWarning, match=r"Wednesday-workingHours.pcap_ISCX.csv: 1 Timestamp text\(s\) not d/m/Y"):
        raw = cic.read_cicids2017(tmp_path)
    assert raw.counts["unparseable_timestamps"] == 1 and raw.frame["timestamp"].tolist()[2] == ""
