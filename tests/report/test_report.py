"""Reports are recomputable from the run files and refuse what cannot be traced.

The run files here are crafted with `bench.results.write_run` (chosen R matrices, timings and provenance), so
every expectation is recomputed independently with explicit loops, not by the code under test.
"""

from __future__ import annotations

import io
import json
import math
import shutil
import zlib
from pathlib import Path

import h5py
import numpy as np
import pandas as pd
import pytest

from bench import results
from bench.cli import main
from bench.config import ImageInputs, RunConfig
from bench.errors import BenchError
from bench.report import heatmaps as hm
from bench.report.aggregate import Options, aggregate, verify
from bench.report.bootstrap import roc_auc_cl_interval, roc_auc_cl_samples
from bench.report.collect import collect
from bench.report.timing import format_duration, format_timing
from helpers import one_error_line

PROVENANCE = {"git_commit": "0123456789abcdef0123456789abcdef01234567", "git_dirty": 0, "packages": "{}",
              "python": "3.11.7", "host": "node1", "device": "cpu", "slurm_job_id": "", "slurm_array_job_id": "",
              "slurm_array_task_id": "", "started_at": "2026-01-01T00:00:00+00:00",
              "finished_at": "2026-01-01T00:01:00+00:00"}
TASKS = ("alpha", "beta", "gamma", "delta")


def lower(rng, n, lo=0.5, hi=1.0):
    R = np.full((n, n), np.nan)
    for i in range(n):
        for j in range(i + 1):
            R[i, j] = rng.uniform(lo, hi)
    return R


def write(outputs: Path, *, dataset="synthetic", model="patchcore", backbone="resnet18", weights="none",
          protocol="cl", ordering="easy_to_hard", seed=0, tasks=TASKS, image=None, pixel=None, train=None,
          evals=None, status="complete", steps=None, attrs=None, extra=None, rng=None, path=None,
          hparams=None, image_size=64) -> Path:
    """One crafted run file; returns its path (outputs/<dataset>/runs/<run_name>.h5 unless `path`)."""
    # run keys hash the task order, not the ordering's name: each ordering needs its own order
    tasks = {"hard_to_easy": tasks[::-1], "random": tasks[1:] + tasks[:1]}.get(ordering, tasks)
    rng = rng or np.random.default_rng(zlib.crc32(f"{dataset}{model}{backbone}{protocol}{ordering}{seed}".encode()))
    n = len(tasks)
    cfg = RunConfig(dataset=dataset, root="/data", model=model, tasks=list(tasks), ordering=ordering,
                    protocol=protocol, seed=seed, hparams=dict(hparams or {}),
                    inputs=ImageInputs(backbone=backbone, weights=weights, image_size=image_size))
    key = cfg.run_key("f" * 64, weights)
    all_attrs = {**PROVENANCE, "run_key": key, "run_name": cfg.run_name(key), "status": status,
                 "steps_done": n if steps is None else steps, "n_tasks": n, "config": cfg.to_json(),
                 "config_sha256": cfg.sha256(), "index_sha256": "f" * 64, "weights_id": weights, "seed": seed,
                 **(attrs or {})}
    arrays = {"R/image": lower(rng, n) if image is None else np.asarray(image, float),
              "R/pixel": lower(rng, n) if pixel is None else np.asarray(pixel, float),
              "R/image_npr_auc": lower(rng, n, 0, 1),
              "timing/train_s": rng.uniform(1, 100, n) if train is None else np.asarray(train, float),
              "timing/eval_s": rng.uniform(1, 100, n) if evals is None else np.asarray(evals, float),
              **(extra or {})}
    path = path or outputs / dataset / "runs" / f"{cfg.run_name(key)}.h5"
    results.write_run(path, all_attrs, arrays, list(tasks))
    return path


# ------------------------------------------------------------ independent recomputation (explicit loops)

def eq1(R):
    cells = [R[i][j] for i in range(len(R)) for j in range(i + 1) if not math.isnan(R[i][j])]
    return sum(cells) / len(cells) if cells else math.nan


def eq2(R):
    terms = [R[i][j] - R[j][j] for i in range(1, len(R)) for j in range(i)]
    terms = [t for t in terms if not math.isnan(t)]
    return sum(terms) / len(terms) if terms else math.nan


def eq2_released(R):
    """InCLAD's released BWT: consecutive differences R[i][j] − R[i−1][j] averaged."""
    terms = [R[i][j] - R[i - 1][j] for i in range(1, len(R)) for j in range(i)]
    terms = [t for t in terms if not math.isnan(t)]
    return sum(terms) / len(terms) if terms else math.nan


METRIC_REFERENCE = {"roc_auc_cl": eq1, "bwt": eq2, "bwt_released": eq2_released}


def mean_std(values):
    m = sum(values) / len(values)
    return m, math.sqrt(sum((v - m) ** 2 for v in values) / len(values))


def read_csv(path) -> pd.DataFrame:
    return pd.read_csv(path, keep_default_na=True)


# ------------------------------------------------------------ Table 2 and the per-method table

@pytest.fixture
def grid(tmp_path):
    """3 models × 2 backbones × 2 orderings × 2 protocols, patchcore/resnet18 with 2 seeds, one run whose pixel
    R is all NaN (a detector without maps); returns (outputs, {(model, backbone, protocol, ordering, seed):
    (R_image, R_pixel)})."""
    outputs, made = tmp_path / "outputs", {}
    rng = np.random.default_rng(7)
    for model in ("patchcore", "padim", "cfa"):
        for backbone in ("resnet18", "wide_resnet50_2"):
            for ordering in ("easy_to_hard", "random"):
                for protocol in ("ncl", "cl"):
                    seeds = (0, 1) if (model, backbone) == ("patchcore", "resnet18") else (0,)
                    for seed in seeds:
                        image, pixel = lower(rng, 4, 0.4), lower(rng, 4, 0.4)
                        if (model, backbone, ordering, protocol) == ("cfa", "resnet18", "random", "cl"):
                            pixel = np.full((4, 4), np.nan)
                        write(outputs, model=model, backbone=backbone, protocol=protocol, ordering=ordering,
                              seed=seed, image=image, pixel=pixel, rng=rng)
                        made[(model, backbone, protocol, ordering, seed)] = (image, pixel)
    return outputs, made


def expected_cell(made, ordering, protocol, level, metric):
    by_method = {}
    nan = 0
    for (model, backbone, p, o, seed), (image, pixel) in made.items():
        if (p, o) != (protocol, ordering):
            continue
        value = METRIC_REFERENCE[metric](image if level == "image" else pixel)
        if math.isnan(value):
            nan += 1
        else:
            by_method.setdefault((model, backbone), []).append(value)
    means = [sum(v) / len(v) for v in by_method.values()]
    return (*mean_std(means), sum(len(v) for v in by_method.values()), len(means), nan)


