"""The budgeted corpus: the released per-class rule and its alternatives, the manifest, the feature sets, the
non-finite policy, and bad input refused in one line with nothing written."""

from __future__ import annotations

import shutil

import numpy as np
import pandas as pd
import pytest
from asm_streams import corpus1, week  # noqa: F401  (fixtures)

from bench.assembly.corpus import SOURCES, FeatureSet, Subsample, build_corpus
from bench.errors import ConfigError, DatasetError
from bench.io import file_sha256
from bench.tabular.cic import FEATURES

ELIGIBLE = {"Monday": 360, "Tuesday": 360, "Wednesday": 420, "Thursday": 360, "Friday": 420}  # K = 1


def day_file(root, day):
    return root / "TrafficLabelling" / f"{day}-WorkingHours.pcap_ISCX.csv"


def minutes(c, day, attack=True):
    """Minutes after 9:00 of the corpus's records of `day` of one class, in corpus order."""
    rows = (c.capture == c.captures.index(day)) & (c.y == attack)
    t = c.timestamp[rows]
    return ((t - (t - t % 86_400_000_000_000)) // 60_000_000_000 - 9 * 60).tolist()


def test_released_sources_and_budgets():
    assert SOURCES["cicids2017"].budgets == {"Monday": 300_000, "Tuesday": 300_000, "Wednesday": 350_000,
                                             "Thursday": 300_000, "Friday": 350_000}
    assert SOURCES["cicids2017"].rule is Subsample.RELEASED


def test_released_rule_keeps_the_head_of_each_class_above_half_retention(corpus1):
    # Tuesday: 60 attack minutes from 60, 300 benign; budget 300 of 360: keep round(60·5/6) = 50 attacks, stride 1
    assert minutes(corpus1, "Tuesday") == list(range(60, 110))
    assert minutes(corpus1, "Tuesday", attack=False) == list(range(0, 60)) + list(range(120, 310))
    day = next(s for s in corpus1.manifest["captures"] if s["capture"] == "Tuesday")
    assert day["stride"] == {"attack": 1, "benign": 1} and day["head_of_each_class"]


def test_released_rule_strides_below_half_retention(week):
    # budget 120 of 360: keep round(60/3) = 20 attacks, stride 60 // 20 = 3: minutes 60, 63, …
    c = build_corpus("cicids2017", week[1], budgets={"Tuesday": 120})
    assert minutes(c, "Tuesday") == list(range(60, 120, 3))
    day = c.manifest["captures"][0]
    assert day["stride"] == {"attack": 3, "benign": 3} and not day["head_of_each_class"]


def test_even_rule_spreads_over_the_whole_class(week):
    # budget 200 of 360: keep round(60·200/360) = 33 attacks; released stride 60 // 33 = 1 keeps the head
    released = build_corpus("cicids2017", week[1], budgets={"Tuesday": 200})
    even = build_corpus("cicids2017", week[1], budgets={"Tuesday": 200}, rule=Subsample.EVEN)
    assert minutes(released, "Tuesday") == list(range(60, 93))
    assert minutes(even, "Tuesday") == [60 + i * 60 // 33 for i in range(33)]
    assert even.manifest["rule"] == "even" and released.manifest["rule"] == "released"


def test_manifest_records_inputs_counts_and_the_prevalence_bias(week):
    c = build_corpus("cicids2017", week[1], budgets={"Monday": 300, "Friday": 210})
    m = c.manifest
    assert m["files"] == {p.name: file_sha256(p) for p in (day_file(week[1], "Monday"), day_file(week[1], "Friday"))}
    fri = m["captures"][1]
    # Friday: 240 attacks, 180 benign eligible; factor 1/2 keeps 120 and 90
    assert (fri["eligible"], fri["kept"], fri["attacks_kept"], fri["retention_pct"]) == (420, 210, 120, 50.0)
    assert m["prevalence_bias_pp"] == pytest.approx(100 * (120 / 510 - 240 / 780))
    assert m["features"]["set"] == "released" and m["scale"] == 1.0 and m["rule"] == "released"


def test_manifest_is_json_and_its_digest_ignores_where_the_files_lie(week, corpus1, tmp_path):
    import json

    from bench.assembly.corpus import manifest_sha256

    assert json.loads(json.dumps(corpus1.manifest)) == corpus1.manifest
    shutil.copytree(week[1], tmp_path / "elsewhere")
    moved = build_corpus("cicids2017", tmp_path / "elsewhere", scale=1 / 1000, corpus_name="synthetic")
    assert manifest_sha256(moved) == manifest_sha256(corpus1)
    assert manifest_sha256(build_corpus("cicids2017", week[1], scale=1 / 1000, rule=Subsample.EVEN)) != \
        manifest_sha256(corpus1)


def test_a_twelve_hour_clock_file_is_repaired(week, tmp_path):
    """TrafficLabelling files that never pass 12 o'clock write the afternoon as 1:00…; those rows move by 12 h."""
    def twelve_hour(f):
        f[" Timestamp"] = f[" Timestamp"].str.replace(r" 1([3-9]):", lambda m: f" {int(m[1]) - 2}:", regex=True)

    root, _ = edited(week, tmp_path, "Monday", twelve_hour)
    c = build_corpus("cicids2017", root, scale=0.001)
    ref = build_corpus("cicids2017", week[1], scale=0.001)
    assert np.array_equal(c.timestamp, ref.timestamp)
    assert c.manifest["captures"][0]["timestamps_to_pm"] == 2 * 60  # Monday's 360 minutes end at 14:59


def test_attempted_rows_are_dropped_and_counted(corpus1):
    wed = next(s for s in corpus1.manifest["captures"] if s["capture"] == "Wednesday")
    assert (wed["raw"], wed["attempted_dropped"], wed["eligible"]) == (422, 2, 420)
    assert not any("Attempted" in n for n in corpus1.label_names)


def test_feature_sets(week, corpus1):
    names = corpus1.feature_names
    assert len(names) == 80 and {"Source Port", "Destination Port", "Protocol", "Fwd Header Length.1"} <= set(names)
    assert not {"Label", "Timestamp", "Flow ID", "Source IP"} & set(names)
    suite = build_corpus("cicids2017", week[1], scale=0.001, features=FeatureSet.SUITE)
    assert suite.X.shape == (1600, 77) and suite.manifest["features"]["names"] == [f.strip() for f in FEATURES]
    with pytest.raises(ConfigError, match="not offered for litnet"):
        build_corpus("litnet", week[1], features=FeatureSet.SUITE)


def test_non_finite_policy_zeroes_and_counts(week):
    c = build_corpus("cicids2017", week[1], budgets=ELIGIBLE)  # every eligible record kept
    assert np.isfinite(c.X).all()
    expected = {"posinf": 0, "nan": 0}
    for day in ELIGIBLE:
        raw = pd.read_csv(day_file(week[1], day), encoding="cp1252", skipinitialspace=True)
        raw = raw[~raw["Label"].str.contains("Attempted")]
        num = raw.select_dtypes("number").to_numpy()
        expected["posinf"] += int(np.isposinf(num).sum())
        expected["nan"] += int(np.isnan(num).sum())
    got = c.manifest["non_finite"]
    assert (got["posinf"], got["nan"]) == (expected["posinf"], expected["nan"]) and got["posinf"] > 0


def edited(week, tmp_path, day, edit):
    root = tmp_path / "root"
    shutil.copytree(week[1], root)
    path = day_file(root, day)
    frame = pd.read_csv(path, encoding="cp1252", dtype=str, keep_default_na=False)
    edit(frame)
    frame.to_csv(path, index=False, encoding="cp1252")
    return root, path


def no_timestamp(f):
    del f[" Timestamp"]


def bad_timestamp(f):
    f.loc[5, " Timestamp"] = "32/13/2017 25:99"


def bad_label(f):
    f.loc[5, " Label"] = "DoS Hulkk"


@pytest.mark.parametrize("edit, words", [(no_timestamp, "no Timestamp column"),
                                         (bad_timestamp, "not d/m/Y"),
                                         (bad_label, "unknown label")])
def test_bad_files_are_refused_in_one_line_naming_the_file(week, tmp_path, edit, words):
    root, path = edited(week, tmp_path, "Thursday", edit)
    before = sorted(p.name for p in root.rglob("*"))
    with pytest.raises(DatasetError) as e:
        build_corpus("cicids2017", root, scale=0.001)
    assert words in str(e.value) and path.name in str(e.value) and "\n" not in str(e.value)
    assert sorted(p.name for p in root.rglob("*")) == before  # nothing written


@pytest.mark.parametrize("kw, words", [({"budgets": {"Monday": 361}}, "capture 'Monday' (Monday-WorkingHours"
                                                                      ".pcap_ISCX.csv): budget 361 records is above"),
                                       ({"scale": 1e-6}, "empty after its budget (0 records")])
def test_bad_budgets_are_refused_in_one_line_naming_the_capture(week, kw, words):
    with pytest.raises(DatasetError) as e:
        build_corpus("cicids2017", week[1], **kw)
    assert words in str(e.value) and "--scale" in str(e.value) and "\n" not in str(e.value)


def test_rule_and_feature_set_names_parse_or_list_the_valid_ones():
    from bench.assembly.corpus import feature_set, subsample

    assert subsample("even") is Subsample.EVEN and feature_set("suite") is FeatureSet.SUITE
    with pytest.raises(ConfigError, match="valid: even, head, released"):
        subsample("random")
    with pytest.raises(ConfigError, match="valid: released, suite"):
        feature_set("all")


def test_unknown_source_and_missing_capture(week, tmp_path):
    with pytest.raises(ConfigError, match="valid: cicids2017, cicids2018, litnet"):
        build_corpus("nosuch", week[1])
    root = tmp_path / "one-day"
    (root / "TrafficLabelling").mkdir(parents=True)
    shutil.copy(day_file(week[1], "Monday"), root / "TrafficLabelling")
    with pytest.raises(DatasetError, match="no records of capture"):
        build_corpus("cicids2017", root, scale=0.001)


def test_released_rule_reproduces_the_archived_corpus_counts():
    """Per-day eligible records and attacks from the released audit's archived manifest
    (MichelYsf/rcbsid-paper results/manifests/cicids_subsample_audit_20260819T085704_3ed9b901.json); the paper's
    corpus holds 1,600,000 records and 352,962 attacks, a -2.1464-point prevalence bias, every stride 1."""
    from pathlib import Path

    from bench.assembly.corpus import CaptureTable, cut

    archived = {"Monday": (371_624, 0, 300_000), "Tuesday": (322_039, 6_933, 300_000),
                "Wednesday": (490_765, 171_645, 350_000), "Thursday": (360_079, 71_907, 300_000),
                "Friday": (543_490, 254_946, 350_000)}
    kept = attacks = 0
    for day, (n, a, budget) in archived.items():
        flags = np.zeros(n, bool)
        flags[:a] = True
        table = CaptureTable(day, pd.DataFrame(), np.zeros(n, object), flags, np.arange(n, dtype=np.int64),
                             (Path(day),))
        _, stat = cut(table, budget, Subsample.RELEASED)
        kept, attacks = kept + stat["kept"], attacks + stat["attacks_kept"]
        assert stat["head_of_each_class"]
    assert (kept, attacks) == (1_600_000, 352_962)
    eligible = sum(n for n, _, _ in archived.values())
    bias = 100 * attacks / kept - 100 * sum(a for _, a, _ in archived.values()) / eligible
    assert round(bias, 4) == -2.1464


def test_improved_release_gives_the_84_released_features_and_the_same_records(week, tmp_path):
    from bench.assembly.synthetic import Release, generate

    root = generate(tmp_path / "improved", K=1, seed=1, release=Release.IMPROVED)  # week[1]'s seed
    improved = build_corpus("cicids2017", root, scale=0.001)
    assert improved.X.shape == (1600, 84)
    assert {"Src Port", "Dst Port", "Protocol", "ICMP Code", "Total TCP Flow Time"} <= set(improved.feature_names)
    assert not {"id", "Attempted Category", "Label", "Timestamp"} & set(improved.feature_names)
    suite = {r: build_corpus("cicids2017", p, scale=0.001, features=FeatureSet.SUITE)
             for r, p in (("improved", root), ("traffic", week[1]))}
    assert np.array_equal(suite["improved"].y, suite["traffic"].y)
    assert np.array_equal(suite["improved"].X, suite["traffic"].X)
    assert improved.manifest["captures"][2]["attempted_dropped"] == 2
