"""A resumed run's git_dirty covers every step it ran: one step from a dirty tree makes the whole file dirty, so
the paper comparison (bench/report/paper.py) names it, whatever tree the last step ran from."""

from __future__ import annotations

import h5py

from bench import results
from bench.continual.runner import execute, prepare

TASKS = ["chip", "stripes"]


def _dirty(path) -> int:
    with h5py.File(path, "r", locking=False) as f:
        return int(f.attrs["git_dirty"])


def test_a_run_resumed_from_a_clean_tree_after_a_dirty_step_records_dirty(tiny_root, tmp_path, make_config,
                                                                         monkeypatch):
    real = results.provenance

    def tree(dirty: int):
        monkeypatch.setattr(results, "provenance", lambda: {**real(), "git_commit": "a" * 40, "git_dirty": dirty})

    run = prepare(make_config(tiny_root, TASKS, model="padim"), out_dir=tmp_path)
    tree(1)
    execute(run, progress=False, max_steps=1, log=lambda *_: None)
    assert _dirty(run.out) == 1
    tree(0)
    execute(run, progress=False, log=lambda *_: None)
    with h5py.File(run.out, "r", locking=False) as f:
        assert f.attrs["status"] == "complete"
    assert _dirty(run.out) == 1


def test_a_clean_run_resumed_clean_stays_clean(tiny_root, tmp_path, make_config, monkeypatch):
    real = results.provenance
    monkeypatch.setattr(results, "provenance", lambda: {**real(), "git_commit": "a" * 40, "git_dirty": 0})
    run = prepare(make_config(tiny_root, TASKS, model="padim"), out_dir=tmp_path)
    execute(run, progress=False, max_steps=1, log=lambda *_: None)
    execute(run, progress=False, log=lambda *_: None)
    assert _dirty(run.out) == 0