def test_table2_cells_equal_an_independent_recomputation(grid):
    outputs, made = grid
    aggregate(outputs, "synthetic", fast(), log=lambda *a: None)
    table = read_csv(outputs / "synthetic/tables/table2.csv")
    assert len(table) == 2 * 3 * 4  # orderings × metrics × (level, protocol)
    for r in table.to_dict("records"):
        mean, std, n_runs, n_methods, n_nan = expected_cell(made, r["ordering"], r["protocol"], r["level"], r["metric"])
        assert r["mean"] == pytest.approx(mean, abs=1e-12) and r["std"] == pytest.approx(std, abs=1e-12)
        assert (r["n_runs"], r["n_methods"], r["n_nan"]) == (n_runs, n_methods, n_nan)
    nan_cell = table[(table["ordering"] == "random") & (table["level"] == "pixel") & (table["protocol"] == "cl")]
    assert set(nan_cell["n_nan"]) == {1} and set(nan_cell["n_methods"]) == {5}
    md = (outputs / "synthetic/tables/table2.md").read_text()
    r = table[(table["ordering"] == "easy_to_hard") & (table["metric"] == "bwt") & (table["level"] == "image")
              & (table["protocol"] == "ncl")].iloc[0]
    assert f"{r['mean']:.3f} ± {r['std']:.3f}" in md
    assert "[1 NaN]" in md and "7 (6)" in md  # 7 runs of 6 methods behind a cell; the NaN run counted
    assert "Rests on 28 complete runs from commit 0123456789ab (28 runs)" in md
    assert "| Synthetic | Easy-to-Hard | BWT (as released) ↑ |" in md


def test_per_method_cells_average_seeds(grid):
    outputs, made = grid
    aggregate(outputs, "synthetic", fast(), log=lambda *a: None)
    pm = read_csv(outputs / "synthetic/tables/per_method.csv")
    assert len(pm) == 6 * 2 * 3 * 4  # methods × orderings × metrics × (level, protocol)
    for r in pm.to_dict("records"):
        values = [METRIC_REFERENCE[r["metric"]](im if r["level"] == "image" else px)
                  for (m, b, p, o, s), (im, px) in made.items()
                  if (m, b, p, o) == (r["model"], r["backbone"], r["protocol"], r["ordering"])]
        finite = [v for v in values if not math.isnan(v)]
        assert (r["n_runs"], r["n_nan"]) == (len(finite), len(values) - len(finite))
        if finite:
            mean, std = mean_std(finite)
            assert r["mean"] == pytest.approx(mean, abs=1e-12) and r["std"] == pytest.approx(std, abs=1e-12)
    md = (outputs / "synthetic/tables/per_method.md").read_text()
    assert "| Synthetic | PatchCore | resnet18 | Easy-to-Hard | ROC-AUC_CL ↑ |" in md
    assert "| Synthetic | PatchCore | resnet18 | Easy-to-Hard | BWT (as released) ↑ |" in md


def test_latex_is_booktabs_with_one_line_per_row(grid):
    outputs, _ = grid
    aggregate(outputs, "synthetic", fast(), log=lambda *a: None)
    tex = (outputs / "synthetic/tables/table2.tex").read_text()
    for rule in (r"\toprule", r"\midrule", r"\bottomrule", r"\cmidrule(lr){4-5}"):
        assert rule in tex
    body = tex.split(r"\midrule")[1].split(r"\bottomrule")[0].strip().splitlines()
    assert len(body) == 6 and body[0].startswith("Synthetic & Easy-to-Hard & ROC-AUC") and body[1].startswith(" & ")
    assert body[2].startswith(" & Easy-to-Hard & BWT (as released)")
    assert r"\scriptstyle\pm" in tex and "% Rests on 28 complete runs" in tex


def test_runs_csv_has_one_row_per_run_with_provenance(grid):
    outputs, made = grid
    aggregate(outputs, "synthetic", Options(bootstrap=10, figure_formats=()), log=lambda *a: None)
    runs = read_csv(outputs / "synthetic/tables/runs.csv")
    assert len(runs) == len(made) == runs["run_key"].nunique()
    for col in ("image_roc_auc_cl", "image_bwt", "image_bwt_released", "pixel_bwt_released", "image_forgetting",
                "image_final_mean", "train_s", "eval_s",
                "git_commit", "config_sha256", "file_sha256", "image_roc_auc_cl_ci_low"):
        assert col in runs
    r = runs.iloc[0]
    key = (r["model"], r["backbone"], r["protocol"], r["ordering"], r["seed"])
    assert r["image_roc_auc_cl"] == pytest.approx(eq1(made[key][0]))
    assert r["image_bwt"] == pytest.approx(eq2(made[key][0]))
    assert r["image_bwt_released"] == pytest.approx(eq2_released(made[key][0]))
    assert runs["image_roc_auc_cl_ci_low"].isna().all()  # crafted files hold no per-image scores


# ------------------------------------------------------------ MultiDataset selection

