"""The command line means what it says (issue 46 §5): a label cannot join another result set's tables, a task list
names every task it counts, `status` without records says so, `tabular index --out` a file says what is wrong, and
a grid's value out of range names the grid, not a flag the user never gave. Each one line, exit 2."""

from __future__ import annotations

import json

import pytest

from bench.cli import main
from bench.config import RunConfig, TabularInputs
from bench.datasets import result_sets
from bench.errors import ConfigError
from helpers import write_grid

RUN = ["run", "--dataset", "synthetic", "--weights", "none", "--image-size", "64", "--device", "cpu",
       "--batch-size", "8", "--workers", "0", "--no-progress"]


def refused(capsys, *argv) -> str:
    code = main([str(a) for a in argv])
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1 and err.startswith("error: "), (code, err)
    return err


@pytest.mark.parametrize("label", ["all", *(r for r in result_sets(plugins_too=True) if r != "synthetic")])
def test_an_image_run_cannot_take_another_result_sets_name(label):
    config = RunConfig(dataset="synthetic", root=".", model="patchcore", tasks=["a"], label=label)
    with pytest.raises(ConfigError, match=f"--label '{label}' is"):
        config.validate()


@pytest.mark.parametrize("label", ["all", *(r for r in result_sets(plugins_too=True) if r != "tabular-synthetic")])
def test_a_tabular_run_cannot_take_another_result_sets_name(label):
    config = RunConfig(dataset="synthetic", root=".", model="iforest", tasks=["a"], label=label,
                       inputs=TabularInputs())
    with pytest.raises(ConfigError, match=f"--label '{label}' is"):
        config.validate()


def test_a_label_of_ones_own_data_is_accepted():
    RunConfig(dataset="synthetic", root=".", model="patchcore", tasks=["a"], label="my-parts").validate()
    RunConfig(dataset="synthetic", root=".", model="patchcore", tasks=["a"], label="synthetic").validate()


def test_run_label_all_is_refused_before_anything_runs(tiny_root, tmp_path, capsys):
    err = refused(capsys, *RUN, "--root", tiny_root, "--ordering", "easy_to_hard", "--label", "all",
                  "--out", tmp_path / "r.h5")
    assert "--label 'all'" in err and not (tmp_path / "r.h5").exists()


@pytest.mark.parametrize("tasks", ["", ",", "disc,,stripes", "disc, ,stripes", "disc,stripes,"])
def test_a_task_list_with_an_empty_entry_is_refused_on_both_tracks(tasks, tiny_root, tmp_path, capsys):
    expected = f"--tasks {tasks!r}: expected comma-separated task names, none of them empty"
    assert expected in refused(capsys, *RUN, "--root", tiny_root, "--tasks", tasks, "--out", tmp_path / "r.h5")
    assert expected in refused(capsys, "tabular", "run", "--index", tmp_path / "no-index", "--model", "iforest",
                               "--tasks", tasks)
    assert expected in refused(capsys, "tabular", "ste", "--index", tmp_path / "no-index", "--model", "iforest",
                               "--out", tmp_path / "s.h5", "--tasks", tasks)


def test_status_without_records_says_so_and_blames_no_dataset(tmp_path, capsys):
    err = refused(capsys, "status", "--dataset", "synthetic", "--outputs", tmp_path)
    assert "no submission records" in err and "dataset root" not in err


def test_tabular_index_out_an_existing_file_says_so(tmp_path, capsys):
    out = tmp_path / "index"
    out.write_text("mine")
    err = refused(capsys, "tabular", "index", "--dataset", "synthetic", "--out", out)
    assert f"--out {out}: exists and is not a folder" in err and "free space" not in err
    assert out.read_text() == "mine"


@pytest.mark.parametrize("key,value,expected", [("seeds", [-5], "seeds: -5 is not allowed")])
def test_a_grid_value_out_of_range_names_the_grid_not_a_flag(key, value, expected, tiny_root, tmp_path, capsys):
    grid = write_grid(tmp_path / "grid.yaml")
    grid.write_text(json.dumps({**json.loads(grid.read_text()), key: value}))
    err = refused(capsys, "submit", "--dataset", "synthetic", "--grid", grid, "--root", tiny_root, "--outputs",
                  tmp_path / "out", "--cluster", "debug", "--dry-run")
    assert f"{grid}: {expected}" in err and " --" not in err
