"""Issue 20's last two items: the tabular Replay buffer's size (`replay_size`) and the models' hyperparameter presets
(`preset`) as grid and `bench tabular run` settings, checked before any run, recorded in the run's config."""

from __future__ import annotations

import json

import numpy as np
import pytest
import yaml
from helpers import one_error_line, cli_stdout
from test_tabular_runner import STREAM, config, index, scenario_folder  # noqa: F401 (module fixtures)

from bench import results
from bench.cli import main
from bench.config import RunConfig, TabularInputs
from bench.continual.runner import prepare
from bench.errors import ConfigError
from bench.hpc import grid as grids
from bench.registry import get
from bench.tabular.protocols import REPLAY_RECORDS

# Run keys computed before replay_size existed (commit 8807219), from a fixed preimage: a tabular run of each protocol
# keeps its key, Replay's too when it asks for the default buffer.
EARLIER_KEYS = {
    "ncl": "caafba06af88d0a04893c9c66a5bb998088f4c4ec38e00fc065b2fb83f340e95",
    "cl": "c721c8ef7edd89f60ef6d986361ecdb59a20387d9605ded78e74ef45f9b2027b",
    "cumulative": "eb5ff82fdf019e3104d60210cd13602d7c1c32fb24750d5f64eaf7cd4183733a",
    "cumulative_fresh": "59f00d96e98058d278f5c8796433bddda0f95b17bcd56d29c95eb60173957d84",
    "mste": "362049b7e27af9d3d65c9e2f6392acb16e7ec576fdbd10953e2ec40bd65e69ea",
}
EARLIER_SCHEMA2_CL_KEY = "d6051087cf851210d54da4ef8f854532113e16031b75dec743440c22fe9ff377"


def fixed_key(protocol: str, replay_size=None, content="c" * 64, replay_share=None) -> str:
    cfg = RunConfig(dataset="synthetic", root="r", model="vae", tasks=["Monday", "Tuesday"], protocol=protocol,
                    seed=0, hparams={"epochs": 5}, model_version=1,
                    inputs=TabularInputs(index_content_sha256=content, replay_size=replay_size,
                                         replay_share=replay_share))
    return cfg.run_key("a" * 64, "none")


def test_run_keys_from_before_replay_size_stay_and_only_a_replay_buffer_off_the_default_changes_a_key():
    for protocol, key in EARLIER_KEYS.items():
        assert fixed_key(protocol) == key
    assert fixed_key("cl", REPLAY_RECORDS) == EARLIER_KEYS["cl"]  # the default, recorded, is the same run
    assert fixed_key("cl", None, content=None) == EARLIER_SCHEMA2_CL_KEY  # a schema-2 file keeps its key too
    assert fixed_key("cl", 500) != EARLIER_KEYS["cl"] and fixed_key("cl", 500) != fixed_key("cl", 501)
    # only Replay has a bounded buffer: another protocol's preimage never holds it
    assert fixed_key("cumulative", 500) == EARLIER_KEYS["cumulative"]


def test_prepare_records_the_default_buffer_of_a_replay_run_and_refuses_a_size_for_another_protocol(index, tmp_path):
    default = prepare(config(index, "cl"), out=tmp_path / "a.h5")
    asked = prepare(config(index, "cl", inputs=TabularInputs(replay_size=REPLAY_RECORDS)), out=tmp_path / "a.h5")
    assert default.config.tabular.replay_size == REPLAY_RECORDS and default.run_key == asked.run_key
    small = prepare(config(index, "cl", inputs=TabularInputs(replay_size=40)), out=tmp_path / "b.h5")
    assert small.run_key != default.run_key and small.config.tabular.replay_size == 40
    assert prepare(config(index, "ncl"), out=tmp_path / "c.h5").config.tabular.replay_size is None
    with pytest.raises(ConfigError, match="replay_size=40 sizes the Replay buffer of protocol cl; protocol "
                                          "cumulative has none"):
        prepare(config(index, "cumulative", inputs=TabularInputs(replay_size=40)), out=tmp_path / "d.h5")
    for bad in (0, -3, 2.5, True, "many"):
        with pytest.raises(ConfigError, match=r"--replay-size .* is not allowed \(expected an integer from 1"):
            prepare(config(index, "cl", inputs=TabularInputs(replay_size=bad)), out=tmp_path / "e.h5")
    assert not list(tmp_path.iterdir())


