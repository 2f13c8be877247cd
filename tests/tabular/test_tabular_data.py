"""The tabular data path on small files written in the three CIC formats with their quirks: readers, one
harmonised schema, preprocessing counts, the record index and its SHA-256, task discovery, the synthetic set."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from bench.errors import ConfigError, DatasetError
from bench.tabular import cic
from bench.tabular.cic import ALIASES_2018, ALIASES_CFM4, FEATURES
from bench.tabular.discovery import DiscoverySettings, discover
from bench.tabular.preprocess import PrepSettings, build_index, clean, load_index, split
from bench.tabular.synthetic import generate

REV_2018 = {v: k for k, v in ALIASES_2018.items()}
REV_CFM4 = {**{v: k for k, v in ALIASES_2018.items() if k in ("Fwd Act Data Pkts", "Fwd Seg Size Min")},
            **{v: k for k, v in ALIASES_CFM4.items()}}


def values(n, seed=0):
    return np.round(np.random.default_rng(seed).normal(size=(n, len(FEATURES))) * 100, 3)


def write_2017(path, X, labels):
    cols = [FEATURES[0]] + [" " + f for f in FEATURES[1:]]
    at = FEATURES.index("Fwd Avg Bytes/Bulk")
    cols.insert(at, " Fwd Header Length")
    fwd = FEATURES.index("Fwd Header Length")
    lines = [",".join(cols + [" Label"])]
    for row, lab in zip(X, labels):
        cells = [repr(float(v)) for v in row]
        cells.insert(at, cells[fwd])
        lines.append(",".join(cells + [lab]))
    path.write_bytes(("\n".join(lines) + "\n").encode("cp1252"))


def test_cicids2017_quirks(tmp_path):
    X = values(6)
    labels = ["BENIGN", "BENIGN", "Web Attack \u2013 Brute Force", "BENIGN", "DoS Hulk", "BENIGN"]
    write_2017(tmp_path / "Thursday-WorkingHours-Morning-WebAttacks.pcap_ISCX.csv", X, labels)
    text = (tmp_path / "Thursday-WorkingHours-Morning-WebAttacks.pcap_ISCX.csv").read_bytes()
    assert b"\x96" in text  # the cp1252 dash, as distributed
    lines = text.decode("cp1252").splitlines()
    rate = FEATURES.index("Flow Bytes/s")
    cells = lines[2].split(",")
    cells[rate] = "Infinity"
    cells[rate + 1] = "NaN"
    lines[2] = ",".join(cells)
    (tmp_path / "Thursday-WorkingHours-Morning-WebAttacks.pcap_ISCX.csv").write_bytes(
        ("\n".join(lines) + "\n").encode("cp1252"))
    raw = cic.read_cicids2017(tmp_path)
    df = raw.frame
    assert list(df.columns[:len(FEATURES)]) == list(FEATURES)  # spaces stripped, the duplicate dropped
    assert df["attack"].tolist()[2] == "Web Attack - Brute Force"
    assert df["label"].tolist() == [0, 0, 1, 0, 1, 0] and set(df["day"]) == {"Thursday"}
    assert np.isposinf(df.loc[1, "Flow Bytes/s"]) and np.isnan(df.loc[1, "Flow Packets/s"])
    ok = np.ones(len(FEATURES), dtype=bool)
    ok[[rate, rate + 1]] = False
    assert np.allclose(df[list(FEATURES)].to_numpy()[:, ok], X[:, ok])
    assert df["row"].tolist() == list(range(6)) and raw.files[0].name.endswith(".pcap_ISCX.csv")


def test_cicids2018_repeated_headers_84_columns_and_abbreviations(tmp_path):
    names = [REV_2018.get(f, f) for f in FEATURES]
    X = values(5, 1)
    stamps = ["02/03/2018 08:47:38"] * 5
    frame = pd.DataFrame(X, columns=names)
    frame.insert(1, "Protocol", 6)
    frame.insert(2, "Timestamp", stamps)
    frame["Label"] = ["Benign", "Benign", "DoS attacks-Hulk", "Benign", "Benign"]
    text = frame.to_csv(index=False).splitlines()
    text.insert(4, text[0])  # the header again, mid-file
    (tmp_path / "Friday-02-03-2018_TrafficForML_CICFlowMeter.csv").write_text("\n".join(text) + "\n")
    wide = frame.copy()
    for i, c in enumerate(("Flow ID", "Src IP", "Src Port", "Dst IP")):
        wide.insert(i, c, "x")
    assert wide.shape[1] == 84
    wide.to_csv(tmp_path / "Thuesday-20-02-2018_TrafficForML_CICFlowMeter.csv", index=False)
    raw = cic.read_cicids2018(tmp_path)
    df = raw.frame
    assert raw.counts["repeated_header_lines"] == 1 and len(df) == 10
    first = df[df["source"].str.startswith("Friday")]
    assert first["row"].tolist() == [0, 1, 2, 4, 5]  # line positions in the raw file, the header line skipped
    assert np.allclose(first[list(FEATURES)].to_numpy(), X)
    assert first["label"].tolist() == [0, 0, 1, 0, 0] and set(df["day"]) == {"2018-03-02"}
    assert df["timestamp"].iloc[0] == "2018-03-02T08:47:38"


def test_cicunsw_cicflowmeter4_names_single_file_and_data_label_pair(tmp_path):
    names = [REV_CFM4.get(f, f) for f in FEATURES]
    assert "Total Fwd Packet" in names and "FWD Init Win Bytes" in names
    X = values(4, 2)
    a = tmp_path / "a"
    a.mkdir()
    pd.DataFrame(X, columns=names).assign(Label=["Benign", "Exploits", "Benign", "Fuzzers"]).to_csv(
        a / "flows.csv", index=False)
    df = cic.read_cicunsw(a).frame
    assert df["label"].tolist() == [0, 1, 0, 1] and np.allclose(df[list(FEATURES)].to_numpy(), X)
    b = tmp_path / "b"
    b.mkdir()
    pd.DataFrame(X, columns=names).to_csv(b / "Data.csv", index=False)
    pd.DataFrame({"Label": [0, 3, 0, 0]}).to_csv(b / "Label.csv", index=False)
    raw = cic.read_cicunsw(b)
    assert raw.frame["label"].tolist() == [0, 1, 0, 0] and {f.name for f in raw.files} == {"Data.csv", "Label.csv"}


def test_the_cli_offers_every_reader():
    from bench.tabular.commands import DATASETS

    assert DATASETS == ("synthetic",) + tuple(cic.READERS)


def test_the_three_formats_meet_in_one_schema(tmp_path):
    X = values(3, 3)
    write_2017((tmp_path / "Monday-WorkingHours.pcap_ISCX.csv"), X, ["BENIGN"] * 3)
    frame = pd.DataFrame(X, columns=[REV_2018.get(f, f) for f in FEATURES]).assign(Label="Benign")
    d18 = tmp_path / "d18"
    d18.mkdir()
    frame.to_csv(d18 / "x_TrafficForML_CICFlowMeter.csv", index=False)
    a = cic.read_cicids2017(tmp_path).frame
    b = cic.read_cicids2018(d18).frame
    assert list(a.columns) == list(b.columns)
    assert np.allclose(a[list(FEATURES)].to_numpy(), b[list(FEATURES)].to_numpy())


@pytest.mark.parametrize("case", ["no_root", "no_files", "missing_column", "no_label", "empty"])
def test_bad_input_names_the_file(tmp_path, case):
    f = tmp_path / "Monday-WorkingHours.pcap_ISCX.csv"
    if case == "no_root":
        root = tmp_path / "nope"
    else:
        root = tmp_path
    if case == "missing_column":
        pd.DataFrame(values(2)[:, 1:], columns=FEATURES[1:]).assign(Label="BENIGN").to_csv(f, index=False)
    elif case == "no_label":
        pd.DataFrame(values(2), columns=FEATURES).to_csv(f, index=False)
    elif case == "empty":
        f.write_text(",".join(FEATURES) + ",Label\n")
    with pytest.raises(DatasetError) as err:
        cic.read_cicids2017(root)
    expected = {"no_root": "nope", "no_files": str(tmp_path), "missing_column": f.name, "no_label": f.name,
                "empty": f.name}[case]
    assert expected in str(err.value)
    assert {"missing_column": "Destination Port", "no_label": "'Label'", "empty": "no records"}.get(
        case, "") in str(err.value)


# ---- preprocessing ----------------------------------------------------------------------------------------

def raw_from(tmp_path, n_norm=50, n_anom=30, dup=3):
    tmp_path.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(4)
    X = rng.normal(size=(n_norm + n_anom, len(FEATURES)))
    X[n_norm:] += 3
    labels = ["BENIGN"] * n_norm + ["DDoS"] * n_anom
    X = np.concatenate([X, X[:dup]])
    labels = labels + labels[:dup]
    X[5, FEATURES.index("Flow Bytes/s")] = np.inf
    X[7, FEATURES.index("Flow Packets/s")] = -np.inf
    X[9, 0] = np.nan
    write_2017(tmp_path / "Friday-WorkingHours.pcap_ISCX.csv", X, labels)
    return cic.read_cicids2017(tmp_path)


def test_clean_split_and_scaler_with_counts(tmp_path):
    raw = raw_from(tmp_path)
    df, counts = clean(raw)
    assert counts == {"records_read": 83, "inf_values": 2, "nan_rows_dropped": 3, "duplicates_dropped": 3,
                      "records_kept": 77}
    out, per_task = split(df, np.array(["t"] * len(df)), PrepSettings(seed=0))
    n_norm = int((df["label"] == 0).sum())
    assert per_task["t"]["train_normal"] == round(0.8 * n_norm)
    assert (out.loc[out["split"] == "train", "label"] == 0).all()
    assert (out.loc[out["label"] == 1, "split"] == "test").all()
    _, balanced = split(df, np.array(["t"] * len(df)), PrepSettings(seed=0, rebalance=True))
    assert balanced["t"]["test_anomalous"] == balanced["t"]["test_normal"]  # 30 anomalies → at most 1:1
    assert balanced["t"]["anomalies_dropped_by_rebalance"] == 30 - balanced["t"]["test_normal"]


def test_record_index_round_trip_and_sha256(tmp_path):
    raw = raw_from(tmp_path / "raw")
    s = DiscoverySettings(min_normal=5, min_anomalous=1)
    task = lambda df: discover(df, s)  # noqa: E731
    meta = build_index("cicids2017", raw, task, PrepSettings(), tmp_path / "idx", s.to_dict())
    index, X, meta2 = load_index(tmp_path / "idx")
    assert X.dtype == np.float32 and len(X) == len(index) == 77 and meta2 == meta
    assert index["record_id"].iloc[0].startswith("Friday-WorkingHours.pcap_ISCX.csv:")
    train = (index["split"] == "train").to_numpy()
    assert np.allclose(X[train].mean(0), 0, atol=1e-5) and np.allclose(X[train].std(0), 1, atol=1e-3)
    assert abs(X[~train].mean()) > 0.1  # the scaler never saw the test records (anomalies are shifted)
    again = build_index("cicids2017", raw, task, PrepSettings(), tmp_path / "idx2", s.to_dict())
    assert again["index_sha256"] == meta["index_sha256"]
    other = build_index("cicids2017", raw, task, PrepSettings(seed=1), tmp_path / "idx3", s.to_dict())
    assert other["index_sha256"] != meta["index_sha256"]
    f = tmp_path / "raw" / "Friday-WorkingHours.pcap_ISCX.csv"
    f.write_bytes(f.read_bytes() + b"\n")  # same records, other bytes
    touched = build_index("cicids2017", cic.read_cicids2017(tmp_path / "raw"), task, PrepSettings(),
                          tmp_path / "idx4", s.to_dict())
    assert touched["index_sha256"] != meta["index_sha256"]
    (tmp_path / "idx" / "features.npy").write_bytes(b"junk")
    with pytest.raises(DatasetError, match="idx"):
        load_index(tmp_path / "idx")


# ---- task discovery -----------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def synthetic(tmp_path_factory):
    root = generate(tmp_path_factory.mktemp("syn"), seed=0, n_normal=200, n_anomal=60)
    return clean(cic.read_cicids2017(root))[0]


@pytest.mark.parametrize("method", ["kmeans", "spectral", "gmm"])
@pytest.mark.parametrize("variant", ["joint", "nearest", "random"])
def test_each_discovery_variant_meets_the_minimum_sizes(synthetic, method, variant):
    s = DiscoverySettings(method=method, variant=variant, n_tasks=4, min_normal=150, min_anomalous=20)
    tasks, info = discover(synthetic, s)
    labels = synthetic["label"].to_numpy()
    for t in set(tasks) - {""}:
        assert (labels[tasks == t] == 0).sum() >= 150 and (labels[tasks == t] == 1).sum() >= 20
    assert set(info["tasks"]) == set(tasks) - {""} and set(info["dropped"]).isdisjoint(info["tasks"])
    assert info["candidate"] == f"{method}-{variant}-k4"


def test_natural_split_and_variant_semantics(synthetic):
    tasks, info = discover(synthetic, DiscoverySettings(min_normal=10))
    assert set(tasks) == set(synthetic["day"]) and len(info["tasks"]) == 7
    labels = synthetic["label"].to_numpy()
    near, _ = discover(synthetic, DiscoverySettings(method="kmeans", variant="nearest", n_tasks=5, min_normal=1))
    rand, _ = discover(synthetic, DiscoverySettings(method="kmeans", variant="random", n_tasks=5, min_normal=1))
    assert (near[labels == 0] == rand[labels == 0]).all()  # the same clustering of the normals ...
    assert (near[labels == 1] != rand[labels == 1]).mean() > 0.5  # ... anomalies placed differently
    counts = pd.Series(rand[labels == 1]).value_counts()
    assert counts.min() > 0.5 * counts.mean()  # random: spread over all clusters
    with pytest.raises(ConfigError, match="no task"):
        discover(synthetic, DiscoverySettings(min_normal=10_000))


def test_synthetic_is_deterministic_from_its_seed(tmp_path):
    a = generate(tmp_path / "a", seed=3, n_normal=30, n_anomal=5)
    b = generate(tmp_path / "b", seed=3, n_normal=30, n_anomal=5)
    c = generate(tmp_path / "c", seed=4, n_normal=30, n_anomal=5)
    f = "MachineLearningCVE/Monday-WorkingHours.pcap_ISCX.csv"
    assert (a / f).read_bytes() == (b / f).read_bytes() != (c / f).read_bytes()
    raw = cic.read_cicids2017(a)
    assert "Web Attack - Brute Force" in set(raw.frame["attack"]) and np.isinf(raw.frame[list(FEATURES)]).any().any()


def _two_datasets(n=240, seed=0) -> pd.DataFrame:
    """Two datasets of two normal regimes each, planted in different features (20 of them, as real regimes move
    many flow statistics together) and at scales 1000× apart, plus a few attacks beside every regime."""
    rng = np.random.default_rng(seed)
    frames = []
    for name, axes, scale in (("big", slice(0, 20), 1000.0), ("small", slice(20, 40), 1.0)):
        for regime in (0, 1):
            for label, count in ((0, n), (1, n // 8)):
                x = rng.normal(size=(count, len(cic.FEATURES)))
                x[:, axes] += 4 * regime
                x[:, 40:50] += 3 * label  # attacks sit beside their regime
                f = pd.DataFrame(x * scale, columns=list(cic.FEATURES))
                frames.append(f.assign(label=label, dataset=name, regime=f"{name}{regime}"))
    return pd.concat(frames, ignore_index=True)


@pytest.mark.parametrize("method", ["kmeans", "gmm", "spectral"])
def test_clustering_within_each_dataset_recovers_each_datasets_regimes(method):
    from sklearn.metrics import adjusted_rand_score

    df = _two_datasets()
    s = DiscoverySettings(method=method, variant="nearest", n_tasks=2, within="dataset", min_normal=100,
                          min_anomalous=10)
    tasks, info = discover(df, s)
    assert info["candidate"] == f"{method}-nearest-k2-by-dataset"
    assert sorted(info["tasks"]) == ["big/c0", "big/c1", "small/c0", "small/c1"] and not info["dropped"]
    for name in ("big", "small"):
        rows = (df["dataset"] == name).to_numpy()
        assert all(t.startswith(f"{name}/") for t in tasks[rows])  # no task mixes the datasets
        assert adjusted_rand_score(df["regime"][rows], tasks[rows]) == 1.0  # the planted regimes, attacks included
    labels = df["label"].to_numpy()
    for t in info["tasks"]:
        assert (labels[tasks == t] == 0).sum() >= 100 and (labels[tasks == t] == 1).sum() >= 10


def test_discovery_within_a_column_refuses_what_it_cannot_do():
    df = _two_datasets(n=40)
    tasks, info = discover(df, DiscoverySettings(column="regime", within="dataset", min_normal=10, min_anomalous=1))
    assert sorted(info["tasks"]) == ["big/big0", "big/big1", "small/small0", "small/small1"]
    with pytest.raises(ConfigError, match="within='capture': no such column"):
        discover(df, DiscoverySettings(method="kmeans", within="capture"))
    with pytest.raises(ConfigError, match="dataset 'big' has 80 normal records, fewer than the 100 clusters"):
        discover(df, DiscoverySettings(method="kmeans", n_tasks=100, within="dataset"))
    with pytest.raises(ConfigError, match="other than the split's own"):
        DiscoverySettings(column="dataset", within="dataset")


def test_candidate_syntax_names_the_column_to_discover_within():
    from types import SimpleNamespace

    from bench.tabular.commands import parse_candidate

    args = SimpleNamespace(min_normal=100, min_anomalous=10, seed=0)
    assert parse_candidate("kmeans:nearest:3@dataset", args).name == "kmeans-nearest-k3-by-dataset"
    assert parse_candidate("natural:day@dataset", args).name == "natural-day-by-dataset"
    assert parse_candidate("gmm:joint:4", args).within == ""
    # an index records its discovery settings (index_sha256 covers them): without `within`, as before it existed
    assert "within" not in parse_candidate("gmm:joint:4", args).to_dict()
    assert parse_candidate("gmm:joint:4@dataset", args).to_dict()["within"] == "dataset"
    for bad in ("kmeans:nearest:3@", "kmeans:nearest@dataset", "natural:day:x"):
        with pytest.raises(ConfigError, match="is not natural"):
            parse_candidate(bad, args)


def test_cicids2017_trafficlabelling_12_hour_clock_is_put_in_stream_order(tmp_path):
    from bench.tabular.track import stream_order

    def write(name, stamps):
        path = tmp_path / name
        write_2017(path, values(len(stamps)), ["BENIGN"] * len(stamps))
        lines = path.read_text(encoding="cp1252").splitlines()
        lines = [f"{lines[0]}, Timestamp"] + [f"{line},{s}" for line, s in zip(lines[1:], stamps)]
        path.write_text("\n".join(lines) + "\n", encoding="cp1252")

    write("Friday-WorkingHours-Afternoon-DDos.pcap_ISCX.csv", ["7/7/2017 8:59", "7/7/2017 12:30", "7/7/2017 1:05",
                                                               "7/7/2017 3:58:10", "7/7/2017 11:10", "junk"])
    write("Monday-WorkingHours.pcap_ISCX.csv", ["3/7/2017 8:55:58", "3/7/2017 13:01:05", "3/7/2017 1:00:00"])
    raw = cic.read_cicids2017(tmp_path)
    friday = raw.frame[raw.frame["day"] == "Friday"]
    assert friday["timestamp"].tolist() == ["2017-07-07T08:59:00", "2017-07-07T12:30:00", "2017-07-07T13:05:00",
                                            "2017-07-07T15:58:10", "2017-07-07T11:10:00", ""]
    order = stream_order(friday["timestamp"].to_numpy()[:5], np.arange(5))
    assert order.tolist() == [0, 2, 3, 4, 1]  # 8:59, 11:10, 12:30, 13:05, 15:58
    monday = raw.frame[raw.frame["day"] == "Monday"]  # its clock passes 12: a 24-hour file, left as it is
    assert monday["timestamp"].tolist() == ["2017-07-03T08:55:58", "2017-07-03T13:01:05", "2017-07-03T01:00:00"]
    assert raw.counts["timestamps_to_pm"] == 2 and raw.reading == {
        "cicids2017_clock": "12-hour files: hours before 8 are afternoon"}
    assert cic.read_cicids2017(tmp_path).reading == raw.reading
    machine_learning_cve = tmp_path / "mlcve"
    machine_learning_cve.mkdir()
    write_2017(machine_learning_cve / "Monday-WorkingHours.pcap_ISCX.csv", values(2), ["BENIGN"] * 2)
    plain = cic.read_cicids2017(machine_learning_cve)
    assert plain.reading == {} and set(plain.frame["timestamp"]) == {""}  # no Timestamp column: nothing to choose
    s = DiscoverySettings(min_normal=1, min_anomalous=0)
    ones = lambda df: (np.array(["t"] * len(df), dtype=object), {})  # noqa: E731
    for table, settings in ((raw, {"reading": raw.reading}), (plain, {})):  # the index's SHA-256 covers the choice
        table.frame.loc[table.frame.index[-1], "label"] = 1  # a task needs an anomaly
        meta = build_index("cicids2017", table, ones, PrepSettings(), tmp_path / f"idx{len(settings)}", s.to_dict())
        assert {k: v for k, v in meta["settings"].items() if k == "reading"} == settings
