"""The LITNET-2020 source: per-attack-type captures, the released HEAD budgets, the layout, one-line errors."""

from __future__ import annotations

import shutil

import numpy as np
import pandas as pd
import pytest
from asm_streams import trio  # noqa: F401  (fixture)

from bench.assembly import litnet
from bench.assembly.corpus import SOURCES, Subsample, build_corpus
from bench.assembly.synthetic import LITNET_CAPTURES, litnet_budgets
from bench.errors import DatasetError


def test_registered_with_the_released_captures_budgets_and_rule():
    src = SOURCES["litnet"]
    assert src.budgets == {"blaster_worm": 500_000, "spam": 500_000, "udp_flood": 500_000}
    assert src.rule is Subsample.HEAD
    assert len(litnet.COLUMNS) == 85 and litnet.COLUMNS[-2:] == ("attack_t", "attack_a")


def test_captures_are_attack_types_in_date_order_cut_to_their_head(trio):
    c = build_corpus("litnet", trio, budgets=litnet_budgets(2))
    assert c.captures == ("udp_flood", "spam", "blaster_worm")  # 2019-03-06, 2019-12-09, 2020-01-25
    for i, name in enumerate(c.captures):
        layout = LITNET_CAPTURES[name][3]
        expected = np.concatenate([np.full(b.minutes * 2, b.attack) for b in layout])  # the first 200·K records
        assert np.array_equal(c.y[c.capture == i], expected.astype(np.int8))
    assert np.all(np.diff(c.timestamp) >= 0)
    assert set(c.label_names) == {"none", "udp_f", "smtp_b", "tcp_w32_w"}
    assert not {"ID", "attack_t", "attack_a", "sa", "da"} & set(c.feature_names)
    assert {"sp", "dp", "ts_year"} <= set(c.feature_names)  # every numeric column, as released


def test_a_header_row_is_read_as_well(trio, tmp_path):
    root = tmp_path / "with-header"
    shutil.copytree(trio, root)
    path = root / "SPAM_v2.csv"
    frame = pd.read_csv(path, header=None, dtype=str, keep_default_na=False)
    frame.columns = list(litnet.COLUMNS)
    frame.to_csv(path, index=False)
    a = build_corpus("litnet", trio, budgets=litnet_budgets(2))
    b = build_corpus("litnet", root, budgets=litnet_budgets(2))
    assert np.array_equal(a.X, b.X) and np.array_equal(a.y, b.y)


def rewrite(trio, tmp_path, edit):
    root = tmp_path / "bad"
    shutil.copytree(trio, root)
    path = root / "SPAM_v2.csv"
    frame = pd.read_csv(path, header=None, dtype=str, keep_default_na=False)
    frame = edit(frame)
    frame.to_csv(path, index=False, header=False)
    return root, path


def drop_column(f):
    return f.iloc[:, :-1]


def unknown_type(f):
    f.iloc[3, 83] = "smtp_bb"
    return f


def bad_start(f):
    f.iloc[3, 2] = "13"  # month 13
    return f


@pytest.mark.parametrize("edit, words", [(drop_column, "84 columns, expected the 85"),
                                         (unknown_type, "unknown label"),
                                         (bad_start, "start time")])
def test_bad_files_are_refused_in_one_line_naming_the_file(trio, tmp_path, edit, words):
    root, path = rewrite(trio, tmp_path, edit)
    with pytest.raises(DatasetError) as e:
        build_corpus("litnet", root, budgets=litnet_budgets(2))
    assert words in str(e.value) and path.name in str(e.value) and "\n" not in str(e.value)


def test_a_root_without_litnet_files_names_the_layout(tmp_path):
    with pytest.raises(DatasetError, match="_v2.csv"):
        build_corpus("litnet", tmp_path)