def test_cli_replay_size_reaches_the_buffer_and_bad_values_fail_before_work(index, tmp_path, capsys):
    args = ["tabular", "run", "--index", index, "--model", "iforest", "--quick", "--protocol", "cl",
            "--tasks", ",".join(STREAM)]
    cli_stdout(*args, "--replay-size", 30, "--out", tmp_path / "small.h5")
    cli_stdout(*args, "--out", tmp_path / "default.h5")
    small, default = (results.read_run(tmp_path / f"{n}.h5") for n in ("small", "default"))
    assert json.loads(small["attrs"]["config"])["inputs"]["replay_size"] == 30
    assert json.loads(default["attrs"]["config"])["inputs"]["replay_size"] == REPLAY_RECORDS
    assert small["attrs"]["run_key"] != default["attrs"]["run_key"]
    n_train = [int(n) for n in default["tasks_info/n_train"]]
    # the default buffer holds every past record of this small stream; 30 records hold 30 (an equal share each)
    assert default["replay/composition"].sum(axis=1).tolist() == [0, *np.cumsum(n_train[:3]).tolist()]
    assert small["replay/composition"].sum(axis=1).tolist() == [0, 30, 30, 30]
    assert small["replay/composition"][3, :3].tolist() == [10, 10, 10]
    capsys.readouterr()
    for extra, message in ((["--replay-size", "0"], "--replay-size 0 is not allowed"),
                           (["--replay-size", "5", "--protocol", "ncl"], "protocol ncl has none")):
        assert main([str(a) for a in args] + extra + ["--out", str(tmp_path / "bad.h5")]) == 2
        assert message in one_error_line(capsys)
    assert not (tmp_path / "bad.h5").exists()


def test_cli_preset_resolves_the_registry_values_and_unknown_names_list_the_valid_ones(index, tmp_path, capsys):
    cli_stdout("tabular", "run", "--index", index, "--model", "iforest", "--quick", "--protocol", "ncl",
               "--tasks", ",".join(STREAM[:2]), "--preset", "released", "--out", tmp_path / "r.h5")
    assert json.loads(results.read_run(tmp_path / "r.h5")["attrs"]["config"])["preset"] == "released"
    vae = config(index, "ncl", model="vae", preset="released")
    vae.hparams = {}  # --quick's epochs and batch size would apply on top of the preset
    hp = prepare(vae, out=tmp_path / "v.h5").config.hparams
    assert (hp["epochs"], hp["batch_size"]) == (20, 128)
    capsys.readouterr()
    assert main(["tabular", "run", "--index", str(index), "--model", "vae", "--preset", "paper",
                 "--out", str(tmp_path / "bad.h5")]) == 2
    err = one_error_line(capsys)
    assert "unknown vae preset 'paper' (valid: released, suite)" in err
    assert not (tmp_path / "bad.h5").exists()


def grid_file(tmp_path, **changes):
    """The shipped synthetic tabular grid with `changes` applied (models replaced whole)."""
    data = {**yaml.safe_load(grids.grid_path("tabular-synthetic").read_text()), **changes}
    path = tmp_path / "grid.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def expand(path, scenario_folder, tmp_path, **selection):
    return grids.expand(grids.load_grid("tabular-synthetic", path), grids.load_profile("cpu"),
                        grids.Selection(**selection), scenario_folder, tmp_path)


