"""No stale results: the model's algorithm version is part of the run key, and a run resumed under another git
commit says so and records every commit it ran under."""

from __future__ import annotations

import dataclasses
import json

import h5py
import pytest

from bench import results
from bench.continual.runner import execute, prepare
from bench import registry

TASKS = ["chip", "stripes"]


def _attrs(path):
    with h5py.File(path, "r", locking=False) as f:
        return dict(f.attrs)


def test_algorithm_version_change_recomputes(tiny_root, tmp_path, make_config, monkeypatch):
    log = []
    first = execute(prepare(make_config(tiny_root, TASKS, model="padim"), out_dir=tmp_path), progress=False,
                    log=log.append)
    assert json.loads(_attrs(first)["config"])["model_version"] == registry.get("padim").version
    # the same run again is reused ...
    again = prepare(make_config(tiny_root, TASKS, model="padim"), out_dir=tmp_path)
    assert again.out == first
    execute(again, progress=False, log=log.append)
    assert any("already complete" in line for line in log)
    # ... but not once the algorithm's version is bumped: the complete file with the old key stays untouched
    spec = registry.get("padim")
    monkeypatch.setitem(registry._SPECS, "padim", dataclasses.replace(spec, version=spec.version + 1))
    log.clear()
    bumped = prepare(make_config(tiny_root, TASKS, model="padim"), out_dir=tmp_path)
    assert bumped.run_key != results.file_run_key(first) and bumped.out != first
    second = execute(bumped, progress=False, log=log.append)
    assert not any("already complete" in line for line in log)
    assert sum("learning task" in line for line in log) == len(TASKS)  # recomputed, every step
    assert _attrs(second)["status"] == "complete" and _attrs(second)["run_key"] == bumped.run_key
    # the old file cannot be overwritten by the new version either
    with pytest.raises(Exception, match="holds another run"):
        prepare(make_config(tiny_root, TASKS, model="padim"), out=first)


def test_resume_under_another_commit_is_said_and_recorded(tiny_root, tmp_path, make_config, monkeypatch):
    real = results.provenance

    def under(commit):
        monkeypatch.setattr(results, "provenance", lambda: {**real(), "git_commit": commit})

    run = prepare(make_config(tiny_root, TASKS, model="padim"), out_dir=tmp_path)
    under("a" * 40)
    execute(run, progress=False, max_steps=1, log=lambda *_: None)
    assert json.loads(_attrs(run.out)["git_commits"]) == ["a" * 40]
    under("b" * 40)
    log = []
    execute(run, progress=False, log=log.append)
    said = [line for line in log if "resuming under commit" in line]
    assert len(said) == 1 and "bbbbbbbbbbbb" in said[0] and "aaaaaaaaaaaa" in said[0]
    attrs = _attrs(run.out)
    assert attrs["status"] == "complete" and attrs["git_commit"] == "b" * 40
    assert json.loads(attrs["git_commits"]) == ["a" * 40, "b" * 40]


def test_same_commit_resume_records_it_once(tiny_root, tmp_path, make_config):
    run = prepare(make_config(tiny_root, TASKS, model="padim"), out_dir=tmp_path)
    execute(run, progress=False, max_steps=1, log=lambda *_: None)
    log = []
    execute(run, progress=False, log=log.append)
    assert not any("resuming under commit" in line for line in log)
    assert json.loads(_attrs(run.out)["git_commits"]) == [results.provenance()["git_commit"]]
