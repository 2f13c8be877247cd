"""One registration per dataset (bench.datasets, issue 30 §2): every list of datasets is derived from the
registrations; a dataset from another package (entry point group `bench.datasets`) runs through `bench data` and
`bench run`; a broken dataset plugin is one line, never the end of `--help`; Make routes DATASET= by its track; and
no run key moved."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from helpers import bench_process, hand_installed_plugin, plugin_env

REPO = Path(__file__).resolve().parents[2]
GROUP = "bench.datasets"


def test_every_derived_list_is_the_registrations():
    from bench import config, datasets
    from bench.data import datasets as data_datasets
    from bench.data import readers
    from bench.report import render
    from bench.tabular import cic, commands

    image = [s for s in datasets.BUILT_IN if s.track == "image"]
    tabular = [s for s in datasets.BUILT_IN if s.track == "tabular"]
    assert config.DATASETS == tuple(s.name for s in image) == datasets.names("image")[:len(image)]
    assert config.TABULAR_DATASETS == tuple(s.name for s in tabular)
    assert config.RESULT_SETS == datasets.result_sets()
    assert data_datasets.READERS == {s.name: s.load_reader() for s in image if not s.stream}
    assert readers.KNOWN_CONCEPTS == {s.name: s.known for s in image if s.known}
    assert render.DATASET_LABELS == {s.name: s.label for s in image}
    own = [s for s in tabular if s.reader is not None]
    assert cic.READERS == {s.name: s.load_reader() for s in own}
    assert cic.PATTERNS == {s.name: s.files for s in own}
    assert cic.KNOWN_LABELS == {s.name: {x.lower() for x in s.known} for s in own}
    assert commands.DATASETS == tuple(n for n in config.TABULAR_DATASETS if n != "multi")
    assert (readers.MVTEC_LAYOUT, readers.VISA_LAYOUT) == (datasets.get("mvtec", "image").layout,
                                                           datasets.get("visa", "image").layout)


def test_the_published_datasets_keep_their_order():
    """The order is the reports' sort order and the CLI's choices: the published datasets keep the order and labels
    the hand lists had before the registry, each stream comes last in its track, and a dataset added to BUILT_IN
    (anywhere after them) changes none of that."""
    from bench import config, datasets
    from bench.report import render

    image = ("synthetic", "mvtec", "visa", "btad", "mpdd", "dagm")
    tabular = ("synthetic", "cicids2017", "cicids2018", "cicunsw")
    assert config.DATASETS[:len(image)] == image and config.DATASETS[-1] == datasets.MULTI
    assert config.TABULAR_DATASETS[:len(tabular)] == tabular and config.TABULAR_DATASETS[-1] == datasets.MULTI
    assert config.RESULT_SETS[:len(config.DATASETS)] == config.DATASETS
    assert config.RESULT_SETS[len(config.DATASETS):][:len(tabular)] == ("tabular-synthetic", "cicids2017",
                                                                       "cicids2018", "cicunsw")
    assert config.RESULT_SETS[-1] == "tabular-multi"
    labels = {"mvtec": "MVTec", "visa": "VisA", "btad": "BTAD", "mpdd": "MPDD", "dagm": "DAGM",
              "multi": "MultiDataset", "synthetic": "Synthetic"}
    assert {name: render.DATASET_LABELS[name] for name in labels} == labels


def test_importing_config_imports_neither_pandas_nor_torch_nor_a_reader():
    probe = subprocess.run([sys.executable, "-c", (
        "import sys, bench.config; print(sorted(m for m in ('pandas', 'torch', 'bench.data', 'bench.tabular', "
        "'importlib.metadata') if m in sys.modules))")], env=plugin_env(None), capture_output=True, text=True)
    assert probe.returncode == 0 and probe.stdout.strip() == "[]", probe.stdout + probe.stderr


def test_run_keys_did_not_move():
    """Keys computed before the registry existed: the dataset enters the key by its name, as before."""
    from bench.config import ImageInputs, RunConfig, TabularInputs

    configs = {
        "7418b477b26da70c0c33ff99d65f2e8156481bd80c00691369de3c4865e190b8": RunConfig(
            dataset="synthetic", root="/x", model="patchcore", tasks=["a", "b"], protocol="cl", hparams={"k": 1},
            model_version=1, inputs=ImageInputs(weights="none", image_size=32, feature_dtype="float16",
                                                normalize=True, resize="float")),
        "a5376dc5cc15c46492fe43c1a38510b7aa0ee885c068cd24554f2bf2a29e5fc4": RunConfig(
            dataset="mvtec", root="/y", model="padim", tasks=["bottle", "cable"], protocol="ncl", seed=3,
            model_version=2, inputs=ImageInputs()),
        "78ebdbe8aae9baa240f17ef11b25ef605fe7a7710083ab6772196521eb75593a": RunConfig(
            dataset="cicids2017", root="/z", model="ae", tasks=["Monday", "Tuesday"], protocol="cl",
            evaluation="cross", model_version=1, inputs=TabularInputs()),
    }
    for key, config in configs.items():
        assert config.validate().run_key("i" * 64, "w") == key
    assert [c.result_set for c in configs.values()] == ["synthetic", "mvtec", "cicids2017"]
    tabular_synthetic = RunConfig(dataset="synthetic", root="", model="", tasks=[], inputs=TabularInputs())
    assert tabular_synthetic.result_set == "tabular-synthetic"


# --- a dataset from outside -------------------------------------------------------------------------------------

PLUGIN = '''"""A dataset of its own: a reader and its registration, one file."""
from bench.data.readers import read_mvtec
from bench.datasets import DatasetSpec, register


def read(root):
    return read_mvtec(root, dataset="toydata")


register(DatasetSpec("toydata", "image", read, label="ToyData", layout="MVTec AD layout", known=("a", "b", "c")))
'''


def _plugin(site: Path, module: str, source: str, name: str = "toydata", entry_points: str | None = None) -> Path:
    """A dataset plugin installed by hand (helpers.hand_installed_plugin)."""
    return hand_installed_plugin(site, module, source, group=GROUP, name=name, entry_points=entry_points)


def _png(path: Path, value: int, rng) -> None:
    from PIL import Image

    path.parent.mkdir(parents=True, exist_ok=True)
    pixels = np.clip(value + rng.normal(0, 8, (32, 32, 3)), 0, 255).astype(np.uint8)
    Image.fromarray(pixels).save(path)


@pytest.fixture(scope="module")
def toy_root(tmp_path_factory) -> Path:
    """Two concepts in the MVTec AD layout, 32 px: 4 training images, 2 good and 2 defect test images each."""
    from PIL import Image

    root, rng = tmp_path_factory.mktemp("toydata"), np.random.default_rng(0)
    for concept, value in (("a", 90), ("b", 160)):
        for i in range(4):
            _png(root / concept / "train" / "good" / f"{i:03d}.png", value, rng)
        for i in range(2):
            _png(root / concept / "test" / "good" / f"{i:03d}.png", value, rng)
            _png(root / concept / "test" / "spot" / f"{i:03d}.png", 255 - value, rng)
            mask = root / concept / "ground_truth" / "spot" / f"{i:03d}_mask.png"
            mask.parent.mkdir(parents=True, exist_ok=True)
            Image.fromarray(np.full((32, 32), 255, np.uint8)).save(mask)
    return root


@pytest.mark.slow
def test_a_dataset_plugin_runs_through_bench_data_and_bench_run(toy_root, tmp_path):
    site = _plugin(tmp_path / "site", "toydata_bench", PLUGIN)
    data = bench_process(site, "data", "--dataset", "toydata", "--root", toy_root)
    assert data.returncode == 0, data.stderr
    assert f"toydata at {toy_root}: 2 tasks, 16 images" in data.stdout
    assert "concepts not found: c" in data.stdout  # its registration's known concepts
    out = tmp_path / "outputs" / "toydata" / "runs" / "toy.h5"
    run = bench_process(site, "run", "--dataset", "toydata", "--root", toy_root, "--model", "padim", "--protocol", "ncl",
                 "--weights", "none", "--image-size", "32", "--device", "cpu", "--batch-size", "8", "--workers", "0",
                 "--tasks", "a,b", "--out", out)
    assert run.returncode == 0, run.stderr
    from bench.results import load

    row = load(out.parent).iloc[0]
    assert (row["dataset"], row["steps_done"], row["n_tasks"]) == ("toydata", 2, 2)
    assert np.isfinite(row["image_roc_auc_cl"])
    assert "toydata" in bench_process(site, "run", "--help").stdout
    assert bench_process(site, "track-of", "toydata").stdout.split() == ["image", "toydata"]
    # its result set aggregates, and its tables and report name it by its registration's label
    agg = bench_process(site, "aggregate", "--dataset", "toydata", "--outputs", tmp_path / "outputs", "--bootstrap", "0",
                 "--figures", "none")
    assert agg.returncode == 0, agg.stderr
    assert "ToyData" in (tmp_path / "outputs/toydata/tables/table2.md").read_text()
    assert "ToyData" in (tmp_path / "outputs/toydata/report/index.html").read_text()


TABULAR_PLUGIN = '''from bench.datasets import DatasetSpec, register
from bench.tabular import cic


def read(root):
    return cic.read_cicids2017(root)  # CSV files in CICIDS2017's format


register(DatasetSpec("toytab", "tabular", read, known=("BENIGN", "DoS Hulk")))
'''


@pytest.mark.slow
def test_a_tabular_dataset_plugin_runs_through_bench_tabular_index_and_run(tmp_path):
    from bench.results import load
    from bench.tabular.synthetic import generate

    site = _plugin(tmp_path / "site", "toytab_bench", TABULAR_PLUGIN, name="toytab")
    raw = generate(tmp_path / "raw", seed=0, n_normal=120, n_anomal=30)
    index = bench_process(site, "tabular", "index", "--dataset", "toytab", "--root", raw, "--out", tmp_path / "index",
                   "--min-normal", 50)
    assert index.returncode == 0, index.stderr
    out = tmp_path / "runs" / "toytab.h5"
    run = bench_process(site, "tabular", "run", "--index", tmp_path / "index", "--model", "iforest", "--quick",
                 "--protocol", "ncl", "--out", out)
    assert run.returncode == 0, run.stderr
    row = load(out.parent).iloc[0]
    assert (row["dataset"], row["model"]) == ("toytab", "iforest")
    assert bench_process(site, "track-of", "toytab").stdout.split() == ["tabular", "toytab"]


@pytest.mark.parametrize("source,expected", [
    ("raise ImportError('needs a package that is not installed')",
     "failed to load: ImportError: needs a package that is not installed"),
    ("import sys\nsys.exit(0)", "failed to load: SystemExit: 0"),
    ("X = 1  # registers nothing", "registered no dataset named 'broken'"),
])
def test_a_broken_dataset_plugin_is_one_line_where_it_is_asked_for_and_never_stops_help(plugin_on_path, tmp_path,
                                                                                       capsys, source, expected):
    from bench.cli import main

    plugin_on_path(_plugin(tmp_path / "site", "broken_data", source, name="broken"))
    for argv in (["--help"], ["run", "--help"], ["data", "--help"]):
        with pytest.raises(SystemExit) as done:
            main(argv)
        shown = capsys.readouterr()
        assert done.value.code == 0 and "usage:" in shown.out and "Traceback" not in shown.err, shown.err
    assert "broken" in shown.out and "broken_data" not in sys.modules  # data --help lists it by name, not imported
    assert main(["data", "--dataset", "broken", "--root", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "Traceback" not in err, err
    assert err.startswith(f"error: dataset plugin 'broken' (distribution broken-data, entry point {GROUP}: "
                          "broken = broken_data)"), err
    assert expected in err
    assert main(["run", "--dataset", "broken", "--root", str(tmp_path), "--model", "padim", "--weights", "none",
                 "--tasks", "a", "--out", str(tmp_path / "out.h5")]) == 2
    assert capsys.readouterr().err.strip().splitlines() == [err]
    assert not (tmp_path / "out.h5").exists()


def test_a_malformed_entry_points_file_is_one_warning_not_the_end_of_help(tmp_path):
    site = _plugin(tmp_path / "site", "broken_data", "X = 1", entry_points=f"[{GROUP}]\nbroken\n")
    shown = bench_process(site, "data", "--help")
    assert shown.returncode == 0 and "--dataset" in shown.stdout, shown.stderr
    assert "distribution 'broken-data': its entry_points.txt cannot be read" in shown.stderr
    assert len(shown.stderr.strip().splitlines()) == 1, shown.stderr


# --- Make routes by the track ------------------------------------------------------------------------------------

def _make_n(*argv, site: Path | None = None) -> str:
    if not (REPO / ".venv" / "bin" / "python").exists():
        pytest.skip("make calls .venv/bin/python (`make venv`)")
    out = subprocess.run(["make", "-n", "-o", ".venv/.installed", *argv], cwd=REPO, env=plugin_env(site),
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    return out.stdout.replace("\\\n", "")


def test_make_scenarios_routes_by_the_result_sets_track(tmp_path):
    assert "-m bench tabular scenarios --dataset cicids2017 " in _make_n("scenarios", "DATASET=cicids2017")
    visa = _make_n("scenarios", "DATASET=visa")
    assert "-m bench scenarios ste --dataset visa " in visa and "tabular scenarios" not in visa
    assert "-m bench tabular scenarios --dataset synthetic " in _make_n("scenarios", "DATASET=tabular-synthetic")
    assert "-m bench scenarios multi " in _make_n("scenarios", "DATASET=multi")
    for mk in ("scenarios.mk", "tabular.mk"):  # no list of names routes any more
        assert "filter cicids2017" not in (REPO / "make" / mk).read_text()
    site = _plugin(tmp_path / "site", "toydata_bench", PLUGIN)  # a plugin routes by its registration's track
    assert "-m bench scenarios ste --dataset toydata " in _make_n("scenarios", "DATASET=toydata", site=site)