def test_grid_replay_size_reaches_only_the_replay_runs_and_a_model_may_set_its_own(scenario_folder, tmp_path):
    models = {"deepsvdd": {"hparams": {"epochs": 1}}, "vae": {"replay_size": 7, "hparams": {"epochs": 1}}}
    path = grid_file(tmp_path, replay_size=40, models=models, protocols=["ncl", "cl"])
    planned = expand(path, scenario_folder, tmp_path, orderings=["smooth_drift"])
    sizes = {(p.run.config.model, p.run.config.protocol): p.run.config.tabular.replay_size for p in planned}
    assert sizes == {("deepsvdd", "ncl"): None, ("deepsvdd", "cl"): 40, ("vae", "ncl"): None, ("vae", "cl"): 7}
    default = expand(grid_file(tmp_path, models=models, protocols=["ncl", "cl"]),
                     scenario_folder, tmp_path, orderings=["smooth_drift"])
    keys = {(p.run.config.model, p.run.config.protocol): p.key for p in planned}
    before = {(p.run.config.model, p.run.config.protocol): p.key for p in default}
    assert keys[("deepsvdd", "ncl")] == before[("deepsvdd", "ncl")]
    assert keys[("deepsvdd", "cl")] != before[("deepsvdd", "cl")]


def test_grid_replay_size_reaches_the_job_through_submit(scenario_folder, tmp_path):
    path = grid_file(tmp_path, replay_size=12, models={"deepsvdd": {"hparams": {"epochs": 1}}}, protocols=["cl"])
    out = cli_stdout("submit", "--dataset", "tabular-synthetic", "--grid", path, "--root", scenario_folder,
                     "--outputs", tmp_path, "--orderings", "smooth_drift", "--cluster", "debug", "--profile", "cpu")
    assert "1 run ran" in out
    [f] = (tmp_path / "tabular-synthetic" / "runs").glob("*.h5")
    r = results.read_run(f)
    assert r["attrs"]["status"] == "complete"
    assert json.loads(r["attrs"]["config"])["inputs"]["replay_size"] == 12
    assert r["replay/composition"].sum(axis=1).tolist() == [0, 12, 12, 12]


@pytest.mark.parametrize("where", ["grid", "model"])
@pytest.mark.parametrize("bad", [0, -1, 2.5, True, "all", None])
def test_a_bad_grid_replay_size_is_refused_at_load_naming_the_grid(tmp_path, where, bad):
    if where == "grid":
        path = grid_file(tmp_path, replay_size=bad)
        name = "replay_size"
    else:
        path = grid_file(tmp_path, models={"vae": {"replay_size": bad}})
        name = "replay_size of model 'vae'"
    with pytest.raises(ConfigError, match=f"must be an integer >= 1, got {bad!r}") as e:
        grids.load_grid("tabular-synthetic", path)
    assert str(e.value).startswith(f"{path}: {name} ")


def test_a_grid_replay_size_without_a_replay_run_is_refused(tmp_path):
    with pytest.raises(ConfigError, match="replay_size sizes the Replay buffer, but no run of vae, deepsvdd uses "
                                          "protocol cl"):
        grids.load_grid("tabular-synthetic", grid_file(tmp_path, replay_size=10, protocols=["ncl", "mste"],
                                                       models={"vae": {}, "deepsvdd": {}}))
    models = {"vae": {"replay_size": 10, "protocols": ["ncl"]}, "deepsvdd": {}}
    with pytest.raises(ConfigError, match="replay_size of model 'vae' sizes the Replay buffer, but no run of vae "):
        grids.load_grid("tabular-synthetic", grid_file(tmp_path, models=models))
    with pytest.raises(ConfigError, match=r"unknown key\(s\) \['replay_size'\] in index_settings"):
        grids.load_grid("tabular-synthetic", grid_file(tmp_path, index_settings={"replay_size": 10}))


def test_bad_grid_values_are_refused_before_any_run_is_submitted(scenario_folder, tmp_path, capsys):
    for changes in ({"replay_size": 0}, {"models": {"vae": {"preset": "paper"}}}):
        path = grid_file(tmp_path, **changes)
        capsys.readouterr()
        assert main(["submit", "--dataset", "tabular-synthetic", "--grid", str(path), "--root", str(scenario_folder),
                     "--outputs", str(tmp_path / "out"), "--cluster", "debug", "--profile", "cpu"]) == 2
        assert str(path) in one_error_line(capsys)
    # only submit's lock file is there: no run, no log, no submission record
    assert [p.name for p in (tmp_path / "out").rglob("*") if p.is_file()] == ["submissions.lock"]


