"""Assembly runs (bench.assembly.runs, store): the run file round-trips to ScoredStream, complete files are skipped,
changed inputs never reuse a result, an interrupted online run resumes to identical scores, batch runs record
their batch, and bad input is one line."""

from __future__ import annotations

import json
import os

import h5py
import numpy as np
import pytest

from bench.assembly import runs, store
from bench.assembly.detectors import batch_record
from bench.assembly.records import Kind, ScoredStream, SplitRule
from bench.assembly.synthetic import generate
from bench.errors import ConfigError, DatasetError


class Interrupt(Exception):
    pass


@pytest.fixture(scope="module")
def week_root(tmp_path_factory):
    return generate(tmp_path_factory.mktemp("runs-week") / "week", K=1, seed=3)


def _spec(root, detector="bocpd", arm="timestamp", **kw) -> runs.RunSpec:
    return runs.RunSpec(runs.CorpusSpec("cicids2017", str(root), scale=0.001, name="synthetic"), arm, detector, **kw)


def test_online_run_file_round_trips_to_scored_stream(week_root, tmp_path):
    run = runs.prepare(_spec(week_root), tmp_path / "runs")
    runs.execute(run, log=lambda _: None)
    s = store.read_run(run.out)
    assert isinstance(s, ScoredStream) and s.kind is Kind.ONLINE and s.detector == "bocpd"
    corpus, sha = runs.load_corpus(run.spec.corpus)
    assert s.corpus == "synthetic" and s.corpus_sha256 == sha and s.n == corpus.n == 1600
    assert s.bounds == (1120, 1360) and s.batch is None
    order = np.argsort(corpus.timestamp, kind="stable")
    np.testing.assert_array_equal(s.rows, order)
    np.testing.assert_array_equal(s.y, corpus.y[order])
    assert np.isfinite(s.score).all() and set(s.branches) == {"tail", "short_run", "p_reset"}
    # the deployed score is the released composition of the stored branches, at every record past the warm-up
    composed = np.clip(np.maximum(s.branches["tail"], 0.25 * s.branches["short_run"]), 0, 1)
    np.testing.assert_allclose(s.score[30:], composed[30:], rtol=0, atol=1e-15)
    # scores equal a direct run of the detector over the stream (score before update, in order)
    direct = runs.detectors.get("bocpd").create().score_learn(corpus.X[order])
    np.testing.assert_array_equal(s.score, direct.score)
    attrs = store.run_attrs(run.out)
    assert attrs["run_key"] == run.run_key and attrs["git_commit"] and attrs["python"]
    assert len(json.loads(attrs["inputs_sha256"])) == 5  # one SHA-256 per input file (the five days)


def test_complete_file_is_skipped(week_root, tmp_path):
    run = runs.prepare(_spec(week_root, "iforest"), tmp_path / "runs")
    runs.execute(run, log=lambda _: None)
    before = run.out.stat().st_mtime_ns
    said = []
    runs.execute(run, log=said.append)
    assert run.out.stat().st_mtime_ns == before and "already complete" in said[-1]


def test_changed_corpus_input_gives_a_new_key_and_the_old_file_is_refused(tmp_path):
    root = generate(tmp_path / "week", K=1, seed=5)
    old = runs.prepare(_spec(root, "iforest"), tmp_path / "runs")
    runs.execute(old, log=lambda _: None)
    day = root / "TrafficLabelling" / "Monday-WorkingHours.pcap_ISCX.csv"
    lines = day.read_text(encoding="cp1252").splitlines(keepends=True)
    fields = lines[5].split(",")
    fields[7] = "12345.5"  # one feature of one Monday record changes
    lines[5] = ",".join(fields)
    day.write_text("".join(lines), encoding="cp1252")
    new = runs.prepare(_spec(root, "iforest"), tmp_path / "runs")
    assert new.run_key != old.run_key and new.out != old.out  # recomputed under its own key, never the stale file
    with pytest.raises(ConfigError, match="run key changed since it was planned"):
        runs.execute(old, log=lambda _: None)  # a job planned before the change refuses to run
    with pytest.raises(ConfigError, match="holds run key"):
        runs.execute(runs.PreparedRun(new.spec, new.run_key, old.out), log=lambda _: None)
    runs.execute(new, log=lambda _: None)
    assert store.read_run(new.out).corpus_sha256 != store.read_run(old.out).corpus_sha256
    other = tmp_path / "image-run.h5"
    other.write_bytes(b"someone else's file")
    with pytest.raises(ConfigError, match="exists and is not an assembly run file"):
        runs.execute(runs.PreparedRun(new.spec, new.run_key, other), log=lambda _: None)
    assert other.read_bytes() == b"someone else's file"