def test_multidataset_rows_pool_the_three_best_single_dataset_methods(tmp_path):
    """Scores: average over (dataset × backbone × ordering) cells, not over runs. 'stfpm' has many high-scoring
    seeds in one cell but is poor elsewhere: by run count it would rank first; by the rule it ranks last."""
    outputs = tmp_path / "outputs"
    diag = lambda v: np.where(np.tri(3, dtype=bool), v, np.nan)  # noqa: E731  R with every cell = v
    level = {"cfa": 0.90, "paste": 0.85, "padim": 0.80, "patchcore": 0.75, "stfpm": 0.60}
    for model, value in level.items():
        for dataset in ("mvtec", "btad"):
            for ordering in ("easy_to_hard", "hard_to_easy"):
                seeds = range(8) if (model, dataset, ordering) == ("stfpm", "mvtec", "easy_to_hard") else (0,)
                for seed in seeds:
                    v = 0.99 if model == "stfpm" and dataset == "mvtec" and ordering == "easy_to_hard" else value
                    write(outputs, dataset=dataset, model=model, ordering=ordering, seed=seed, tasks=TASKS[:3],
                          image=diag(v), protocol="cl")
                    # NCL scores must not influence the default (image, CL) criterion
                    write(outputs, dataset=dataset, model=model, ordering=ordering, seed=seed, tasks=TASKS[:3],
                          image=diag(1.0 - v), protocol="ncl")
    multi_tasks = ("mvtec/a", "btad/b", "mvtec/c")
    multi_values = {}
    for i, model in enumerate(level):
        for protocol in ("ncl", "cl"):
            multi_values[(model, protocol)] = 0.5 + 0.05 * i + (0.1 if protocol == "cl" else 0)
            write(outputs, dataset="multi", model=model, ordering="easy_to_hard", tasks=multi_tasks,
                  protocol=protocol, image=diag(multi_values[(model, protocol)]))
    # stfpm's run-weighted mean would be (8·0.99 + 3·0.6)/11 ≈ 0.88, second; its cell mean is 0.6975, last
    for dataset_arg in ("all", "multi"):
        aggregate(outputs, dataset_arg, fast(), log=lambda *a: None)
        sel = read_csv(outputs / dataset_arg / "tables/multi_selection.csv")
        assert list(sel["model"]) == ["cfa", "paste", "padim", "patchcore", "stfpm"]
        assert list(sel["selected"]) == [True, True, True, False, False]
        assert sel.loc[sel["model"] == "stfpm", "score"].item() == pytest.approx((0.99 + 3 * 0.6) / 4)
        table = read_csv(outputs / dataset_arg / "tables/table2.csv")
        multi = table[(table["dataset"] == "multi") & (table["metric"] == "roc_auc_cl") & (table["level"] == "image")]
        for protocol in ("ncl", "cl"):
            r = multi[multi["protocol"] == protocol].iloc[0]
            mean, std = mean_std([multi_values[(m, protocol)] for m in ("cfa", "paste", "padim")])
            assert (r["mean"], r["n_runs"]) == (pytest.approx(mean), 3) and r["std"] == pytest.approx(std)
        # the per-method table still shows every method on the multi stream
        pm = read_csv(outputs / dataset_arg / "tables/per_method.csv")
        assert set(pm.loc[pm["dataset"] == "multi", "model"]) == set(level)
    manifest = json.loads((outputs / "multi/tables/manifest.json").read_text())
    assert manifest["multi_selection"]["models"] == ["cfa", "paste", "padim"]
    assert {e["scope"] for e in manifest["inputs"]} == {"tables", "selection"}


# ------------------------------------------------------------ timing

@pytest.mark.parametrize("seconds, text", [(58.7, "58.7s"), (0.7, "0.7s"), (299.4, "4m 59s"), (6749, "112m 29s"),
                                           (300, "5m 0s"), (66, "1m 6s"), (59.96, "1m 0s"), (12169.6, "202m 50s"),
                                           (float("nan"), "–")])
def test_duration_format_matches_inclad_table_4(seconds, text):
    assert format_duration(seconds) == text


def test_timing_cell_format():
    assert format_timing(299.0, 0.7, 3) == "4m 59s (± 0.7s)"
    assert format_timing(6749.0, 300.0, 2) == "112m 29s (± 5m 0s)"
    assert format_timing(58.7, 1.2, 3) == "58.7s (± 1.2s)"
    assert format_timing(58.7, 0.0, 1) == "58.7s" and format_timing(1.0, 0.0, 0) == "–"


def test_timing_table_is_mean_and_population_std_across_orderings(tmp_path):
    outputs = tmp_path / "outputs"
    train = {("easy_to_hard", 0): [10, 20, 30, 40], ("easy_to_hard", 1): [20, 20, 30, 40],
             ("random", 0): [100, 100, 100, 100], ("hard_to_easy", 0): [1, 1, 1, 1]}
    for (ordering, seed), t in train.items():
        write(outputs, ordering=ordering, seed=seed, train=t, evals=[2 * x for x in t], protocol="cl")
    write(outputs, ordering="random", train=[5, 5, 5, 5], evals=[1, 1, 1, 1], protocol="ncl")
    aggregate(outputs, "synthetic", fast(), log=lambda *a: None)
    tm = read_csv(outputs / "synthetic/tables/timing.csv")
    per_ordering = [(100 + 110) / 2, 400, 4]  # seeds of easy_to_hard averaged first
    mean, std = mean_std(per_ordering)
    cl_train = tm[(tm["phase"] == "train") & (tm["protocol"] == "cl")].iloc[0]
    assert cl_train["mean_s"] == pytest.approx(mean) and cl_train["std_s"] == pytest.approx(std)
    assert (cl_train["n_orderings"], cl_train["n_runs"]) == (3, 4)
    cl_eval = tm[(tm["phase"] == "eval") & (tm["protocol"] == "cl")].iloc[0]
    assert cl_eval["mean_s"] == pytest.approx(2 * mean)
    md = (outputs / "synthetic/tables/timing.md").read_text()
    assert f"| Synthetic | PatchCore | resnet18 | Train | 20.0s | {format_timing(mean, std, 3)} |" in md


def test_detectors_without_a_backbone_get_their_own_timing_table(tmp_path):
    """InCLAD Tables 4 and 5: backbone-based detectors in one table, raw-image ones (backbone "none") in another."""
    outputs = tmp_path / "outputs"
    write(outputs, train=[1, 1, 1, 1])
    write(outputs, model="ganomaly", backbone="none", train=[7, 7, 7, 7])
    aggregate(outputs, "synthetic", fast(), log=lambda *a: None)
    md = (outputs / "synthetic/tables/timing.md").read_text()
    with_backbone, without = md.split("## Execution times without a backbone")
    assert "| Synthetic | PatchCore | resnet18 | Train | – | 4.0s |" in with_backbone and "GANomaly" not in with_backbone
    assert "| Synthetic | GANomaly | Train | – | 28.0s |" in without and "PatchCore" not in without
    tex = (outputs / "synthetic/tables/timing.tex").read_text()
    assert tex.count(r"\begin{tabular}") == 2 and "GANomaly & Train" in tex


def test_an_empty_timing_table_renders_one_empty_section():
    from bench.report.timing import timing_latex, timing_markdown

    empty = pd.DataFrame(columns=["dataset", "model", "backbone", "weights", "phase", "protocol", "mean_s", "std_s",
                                  "n_orderings"])
    md = timing_markdown(empty)
    assert md.count("## Execution times") == 1 and "| Dataset | Model | Backbone | Time | Naive | Continual |" in md
    assert timing_latex(empty).count(r"\begin{tabular}") == 1


def fast():
    """No bootstrap, no drawing: for tests about the tables (heatmaps.csv is still written)."""
    return Options(bootstrap=0, figure_formats=())


# ------------------------------------------------------------ heatmaps

