"""The tabular track through the one continual runner: record protocols on the synthetic tabular benchmark, the
per-cell metrics of the tabular reports, resume after a stop, and the readers (results.load, report.collect)."""

from __future__ import annotations

import json

import numpy as np
import pytest
from sklearn.metrics import average_precision_score

from bench import results
from bench.config import SCHEMA_VERSION, RunConfig, TabularInputs
from bench.continual.runner import execute, prepare
from bench.errors import ConfigError
from bench.metrics import continual_roc_auc, forgetting, roc_auc, summarize
from bench.registry import get
from bench.report.collect import ProvenanceError, check_file, check_scores
from bench.metrics import expected_random_ap

STREAM = ["Monday", "Tuesday", "Wednesday", "Thursday"]  # the synthetic benchmark's kept regimes
QUIET = lambda s: None  # noqa: E731


@pytest.fixture(scope="module")
def index(tmp_path_factory):
    from bench.tabular import discovery, preprocess, scenario

    root = tmp_path_factory.mktemp("tabular-runner")
    cand = discovery.DiscoverySettings()
    preprocess.build_index("synthetic", scenario.raw_table("synthetic", root, seed=0),
                           lambda df: discovery.discover(df, cand), preprocess.PrepSettings(), root / "index",
                           cand.to_dict())
    return root / "index"


def config(index, protocol, model="iforest", **kw):
    kw.setdefault("inputs", TabularInputs())
    return RunConfig(dataset="synthetic", root=str(index), model=model, tasks=list(STREAM), protocol=protocol,
                     seed=0, hparams=dict(get(model, "tabular").quick), device="cpu", **kw)


def run(index, tmp_path, protocol, name=None, max_steps=None, **kw):
    prepared = prepare(config(index, protocol, **kw), out=tmp_path / f"{name or protocol}.h5")
    return results.read_run(execute(prepared, progress=False, max_steps=max_steps, log=QUIET)), prepared


@pytest.fixture(scope="module")
def runs(index, tmp_path_factory):
    out = tmp_path_factory.mktemp("runs")
    return {p: run(index, out, p)[0] for p in ("ncl", "mste")}


def test_record_protocols_through_the_runner(runs):
    for protocol, r in runs.items():
        a, R = r["attrs"], r["R/record"]
        assert (a["status"], a["track"], json.loads(a["levels"]), a["evaluation"]) == \
            ("complete", "tabular", ["record"], "continual")
        assert a["schema_version"] == SCHEMA_VERSION and r["tasks"] == STREAM
        low = np.tril(np.ones((4, 4), dtype=bool))
        assert np.isfinite(R[low]).all() and np.isnan(R[~low]).all()
        assert np.diagonal(R).min() >= 0.8, protocol  # every expert learns its own regime
    mste = runs["mste"]["R/record"]
    assert forgetting(mste) == 0 and all(np.unique(mste[j:, j]).size == 1 for j in range(4))
    assert forgetting(runs["ncl"]["R/record"]) > 0  # Naive refits on each regime and forgets the earlier ones


def test_each_cell_records_ap_prevalence_npr_auc_and_random_ap(runs, index):
    import pandas as pd

    r = runs["ncl"]
    records = pd.read_csv(index / "index.csv", keep_default_na=False)
    for i, j in ((0, 0), (3, 1)):
        sel = (r["scores/step"] == i) & (r["scores/task"] == j)
        y, s, rows = r["scores/label"][sel], r["scores/value"][sel], r["scores/record"][sel]
        assert (records["task"].iloc[rows] == STREAM[j]).all() and (records["split"].iloc[rows] == "test").all()
        assert np.array_equal(records["label"].iloc[rows].to_numpy(), y)
        assert r["R/record"][i, j] == pytest.approx(roc_auc(y, s), abs=1e-12)
        ap, p = average_precision_score(y, s), y.mean()
        assert r["R/record_ap"][i, j] == pytest.approx(ap, abs=1e-9)
        assert r["R/record_prevalence"][i, j] == pytest.approx(p)
        assert r["R/record_npr_auc"][i, j] == pytest.approx((ap - p) / (1 - p), abs=1e-9)
        assert r["R/record_expected_ap"][i, j] == pytest.approx(expected_random_ap(len(y), int(y.sum())))
        assert r["R/record_expected_ap"][i, j] > p  # a random ranking's AP is above p on a finite set