@pytest.mark.parametrize("detector", ["bocpd", "hst"])
def test_interrupted_online_run_resumes_to_identical_scores(week_root, tmp_path, detector):
    quick = detector == "hst"
    whole = runs.prepare(_spec(week_root, detector, quick=quick), tmp_path / "whole")
    runs.execute(whole, log=lambda _: None, chunk=100)
    cut = runs.prepare(_spec(week_root, detector, quick=quick), tmp_path / "cut")

    def stop(k):
        if k == 7:
            raise Interrupt

    with pytest.raises(Interrupt):
        runs.execute(cut, log=lambda _: None, chunk=100, checkpoint_every=300, on_chunk=stop)
    ckpt = store.checkpoint_path(cut.out)
    assert not cut.out.exists() and ckpt.is_file()
    with h5py.File(ckpt, "r") as f:
        assert int(f.attrs["position"]) == 600  # the last checkpoint before the interruption (after chunk 6)
    said = []
    runs.execute(cut, log=said.append, chunk=100, checkpoint_every=300)
    assert any("resuming at record 600" in line for line in said) and not ckpt.exists()
    a, b = store.read_run(whole.out), store.read_run(cut.out)
    np.testing.assert_array_equal(a.score, b.score)
    for name in a.branches:
        np.testing.assert_array_equal(a.branches[name], b.branches[name])


def test_batch_run_records_its_batch(week_root, tmp_path):
    run = runs.prepare(_spec(week_root, "ecod", arm="day_round_robin"), tmp_path / "runs")
    runs.execute(run, log=lambda _: None)
    s = store.read_run(run.out)
    corpus, _ = runs.load_corpus(run.spec.corpus)
    i_tr = s.bounds[0]
    assert s.kind is Kind.BATCH and np.isnan(s.score[:i_tr]).all() and np.isfinite(s.score[i_tr:]).all()
    assert s.batch == batch_record(corpus.record_id[s.rows[i_tr:]]) and s.batch.size == 1600 - 1120
    assert store.run_attrs(run.out)["batch_dependent"]
    # the analyses' in-memory scoring makes the same call (common.score_batch): the same scores and batch
    from bench.assembly import arms, detectors
    from bench.assembly.analyses.inmemory import score_arm

    mem = score_arm(corpus, arms.make_arm(corpus, "day_round_robin"), detectors.get("ecod"), run.spec.split)
    np.testing.assert_array_equal(mem.score, s.score)
    assert mem.batch == s.batch


def test_read_run_refuses_other_files_in_one_line(tmp_path):
    path = tmp_path / "x.h5"
    with h5py.File(path, "w") as f:
        f.attrs["status"] = "complete"
    with pytest.raises(DatasetError, match="not an assembly run file") as e:
        store.read_run(path)
    assert "\n" not in str(e.value)
    (tmp_path / "y.h5").write_text("not hdf5")
    with pytest.raises(DatasetError, match="not a readable assembly run file"):
        store.read_run(tmp_path / "y.h5")


def test_a_small_run_file_declaring_huge_arrays_is_refused_before_reading(tmp_path):
    """A few-KB assembly run file declaring 10^11 scores (chunked, compressed, nothing stored) would make read_run
    allocate 745 GiB; the size guard the suite's result reader uses (results.sized_datasets) refuses it first."""
    path = tmp_path / "crafted.h5"
    with h5py.File(path, "w") as f:
        f.attrs.update(format=store.FORMAT, status="complete")
        f.create_dataset("rows", data=np.arange(5))
        f.create_dataset("y", data=np.zeros(5, np.int8))
        f.create_dataset("score", shape=(10**11,), dtype="f8", chunks=(2**20,), compression="gzip")
    assert path.stat().st_size < 100_000
    with pytest.raises(DatasetError, match="dataset score declares shape \\(100000000000,\\)") as e:
        store.read_run(path)
    assert str(path) in str(e.value) and "\n" not in str(e.value)
    # a checkpoint declaring as much is not this run's to resume: started over, unread
    ckpt = tmp_path / "crafted.h5.ckpt"
    with h5py.File(ckpt, "w") as f:
        f.attrs.update(run_key="k", position=5)
        f.create_dataset("score", shape=(10**11,), dtype="f8", chunks=(2**20,), compression="gzip")
        f.create_dataset("state/x", data=np.zeros(1))
    assert store.read_checkpoint(ckpt, "k", None, np.zeros(5), {}) == 0 and not ckpt.exists()


