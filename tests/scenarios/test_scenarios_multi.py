"""The multi-dataset stream: selection rule on crafted difficulty tables, the 27-task InCLAD stream derived from
the shipped manifests, and a run whose tasks come from two dataset roots."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from bench import results
from bench.cli import main
from bench.data import read_index
from bench.data import manifest
from bench.data.multi import default_root, load_roots
from bench.data.synthetic import generate
from bench.errors import ConfigError, DatasetError
from bench.scenarios.multi import orderings, select


def difficulty(dataset: str, avg: dict[str, float], positions: list[str] | None = None) -> list[dict]:
    order = positions or sorted(avg, key=lambda c: (avg[c], c))
    return [{"dataset": dataset, "concept": c, "avg_roc_auc": v, "hard_position": order.index(c)}
            for c, v in avg.items()]


def test_selection_keeps_two_hardest_two_median_two_easiest_of_larger_datasets():
    ten = {f"a{i}": 0.50 + 0.04 * i for i in range(10)}     # even: median = positions 4, 5
    seven = {f"d{i}": 0.52 + 0.05 * i for i in range(7)}    # odd: the median (3) and its harder neighbour (2)
    six = {f"b{i}": 0.6 + 0.01 * i for i in range(6)}       # exactly six: all kept
    three = {"c0": 0.7, "c1": 0.55, "c2": 0.9}
    frame = pd.DataFrame(difficulty("A", dict(reversed(ten.items()))) + difficulty("D", seven)
                         + difficulty("B", six) + difficulty("C", three))
    selected = select(frame)
    roles = dict(zip(selected["task"], selected["role"]))
    assert {t for t in roles if t.startswith("A/")} == {f"A/a{i}" for i in (0, 1, 4, 5, 8, 9)}
    assert [roles[f"A/a{i}"] for i in (0, 1, 4, 5, 8, 9)] == ["hardest"] * 2 + ["median"] * 2 + ["easiest"] * 2
    assert {t for t in roles if t.startswith("D/")} == {f"D/d{i}" for i in (0, 1, 2, 3, 5, 6)}
    assert (roles["D/d2"], roles["D/d3"]) == ("median", "median")
    assert {t for t in roles if t[0] in "BC"} == {f"B/b{i}" for i in range(6)} | {"C/c0", "C/c1", "C/c2"}
    assert {roles[t] for t in roles if t[0] in "BC"} == {"all"}
    assert len(selected) == 21
    assert list(selected["avg_roc_auc"]) == sorted(selected["avg_roc_auc"])  # hardest first across datasets
    o = orderings(selected)
    assert o["hard_to_easy"]["tasks"] == list(selected["task"])
    assert o["easy_to_hard"]["tasks"] == o["hard_to_easy"]["tasks"][::-1]


def test_equal_average_roc_auc_is_ordered_by_name():
    frame = pd.DataFrame(difficulty("B", {"y": 0.8, "x": 0.8}) + difficulty("A", {"z": 0.8}))
    assert list(select(frame)["task"]) == ["A/z", "B/x", "B/y"]


def test_rank_criterion_selects_by_the_datasets_hard_to_easy_ordering():
    avg = {f"c{i}": 0.5 + 0.05 * i for i in range(8)}
    positions = ["c0", "c1", "c2", "c5", "c3", "c4", "c6", "c7"]  # the average ranks put c5 in the middle
    frame = pd.DataFrame(difficulty("A", avg, positions))
    assert set(select(frame)["concept"]) == {"c0", "c1", "c3", "c4", "c6", "c7"}
    assert set(select(frame, "rank")["concept"]) == {"c0", "c1", "c5", "c3", "c6", "c7"}
    assert list(select(frame, "rank")["concept"]) == ["c0", "c1", "c3", "c5", "c6", "c7"]  # ordered by ROC-AUC
    with pytest.raises(ConfigError, match="unknown selection criterion"):
        select(frame, "median")


# The released InCLAD-MD stream, easy to hard: InCLAD-benchmark docs/inclad-md-dataset.md @7901579, "Category
# selection" (each block's categories, easiest first) and "Orderings" (blocks BTech → MPDD → DAGM → VisA → MVTec)
RELEASED_EASY_TO_HARD = [
    "btad/03", "btad/01", "btad/02",
    "mpdd/connector", "mpdd/bracket_brown", "mpdd/metal_plate", "mpdd/bracket_white", "mpdd/tubes",
    "mpdd/bracket_black",
    "dagm/Class4", "dagm/Class9", "dagm/Class7", "dagm/Class3", "dagm/Class5", "dagm/Class8",
    "visa/pcb4", "visa/chewinggum", "visa/fryum", "visa/pcb2", "visa/macaroni2", "visa/capsules",
    "mvtec/bottle", "mvtec/leather", "mvtec/toothbrush", "mvtec/carpet", "mvtec/screw", "mvtec/pill"]


def test_the_shipped_multi_stream_is_the_released_inclad_md_stream():
    """data/scenarios/multi.json's easy_to_hard / hard_to_easy are the released InCLAD-MD list and order
    (InCLAD-benchmark docs/inclad-md-dataset.md @7901579: 27 categories, "hard_to_easy: exact reverse"), and the
    published-stream table the paper comparison checks runs against (data/paper/inclad_streams.csv) holds the same."""
    from bench.report.paper import published_streams

    shipped = manifest.read(manifest.DEFAULT_DIR / "multi.json")
    assert len(RELEASED_EASY_TO_HARD) == 27
    assert shipped["orderings"]["easy_to_hard"]["tasks"] == RELEASED_EASY_TO_HARD
    assert shipped["orderings"]["hard_to_easy"]["tasks"] == RELEASED_EASY_TO_HARD[::-1]
    streams = published_streams()
    assert streams[("multi", "easy_to_hard")] == RELEASED_EASY_TO_HARD
    assert streams[("multi", "hard_to_easy")] == RELEASED_EASY_TO_HARD[::-1]


def test_the_roc_auc_stream_stays_a_named_alternative_and_the_manifest_is_reproducible(scen_dir, tmp_path):
    for name in ("btad", "dagm", "mpdd", "mvtec", "visa"):
        (scen_dir / f"{name}.json").write_text((manifest.DEFAULT_DIR / f"{name}.json").read_text())
    assert main(["scenarios", "multi", "--out", str(tmp_path / "out")]) == 0
    m = manifest.load("multi")
    assert list(m["orderings"]) == ["easy_to_hard", "hard_to_easy", "roc_auc_easy_to_hard", "roc_auc_hard_to_easy"]
    roc = m["orderings"]["roc_auc_hard_to_easy"]["tasks"]
    counts = pd.Series([t.split("/")[0] for t in roc]).value_counts().to_dict()
    assert counts == {"btad": 3, "dagm": 6, "mpdd": 6, "mvtec": 6, "visa": 6}
    assert {t for t in roc if t.startswith("dagm/")} == {f"dagm/Class{i}" for i in (8, 5, 3, 7, 9, 4)}
    assert {t for t in roc if t.startswith("mvtec/")} == \
        {f"mvtec/{c}" for c in ("screw", "pill", "hazelnut", "cable", "wood", "bottle")}
    assert roc[:3] == ["visa/macaroni2", "visa/capsules", "dagm/Class8"]
    assert m["orderings"]["roc_auc_easy_to_hard"]["tasks"] == roc[::-1]
    assert m["orderings"]["easy_to_hard"]["tasks"] == RELEASED_EASY_TO_HARD
    # the two streams share 23 tasks: the manifest's task set is their union, 31
    assert m["tasks"] == sorted(set(roc) | set(RELEASED_EASY_TO_HARD)) and len(m["tasks"]) == 31
    assert m["source"]["kind"] == "publication"
    shipped = manifest.read(manifest.DEFAULT_DIR / "multi.json")
    for key in ("tasks", "orderings", "selection", "difficulty"):
        assert m[key] == shipped[key]
    assert (tmp_path / "out" / "multi_ordering.md").is_file()
    # by average rank, MVTec AD keeps the concepts of the released InCLAD-MD stream (docs/scenarios.md)
    assert main(["scenarios", "multi", "--criterion", "rank", "--out", str(tmp_path / "out")]) == 0
    rank = manifest.load("multi")["orderings"]["rank_hard_to_easy"]["tasks"]
    assert {t for t in rank if t.startswith("mvtec/")} == \
        {f"mvtec/{c}" for c in ("pill", "screw", "carpet", "toothbrush", "leather", "bottle")}


def test_a_multi_manifest_ordering_may_select_tasks_but_each_task_is_in_one(tmp_path):
    """Only the multi-dataset manifest may hold orderings over different task selections (two streams); a task in
    no ordering, or a single-dataset ordering that is not a permutation, stays refused."""
    m = {"schema": 1, "dataset": "multi", "tasks": ["a/x", "a/y", "b/z"], "source": {"kind": "publication"},
         "orderings": {"one": {"tasks": ["a/x", "b/z"]}, "two": {"tasks": ["a/y", "a/x"]}}}
    assert manifest.validate(m, "m.json") is m
    m["orderings"]["two"]["tasks"] = ["a/x"]
    with pytest.raises(ConfigError, match=r"m.json: tasks \['a/y'\] are in no ordering"):
        manifest.validate(m, "m.json")
    single = {**m, "dataset": "mvtec", "tasks": ["x", "y"], "orderings": {"one": {"tasks": ["x"]}}}
    with pytest.raises(ConfigError, match="not a permutation"):
        manifest.validate(single, "s.json")


def test_roots_resolve_from_environment_then_roots_file_then_data_raw(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("BENCH_ROOT_MVTEC", raising=False)
    monkeypatch.delenv("BENCH_ROOT_VISA", raising=False)
    assert default_root("mvtec") == tmp_path.joinpath("data/raw/mvtec").relative_to(tmp_path)
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "roots.yaml").write_text("mvtec: /srv/mvtec\nvisa: ~/VisA\n")
    assert str(default_root("mvtec")) == "/srv/mvtec"
    monkeypatch.setenv("BENCH_ROOT_MVTEC", "/scratch/mvtec")
    assert str(default_root("mvtec")) == "/scratch/mvtec"
    assert str(default_root("multi")) == "data/roots.yaml"
    assert "~" not in str(default_root("visa"))


@pytest.mark.parametrize("text, message", [
    ("mvtec: /a\ncoco: /b\n", "unknown dataset 'coco'"),
    ("- /a\n", "expected a mapping"),
    ("mvtec: [1, 2]\n", "must be a path string"),
    ("mvtec: [\n", "unreadable roots file"),
])
def test_bad_roots_files_are_refused_naming_the_file(tmp_path, text, message):
    path = tmp_path / "roots.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError, match=str(path)) as err:
        load_roots(path)
    assert message in str(err.value)


@pytest.fixture
def two_roots(tmp_path, scen_dir):
    """Two tiny synthetic trees staged as `synthetic` and `mpdd` (MVTec layout), a roots file naming both and a
    multi-dataset manifest made from a crafted STE table. Both trees hold tasks `stripes` and `checker`."""
    roots = {"synthetic": generate(tmp_path / "syn", preset="tiny", seed=0, n_tasks=2),
             "mpdd": generate(tmp_path / "other", preset="tiny", seed=1, n_tasks=2)}
    roots_file = tmp_path / "roots.yaml"
    roots_file.write_text("".join(f"{d}: {r}\n" for d, r in roots.items()))
    ste = tmp_path / "ste.csv"
    auc = {("synthetic", "stripes"): 0.9, ("synthetic", "checker"): 0.7, ("mpdd", "stripes"): 0.8,
           ("mpdd", "checker"): 0.95}
    pd.DataFrame([{"dataset": d, "concept": c, "method": "patchcore", "backbone": "resnet18", "roc_auc": v}
                  for (d, c), v in auc.items()]).to_csv(ste, index=False)
    assert main(["scenarios", "multi", "--ste", str(ste), "--out", str(tmp_path / "out")]) == 0
    return roots, roots_file


@pytest.mark.filterwarnings("ignore:.*concepts not found")
def test_multi_index_reads_each_task_from_its_own_root(two_roots, monkeypatch, tmp_path, capsys):
    roots, roots_file = two_roots
    index = read_index("multi", roots_file)
    assert sorted(index["task"].unique()) == ["mpdd/checker", "mpdd/stripes", "synthetic/checker",
                                              "synthetic/stripes"]
    for row in index.itertuples():
        assert row.task.startswith(row.dataset + "/")
        assert (roots[row.dataset] / row.image_path).is_file()

    assert main(["scenarios", "index", "--dataset", "multi", "--root", str(roots_file)]) == 0
    files = manifest.load("multi")["files"]
    assert files["mpdd/stripes"]["train"]["list"][0][0] == "stripes/train/good/000.png"
    assert main(["scenarios", "check", "--dataset", "multi", "--root", str(roots_file)]) == 0

    monkeypatch.setenv("BENCH_ROOT_MPDD", str(tmp_path / "elsewhere"))  # the environment beats the roots file
    with pytest.raises(DatasetError, match="elsewhere: the mpdd root of the multi-dataset stream does not exist"):
        read_index("multi", roots_file)


@pytest.mark.slow
@pytest.mark.filterwarnings("ignore:.*concepts not found")
def test_a_multi_dataset_run_follows_the_manifest_ordering(two_roots, tmp_path):
    _, roots_file = two_roots
    out = tmp_path / "run.h5"
    assert main(["run", "--dataset", "multi", "--root", str(roots_file), "--ordering", "easy_to_hard",
                 "--weights", "none", "--protocol", "cl", "--image-size", "64", "--batch-size", "16",
                 "--device", "cpu", "--workers", "0", "--out", str(out), "--no-progress", "--max-steps", "2"]) == 0
    run = results.read_run(out)
    assert run["tasks"] == ["mpdd/checker", "synthetic/stripes", "mpdd/stripes", "synthetic/checker"]
    assert run["attrs"]["steps_done"] == 2
    config = json.loads(run["attrs"]["config"])
    assert (config["dataset"], config["root"]) == ("multi", str(roots_file))
    r = run["R/image"]
    assert all(0.0 <= r[i, j] <= 1.0 for i in range(2) for j in range(i + 1))