def test_a_stopped_run_resumes_to_the_same_results(index, tmp_path, runs):
    part, prepared = run(index, tmp_path, "ncl", "part", max_steps=2)
    assert (part["attrs"]["status"], part["attrs"]["steps_done"]) == ("running", 2)
    assert prepared.checkpoint_path.is_file()
    whole, _ = run(index, tmp_path, "ncl", "part")
    assert whole["attrs"]["status"] == "complete" and not prepared.checkpoint_path.exists()
    for key in ("R/record", "R/record_ap", "scores/value", "scores/record"):
        assert np.array_equal(whole[key], runs["ncl"][key], equal_nan=True), key
    assert whole["attrs"]["run_key"] == runs["ncl"]["attrs"]["run_key"]


@pytest.fixture(scope="module")
def replay(index, tmp_path_factory):
    """An uninterrupted Replay run (its checkpoint carries a detector and a buffer) to resume against."""
    return run(index, tmp_path_factory.mktemp("replay"), "cl")[0]


def _same_results(a: dict, b: dict) -> None:
    for key in ("R/record", "R/record_ap", "R/record_npr_auc", "scores/value", "scores/record"):
        assert np.array_equal(a[key], b[key], equal_nan=True), key
    assert a["attrs"]["run_key"] == b["attrs"]["run_key"]


@pytest.mark.parametrize("boundary", ["checkpoint write", "result write", "checkpoint removal"])
def test_a_run_killed_at_each_write_boundary_of_its_last_step_resumes_to_identical_results(
        boundary, index, tmp_path, monkeypatch, replay):
    from helpers import Killed, kill_at

    _, prepared = run(index, tmp_path, "cl", "part", max_steps=len(STREAM) - 1)
    with monkeypatch.context() as m:
        kill_at(m, boundary)
        with pytest.raises(Killed):
            execute(prepared, progress=False, log=QUIET)
    whole = results.read_run(execute(prepared, progress=False, log=QUIET))
    assert whole["attrs"]["status"] == "complete" and not prepared.checkpoint_path.exists()
    _same_results(whole, replay)


@pytest.mark.slow
def test_a_sigkilled_run_resumes_to_identical_results(index, tmp_path):
    import signal
    import subprocess
    import sys
    import time

    import h5py

    out = tmp_path / "killed.h5"
    command = [sys.executable, "-m", "bench", "tabular", "run", "--index", str(index), "--model", "autoencoder",
               "--protocol", "cl", "--quick", "--tasks", ",".join(STREAM), "--out", str(out)]
    with (tmp_path / "child.log").open("w") as log:  # a file, not a pipe: a full pipe would stall the child
        child = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT)
    deadline, done = time.monotonic() + 300, 0
    while child.poll() is None and time.monotonic() < deadline and not done:
        time.sleep(0.01)
        if out.is_file():  # written by os.replace: a whole file or none
            with h5py.File(out, "r", locking=False) as f:
                done = int(f.attrs["steps_done"])
    child.send_signal(signal.SIGKILL)
    assert child.wait() == -signal.SIGKILL, (tmp_path / "child.log").read_text()  # killed, not finished
    assert 1 <= done < len(STREAM) and results.read_run(out)["attrs"]["status"] == "running"
    resumed = subprocess.run(command, capture_output=True, text=True)
    assert resumed.returncode == 0 and "resuming" in resumed.stdout + resumed.stderr, resumed.stderr
    whole, _ = run(index, tmp_path, "cl", "whole", model="autoencoder")  # on the thread count the command ran on
    _same_results(results.read_run(out), whole)