@pytest.mark.parametrize("change, message", [
    (dict(detector="nope"), "unknown assembly detector 'nope'"),
    (dict(arm="shuffled"), "unknown arm 'shuffled'"),
    (dict(split=SplitRule(0.9, 0.1)), "train \\+ validation < 1"),
    (dict(preset="fast"), "unknown bocpd preset 'fast'"),
])
def test_bad_run_specs_are_one_line(week_root, change, message):
    spec = _spec(week_root, **{"detector": "bocpd", **change})
    with pytest.raises(ConfigError, match=message) as e:
        runs.prepare(spec)
    assert "\n" not in str(e.value)


def test_a_split_leaving_a_segment_empty_is_refused(week_root, tmp_path):
    spec = _spec(week_root, "iforest", split=SplitRule(0.7, 0.0005))  # int(0.0005 · 1600) = 0 validation records
    with pytest.raises(ConfigError, match="leaves the validation segment"):
        runs.execute(runs.prepare(spec, tmp_path), log=lambda _: None)


def test_missing_root_says_how_to_stage_it(tmp_path):
    with pytest.raises(DatasetError, match="no such dataset folder.*bench assembly synthetic"):
        runs.prepare(_spec(tmp_path / "absent"), tmp_path)
    spec = runs.RunSpec(runs.CorpusSpec("cicids2017", str(tmp_path / "absent")), "timestamp", "bocpd")
    with pytest.raises(DatasetError, match="stage the cicids2017 captures there"):
        runs.prepare(spec, tmp_path)


def test_planning_reuses_the_corpus_facts_until_a_file_changes(tmp_path, monkeypatch):
    root = generate(tmp_path / "week", K=1, seed=6)
    first = runs.prepare(_spec(root, "iforest"), tmp_path / "runs", cache_dir=tmp_path / "corpus")
    assert len(list((tmp_path / "corpus").glob("*.json"))) == 1

    def no_build(spec):
        raise AssertionError("the corpus was rebuilt")

    monkeypatch.setattr(runs, "load_corpus", no_build)
    again = runs.prepare(_spec(root, "iforest"), tmp_path / "runs", cache_dir=tmp_path / "corpus")
    assert again.run_key == first.run_key
    day = root / "TrafficLabelling" / "Friday-WorkingHours.pcap_ISCX.csv"
    day.write_bytes(day.read_bytes().replace(b"7/7/2017 9:00", b"7/7/2017 9:01", 1))
    with pytest.raises(AssertionError, match="rebuilt"):  # the root changed: the facts are not reused
        runs.prepare(_spec(root, "iforest"), tmp_path / "runs", cache_dir=tmp_path / "corpus")


def test_a_same_size_rewrite_given_back_its_mtime_is_a_change(tmp_path, monkeypatch):
    """`cp -p` / `rsync -t` keep size and mtime: the corpus key must still see new content (inode, ctime)."""
    root = generate(tmp_path / "week", K=1, seed=6)
    runs.prepare(_spec(root, "iforest"), tmp_path / "runs", cache_dir=tmp_path / "corpus")
    day = root / "TrafficLabelling" / "Friday-WorkingHours.pcap_ISCX.csv"
    before = day.stat()
    edited = day.read_bytes().replace(b"7/7/2017 9:00", b"7/7/2017 9:01", 1)
    assert len(edited) == before.st_size
    staged = day.with_suffix(".new")
    staged.write_bytes(edited)
    os.utime(staged, ns=(before.st_atime_ns, before.st_mtime_ns))
    os.replace(staged, day)  # what rsync -t does: a new file renamed into place, old mtime
    assert (day.stat().st_size, day.stat().st_mtime_ns) == (before.st_size, before.st_mtime_ns)

    def no_build(spec):
        raise AssertionError("the corpus was rebuilt")

    monkeypatch.setattr(runs, "load_corpus", no_build)
    with pytest.raises(AssertionError, match="rebuilt"):
        runs.prepare(_spec(root, "iforest"), tmp_path / "runs", cache_dir=tmp_path / "corpus")
