"""Issue 31 §6: a run resumed under another CPU thread count recorded only the last count, although on CPU a
trained detector's numbers depend on it. Each step's count is now recorded (timing/cpu_threads) and shown in
runs.csv (step_threads) and in aggregate's refusal of two differing files of one key."""

from __future__ import annotations

import h5py
import numpy as np
import torch

from bench import results
from bench.continual.runner import execute, prepare

TASKS = ["chip", "stripes"]


def test_a_run_resumed_under_another_thread_count_records_both(tiny_root, tmp_path, make_config):
    before = torch.get_num_threads()
    run = prepare(make_config(tiny_root, TASKS, model="padim"), out_dir=tmp_path)
    try:
        torch.set_num_threads(1)
        execute(run, progress=False, max_steps=1, log=lambda *_: None)
        torch.set_num_threads(2)
        execute(run, progress=False, log=lambda *_: None)
    finally:
        torch.set_num_threads(before)
    with h5py.File(run.out, "r", locking=False) as f:
        assert f.attrs["status"] == "complete" and int(f.attrs["cpu_threads"]) == 2
        np.testing.assert_array_equal(f["timing/cpu_threads"][()], [1, 2])
    assert results.summary_row(results.read_run(run.out), run.out)["step_threads"] == "1,2"


def test_a_file_from_before_per_step_threads_reads_as_not_recorded():
    assert results.step_threads({}, 2) == ""
    assert results.step_threads({"timing/cpu_threads": np.array([0, 0])}, 2) == ""
    assert results.step_threads({"timing/cpu_threads": np.array(["1", "2"])}, 2) == ""  # crafted: not counts
    assert results.step_threads({"timing/cpu_threads": np.array([2, 2, 1])}, 2) == "2"  # steps done only


def test_a_detector_whose_state_cannot_be_checkpointed_is_one_line_naming_the_value(tiny_root, tmp_path,
                                                                                   make_config, monkeypatch):
    """Issue 31 §6: a plugin whose state_dict() holds an object failed at its first checkpoint with a TypeError
    traceback. It is now a CheckpointError naming the value (one line, exit 2 from the CLI), recorded as the
    run's failure for `make status`. (An untrained detector may have no state to show, so the check is where the
    state exists; bench.testing's contract checks the round trip before any run.)"""
    import dataclasses

    import pytest

    from bench import registry
    from bench.errors import CheckpointError

    padim = registry.get("padim")

    def factory(*args, **kwargs):
        det = padim.factory(*args, **kwargs)

        class WithObject(type(det)):
            def state_dict(self):
                return {**super().state_dict(), "model": object()}  # e.g. a fitted scikit-learn estimator

        det.__class__ = WithObject
        return det

    monkeypatch.setitem(registry._SPECS, "zz_objects", dataclasses.replace(padim, name="zz_objects",
                                                                           factory=factory))
    for protocol in ("ncl",):  # (PaDiM's CL keeps its banks' arrays, not the detector's state_dict())
        run = prepare(make_config(tiny_root, TASKS, model="zz_objects", protocol=protocol), out_dir=tmp_path)
        with pytest.raises(CheckpointError, match=r"cannot store this state: checkpoint: \S*model is a object "
                                                  r"\(only plain data is stored\)") as e:
            execute(run, progress=False, log=lambda *_: None)
        assert "\n" not in str(e.value) and str(run.checkpoint_path) in str(e.value)
        with h5py.File(run.out, "r", locking=False) as f:
            assert f.attrs["status"] == "failed" and "cannot store this state" in f.attrs["error"]


def test_a_state_that_cannot_be_checkpointed_from_the_start_is_refused_before_any_task(tiny_root, tmp_path,
                                                                                       make_config, monkeypatch):
    """Where the untrained detector already shows its state (here an object from its constructor on), the run
    is refused before its first task is learned, in one line naming the detector and the value."""
    import dataclasses

    import pytest

    from bench import registry
    from bench.errors import CheckpointError

    padim = registry.get("padim")

    def factory(*args, **kwargs):
        det = padim.factory(*args, **kwargs)

        class HoldsAnObject(type(det)):
            def state_dict(self):
                return {"estimator": object()}

        det.__class__ = HoldsAnObject
        return det

    monkeypatch.setitem(registry._SPECS, "zz_early", dataclasses.replace(padim, name="zz_early", factory=factory))
    lines = []
    run = prepare(make_config(tiny_root, TASKS, model="zz_early", protocol="ncl"), out_dir=tmp_path)
    with pytest.raises(CheckpointError, match=r"^the state of detector 'zz_early' \(ncl\) cannot be checkpointed: "
                                              r"checkpoint: /estimator is a object"):
        execute(run, progress=False, log=lines.append)
    assert not any(line.startswith(("learning task", "[step")) for line in lines)  # no task was learned
