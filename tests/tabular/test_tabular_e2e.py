"""The tabular chain end to end: an STE run resumes to identical results, and on the synthetic benchmark the
framework removes the planted unlearnable, duplicate and dominating tasks and keeps the rest."""

from __future__ import annotations

import json

import numpy as np
import pytest

from bench.io import file_sha256
from bench.registry import get
from bench.results import read_run
from bench.tabular.discovery import DiscoverySettings
from bench.tabular.orderings import ORDERINGS
from bench.tabular.scenario import construct
from bench.tabular.ste import read_matrix, ste_run
from bench.tabular.synthetic import PLANTED, generate

QUICK = {m: get(m, "tabular").quick for m in ("autoencoder", "iforest", "ae1svm")}


@pytest.fixture(scope="module")
def chain(tmp_path_factory):
    base = tmp_path_factory.mktemp("tabular")
    root = generate(base / "raw", seed=0, n_normal=400, n_anomal=100)
    manifest = construct("synthetic", base / "out", root=root, candidates=[DiscoverySettings()], hparams=QUICK,
                         log=lambda s: None)
    return base, root, manifest


def test_planted_tasks_are_removed_and_the_rest_kept(chain):
    _, _, manifest = chain
    cand = manifest["candidates"]["natural-day"]
    removed = set(cand["removed"])
    dup = set(PLANTED["duplicate"])
    assert {PLANTED["unlearnable"], PLANTED["dominating"]} <= removed
    assert len(removed & dup) == 1 and len(removed) == 3  # exactly one of the duplicate pair goes ...
    assert set(cand["kept"]) == {"Tuesday", "Wednesday", "Thursday"} | (dup - removed)  # ... nothing else
    first = cand["passes"][0]
    at = {t: i for i, t in enumerate(first["tasks"])}
    assert first["fc1"][at[PLANTED["unlearnable"]]] and first["fc3"][at[PLANTED["dominating"]]]
    # the pair is solved alike by every expert (FC5); their own experts' rows differ more (Isolation Forest's
    # off-diagonal values are noisy), so FC4 is not required here
    assert all(first["fc5"][at[t]] for t in dup)
    assert not any(first["fc5"][at[t]] for t in ("Tuesday", "Wednesday", "Thursday"))
    assert cand["passes"][-1]["removed"] is None and sum(cand["passes"][-1]["flags"]) == 0


def test_release_files(chain):
    base, root, manifest = chain
    rel = base / "out" / "release"
    kept = manifest["tasks"]
    orderings = json.loads((rel / "orderings.json").read_text())
    assert set(orderings) == set(ORDERINGS) and all(sorted(o) == sorted(kept) for o in orderings.values())
    import pandas as pd
    data = pd.read_csv(rel / "data.csv")
    assert list(data.columns) == ["task_id", "task", "split", "label", "record_id"]
    assert set(data["task"]) == set(kept) and (data.loc[data["split"] == "train", "label"] == 0).all()
    assert data["record_id"].is_unique
    files = sorted((root / "MachineLearningCVE").glob("*.csv"))
    assert manifest["files_sha256"] == {f.name: file_sha256(f) for f in files}
    w = manifest["w_table"]["natural-day"]
    assert set(w) == {"smooth_drift", "abrupt_drift", "curriculum", "generalization", "mean"}
    assert all(v is None or 0 <= v <= 1 for v in w.values())
    report = (rel / "report.md").read_text()
    assert "| natural-day (selected) | 4 |" in report and "removed" in report
    assert len(list((rel / "figures").glob("ste_natural-day_*.png"))) == 3
    points = manifest["candidates"]["natural-day"]["borda_points"]["curriculum_up"]
    assert sum(points.values()) == 3 * len(kept) * (len(kept) - 1) / 2  # 3 models × (0 + 1 + … + K−1)