def test_runs_carry_the_stream_order_of_a_timestamped_index(index, tmp_path, runs):
    import shutil

    import pandas as pd

    from bench.report import tabular as tb

    stamped = tmp_path / "stamped"
    shutil.copytree(index, stamped)
    records = pd.read_csv(stamped / "index.csv", keep_default_na=False, dtype=str)
    # stream order reverses the index rows, three records per second (ties broken by record id)
    seconds = (len(records) - np.arange(len(records))) // 3
    records["timestamp"] = (pd.Timestamp("2017-07-03") + pd.to_timedelta(seconds, unit="s")).strftime(
        "%Y-%m-%dT%H:%M:%S")
    records.to_csv(stamped / "index.csv", index=False)
    part, _ = run(stamped, tmp_path, "ncl", "stamped", max_steps=2)
    r, _ = run(stamped, tmp_path, "ncl", "stamped")  # resumed: the order survives the checkpoint
    assert "scores/order" not in runs["ncl"] and r["scores/order"].dtype == np.int64
    for i, j in ((0, 0), (3, 1), (3, 3)):
        sel = (r["scores/step"] == i) & (r["scores/task"] == j)
        rows = r["scores/record"][sel]
        expected = sorted(range(rows.size), key=lambda k: (records["timestamp"].iloc[rows[k]], rows[k]))
        assert np.array_equal(np.argsort(r["scores/order"][sel]), expected)
    assert np.array_equal(r["R/record"], runs["ncl"]["R/record"], equal_nan=True)  # the timestamps change no score
    frame = pd.DataFrame([{"track": "tabular", "dataset": "synthetic", "ordering": "o", "model": "iforest",
                           "protocol": p, "seed": 0, "run_key": p} for p in ("ncl", "mste")])
    long = tb.tabular_table2(tb.tabular_cells(frame, {"ncl": r, "mste": runs["mste"]}, n_boot=50))
    assert dict(zip(long["protocol"], long["method"])) == {"ncl": "block", "mste": "stratified"}


def test_a_schema_2_tabular_file_keeps_its_run_key_and_aggregates(index, runs, tmp_path):
    import hashlib
    import shutil

    import h5py

    from bench.report.collect import collect

    path = tmp_path / "tabular-synthetic" / "runs" / "old.h5"
    path.parent.mkdir(parents=True)
    shutil.copy(run(index, tmp_path, "ncl")[1].out, path)
    with h5py.File(path, "r+") as f:  # as schema 2 wrote it: a flat config carrying the unused image fields
        config = json.loads(f.attrs["config"])
        flat = {**{k: v for k, v in config.items() if k != "inputs"}, "backbone": "resnet18", "weights": "imagenet",
                "image_size": 224, "batch_size": 32, "workers": 0, "cache_budget": "", "pixel_eval": "resized",
                "feature_dtype": "float16"}
        text = json.dumps(flat, sort_keys=True, separators=(",", ":"))
        # its key had no index content (run key schema 2): what the schema-2 preimage of this config gives
        old_key = RunConfig.from_json(text).run_key(f.attrs["index_sha256"], "none")
        f.attrs.update(schema_version=2, config=text, config_sha256=hashlib.sha256(text.encode()).hexdigest(),
                       run_key=old_key)
    assert old_key != runs["ncl"]["attrs"]["run_key"]  # today's key also covers index.csv and features.npy
    old = results.read_run(path)
    check_file(old, path, "tabular-synthetic")  # the run key recomputed from the flat config still matches
    assert check_scores(old, path)
    row = results.load(path).iloc[0]
    assert (row["track"], row["backbone"], row["run_key"]) == ("tabular", "", old_key)
    assert list(collect(tmp_path, "tabular-synthetic").runs["run_key"]) == [row["run_key"]]


def test_readers_see_the_levels_and_no_backbone(runs, tmp_path):
    path = tmp_path / "ncl.h5"
    results.write_run(path, runs["ncl"]["attrs"], {k: v for k, v in runs["ncl"].items()
                                                  if k not in ("attrs", "tasks")}, STREAM)
    row = results.load(path).iloc[0]
    assert (row["track"], row["backbone"], row["protocol"]) == ("tabular", "", "ncl")
    assert "image_roc_auc_cl" not in row and np.isfinite(row["record_roc_auc_cl"])
    r = results.read_run(path)
    check_file(r, path, "tabular-synthetic")  # the tabular synthetic benchmark's own result folder
    assert check_scores(r, path)
    r["R/record"][2, 1] += 0.01
    with pytest.raises(ProvenanceError, match=r"R/record\[2,1\]"):
        check_scores(r, path)


@pytest.mark.parametrize("matrix", ["R/record_ap", "R/record_npr_auc", "R/record_prevalence",
                                    "R/record_expected_ap"])