def test_grid_preset_resolves_the_registry_preset_and_unknown_names_are_refused_at_load(scenario_folder, tmp_path):
    models = {"vae": {"preset": "released"}, "deepsvdd": {"preset": "released", "hparams": {"epochs": 2}},
              "dagmm": {}}
    planned = expand(grid_file(tmp_path, models=models), scenario_folder, tmp_path, orderings=["smooth_drift"],
                     protocols=["ncl"])
    cfg = {p.run.config.model: p.run.config for p in planned}
    assert (cfg["vae"].preset, cfg["vae"].hparams["epochs"], cfg["vae"].hparams["batch_size"]) == ("released", 20, 128)
    # the model's hparams apply on top of its preset; a model without one runs its default preset
    assert (cfg["deepsvdd"].hparams["epochs"], cfg["deepsvdd"].hparams["batch_size"]) == (2, 128)
    assert cfg["dagmm"].preset == get("dagmm", "tabular").default_preset
    assert cfg["dagmm"].hparams == get("dagmm", "tabular").resolve({})
    for preset, message in (("paper", r"unknown vae preset 'paper' \(valid: released, suite\)"),
                            (3, "expected a preset name, got 3")):
        path = grid_file(tmp_path, models={"vae": {"preset": preset}})
        with pytest.raises(ConfigError, match=message) as e:
            grids.load_grid("tabular-synthetic", path)
        assert str(e.value).startswith(f"{path}: preset of model 'vae': ")


def test_the_replay_share_rule_keeps_every_earlier_key_and_only_the_released_floor_changes_a_cl_key():
    """T8: a water-filled buffer (every earlier run) keeps its key; pyCLAD's floor share (v0.3.0
    strategies/replay/buffers/adaptive_balanced.py:20) is another Replay run, and only a Replay run."""
    assert fixed_key("cl", replay_share="water") == fixed_key("cl", REPLAY_RECORDS, replay_share="water") \
        == EARLIER_KEYS["cl"]
    assert fixed_key("cl", replay_share="floor") != EARLIER_KEYS["cl"]
    assert fixed_key("cumulative", replay_share="floor") == EARLIER_KEYS["cumulative"]


def test_a_released_replay_run_records_and_uses_the_floor_share(index, tmp_path):
    """T8: under the released preset Replay keeps ⌊capacity / tasks⌋ records of each past task, as the CAD
    framework's AdaptiveBalancedReplayBuffer (CAD 675a9c9 scripts/pyclad/run_validation_strategies.py:115; pyCLAD
    v0.3.0 adaptive_balanced.py:20) and nothing more where a task holds fewer; the suite fills with water."""
    from bench.continual.runner import execute
    from bench.training.replay import equal_shares

    # 1,000 records over three past tasks of 477: water keeps 334 + 333 + 333, the floor 333 each (999)
    suite = prepare(config(index, "cl", inputs=TabularInputs(replay_size=1000)), out=tmp_path / "s.h5")
    released = prepare(config(index, "cl", preset="released", inputs=TabularInputs(replay_size=1000)),
                       out=tmp_path / "r.h5")
    assert suite.config.tabular.replay_share == "water" and released.config.tabular.replay_share == "floor"
    assert released.run_key != suite.run_key
    assert prepare(config(index, "ncl", preset="released"), out=tmp_path / "n.h5").config.tabular.replay_share is None
    with pytest.raises(ConfigError, match="replay_share='water': preset released runs Replay with the 'floor'"):
        prepare(config(index, "cl", preset="released", inputs=TabularInputs(replay_share="water")),
                out=tmp_path / "x.h5")
    for prepared, share in ((released, "floor"), (suite, "water")):
        run = results.read_run(execute(prepared, progress=False, log=lambda s: None))
        n_train = [int(n) for n in run["tasks_info/n_train"]]
        for step in range(1, len(n_train)):
            assert run["replay/composition"][step, :step].tolist() == equal_shares(n_train[:step], 1000, share)
        assert json.loads(run["attrs"]["config"])["inputs"]["replay_share"] == share
    assert equal_shares(n_train[:3], 1000, "floor") != equal_shares(n_train[:3], 1000, "water")
