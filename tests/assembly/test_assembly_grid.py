"""Stream-assembly grids through the suite's cluster path (bench/hpc/assembly_grid.py): a `track: assembly` grid
loads and expands to the keys `bench assembly run` computes, the debug (and, marked slow, the local) executor runs
it, status and resubmit see the complete files, and bad input from the grid or the command line is one line, exit 2.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from bench.assembly import runs, store
from bench.assembly.synthetic import generate, generate_litnet, litnet_budgets
from bench.cli import main
from bench.errors import ConfigError
from bench.hpc import assembly_grid, executors, grid as grids, status as st

SET = "synthetic-assembly"
GRID = """dataset: synthetic-assembly
track: assembly
corpus: {{source: cicids2017, name: synthetic, scale: 0.001}}
arms: [timestamp, day_round_robin]
detectors: {detectors}
seeds: [1, 2]
"""


@pytest.fixture(scope="module")
def week_root(tmp_path_factory):
    return generate(tmp_path_factory.mktemp("grid-week") / "week", K=1, seed=4)


def _grid(tmp_path: Path, detectors: str = "{bocpd: {presets: [released, corrected_reset]}, iforest: {}}",
          text: str | None = None) -> Path:
    path = tmp_path / f"{SET}.yaml"
    path.write_text(text if text is not None else GRID.format(detectors=detectors))
    return path


def cli(capsys, *argv) -> tuple[int, str, str]:
    code = main([str(a) for a in argv])
    out = capsys.readouterr()
    return code, out.out, out.err


def test_shipped_grids_load():
    for name, arms in ((SET, ["timestamp", "day_round_robin"]), ("cicids2017-assembly", ["timestamp",
                                                                                          "day_round_robin"]),
                       ("litnet-assembly", ["capture:*", "pooled"])):
        g = grids.load_grid(name)
        assert g.track == "assembly" and g.orderings == arms and {"bocpd", "hst", "ecod", "lof"} <= set(g.models)
    g = grids.load_grid("cicids2017-assembly")
    assert g.corpus.scale == 1.0 and g.corpus.rule == "released" and g.seeds == [11, 23, 47]
    assert (g.split.train, g.split.validation) == (0.70, 0.15)


def test_grid_expands_to_the_keys_a_local_run_has(week_root, tmp_path):
    g = grids.load_grid(SET, _grid(tmp_path))
    said = []
    planned = grids.expand(g, grids.load_profile("cpu"), grids.Selection(), week_root, tmp_path, log=said.append)
    # bocpd takes no seed: 2 arms × 2 presets once; iforest: 2 arms × 2 seeds
    assert len(planned) == 8 and any("bocpd takes no seed" in line for line in said)
    corpus = runs.CorpusSpec("cicids2017", str(week_root), scale=0.001, name="synthetic")
    local = runs.prepare(runs.RunSpec(corpus, "day_round_robin", "iforest", seed=2), tmp_path / SET / "runs")
    match = [p for p in planned if p.key == local.run_key]
    assert len(match) == 1 and match[0].run.out == local.out and match[0].name == local.out.stem
    assert isinstance(executors.job_for(match[0], grids.REPO), assembly_grid.AssemblyJob)
    only = grids.expand(g, grids.load_profile("cpu"), grids.Selection(models=["iforest"], orderings=["timestamp"],
                                                                       seeds=[1]), week_root, tmp_path)
    assert [p.run.spec.arm for p in only] == ["timestamp"] and only[0].run.spec.seed == 1


def test_every_capture_and_the_pooled_arm(tmp_path):
    root = generate_litnet(tmp_path / "litnet", K=1, seed=0)
    budgets = "{" + ", ".join(f"{k}: {v}" for k, v in litnet_budgets(1).items()) + "}"
    text = (f"dataset: litnet-assembly\ntrack: assembly\ncorpus: {{source: litnet, budgets: {budgets}}}\n"
            "arms: ['capture:*', pooled]\ndetectors: [iforest]\nseeds: [0]\n")
    path = tmp_path / "litnet-assembly.yaml"
    path.write_text(text)
    planned = grids.expand(grids.load_grid("litnet-assembly", path), grids.load_profile("cpu"), grids.Selection(),
                           root, tmp_path)
    # every capture, in the corpus's (date) order, then the pooled composite
    assert [p.run.spec.arm for p in planned] == ["capture:udp_flood", "capture:spam", "capture:blaster_worm",
                                                 "pooled"]


def test_debug_executor_runs_the_grid_then_status_and_resubmit_see_it_done(week_root, tmp_path, capsys):
    grid = _grid(tmp_path, "{bocpd: {}, ecod: {}}")
    code, out, _ = cli(capsys, "submit", "--dataset", SET, "--grid", grid, "--root", week_root, "--outputs",
                       tmp_path / "out", "--cluster", "debug")
    assert code == 0 and "4 runs ran" in out
    files = sorted((tmp_path / "out" / SET / "runs").glob("*.h5"))
    assert len(files) == 4 and all(store.is_complete(f) for f in files)
    assert {store.read_run(f).detector for f in files} == {"bocpd", "ecod"}
    code, out, _ = cli(capsys, "status", "--dataset", SET, "--outputs", tmp_path / "out")
    assert out.splitlines()[-1] == "total 4 runs: 4 complete, 0 running, 0 pending, 0 failed, 0 not submitted"
    code, out, _ = cli(capsys, "resubmit", "--dataset", SET, "--outputs", tmp_path / "out")
    assert code == 0 and "nothing to submit" in out


@pytest.mark.slow
def test_local_executor_runs_the_grid_in_the_background(week_root, tmp_path, capsys):
    grid = _grid(tmp_path, "{iforest: {}}")
    code, out, _ = cli(capsys, "submit", "--dataset", SET, "--grid", grid, "--root", week_root, "--outputs",
                       tmp_path / "out", "--cluster", "local", "--seeds", "1")
    assert code == 0 and "started 1 local process(es)" in out
    pid = out.split("process(es) ")[1].split(":")[0]
    deadline = time.time() + 240
    while st.pid_alive(pid) and time.time() < deadline:
        time.sleep(1)
    code, out, _ = cli(capsys, "status", "--dataset", SET, "--outputs", tmp_path / "out")
    assert out.splitlines()[-1] == "total 2 runs: 2 complete, 0 running, 0 pending, 0 failed, 0 not submitted", out


@pytest.mark.parametrize("detectors, text, message", [
    ("{nope: {}}", None, "unknown assembly detector 'nope'"),
    ("{bocpd: {presets: [fast]}}", None, "unknown bocpd preset 'fast'"),
    ("{bocpd: {speed: 2}}", None, "unknown key\\(s\\) \\['speed'\\] in detector 'bocpd'"),
    (None, GRID.format(detectors="[bocpd]").replace("day_round_robin", "shuffled"), "unknown arm 'shuffled'"),
    (None, GRID.format(detectors="[bocpd]").replace("name: synthetic", "name: other"), "is named 'other-assembly'"),
    (None, GRID.format(detectors="[bocpd]").replace("scale: 0.001", "scale: -1"), "scale must be a positive"),
    (None, GRID.format(detectors="[bocpd]").replace("scale: 0.001", "scale: 0.001, rule: spread"),
     "corpus: unknown subsampling rule 'spread'"),
    (None, GRID.format(detectors="[bocpd]") + "split: {train: abc}\n", "split needs train and validation"),
    (None, GRID.format(detectors="[bocpd]") + "split: {train: 0.8, validation: 0.2}\n", "train \\+ validation < 1"),
])
def test_bad_grids_are_one_line(tmp_path, detectors, text, message):
    path = _grid(tmp_path, detectors or "", text)
    with pytest.raises(ConfigError, match=message) as e:
        grids.load_grid(SET, path)
    assert str(path) in str(e.value) and "\n" not in str(e.value)


def test_missing_root_says_how_to_stage_it(tmp_path, capsys):
    code, _, err = cli(capsys, "submit", "--dataset", "cicids2017-assembly", "--root", tmp_path / "none",
                       "--outputs", tmp_path, "--cluster", "debug")
    assert code == 2 and "stage the cicids2017 captures there" in err and err.count("\n") == 1


@pytest.mark.parametrize("args, message", [
    (["--detector", "nope"], "unknown assembly detector 'nope'"),
    (["--arm", "shuffled"], "unknown arm 'shuffled'"),
    (["--validation", "0.0005"], "leaves the validation segment(s) empty"),
    (["--arm", "capture:Sunday"], "unknown capture of corpus 'synthetic' 'Sunday'"),
])
def test_bad_run_arguments_are_one_line_exit_2(week_root, tmp_path, capsys, args, message):
    code, _, err = cli(capsys, "assembly", "run", "--root", week_root, "--scale", "0.001", "--name", "synthetic",
                       "--outputs", tmp_path, "--detector", "iforest", *args)
    assert code == 2 and message in err and err.count("\n") == 1
    assert not list(tmp_path.rglob("*.h5"))  # nothing half-written


def test_run_command_missing_root_exit_2(tmp_path, capsys):
    code, _, err = cli(capsys, "assembly", "run", "--root", tmp_path / "absent", "--name", "synthetic")
    assert code == 2 and "bench assembly synthetic" in err and err.count("\n") == 1