def test_an_edited_pr_matrix_is_refused_like_an_edited_roc_auc(runs, tmp_path, capsys, matrix):
    from bench.cli import main

    path = tmp_path / "tabular-synthetic" / "runs" / "ncl.h5"
    r = runs["ncl"]
    arrays = {k: v.copy() for k, v in r.items() if k not in ("attrs", "tasks")}
    arrays[matrix][2, 1] += 0.01
    results.write_run(path, r["attrs"], arrays, STREAM)
    with pytest.raises(ProvenanceError, match=rf"{matrix}\[2,1\] = .* but the file's per-sample scores give"):
        check_scores(results.read_run(path), path)
    capsys.readouterr()
    assert main(["aggregate", "--dataset", "tabular-synthetic", "--outputs", str(tmp_path)]) == 2
    assert matrix in capsys.readouterr().err
    assert not (tmp_path / "tabular-synthetic" / "tables").exists()


def test_cli_run_resumes_and_refuses_bad_input(index, tmp_path, capsys):
    from helpers import cli_stdout

    from bench.cli import main

    args = ["tabular", "run", "--index", index, "--model", "iforest", "--quick", "--protocol", "cumulative",
            "--tasks", ",".join(STREAM), "--out", tmp_path / "c.h5"]
    cli_stdout(*args, "--max-steps", 1)
    assert results.read_run(tmp_path / "c.h5")["attrs"]["steps_done"] == 1
    out = cli_stdout(*args)
    r = results.read_run(tmp_path / "c.h5")
    s = summarize(r["R/record"])  # the run's own summary, as image runs print theirs
    assert f"record: ROC-AUC_CL {s['roc_auc_cl']:.4f}  BWT {s['bwt']:+.4f}  FM {s['forgetting']:.4f}" in out
    p = np.diag(r["R/record_prevalence"])
    assert (f"nPR-AUC_CL {continual_roc_auc(r['R/record_npr_auc']):.4f}  (prevalence p {p.mean():.3f}, "
            f"per task {p.min():.3f}-{p.max():.3f})") in out
    assert r["attrs"]["status"] == "complete" and r["replay/composition"][3].tolist() == [
        int(x) for x in r["tasks_info/n_train"][:3]] + [0]  # Cumulative: every past record
    capsys.readouterr()
    with pytest.raises(SystemExit) as stop:  # the protocols are --protocol's choices: argparse lists them, exit 2
        main(["tabular", "run", "--index", str(index), "--model", "iforest", "--protocol", "ste2",
              "--out", str(tmp_path / "d.h5")])
    err = capsys.readouterr().err
    assert stop.value.code == 2 and "invalid choice: 'ste2'" in err and "'cumulative_fresh'" in err
    assert not (tmp_path / "d.h5").exists()


def test_bad_tabular_configs_fail_before_work(index, tmp_path):
    with pytest.raises(ConfigError, match="valid: ncl, cl, cumulative, cumulative_fresh, mste, ste"):
        prepare(config(index, "finetune"), out=tmp_path / "x.h5")
    with pytest.raises(ConfigError, match="evaluation"):
        prepare(RunConfig(dataset="synthetic", root="r", model="patchcore", tasks=["a"], evaluation="cross"))
    bad = config(index, "ncl")
    bad.tasks = ["Monday", "Caturday"]
    with pytest.raises(ConfigError, match="Caturday"):
        prepare(bad, out=tmp_path / "y.h5")
    assert not list(tmp_path.iterdir())


def test_a_run_records_its_index_settings_and_refuses_an_index_built_otherwise(index, tmp_path, runs):
    recorded = json.loads(runs["ncl"]["attrs"]["config"])["inputs"]  # asked for none: all recorded from the index
    built = json.loads((index / "index.json").read_text())["settings"]
    content = recorded.pop("index_content_sha256")
    assert recorded.pop("replay_size") is None and recorded.pop("replay_share") is None  # Naive has no buffer
    assert recorded.pop("nonfinite") == "stop"  # the suite preset stops on a non-finite score
    assert recorded == {"preprocessing": built["preprocessing"], "discovery": built["discovery"]}
    assert len(content) == 64
    assert recorded["preprocessing"]["train_fraction"] == 0.8 and recorded["discovery"]["method"] == "natural"
    asked = prepare(config(index, "ncl", inputs=TabularInputs(preprocessing={"rebalance": False})),
                    out=tmp_path / "same.h5")
    same = prepare(config(index, "ncl"), out=tmp_path / "same.h5")
    assert asked.run_key == same.run_key  # the index_sha256 in the key covers the settings
    for settings, message in (({"preprocessing": {"rebalance": True}}, "built with preprocessing rebalance=False"),
                              ({"discovery": {"method": "kmeans"}}, "built with discovery method='natural'"),
                              ({"preprocessing": {"scaler": "robust"}}, "has no setting 'scaler'")):
        with pytest.raises(ConfigError, match=message) as e:
            prepare(config(index, "ncl", inputs=TabularInputs(**settings)), out=tmp_path / "x.h5")
        assert str(index / "index.json") in str(e.value)
    assert not list(tmp_path.iterdir())