def test_ste_run_resumes_to_identical_results(chain, tmp_path):
    base, _, _ = chain
    index = base / "out" / "candidates" / "natural-day" / "index"
    whole = ste_run(index, "iforest", tmp_path / "whole.h5", hparams=QUICK["iforest"], log=lambda s: None)
    part = tmp_path / "part.h5"
    ste_run(index, "iforest", part, hparams=QUICK["iforest"], max_steps=3, log=lambda s: None)
    run = read_run(part)
    assert run["attrs"]["status"] == "running" and run["attrs"]["steps_done"] == 3
    assert np.isfinite(run["R/record"][:3]).all() and np.isnan(run["R/record"][3:]).all()
    lines = []
    ste_run(index, "iforest", part, hparams=QUICK["iforest"], log=lines.append)
    assert lines[0].startswith("resuming")
    assert [s.split()[1] for s in lines if s.startswith("[step")] == ["4/7]", "5/7]", "6/7]", "7/7]"]  # only the missing
    t1, M1, a1 = read_matrix(whole)
    t2, M2, a2 = read_matrix(part)
    assert t1 == t2 and np.array_equal(M1, M2) and a1["run_key"] == a2["run_key"]
    full = read_run(whole)
    assert np.array_equal(full["scores/value"], read_run(part)["scores/value"])
    from bench.metrics import roc_auc
    sel = (full["scores/step"] == 2) & (full["scores/task"] == 5)  # flat scores reproduce a matrix cell
    assert roc_auc(full["scores/label"][sel], full["scores/value"][sel]) == pytest.approx(M1[2, 5], abs=1e-6)
    import pandas as pd
    records = pd.read_csv(index / "index.csv")
    rows = full["scores/record"][sel]
    assert (records["task"].iloc[rows] == t1[5]).all() and (records["split"].iloc[rows] == "test").all()
    assert a2["track"] == "tabular" and json.loads(a2["levels"]) == ["record"] and a2["evaluation"] == "cross"
    assert np.isfinite(M1).all()  # cross-evaluation: the upper triangle too
    lines = []
    ste_run(index, "iforest", part, hparams=QUICK["iforest"], log=lines.append)
    assert len(lines) == 1 and lines[0].startswith(f"{part}: already complete")


def test_cli_index_ste_and_bad_input(tmp_path, capsys):
    from helpers import cli_stdout

    from bench.cli import main

    root = generate(tmp_path / "raw", seed=1, n_normal=120, n_anomal=30)
    out = cli_stdout("tabular", "index", "--root", root, "--out", tmp_path / "idx", "--min-normal", 50)
    assert "7 tasks" in out and "duplicates dropped" in out
    assert "{" not in out and "'" not in out  # counts as words, not Python dict reprs (issue 31 §5)
    cli_stdout("tabular", "ste", "--index", tmp_path / "idx", "--model", "iforest", "--quick", "--max-steps", 2,
               "--out", tmp_path / "r.h5")
    assert read_run(tmp_path / "r.h5")["attrs"]["steps_done"] == 2
    capsys.readouterr()
    assert main(["tabular", "index", "--dataset", "cicids2017", "--root", str(tmp_path / "nope"),
                 "--out", str(tmp_path / "x")]) == 2
    err = capsys.readouterr().err
    assert "nope" in err and len(err.strip().splitlines()) == 1
    with pytest.raises(SystemExit) as stop:  # --model's choices are the registry's: argparse lists them, exit 2
        main(["tabular", "ste", "--index", str(tmp_path / "idx"), "--model", "patchcore",
              "--out", str(tmp_path / "y.h5")])
    err = capsys.readouterr().err
    assert stop.value.code == 2 and "invalid choice: 'patchcore'" in err
    listed = {c.strip("' ") for c in err.split("choose from ")[1].rstrip(")\n").split(",")}
    assert {"ae1svm", "autoencoder", "iforest"} <= listed


def test_multi_dataset_scenario_each_dataset_one_task_or_clustered_on_its_own(tmp_path):
    from bench.tabular.scenario import multi_table

    a = generate(tmp_path / "a", seed=0, n_normal=60, n_anomal=15)
    b = generate(tmp_path / "b", seed=5, n_normal=60, n_anomal=15)
    table = multi_table({"synthetic": a, "cicids2017": b / "MachineLearningCVE"})
    f = table.frame
    assert set(f["dataset"]) == {"synthetic", "cicids2017"} and len(table.files) == 14
    assert f["dataset_day"].nunique() == 14 and f["source"].str.startswith("cicids2017/").sum() == len(f) / 2
    manifest = construct("multi", tmp_path / "out", roots={"synthetic": a, "cicids2017": b},
                         candidates=[DiscoverySettings(column="dataset", min_normal=10),
                                     DiscoverySettings(method="kmeans", n_tasks=2, within="dataset", min_normal=10,
                                                       min_anomalous=1)],
                         models=("iforest", "ae1svm"), hparams=QUICK, log=lambda s: None)
    assert manifest["candidates"]["natural-dataset"]["tasks"] == ["cicids2017", "synthetic"]
    assert set(manifest["files_sha256"]) == {p.name for p in table.files}
    per_dataset = manifest["candidates"]["kmeans-nearest-k2-by-dataset"]  # the chain ran on it like on any other
    assert {t.split("/")[0] for t in per_dataset["tasks"]} == {"cicids2017", "synthetic"}
    assert set(per_dataset["tasks"]) <= {f"{d}/c{i}" for d in ("cicids2017", "synthetic") for i in (0, 1)}
    assert set(manifest["w_table"]) == {"natural-dataset", "kmeans-nearest-k2-by-dataset"}
    index = tmp_path / "out" / "candidates" / "kmeans-nearest-k2-by-dataset" / "index" / "index.csv"
    import pandas as pd

    rows = pd.read_csv(index)
    assert (rows["task"].str.split("/").str[0] == rows["record_id"].str.split("/").str[0]).all()  # one dataset a task


