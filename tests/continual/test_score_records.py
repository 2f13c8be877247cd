"""The runner's per-cell score record is a type: its columns are named, checked for length, stored in a checkpoint
as plain data, and read back from the positional form earlier checkpoints hold."""

from __future__ import annotations

import numpy as np
import pytest

from bench import checkpoint
from bench.continual.runner import _checked_scores, _score_arrays
from bench.tracks import ScoreRecord


def _record(step=0, task=1, n=5, **extra):
    return ScoreRecord(step, task, np.arange(n, dtype=np.int8) % 2, np.linspace(0, 1, n), **extra)


def test_columns_of_unequal_length_are_refused_where_the_record_is_made():
    with pytest.raises(ValueError, match="same length"):
        ScoreRecord(0, 0, np.zeros(3, np.int8), np.zeros(4))
    with pytest.raises(ValueError, match="same length"):
        _record(record=np.arange(2))


def test_a_record_survives_a_checkpoint_file_and_the_file_stores_no_object(tmp_path):
    a = _record(record=np.arange(5, dtype=np.int32), order=np.array([4, 3, 2, 1, 0]))
    path = tmp_path / "c.ckpt"
    checkpoint.save(path, {"scores": [a.to_plain(), _record(step=1).to_plain()]})
    back = _checked_scores(checkpoint.load(path)["scores"], steps=2, n=2)
    assert back is not None and [r.step for r in back] == [0, 1]
    for name in ("labels", "values", "record", "order"):
        np.testing.assert_array_equal(getattr(back[0], name), getattr(a, name))
    assert back[1].record is None and back[1].order is None


def test_the_positional_form_of_earlier_checkpoints_is_read_by_name():
    labels, values, rows = np.array([0, 1], np.int8), np.array([0.2, 0.9]), np.array([7, 8], np.int32)
    (r,) = _checked_scores([(1, 0, labels, values, rows)], steps=2, n=1)
    assert (r.step, r.task) == (1, 0) and r.order is None
    np.testing.assert_array_equal(r.record, rows)


@pytest.mark.parametrize("plain", [
    [{"step": 5, "task": 0, "labels": np.zeros(2, np.int8), "values": np.zeros(2)}],  # a step not yet run
    [{"step": 0, "task": 9, "labels": np.zeros(2, np.int8), "values": np.zeros(2)}],  # a task outside the run
    [{"step": 0, "task": 0, "labels": np.zeros(2, np.int8), "values": np.zeros(3)}],  # columns of unequal length
    [{"step": 0, "task": 0, "labels": np.zeros(2, np.int8), "values": np.zeros(2), "extra": np.zeros(2)}],
    [{"step": "0", "task": 0, "labels": np.zeros(2, np.int8), "values": np.zeros(2)}],
    "not a list",
])
def test_a_checkpoint_record_that_does_not_fit_the_run_is_rejected(plain):
    assert _checked_scores(plain, steps=2, n=2) is None


def test_an_optional_column_is_written_only_where_every_cell_has_it():
    both = _score_arrays([_record(record=np.arange(5)), _record(step=1, record=np.arange(5))])
    assert set(both) == {"scores/step", "scores/task", "scores/label", "scores/value", "scores/record"}
    np.testing.assert_array_equal(both["scores/step"], [0] * 5 + [1] * 5)
    assert "scores/record" not in _score_arrays([_record(record=np.arange(5)), _record(step=1)])
