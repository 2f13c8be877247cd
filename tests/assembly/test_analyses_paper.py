"""The stream-assembly paper's shipped numbers: pinned digests, an edited value refused, the paper's arithmetic
consistent across files, and comparability with every reason."""

import shutil

import pytest

from bench.assembly import paper, records
import bench.assembly.corpus  # noqa: F401  (registers the sources)
from bench.assembly.sources import SOURCES
from bench.errors import BenchError


@pytest.fixture(scope="module")
def cells():
    return {c.cell: c.value for cs in paper.load_all().values() for c in cs}


def test_every_shipped_file_matches_its_digest():
    loaded = paper.load_all()
    assert set(loaded) == set(paper.SHIPPED_SHA256) and all(loaded.values())
    assert {c.origin for cs in loaded.values() for c in cs} == {"text", "manifest", "derived"}


def test_an_edited_value_is_refused_in_one_line(tmp_path):
    for name in paper.SHIPPED_SHA256:
        shutil.copy(paper.DATA_DIR / name, tmp_path / name)
    path = tmp_path / "assembly_table6.csv"
    path.write_text(path.read_text().replace("0.905613", "0.915613"))
    with pytest.raises(BenchError, match="assembly_table6.csv: SHA-256 .* is not the pinned") as e:
        paper.load("assembly_table6.csv", tmp_path)
    assert "\n" not in str(e.value)
    crlf = tmp_path / "assembly_table8.csv"
    crlf.write_bytes(crlf.read_bytes().replace(b"\n", b"\r\n"))  # line endings alone change nothing
    assert paper.load("assembly_table8.csv", tmp_path) == paper.load("assembly_table8.csv")


def test_the_papers_arithmetic_holds_across_the_files(cells):
    # Table 6 margins (text) from the recovered cells
    assert cells["t6.timestamp.bocpd.ap"] - cells["t6.timestamp.ecod.slice.ap"] == pytest.approx(
        cells["s.timestamp.slice.margin"], abs=1e-9)
    assert cells["t6.day_round_robin.bocpd.ap"] - cells["t6.day_round_robin.ecod.shared.ap"] == pytest.approx(
        cells["s.day_round_robin.shared.margin"], abs=1e-9)
    assert cells["t6.timestamp.bocpd.ap"] - cells["t6.day_round_robin.bocpd.ap"] == pytest.approx(
        cells["s.bocpd_history_move"], abs=1e-9)
    # Table 8: tail minus deployed; the dump's deployed AP differs from Table 4's by 0.000018
    assert cells["t8.tail.ap"] - cells["t8.deployed.ap"] == pytest.approx(cells["r.tail_minus_deployed.ap"], abs=1e-9)
    assert cells["t8.deployed.ap"] - cells["t4.timestamp.bocpd.ap"] == pytest.approx(0.000018, abs=1e-9)
    # Table 9 against the text's lifts (the text rounds its operands first: within 2e-6)
    for level in ("5", "10", "natural", "40", "64"):
        ap, p = cells[f"t9.{level}.bocpd.ap"], cells[f"t9.{level}.chance"]
        assert ap - p == pytest.approx(cells[f"p.lift.{level}"], abs=2e-6)
        assert (ap - p) / (1 - p) == pytest.approx(cells[f"p.norm_lift.{level}"], abs=2e-6)
    # the ladder's span, and the contrast margins from Table 4
    ladder = [cells[f"b.ladder.{k}"] for k in (240000, 300000, 360000, 480000)]
    assert max(ladder) - min(ladder) == pytest.approx(cells["b.ladder.span"], abs=1e-9)
    assert cells["t4.timestamp.ecod.ap"] - cells["t4.timestamp.bocpd.ap"] == pytest.approx(
        cells["m.timestamp.ecod_minus_bocpd"], abs=1e-9)
    assert cells["t4.timestamp.attacks"] / cells["t4.timestamp.records"] == pytest.approx(
        cells["t4.timestamp.prevalence"], abs=5e-7)


def _released_manifest():
    return {"capture_identity": {"source": "cicids2017"}, "budgets": dict(SOURCES["cicids2017"].budgets),
            "rule": "released", "scale": 1.0, "features": {"set": "released", "n": 84},
            "non_finite": {"policy": "released"}}


def test_the_released_setting_is_comparable():
    bocpd = paper.DetectorSetting("bocpd", "released", {})
    ecod = paper.DetectorSetting("ecod", "released", {"minmax": True})
    c = paper.comparability(_released_manifest(), records.SplitRule(), [bocpd, ecod])
    assert c.comparable and c.text() == "comparable"


def test_another_feature_set_is_not_comparable_with_that_reason():
    m = _released_manifest()
    m["features"] = {"set": "suite", "n": 77}
    c = paper.comparability(m, records.SplitRule())
    assert not c.comparable and c.reasons == (paper.Reason.FEATURES,)
    assert c.text().startswith("not comparable: feature set (suite (77 columns)")


def test_every_reason_is_listed():
    m = {"capture_identity": {"source": "cicids2017"}, "budgets": {"Monday": 300}, "rule": "even", "scale": 0.001,
         "features": {"set": "released", "n": 80}, "non_finite": {"policy": "drop"}}
    c = paper.comparability(m, records.SplitRule(0.6, 0.2), [paper.DetectorSetting("bocpd", "corrected_reset", {})])
    assert c.reasons == (paper.Reason.BUDGETS, paper.Reason.RULE, paper.Reason.SCALE, paper.Reason.FEATURES,
                         paper.Reason.NON_FINITE, paper.Reason.SPLIT, paper.Reason.DETECTOR)
    synthetic = paper.comparability({"capture_identity": {"source": "synthetic"}}, records.SplitRule())
    assert synthetic.reasons == (paper.Reason.CORPUS,)


def test_the_synthetic_week_reproduces_the_papers_identities_at_any_scale():
    from bench.assembly import arms, audit
    from bench.assembly.perf import stand_in

    c = stand_in(1600)
    a = audit.audit(c, [arms.make_arm(c, "timestamp"), arms.make_arm(c, "day_round_robin")])
    rows = paper.identities(a)
    assert [r.holds for r in rows] == [True] * 4
    assert rows[1].ours == 78 and rows[1].ours_at_paper_scale == 78_000
    assert len(paper.identity_frame(rows)) == 4