def test_an_ste_run_records_the_preset_its_values_start_from(chain, tmp_path):
    """`bench tabular scenarios --framework-preset released` runs the construction models' released values; their
    STE files must say `released`, not the model's default preset."""
    import json

    base, _, _ = chain
    index = base / "out" / "candidates" / "natural-day" / "index"
    path = ste_run(index, "iforest", tmp_path / "released.h5", hparams=QUICK["iforest"], preset="released",
                   log=lambda s: None)
    attrs = read_run(path)["attrs"]
    config = json.loads(attrs["config"])
    # iforest's released values are its suite values, but `released` also scores non-finite values as the released
    # metrics do: another run (its own key), recorded as released and never as suite
    assert config["preset"] == "released" and json.loads(attrs["presets"]) == ["released"]
    assert config["inputs"]["nonfinite"] == "released"
    suite = ste_run(index, "iforest", tmp_path / "suite.h5", hparams=QUICK["iforest"], preset="suite",
                    log=lambda s: None)
    suite_attrs = read_run(suite)["attrs"]
    assert json.loads(suite_attrs["config"])["preset"] == "suite" and suite_attrs["run_key"] != attrs["run_key"]
    assert config["hparams"]["n_estimators"] == QUICK["iforest"]["n_estimators"]  # explicit values still win


def test_a_complete_run_is_reused_without_reading_the_records(chain, tmp_path, monkeypatch):
    """Issue 31 §5: reusing a complete result read the whole record index first (CICIDS2017: 14 s, 862 MB).
    The run's key comes from index.json and the index files' digests; the records are read only by a step."""
    from bench.tabular import preprocess

    base, _, _ = chain
    index = base / "out" / "candidates" / "natural-day" / "index"
    out = tmp_path / "done.h5"
    ste_run(index, "iforest", out, hparams=QUICK["iforest"], log=lambda s: None)

    def read_records(*_a, **_k):
        raise AssertionError("the record index was read for a complete result")

    monkeypatch.setattr(preprocess, "load_index", read_records)
    lines = []
    ste_run(index, "iforest", out, hparams=QUICK["iforest"], log=lines.append)
    assert len(lines) == 1 and lines[0].startswith(f"{out}: already complete")
    with pytest.raises(AssertionError, match="record index was read"):  # a run with work to do still reads them
        ste_run(index, "iforest", tmp_path / "new.h5", hparams=QUICK["iforest"], log=lambda s: None)


def test_a_label_names_tabular_data_read_through_another_datasets_reader(tmp_path, monkeypatch):
    """Issue 31 §5: data read through another dataset's reader (an improved CIC-IDS2017 through `cicunsw`; here
    the synthetic reader) carried the reader's name in every table and title. `tabular run --label` names the
    result set, the file, the summary row and the aggregate's tables; the run key is the unlabelled run's."""
    from helpers import cli_stdout

    from bench import results

    monkeypatch.chdir(tmp_path)
    root = generate(tmp_path / "raw", seed=2, n_normal=120, n_anomal=30)
    cli_stdout("tabular", "index", "--root", root, "--out", tmp_path / "idx", "--min-normal", 50)
    run = ["tabular", "run", "--index", tmp_path / "idx", "--model", "iforest", "--quick", "--protocol", "ncl",
           "--tasks", "Monday,Tuesday"]
    cli_stdout(*run, "--label", "improved-ids")
    (path,) = (tmp_path / "outputs" / "improved-ids" / "runs").glob("*.h5")
    assert path.name.startswith("improved-ids_iforest_")
    labelled = results.read_run(path)
    row = results.summary_row(labelled)
    assert row["dataset"] == "improved-ids" and row["reader"] == "synthetic"
    cli_stdout(*run)  # the same run unlabelled: its own result set, the same key
    (plain,) = (tmp_path / "outputs" / "tabular-synthetic" / "runs").glob("*.h5")
    assert results.read_run(plain)["attrs"]["run_key"] == labelled["attrs"]["run_key"]
    cli_stdout("aggregate", "--dataset", "improved-ids", "--outputs", tmp_path / "outputs", "--bootstrap", "0",
               "--figures", "none")  # its tables are what this test reads
    tables = tmp_path / "outputs" / "improved-ids" / "tables"
    text = "".join(p.read_text() for p in sorted(tables.glob("*.md")))
    assert "improved-ids" in text and "synthetic" not in text.replace("tabular-synthetic", "")
