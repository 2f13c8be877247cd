"""What a run's log and file say about how it ran (issue 31 §5): a long phase logs a line at least every minute
where no progress bar is drawn (a SLURM log), never a bar into a file. Tests use a fake clock, not real time.
Each test fails on the code before the issue."""

from __future__ import annotations

import itertools
import os
from pathlib import Path

from bench.cli import main

RUN = ["run", "--dataset", "synthetic", "--weights", "none", "--image-size", "64", "--batch-size", "8",
       "--device", "cpu", "--workers", "0", "--tasks", "chip"]


def test_a_long_phase_logs_a_heartbeat_into_a_file_and_draws_no_bar(tiny_root, tmp_path, capsys, monkeypatch):
    """A clock that moves 61 s per reading: every training batch and every scoring batch is more than a minute
    after the last line. Off a terminal (capsys), with progress bars on by default, the log gets the epoch, the
    samples done and the loss while training, and the images scored while evaluating; no carriage return (a
    bar) reaches it. Before: STFPM's 277 s of training and PatchCore's 343 s of evaluation printed nothing."""
    ticks = itertools.count(step=61.0)
    monkeypatch.setattr("bench.training.loop.clock", lambda: next(ticks))
    assert main([*RUN, "--root", str(tiny_root), "--model", "stfpm", "--set", "epochs=2", "--set", "batch_size=4",
                 "--out", str(tmp_path / "s.h5")]) == 0
    captured = capsys.readouterr()
    log = captured.out + captured.err
    assert "\r" not in log
    assert "stfpm epoch 1/2: 4/16 samples" in log and "stfpm epoch 2/2 loss " in log
    assert "last epoch's loss " in log  # the second epoch's lines carry the first one's loss
    assert "evaluating step 1 on chip: 8/16 images scored" in log


def test_the_load_average_at_a_runs_start_and_end_is_recorded_beside_cpu_threads(tiny_root, tmp_path,
                                                                                 monkeypatch):
    """Timing tables made under load mislead: the file and its runs.csv row carry the machine's 1-minute load
    average as the run started and at its last write (a fake os.getloadavg: 3.5 first, 7.25 afterwards)."""
    from bench import results
    from bench.continual.runner import execute, prepare
    from helpers import make_run_config

    readings = iter([3.5])
    monkeypatch.setattr("bench.continual.runner.os.getloadavg", lambda: (next(readings, 7.25), 1.0, 1.0))
    run = prepare(make_run_config(tiny_root, ["chip", "disc"], protocol="ncl"), out=tmp_path / "r.h5")
    row = results.summary_row(results.read_run(execute(run, progress=False, log=lambda *_: None)))
    assert (row["load_avg_start"], row["load_avg_end"]) == (3.5, 7.25) and row["cpu_threads"] >= 1


def test_a_complete_result_on_a_read_only_mount_is_reported_complete(tiny_root, tmp_path, capsys, monkeypatch):
    """Rerunning a finished run whose folder cannot be written (a read-only mount: os.access says so; the tests
    run as root, for whom permission bits alone would not) said "not a writable directory" and exit 2; it is
    complete, so it is reported, with its summary, and nothing is written."""
    out = tmp_path / "ro" / "r.h5"
    argv = [*RUN, "--root", str(tiny_root), "--model", "patchcore", "--no-progress", "--out", str(out)]
    assert main(argv) == 0
    capsys.readouterr()
    folder = out.parent
    real = os.access
    for module in ("bench.continual.runner", "bench.continual.guards"):
        monkeypatch.setattr(f"{module}.os.access", lambda p, mode, **kw: False if Path(p) == folder
                            else real(p, mode, **kw))
    before = sorted(p.name for p in folder.iterdir())
    assert main(argv) == 0
    said = capsys.readouterr().out
    assert "already complete" in said and "ROC-AUC_CL" in said
    assert sorted(p.name for p in folder.iterdir()) == before


def test_a_label_names_data_read_through_another_datasets_reader(tiny_root, tmp_path, capsys, monkeypatch):
    """Own images read through a reader (here `synthetic`; on real data `mvtec`, or `cicunsw` for an improved
    CIC-IDS2017) carried the reader's name in every table and title. `--label` names the result set, the file and
    the summary row's dataset (what every table and title shows; `reader` keeps the reader); the run key is the
    unlabelled run's, and an unlabelled config's JSON (its hash) is what it was."""
    from bench import results
    from bench.cli import build_parser, config_from_args

    monkeypatch.chdir(tmp_path)
    argv = [*RUN, "--root", str(tiny_root), "--model", "patchcore", "--no-progress"]
    assert main([*argv, "--label", "own-parts"]) == 0
    (path,) = (tmp_path / "outputs" / "own-parts" / "runs").glob("*.h5")
    assert path.name.startswith("own-parts_patchcore_")
    run = results.read_run(path)
    row = results.summary_row(run)
    assert (row["dataset"], row["reader"]) == ("own-parts", "synthetic")
    plain = config_from_args(build_parser().parse_args(argv))
    assert "label" not in plain.to_json()
    from bench.continual.runner import prepare

    assert prepare(plain, out_dir=tmp_path / "x").run_key == run["attrs"]["run_key"]
    capsys.readouterr()
    assert main([*argv, "--label", "a/b"]) == 2 and "--label 'a/b' is not allowed" in capsys.readouterr().err