@pytest.fixture(scope="module")
def scenario_folder(index):
    """A scenario folder as `bench tabular scenarios` lays it out: the selected candidate's index + orderings."""
    import shutil

    from bench.tabular.orderings import ORDERINGS

    root = index.parent / "scenario"
    shutil.copytree(index, root / "candidates" / "natural-day" / "index")
    (root / "release").mkdir()
    (root / "release" / "manifest.json").write_text(json.dumps({"selected_candidate": "natural-day"}))
    rotations = [STREAM[k:] + STREAM[:k] for k in range(4)]
    distinct = rotations + [r[::-1] for r in rotations]  # six of these eight distinct task orders
    orders = dict(zip(ORDERINGS, distinct))
    (root / "release" / "orderings.json").write_text(json.dumps(orders))
    return root


def test_tabular_grid_submits_runs_and_reports_through_the_same_commands(scenario_folder, tmp_path, capsys):
    from helpers import cli_stdout

    from bench.hpc import grid as grids
    from bench.hpc import memory

    grid = grids.load_grid("tabular-synthetic")  # the shipped grid: 6 orderings × 4 strategies per model
    planned = grids.expand(grid, grids.load_profile("cpu"), grids.Selection(), scenario_folder, tmp_path)
    assert len(planned) == len(grid.models) * 6 * len(grid.protocols)
    assert all(p.run.out.parent == tmp_path / "tabular-synthetic" / "runs" for p in planned)
    cum = [p for p in planned if p.run.config.protocol == "cumulative"][0]
    size = (scenario_folder / "candidates" / "natural-day" / "index" / "features.npy").stat().st_size
    assert cum.resources.mem_gb == max(grid.resources.mem_gb, memory.tabular_mem_gb(size, "cumulative"))
    assert memory.tabular_mem_gb(12_000_000 * 80 * 4, "cumulative") > memory.tabular_mem_gb(12_000_000 * 80 * 4, "ncl")
    replay = [p for p in planned if p.run.config.protocol == "cl"][0]
    n = len(np.load(scenario_folder / "candidates" / "natural-day" / "index" / "features.npy", mmap_mode="r"))
    assert replay.resources.mem_gb == max(grid.resources.mem_gb, memory.tabular_mem_gb(size, "cl", n))
    args = ["submit", "--dataset", "tabular-synthetic", "--root", scenario_folder, "--outputs", tmp_path,
            "--models", "deepsvdd", "--orderings", "smooth_drift,abrupt_drift", "--protocols", "ncl,mste",
            "--cluster", "debug", "--profile", "cpu"]
    assert "4 runs ran" in cli_stdout(*args)
    files = sorted((tmp_path / "tabular-synthetic" / "runs").glob("*.h5"))
    assert len(files) == 4
    for f in files:
        r = results.read_run(f)
        assert r["attrs"]["status"] == "complete" and r["attrs"]["track"] == "tabular"
    out = cli_stdout("status", "--dataset", "tabular-synthetic", "--outputs", tmp_path)
    assert out.splitlines()[-1].startswith("total 4 runs: 4 complete")
    assert "nothing to submit" in cli_stdout(*args)
    # make aggregate / verify: the tabular Table 2 and the validation criteria, from the same files
    cli_stdout("aggregate", "--dataset", "tabular-synthetic", "--outputs", tmp_path, "--bootstrap", "60",
               "--figures", "none")
    import pandas as pd

    from bench.metrics import continual_roc_auc

    from bench.report import tabular as tb

    tables = tmp_path / "tabular-synthetic" / "tables"
    long = pd.read_csv(tables / "tabular_table2.csv")
    assert len(long) == 2 * 2 * len(tb.METRICS)  # orderings × strategies × metrics
    configs = {f: json.loads(results.read_run(f)["attrs"]["config"]) for f in files}
    by_file = {(c["protocol"], c["ordering"]): results.read_run(f) for f, c in configs.items()}
    for row in long[long["metric"] == "roc_auc_cl"].itertuples():
        R = by_file[(row.protocol, row.ordering)]["R/record"]
        assert row.value == pytest.approx(continual_roc_auc(R)) and row.ci_low <= row.value <= row.ci_high
    tasks = pd.read_csv(tables / "tabular_tasks.csv")  # each test set's own prevalence, not a pooled one
    assert tasks["prevalence"].between(0, 1).all() and (tasks["random_ap"] >= tasks["prevalence"]).all()
    val = pd.read_csv(tables / "validation.csv")
    for row in val.itertuples():
        cell = long[(long["ordering"] == row.ordering) & (long["metric"] == "roc_auc_cl")].set_index("protocol")
        assert row.non_triviality_gap == pytest.approx(cell.loc["mste", "value"] - cell.loc["ncl", "value"])
        assert row.forgetting_mste_fm == 0 and row.forgetting_naive_fm > 0
    assert ("| Scenario | Ordering | Model | Metric | Naive | Cumulative (warm) | Cumulative (fresh) | MSTE "
            "| Replay |") in \
        (tables / "tabular_table2.md").read_text()
    maps = pd.read_csv(tables / "tabular_heatmaps.csv")  # R heatmaps through bench.report.heatmaps, one per run here
    assert set(maps["figure"]) == {f"heatmap_synthetic_{o}_{p}_record" for o in ("smooth_drift", "abrupt_drift")
                                   for p in ("ncl", "mste")}
    for row in maps.itertuples():
        R = by_file[(row.protocol, row.ordering)]["R/record"]
        assert row.value == pytest.approx(R[row.i, row.j]) and row.j <= row.i and row.n_runs == 1
    from bench.cli import main

    assert main(["verify", "--dataset", "tabular-synthetic", "--outputs", str(tmp_path)]) == 0
    (tables / "validation.csv").write_text((tables / "validation.csv").read_text().replace("0.", "0.9", 1))
    assert main(["verify", "--dataset", "tabular-synthetic", "--outputs", str(tmp_path)]) != 0