def test_heatmaps_are_written_with_the_right_shape(tmp_path):
    outputs = tmp_path / "outputs"
    rng = np.random.default_rng(3)
    made = {}
    for model in ("patchcore", "padim"):
        for seed in (0, 1):
            made[(model, seed)] = lower(rng, 4)
            write(outputs, model=model, seed=seed, image=made[(model, seed)], protocol="cl", rng=rng)
    aggregate(outputs, "synthetic", Options(bootstrap=0, per_method_heatmaps=True), log=lambda *a: None)
    figures = outputs / "synthetic/figures"
    stem = "heatmap_synthetic_easy_to_hard_cl_image"
    for suffix in ("", "_padim_resnet18_none", "_patchcore_resnet18_none"):
        for fmt in ("png", "pdf"):
            assert (figures / f"{stem}{suffix}.{fmt}").stat().st_size > 1000
    assert (figures / f"{stem}.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    values = read_csv(outputs / "synthetic/tables/heatmaps.csv")
    averaged = values[values["figure"] == stem]
    assert len(averaged) == 4 * 5 // 2  # lower triangle with the diagonal
    for r in averaged.to_dict("records"):
        per_method = [(made[(m, 0)][r["i"], r["j"]] + made[(m, 1)][r["i"], r["j"]]) / 2 for m in ("patchcore", "padim")]
        assert r["value"] == pytest.approx(sum(per_method) / 2) and r["n_runs"] == 4
        assert (r["task_i"], r["task_j"]) == (TASKS[r["i"]], TASKS[r["j"]])
    c = collect(outputs, "synthetic")
    maps = {h.stem: h for h in hm.heatmaps(c.runs, c.details)}
    fig = hm.figure(maps[stem])
    ax = fig.axes[0]
    assert ax.images[0].get_array().shape == (4, 4)
    assert np.ma.getmaskarray(ax.images[0].get_array())[0, 1]  # above the diagonal: not drawn
    assert [t.get_text() for t in ax.get_xticklabels()] == list(TASKS)
    assert verify(outputs, "synthetic", log=lambda *a: None) == []
    (figures / f"{stem}.png").write_bytes(b"edited")
    assert verify(outputs, "synthetic", log=lambda *a: None) == [f"figures/{stem}.png: changed since aggregation"]


# ------------------------------------------------------------ routing

def test_routing_table_from_task_bank_runs(tmp_path):
    outputs = tmp_path / "outputs"
    n = 3
    counts = np.zeros((n, n, n), dtype=np.int64)  # [step, test task, bank]
    for i in range(n):
        for j in range(i + 1):
            counts[i, j, j] = 10
    counts[2, 0] = [8, 2, 0]  # after the last step, 2 of task alpha's 10 images go to beta's bank
    own = np.where(np.tri(n, dtype=bool), np.diagonal(counts, axis1=1, axis2=2) / counts.sum(2).clip(1), np.nan)
    write(outputs, tasks=TASKS[:3], protocol="cl", extra={"routing/counts": counts, "routing/own_fraction": own})
    write(outputs, tasks=TASKS[:3], protocol="ncl")
    aggregate(outputs, "synthetic", fast(), log=lambda *a: None)
    rt = read_csv(outputs / "synthetic/tables/routing.csv")
    assert len(rt) == 1 and rt["protocol"].item() == "cl"
    assert rt["routing_accuracy"].item() == pytest.approx(58 / 60)
    assert rt["worst_task"].item() == "alpha" and rt["worst_task_own_share"].item() == pytest.approx(0.8)
    assert rt["final_own_share"].item() == pytest.approx((0.8 + 1 + 1) / 3)
    assert rt["route_by"].item() == "mean"  # PatchCore-CL's fixed rule
    assert "| Synthetic | PatchCore | resnet18 | none | Easy-to-Hard | CL | mean patch score | 0.967 |" in (
        outputs / "synthetic/tables/routing.md").read_text()


def test_routing_table_shows_each_rule_a_method_was_run_under(tmp_path):
    """PaDiM-CL run with route_by=max (the default) and route_by=mean: two rows, never averaged together (on two
    backbones: one table row holds one setting, test_runs_differing_in_more_than_the_seed_are_refused)."""
    outputs, n = tmp_path / "outputs", 2
    for rule, home, backbone in (("max", 6, "resnet18"), ("mean", 9, "wide_resnet50_2")):
        counts = np.zeros((n, n, n), dtype=np.int64)
        counts[0, 0, 0] = 10
        counts[1] = [[home, 10 - home], [0, 10]]
        own = np.where(np.tri(n, dtype=bool), np.diagonal(counts, axis1=1, axis2=2) / counts.sum(2).clip(1), np.nan)
        write(outputs, model="padim", backbone=backbone, tasks=TASKS[:2], protocol="cl", hparams={"route_by": rule},
              extra={"routing/counts": counts, "routing/own_fraction": own})
    aggregate(outputs, "synthetic", fast(), log=lambda *a: None)
    rt = read_csv(outputs / "synthetic/tables/routing.csv")
    assert rt["route_by"].tolist() == ["max", "mean"]
    assert rt["routing_accuracy"].tolist() == pytest.approx([26 / 30, 29 / 30])
    md = (outputs / "synthetic/tables/routing.md").read_text()
    assert "| CL | image score (max) | 0.867 |" in md and "| CL | mean patch score | 0.967 |" in md
    assert verify(outputs, "synthetic", log=lambda *a: None) == []


# ------------------------------------------------------------ provenance: refusals and missing runs

@pytest.mark.parametrize("damage, message", [
    ({"drop": "git_commit"}, "no provenance: attributes git_commit missing"),
    ({"attrs": {"git_commit": "unknown"}}, "git commit unknown"),
    ({"attrs": {"host": ""}}, "no provenance: attributes host missing or empty"),
    ({"attrs": {"schema_version": 99}}, "unknown schema version 99"),
    ({"attrs": {"config_sha256": "0" * 64}}, "config does not match its recorded config_sha256"),
    ({"attrs": {"run_key": "0" * 64}}, "run_key does not match its config"),
    ({"attrs": {"steps_done": 2}}, "status complete but steps_done=2 of 4"),
])
def test_untraceable_files_are_refused(tmp_path, capsys, damage, message):
    outputs = tmp_path / "outputs"
    write(outputs, protocol="ncl")
    bad = write(outputs, protocol="cl", attrs=damage.get("attrs"))
    if "drop" in damage:
        with h5py.File(bad, "a", locking=False) as f:
            del f.attrs[damage["drop"]]
    assert main(["aggregate", "--dataset", "synthetic", "--outputs", str(outputs)]) == 2
    err = one_error_line(capsys)
    assert message in err and bad.name in err
    assert not (outputs / "synthetic/tables/manifest.json").exists()


def test_an_edited_image_npr_auc_is_refused_and_pixel_is_said_unverifiable(tmp_path, capsys):
    from bench.metrics import normalized_pr_auc

    rng = np.random.default_rng(3)
    run, _ = scored_run(tmp_path, lambda i, j, y: y + rng.normal(size=y.size))
    path = next((tmp_path / "outputs" / "synthetic" / "runs").glob("*.h5"))
    npr = np.full((3, 3), np.nan)
    for i, j in zip(*np.tril_indices(3)):
        cell = (run["scores/step"] == i) & (run["scores/task"] == j)
        npr[i, j] = normalized_pr_auc(run["scores/label"][cell], run["scores/value"][cell])[0]
    with h5py.File(path, "a", locking=False) as f:
        f["R/image_npr_auc"][...] = npr  # as a run computes it: published, with the pixel caveat
    assert main(["aggregate", "--dataset", "synthetic", "--outputs", str(tmp_path / "outputs"), "--bootstrap", "0",
                 "--figures", "none"]) == 0
    table = (tmp_path / "outputs" / "synthetic" / "tables" / "table2.md").read_text()
    assert "Pixel ROC-AUC is not verifiable from the file" in table
    capsys.readouterr()
    with h5py.File(path, "a", locking=False) as f:
        f["R/image_npr_auc"][1, 0] += 0.01
    assert main(["aggregate", "--dataset", "synthetic", "--outputs", str(tmp_path / "outputs")]) == 2
    assert "R/image_npr_auc[1,0]" in one_error_line(capsys)


def test_conflicting_duplicates_are_refused_identical_ones_collapsed(tmp_path, capsys):
    outputs = tmp_path / "outputs"
    first = write(outputs, protocol="cl")
    copy = first.with_name("copy-" + first.name)
    shutil.copy(first, copy)
    assert main(["aggregate", "--dataset", "synthetic", "--outputs", str(outputs), "--bootstrap", "0",
                 "--figures", "none"]) == 0
    manifest = json.loads((outputs / "synthetic/tables/manifest.json").read_text())
    assert sorted(e["role"] for e in manifest["inputs"]) == ["duplicate", "used"]
    assert len(read_csv(outputs / "synthetic/tables/runs.csv")) == 1
    capsys.readouterr()
    with h5py.File(copy, "a", locking=False) as f:
        f["R/image"][2, 1] = 0.123
    assert main(["aggregate", "--dataset", "synthetic", "--outputs", str(outputs)]) == 2
    err = one_error_line(capsys)
    assert "same run key" in err and "different results" in err and "R/image[2,1]" in err and copy.name in err


def test_a_run_filed_under_another_dataset_is_refused(tmp_path, capsys):
    outputs = tmp_path / "outputs"
    write(outputs)
    write(outputs, dataset="mvtec", path=outputs / "synthetic/runs/misplaced.h5")
    assert main(["aggregate", "--dataset", "synthetic", "--outputs", str(outputs)]) == 2
    assert "misplaced.h5: holds a 'mvtec' run but lies under synthetic/runs" in one_error_line(capsys)


def test_unknown_dataset_lists_the_ones_with_results(tmp_path, capsys):
    outputs = tmp_path / "outputs"
    write(outputs)
    assert main(["aggregate", "--dataset", "visa", "--outputs", str(outputs)]) == 2
    assert "datasets with results: synthetic" in one_error_line(capsys)


def test_a_folder_under_runs_that_cannot_be_listed_is_refused_not_skipped(tmp_path, capsys, monkeypatch):
    import os

    outputs = tmp_path / "outputs"
    write(outputs, protocol="ncl")
    hidden = outputs / "synthetic" / "runs" / "batch2"
    write(outputs, protocol="cl", path=hidden / "cl.h5")
    listing = os.scandir

    def scandir(path="."):  # what a folder without read permission does (root, running the tests, reads all)
        if os.fspath(path) == os.fspath(hidden):
            raise PermissionError(13, "Permission denied", os.fspath(path))
        return listing(path)

    monkeypatch.setattr(os, "scandir", scandir)
    assert main(["aggregate", "--dataset", "synthetic", "--outputs", str(outputs)]) == 2
    err = one_error_line(capsys)
    assert err.startswith(f"error: {hidden}: cannot list this folder")
    assert not (outputs / "synthetic/tables/manifest.json").exists()


@pytest.mark.parametrize("make, message", [
    (lambda runs: runs.mkdir(parents=True), "no complete runs (0 incomplete or failed)"),
    (lambda runs: (runs.parent.mkdir(parents=True), runs.write_text("x")), "runs: not a folder"),
    (lambda runs: (runs.mkdir(parents=True), (runs / "junk.h5").write_bytes(b"not hdf5"),
                   (runs / "notes.txt").write_text("x")), "junk.h5: not a readable result file"),
    (lambda runs: (runs.mkdir(parents=True), (runs / "dir.h5").mkdir()), "dir.h5: a folder, not a result file"),
])
def test_odd_result_folders_are_one_line_each(tmp_path, capsys, make, message):
    outputs = tmp_path / "outputs"
    make(outputs / "synthetic" / "runs")
    assert main(["aggregate", "--dataset", "synthetic", "--outputs", str(outputs)]) == 2
    assert message in one_error_line(capsys)


def test_incomplete_and_failed_runs_are_listed_missing_never_averaged(tmp_path):
    outputs = tmp_path / "outputs"
    rng = np.random.default_rng(0)
    done = lower(rng, 4)
    write(outputs, model="patchcore", image=done)
    partial = lower(rng, 4, 0.0, 0.1)  # would drag the mean down if it were averaged in
    write(outputs, model="padim", image=partial, status="running", steps=2)
    write(outputs, model="cfa", image=partial, status="failed", steps=1, attrs={"error": "RuntimeError: OOM"})
    # a stale partial copy of a run that completed elsewhere is not missing
    write(outputs, model="patchcore", image=done, status="running", steps=2,
          path=outputs / "synthetic/runs/stale.h5")
    aggregate(outputs, "synthetic", fast(), log=lambda *a: None)
    missing = read_csv(outputs / "synthetic/tables/missing.csv")
    assert sorted(missing["model"]) == ["cfa", "padim"]
    assert set(missing["status"]) == {"running", "failed"} and "RuntimeError: OOM" in set(missing["error"])
    table = read_csv(outputs / "synthetic/tables/table2.csv")
    cell = table[(table["metric"] == "roc_auc_cl") & (table["level"] == "image") & (table["protocol"] == "cl")]
    assert cell["mean"].item() == pytest.approx(eq1(done)) and cell["n_runs"].item() == 1
    assert "2 run(s) missing" in (outputs / "synthetic/tables/table2.md").read_text()
    manifest = json.loads((outputs / "synthetic/tables/manifest.json").read_text())
    roles = {e["path"]: e["role"] for e in manifest["inputs"]}
    assert roles["synthetic/runs/stale.h5"] == "superseded"


# ------------------------------------------------------------ verify

def test_verify_passes_then_names_every_mismatching_cell(grid, capsys):
    outputs, _ = grid
    args = ["--dataset", "synthetic", "--outputs", str(outputs)]
    assert main(["aggregate", *args, "--bootstrap", "50", "--figures", "none"]) == 0
    assert main(["verify", *args]) == 0
    assert "verified synthetic" in capsys.readouterr().out

    # an edited published cell
    path = outputs / "synthetic/tables/table2.csv"
    table = pd.read_csv(path, dtype=str, keep_default_na=False)
    original = path.read_text()
    table.loc[0, "mean"] = "0.999"
    table.to_csv(path, index=False, lineterminator="\n")
    assert main(["verify", *args]) == 1
    err = capsys.readouterr().err
    assert "tables/table2.csv: dataset=synthetic, ordering=easy_to_hard, metric=roc_auc_cl, level=image, " \
           "protocol=ncl: mean published '0.999'" in err
    path.write_text(original)

    # a changed input: a run file rewritten with other results
    some = sorted((outputs / "synthetic/runs").glob("*cfa_resnet18_cl_easy_to_hard*.h5"))[0]
    with h5py.File(some, "a", locking=False) as f:
        f["R/image"][0, 0] = 0.01
    assert main(["verify", *args]) == 1
    err = capsys.readouterr().err
    assert f"input synthetic/runs/{some.name}: changed since aggregation" in err
    assert "tables/table2.csv: dataset=synthetic, ordering=easy_to_hard, metric=roc_auc_cl, level=image, " \
           "protocol=cl: mean published" in err
    assert "tables/table2.md: line" in err and "mismatch(es)" in err


def test_verify_needs_a_manifest(tmp_path, capsys):
    outputs = tmp_path / "outputs"
    write(outputs)
    assert main(["verify", "--dataset", "synthetic", "--outputs", str(outputs)]) == 2
    assert "no manifest" in one_error_line(capsys)


def test_all_aggregates_every_dataset_into_one_table2(tmp_path):
    outputs = tmp_path / "outputs"
    write(outputs, dataset="mvtec")
    write(outputs, dataset="btad", ordering="random")
    aggregate(outputs, "all", fast(), log=lambda *a: None)
    table = read_csv(outputs / "all/tables/table2.csv")
    assert list(table.drop_duplicates(["dataset", "ordering"])["dataset"]) == ["mvtec", "btad"]  # InCLAD's order
    assert verify(outputs, "all", log=lambda *a: None) == []


# ------------------------------------------------------------ bootstrap

def scored_run(tmp_path, scores_for):
    """A run with per-image scores: scores_for(step, task, labels) -> values."""
    n, labels = 3, np.array([0] * 6 + [1] * 4, dtype=np.int8)
    step, task, lab, val = [], [], [], []
    image = np.full((n, n), np.nan)
    from bench.metrics import roc_auc

    for i in range(n):
        for j in range(i + 1):
            v = scores_for(i, j, labels)
            step += [i] * len(v)
            task += [j] * len(v)
            lab.append(labels)
            val.append(v)
            image[i, j] = roc_auc(labels, v)
    extra = {"scores/step": np.array(step, np.int16), "scores/task": np.array(task, np.int16),
             "scores/label": np.concatenate(lab), "scores/value": np.concatenate(val)}
    path = write(tmp_path / "outputs", tasks=TASKS[:3], image=image, extra=extra)
    return results.read_run(path), image


def test_bootstrap_interval_brackets_the_estimate_and_is_reproducible(tmp_path):
    rng = np.random.default_rng(5)
    run, image = scored_run(tmp_path, lambda i, j, y: y * 0.8 + rng.normal(size=y.size))
    lo, hi = roc_auc_cl_interval(run, 400, seed=1)
    assert lo < eq1(image) < hi and 0 <= lo < hi <= 1
    assert (lo, hi) == roc_auc_cl_interval(run, 400, seed=1)
    samples = roc_auc_cl_samples(run, 400, seed=1)
    assert samples.shape == (400,) and abs(np.median(samples) - eq1(image)) < 0.1


@pytest.mark.parametrize("ties", [False, True])
def test_weighted_auc_equals_the_auc_of_the_expanded_resample(ties):
    from bench.metrics import roc_auc
    from bench.report.bootstrap import weighted_auc

    rng = np.random.default_rng(int(ties))
    labels = rng.random(40) < 0.4
    scores = rng.integers(0, 4, 40).astype(float) if ties else rng.normal(size=40) + labels
    weights = rng.integers(0, 3, (40, 25)).astype(float)  # [image, resample]
    weights[np.flatnonzero(labels)[0]] += 1  # every resample keeps both classes
    weights[np.flatnonzero(~labels)[0]] += 1
    expected = [roc_auc(np.repeat(labels, w.astype(int)), np.repeat(scores, w.astype(int))) for w in weights.T]
    assert weighted_auc(scores, labels, weights) == pytest.approx(expected, abs=1e-12)


def test_bootstrap_of_a_perfect_separation_is_degenerate(tmp_path):
    run, _ = scored_run(tmp_path, lambda i, j, y: y + 0.01 * np.arange(y.size))
    assert roc_auc_cl_interval(run, 100) == (1.0, 1.0)


def test_bootstrap_without_scores_is_nan(tmp_path):
    run = results.read_run(write(tmp_path / "outputs"))
    lo, hi = roc_auc_cl_interval(run, 100)
    assert math.isnan(lo) and math.isnan(hi)


def test_demo_helpers_keep_working(grid):
    """bench/tools/demo.py calls table2(frame) and to_markdown(long) on `results.load` of a runs directory."""
    from bench.report.table2 import table2, to_markdown

    outputs, _ = grid
    frame = results.load(outputs / "synthetic/runs")
    text = to_markdown(table2(frame))
    assert text.count("| Synthetic | Easy-to-Hard | ROC-AUC_CL ↑ |") == 2  # values and counts


def test_csv_round_trip_of_run_keys_that_look_like_numbers():
    from bench.report.aggregate import _compare_csv, _read_csv

    text = "run_key,x\n1e5000,1.5\n"
    assert _compare_csv("tables/runs.csv", text, _read_csv(text)) == []
    assert isinstance(pd.read_csv(io.StringIO(text))["run_key"].iloc[0], float)  # why verify reads strings


def test_results_load_reports_both_bwts(tmp_path):
    """bench.results.load: Eq. 2's BWT and the released code's consecutive-difference BWT, side by side."""
    rng = np.random.default_rng(3)
    image, pixel = lower(rng, 4, 0.4), lower(rng, 4, 0.4)
    path = write(tmp_path / "outputs", image=image, pixel=pixel)
    row = results.load(path).iloc[0]
    for level, R in (("image", image), ("pixel", pixel)):
        assert row[f"{level}_bwt"] == pytest.approx(eq2(R))
        assert row[f"{level}_bwt_released"] == pytest.approx(eq2_released(R))
        assert row[f"{level}_bwt"] != pytest.approx(row[f"{level}_bwt_released"])


def test_model_rows_keep_the_papers_order_and_a_new_detector_follows_with_its_registry_label(monkeypatch):
    import dataclasses

    from bench import registry
    from bench.report.render import label, sort_frame

    spec = registry.get("padim")
    monkeypatch.setitem(registry._SPECS, "aa_new", dataclasses.replace(spec, name="aa_new", label="AaNew"))
    paper = ["cfa", "padim", "patchcore", "fastflow", "paste", "rd4ad", "stfpm", "ganomaly", "efficientad"]
    frame = pd.DataFrame({"model": ["zz_unregistered", "aa_new", *sorted(paper)]})
    assert sort_frame(frame, ["model"])["model"].tolist() == [*paper, "aa_new", "zz_unregistered"]  # Tables 4-5
    assert [label("model", m) for m in ("aa_new", "rd4ad", "zz_unregistered")] == ["AaNew", "RD4AD", "zz_unregistered"]


# ------------------------------------------------------------ one table row, one setting (issue 31 §1, §6)

def _aggregate(outputs, *extra) -> int:
    return main(["aggregate", "--dataset", "synthetic", "--outputs", str(outputs), "--bootstrap", "0",
                 "--figures", "none", *extra])


@pytest.mark.parametrize("second, named", [
    ({"hparams": {"coreset_ratio": 0.05}}, "hparams.coreset_ratio (not recorded) vs 0.05"),
    ({"image_size": 96}, "image_size 64 vs 96"),
    ({"ordering": "custom", "tasks": TASKS[::-1]}, "tasks ["),
])
def test_runs_differing_in_more_than_the_seed_are_refused(tmp_path, capsys, second, named):
    """Two seeds of one model × backbone × weights × ordering × protocol that differ in a hyperparameter, the
    image size or the task list (under one ordering name) were averaged as seeds of one method: now one line
    naming both files and every differing setting, and nothing published."""
    outputs = tmp_path / "outputs"
    a = write(outputs, seed=0, ordering=second.get("ordering", "easy_to_hard"))
    b = write(outputs, seed=1, **second)
    assert _aggregate(outputs) == 2
    err = one_error_line(capsys)
    assert a.name in err and b.name in err and named in err and "averages seeds only" in err
    assert "seed 0 vs 1" not in err
    assert not (outputs / "synthetic/tables/manifest.json").exists()


def _tabular_file(outputs, seed, replay_size) -> Path:
    from bench.config import TabularInputs

    cfg = RunConfig(dataset="synthetic", root="/data", model="iforest", tasks=list(TASKS[:2]), protocol="cl",
                    seed=seed, inputs=TabularInputs(index_content_sha256="c" * 64, replay_size=replay_size))
    key = cfg.run_key("f" * 64, "none")
    rng = np.random.default_rng(seed)
    attrs = {**PROVENANCE, "run_key": key, "run_name": cfg.run_name(key), "status": "complete", "steps_done": 2,
             "n_tasks": 2, "config": cfg.to_json(), "config_sha256": cfg.sha256(), "index_sha256": "f" * 64,
             "weights_id": "none", "seed": seed, "track": "tabular", "levels": json.dumps(["record"]),
             "evaluation": "continual"}
    path = outputs / cfg.result_set / "runs" / f"{cfg.run_name(key)}.h5"
    results.write_run(path, attrs, {"R/record": lower(rng, 2), "timing/train_s": np.ones(2),
                                    "timing/eval_s": np.ones(2)}, list(TASKS[:2]))
    return path


def test_tabular_replay_runs_of_one_seed_and_two_buffer_sizes_are_refused(tmp_path):
    """Two Replay runs, seed 0, replay sizes 40 and 80: tabular Table 2 keyed its cell's seeds by seed, so one
    replaced the other (one value, n_seeds 1); now collecting refuses them, naming the replay size."""
    outputs = tmp_path / "outputs"
    _tabular_file(outputs, 0, 40)
    _tabular_file(outputs, 0, 80)
    with pytest.raises(BenchError, match=r"differ in more than the seed \(replay_size (40 vs 80|80 vs 40)\)"):
        collect(outputs, "tabular-synthetic")


def test_one_run_made_by_tasks_and_by_ordering_uses_the_named_ordering_whatever_the_file_order(tmp_path):
    """The same task list asked for as `--tasks` (ordering custom) and as `--ordering easy_to_hard` is one run
    key: the row used was the first file by name. Now the named ordering's file is used, and the other is a
    duplicate, with the files' names in either order."""
    for first in ("custom", "easy_to_hard"):
        outputs = tmp_path / first / "outputs"
        paths = {o: write(outputs, ordering=o, rng=np.random.default_rng(7)) for o in ("custom", "easy_to_hard")}
        for o, p in paths.items():  # rename so that `first` sorts first
            p.rename(p.with_name(("a-" if o == first else "b-") + p.name))
        c = collect(outputs, "synthetic")
        assert c.runs["ordering"].tolist() == ["easy_to_hard"]
        assert sorted((Path(e["path"]).name.split("_")[4], e["role"]) for e in c.inputs) == [
            ("custom", "duplicate"), ("easy", "used")]


def test_a_symlinked_runs_subfolder_is_followed_and_a_loop_refused(tmp_path, capsys):
    """A runs/ subfolder that is a link was skipped (Table 2 from 2 of 4 runs, exit 0): its runs are read now;
    a link back up the tree is one line."""
    outputs = tmp_path / "outputs"
    for protocol in ("ncl", "cl"):
        write(outputs, protocol=protocol)
        write(outputs, protocol=protocol, seed=1, path=tmp_path / "elsewhere" / f"{protocol}.h5")
    (outputs / "synthetic/runs/linked").symlink_to(tmp_path / "elsewhere", target_is_directory=True)
    assert len(collect(outputs, "synthetic").runs) == 4
    (tmp_path / "elsewhere" / "loop").symlink_to(outputs / "synthetic/runs", target_is_directory=True)
    assert _aggregate(outputs) == 2
    assert "a link to a folder already listed" in one_error_line(capsys)


NESTED = "[" * 100_000 + "]" * 100_000


@pytest.mark.parametrize("attrs, message", [
    ({"seed": 1}, "attribute seed=1 but its config says 0"),
    ({"seed": "0"}, "attribute seed is '0', expected an integer"),
    ({"n_tasks": np.arange(4)}, "attribute n_tasks is an array of shape (4,), expected an integer"),
    ({"status": "done"}, "status 'done' (expected running, complete, failed)"),
    ({"git_dirty": 7}, "git_dirty=7"),
    ({"schema_version": np.array([3, 3])}, "unknown schema version an array of shape (2,)"),
    ({"levels": NESTED}, "attribute levels is nested too deeply"),
    ({"levels": json.dumps(["image", 3])}, "attribute levels is ['image', 3], expected a list of level names"),
    ({"track": "tabular"}, "attribute track='tabular' but its config says 'image'"),
    ({"config": NESTED, "config_sha256": __import__("hashlib").sha256(NESTED.encode()).hexdigest()},
     "unreadable config (nested too deeply"),
    ({"host": np.float64(1.5)}, "attribute host is 1.5, expected a string"),
])
def test_crafted_provenance_attributes_are_one_line(tmp_path, capsys, attrs, message):
    """Attributes of the wrong type or disagreeing with the config (a crafted file, a broken writer) tracebacked
    or were accepted (a seed attribute other than the config's); a config of 100,000 nested brackets raised
    RecursionError. Each is one line naming the file."""
    outputs = tmp_path / "outputs"
    bad = write(outputs, attrs=attrs)
    assert _aggregate(outputs) == 2
    err = one_error_line(capsys)
    assert message in err and bad.name in err, err


def test_a_small_file_declaring_huge_arrays_is_refused_before_reading(tmp_path, capsys):
    """A 20 KB file declaring 10^11 scores (chunked, nothing stored) made aggregate allocate 745 GiB; a dataset
    with a row per task of another task count tracebacked later. Both are refused from the shapes alone."""
    outputs = tmp_path / "outputs"
    bad = write(outputs)
    with h5py.File(bad, "a", locking=False) as f:
        for name in ("scores/step", "scores/task", "scores/label", "scores/value"):
            f.create_dataset(name, shape=(10**11,), dtype="f8", chunks=(2**20,), compression="gzip")
    assert bad.stat().st_size < 100_000
    assert _aggregate(outputs) == 2
    assert "dataset scores/label declares shape (100000000000,)" in one_error_line(capsys)
    bad = write(outputs, extra={"memory/state_bytes": np.zeros(7)})
    for old in (outputs / "synthetic/runs").glob("*.h5"):
        if old != bad:
            old.unlink()
    assert _aggregate(outputs) == 2
    assert "dataset memory/state_bytes has shape (7,), expected one row per task" in one_error_line(capsys)


@pytest.mark.parametrize("option", [["--bootstrap", "-1"], ["--bootstrap", "10000000000"],
                                    ["--bootstrap-seed", "-3"], ["--select-top", "0"]])
def test_report_options_are_range_checked(tmp_path, capsys, option):
    """A negative --bootstrap silently meant none and a huge one tracebacked allocating 745 GiB; a negative
    bootstrap seed or a top-0 selection were accepted. Each is one line naming the option."""
    outputs = tmp_path / "outputs"
    write(outputs)
    assert main(["aggregate", "--dataset", "synthetic", "--outputs", str(outputs), *option]) == 2
    assert option[0] in one_error_line(capsys)


def test_one_key_two_thread_counts_says_what_differs(tmp_path, capsys):
    """Two files of one run key made with 1 and 2 CPU threads (a trained detector's R depends on it): the
    refusal said "delete the wrong one" though neither is wrong; it now names the thread counts."""
    outputs = tmp_path / "outputs"
    first = write(outputs, attrs={"cpu_threads": 1})
    write(outputs, attrs={"cpu_threads": 2}, image=lower(np.random.default_rng(9), 4),
          path=first.with_name("copy-" + first.name))
    assert _aggregate(outputs) == 2
    err = one_error_line(capsys)
    assert "cpu_threads 2 vs 1" in err and "neither need be wrong" in err and "delete the wrong one" not in err


def test_a_table_whose_runs_span_thread_counts_says_so(tmp_path):
    """Runs made with 1 and 2 CPU threads were pooled without a word; the table now names both counts."""
    outputs = tmp_path / "outputs"
    write(outputs, seed=0, attrs={"cpu_threads": 1})
    write(outputs, seed=1, attrs={"cpu_threads": 2})
    aggregate(outputs, "synthetic", fast(), log=lambda *a: None)
    assert "Made with 1, 2 CPU threads" in (outputs / "synthetic/tables/table2.md").read_text()


def test_verify_range_checks_the_options_a_manifest_holds(tmp_path, capsys):
    """A manifest's options are read back into the same checked Options: a crafted bootstrap count or an unknown
    option is one line, not a 745 GiB allocation or a TypeError."""
    outputs = tmp_path / "outputs"
    write(outputs)
    aggregate(outputs, "synthetic", fast(), log=lambda *a: None)
    path = outputs / "synthetic/tables/manifest.json"
    manifest = json.loads(path.read_text())
    for options, message in (({**manifest["options"], "bootstrap": 10**12}, "--bootstrap 1000000000000"),
                             ({**manifest["options"], "colour": 1}, "its options are not this suite's")):
        path.write_text(json.dumps({**manifest, "options": options}))
        assert main(["verify", "--dataset", "synthetic", "--outputs", str(outputs)]) == 2
        assert message in one_error_line(capsys)


def test_one_key_whose_steps_ran_with_other_thread_counts_says_so(tmp_path, capsys):
    """The last execution's cpu_threads can agree while a resumed step ran with another count: the refusal names
    the steps' counts (timing/cpu_threads) instead of calling one file wrong."""
    outputs = tmp_path / "outputs"
    first = write(outputs, attrs={"cpu_threads": 2}, extra={"timing/cpu_threads": np.array([2, 2, 2, 2])})
    write(outputs, attrs={"cpu_threads": 2}, image=lower(np.random.default_rng(9), 4),
          extra={"timing/cpu_threads": np.array([1, 2, 2, 2])}, path=first.with_name("copy-" + first.name))
    assert _aggregate(outputs) == 2
    err = one_error_line(capsys)
    assert ("steps' CPU threads 2 vs 1,2" in err or "steps' CPU threads 1,2 vs 2" in err)  # file order
    assert "neither need be wrong" in err


def test_a_table_whose_resumed_run_changed_thread_count_says_so(tmp_path):
    outputs = tmp_path / "outputs"
    write(outputs, attrs={"cpu_threads": 2}, extra={"timing/cpu_threads": np.array([1, 2, 2, 2])})
    aggregate(outputs, "synthetic", fast(), log=lambda *a: None)
    assert "Made with 1, 2 CPU threads" in (outputs / "synthetic/tables/table2.md").read_text()
