"""Threads that fit the work (issue 46 §6): the tabular detectors run on one torch thread unless a SLURM
allocation or the user's OMP_NUM_THREADS says otherwise, and the run records the count it ran with. No timing is
asserted: the counts are the behaviour (`make perf`'s tabular_threads measures what they cost)."""

from __future__ import annotations

import pytest
import torch

from bench import results
from bench.cli import main
from bench.devices import choose_threads


@pytest.fixture
def no_thread_settings(monkeypatch):
    for variable in ("SLURM_CPUS_PER_TASK", "OMP_NUM_THREADS"):
        monkeypatch.delenv(variable, raising=False)
    before = torch.get_num_threads()
    torch.set_num_threads(3)  # what torch's default is on a 3-core machine: the count a run must not inherit
    yield
    torch.set_num_threads(before)


@pytest.mark.parametrize("env,parallel,expected", [
    ({}, False, 1),
    ({"SLURM_CPUS_PER_TASK": "4"}, False, 4),
    ({"SLURM_CPUS_PER_TASK": "4", "OMP_NUM_THREADS": "2"}, True, 4),
    ({"OMP_NUM_THREADS": "2"}, False, 2),
    ({"OMP_NUM_THREADS": "junk"}, False, 1),
    ({}, True, 3),
    ({"OMP_NUM_THREADS": "2"}, True, 3),  # torch read it at start; a count the caller set since is kept
])
def test_the_thread_count_follows_the_allocation_then_the_caller_then_the_workload(no_thread_settings, monkeypatch,
                                                                                  env, parallel, expected):
    for variable, value in env.items():
        monkeypatch.setenv(variable, value)
    assert choose_threads(parallel).threads == expected


@pytest.fixture(scope="module")
def tabular_index(tmp_path_factory):
    from bench.tabular.synthetic import generate

    base = tmp_path_factory.mktemp("threads")
    root = generate(base / "raw", seed=0, n_normal=120, n_anomal=30)
    assert main(["tabular", "index", "--root", str(root), "--out", str(base / "index"), "--min-normal", "50"]) == 0
    return base / "index"


@pytest.mark.parametrize("env,expected", [({}, 1), ({"SLURM_CPUS_PER_TASK": "2"}, 2)])
def test_a_tabular_run_records_the_threads_chosen_for_it(tabular_index, no_thread_settings, monkeypatch, tmp_path,
                                                         env, expected):
    for variable, value in env.items():
        monkeypatch.setenv(variable, value)
    out = tmp_path / "run.h5"
    assert main(["tabular", "run", "--index", str(tabular_index), "--model", "iforest", "--quick", "--protocol",
                 "ncl", "--out", str(out)]) == 0
    run = results.read_run(out)
    assert run["attrs"]["cpu_threads"] == expected
    assert set(run["timing/cpu_threads"].tolist()) == {expected}
    assert torch.get_num_threads() == 3  # the command leaves the process's count as it found it


def test_a_tabular_run_executed_in_process_runs_on_its_tracks_threads(tabular_index, no_thread_settings, tmp_path):
    """The choice is the runner's (bench.tracks.TrackEntry.parallel_ops), not only the commands': a run executed
    from Python, as a notebook or a test does, records one thread and leaves the caller's count as it was."""
    from bench.config import RunConfig, TabularInputs
    from bench.continual.runner import execute, prepare
    from bench.registry import get

    config = RunConfig(dataset="synthetic", root=str(tabular_index), model="iforest", tasks=["Monday", "Tuesday"],
                       protocol="ncl", seed=0, device="cpu", inputs=TabularInputs(),
                       hparams=dict(get("iforest", "tabular").quick))
    out = execute(prepare(config, out=tmp_path / "run.h5"), progress=False, log=lambda *_: None)
    assert results.read_run(out)["attrs"]["cpu_threads"] == 1
    assert torch.get_num_threads() == 3