def test_a_tabular_grid_refuses_a_root_whose_index_was_built_otherwise(scenario_folder, tmp_path):
    import yaml

    from bench.hpc import grid as grids

    def expand(index_settings):
        data = {**yaml.safe_load(grids.grid_path("tabular-synthetic").read_text()), "index_settings": index_settings}
        path = tmp_path / "tabular-synthetic.yaml"
        path.write_text(yaml.safe_dump(data))
        return grids.expand(grids.load_grid("tabular-synthetic", path), grids.load_profile("cpu"),
                            grids.Selection(models=["deepsvdd"], orderings=["smooth_drift"], protocols=["ncl"]),
                            scenario_folder, tmp_path)

    [ok] = expand({"preprocessing": {"train_fraction": 0.8}, "discovery": {"column": "day"}})
    assert ok.run.config.tabular.preprocessing["rebalance"] is False  # the rest recorded from the index
    with pytest.raises(ConfigError, match="built with preprocessing rebalance=False, but the run asks for True"):
        expand({"preprocessing": {"rebalance": True}})
    with pytest.raises(ConfigError, match=r"unknown key\(s\) \['scaling'\] in index_settings"):
        expand({"scaling": {"rebalance": True}})
    with pytest.raises(ConfigError, match="tabular-synthetic.yaml: index_settings: preprocessing="):
        expand({"preprocessing": [1]})


def test_orderings_with_one_task_order_run_once_and_say_so(scenario_folder, tmp_path):
    import shutil

    from bench.hpc import grid as grids

    root = tmp_path / "scenario"
    shutil.copytree(scenario_folder, root)
    path = root / "release" / "orderings.json"
    orders = json.loads(path.read_text())
    orders["generalization_down"] = orders["curriculum_up"]  # what Borda gives with few tasks, now and then
    path.write_text(json.dumps(orders))
    notes = []
    planned = grids.expand(grids.load_grid("tabular-synthetic"), grids.load_profile("cpu"),
                           grids.Selection(models=["deepsvdd"], protocols=["ncl"]), root, tmp_path, log=notes.append)
    assert sorted(p.run.config.ordering for p in planned) == sorted(set(orders) - {"generalization_down"})
    assert len({p.key for p in planned}) == len(planned) == 5
    assert notes == [f"note: ordering generalization_down puts the tasks in the order of curriculum_up "
                     f"({' → '.join(orders['curriculum_up'])}): one scenario, run once and reported as curriculum_up"]
    del orders["smooth_drift"]
    path.write_text(json.dumps(orders))
    with pytest.raises(ConfigError, match="orderings.json: no ordering 'smooth_drift'"):
        grids.expand(grids.load_grid("tabular-synthetic"), grids.load_profile("cpu"), grids.Selection(), root,
                     tmp_path, log=notes.append)


def test_two_concurrent_submits_send_each_run_once(scenario_folder, tmp_path, capsys, monkeypatch):
    """The second submit waits for the records lock and plans from the first one's record. Without the lock both
    plan from no records: the first submit waits (bounded) inside its submission for the second to get there, or
    (with the lock) to be at the lock, where it waits its turn."""
    import fcntl
    import os
    import threading

    from bench.cli import main
    from bench.hpc import executors, records

    inside, first = threading.Event(), threading.Lock()
    at_lock, real_flock = set(), fcntl.flock

    def flock(fd, operation):
        if operation & fcntl.LOCK_EX and os.readlink(f"/proc/self/fd/{fd}").endswith("submissions.lock"):
            at_lock.add(threading.get_ident())
            if len(at_lock) == 2:
                inside.set()
        return real_flock(fd, operation)

    monkeypatch.setattr(fcntl, "flock", flock)

    def fake_submit_local(executor, planned, slots, resources, workdir, env):
        if first.acquire(blocking=False):  # the first submission waits for a second one to reach this point
            inside.wait(timeout=5)
        else:
            inside.set()
        return [executors.Submitted(p, str(os.getpid()), tmp_path / "o", tmp_path / "e") for p in planned]

    monkeypatch.setattr(executors, "submit_local", fake_submit_local)
    args = ["submit", "--dataset", "tabular-synthetic", "--root", str(scenario_folder), "--outputs", str(tmp_path),
            "--models", "deepsvdd", "--orderings", "smooth_drift", "--protocols", "ncl,mste", "--cluster", "local",
            "--profile", "cpu"]
    codes = []
    threads = [threading.Thread(target=lambda: codes.append(main(list(args)))) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert codes == [0, 0]
    sent = [e["run_key"] for r in records.load_records(tmp_path, "tabular-synthetic") for e in r["runs"]]
    assert len(sent) == 2 and len(set(sent)) == 2  # each run once (this process's pid: queued, skipped)


def test_a_replay_runs_memory_request_counts_its_buffer_up_to_every_record():
    """Replay holds one task and its buffer: the default 25,000 records add little to 12 million, a buffer as large
    as the stream asks for what Cumulative asks for, never more."""
    from bench.hpc import memory

    size, n = 12_000_000 * 80 * 4, 12_000_000
    ncl, cum = memory.tabular_mem_gb(size, "ncl", n), memory.tabular_mem_gb(size, "cumulative", n)
    default, half = memory.tabular_mem_gb(size, "cl", n), memory.tabular_mem_gb(size, "cl", n, replay_size=n // 4)
    assert ncl <= default < half < cum
    assert memory.tabular_mem_gb(size, "cl", n, replay_size=10 * n) == cum
    assert memory.tabular_mem_gb(size, "cl", 3_000) == memory.tabular_mem_gb(size, "cumulative", 3_000)  # small stream


def test_an_unreadable_feature_array_is_one_line_at_submit(tmp_path):
    from bench.errors import ConfigError
    from bench.hpc import memory

    bad = tmp_path / "features.npy"
    bad.write_bytes(b"not an array")
    with pytest.raises(ConfigError, match="features.npy: not a readable record feature array"):
        memory.features_size(bad)
