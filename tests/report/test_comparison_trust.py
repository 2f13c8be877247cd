"""What the paper comparison may believe (issue 46 §1, issue 44 §3): the data's content and the pixel labels are
checked, a user's edited table is labelled as theirs, every reason the comparison can give reaches the markdown
and the page, and `verify` reads the page's numbers too."""

from __future__ import annotations

import html
import re

import pandas as pd
import pytest

from bench.cli import main
from bench.report import paper
from test_paper_comparison import BTAD, cell, compare, edited_paper, inclad_presets, write, write_all  # noqa: F401


def _aggregate(outputs, *extra) -> int:
    return main(["aggregate", "--dataset", "btad", "--outputs", str(outputs), "--bootstrap", "0", "--figures",
                 "none", *extra])


def _page(outputs) -> str:
    return html.unescape((outputs / "btad" / "report" / "index.html").read_text())


@pytest.mark.parametrize("dataset", sorted(paper.PUBLISHED_COUNTS))
def test_data_other_than_the_published_release_under_its_concept_names_is_not_comparable(dataset, tmp_path,
                                                                                        inclad_presets):
    """Held-out images filed under the release's concept names: each concept's train/test counts differ from the
    release's, and a name the release lacks is no concept of it; the real counts are comparable."""
    known = paper.PUBLISHED_COUNTS[dataset]
    tasks = sorted(known)[:3]
    assert paper.dataset_reason(_config(dataset, tasks), {t: known[t] for t in tasks}) is None
    for task in tasks:  # any one concept off by one image in either split
        for off in ((1, 0), (0, -1)):
            counts = {t: known[t] for t in tasks}
            counts[task] = (known[task][0] + off[0], known[task][1] + off[1])
            reason = paper.dataset_reason(_config(dataset, tasks), counts)
            assert reason and task in reason and f"published {known[task][0]}/{known[task][1]}" in reason
    renamed = paper.dataset_reason(_config(dataset, ["not_a_concept"]), {"not_a_concept": (10, 10)})
    assert "not_a_concept: not a" in renamed
    assert paper.dataset_reason(_config(dataset, tasks), None) == "train/test counts not recorded"


def _config(dataset, tasks):
    from bench.config import ImageInputs, RunConfig

    return RunConfig(dataset=dataset, root="/d", model="padim", tasks=list(tasks), inputs=ImageInputs())


def test_a_renamed_dataset_makes_every_cell_not_comparable(tmp_path, inclad_presets):
    write_all(tmp_path, counts={t: (60, 30) for t in BTAD})  # textures held out elsewhere, named 01-03
    frame = compare(tmp_path)
    assert not frame["comparable"].any()
    reason = cell(frame, "roc_auc_cl", "image", "cl")["reason"]
    assert "dataset not the published release (03: 60/30 train/test images, published 1000/441; 01: 60/30" in reason
    assert "(16 of 16 runs)" in reason


@pytest.mark.parametrize("threshold, ran", [(200, "above 200"), (0, "above 0"), (None, "any nonzero pixel")])
def test_a_mask_threshold_other_than_the_comparisons_is_a_reason(tmp_path, inclad_presets, threshold, ran):
    write_all(tmp_path, skip={("padim", "resnet18")})
    write(tmp_path, "padim", "resnet18", "ncl")
    write(tmp_path, "padim", "resnet18", "cl", mask_threshold=threshold)
    frame = compare(tmp_path)
    assert cell(frame, "roc_auc_cl", "image", "ncl")["comparable"]
    reason = cell(frame, "roc_auc_cl", "pixel", "cl")["reason"]
    assert f"pixel labels by another mask threshold ({ran}, the comparison's above 127 of 255) (1 of 16 runs)" \
        == reason


def _every_reason() -> list[paper.Reason]:
    """One of each reason the comparison can give, with details that name it."""
    return [paper.Reason(why, tuple(f"<{why.key} {i}>" for i in range(why.template.count("{}"))),
                         (1, 16) if why.per_run else None) for why in paper.Why]


def test_every_reason_the_comparison_can_give_reaches_the_markdown_and_the_page(tmp_path, inclad_presets,
                                                                                monkeypatch):
    reasons = _every_reason()
    assert len({r.text for r in reasons}) == len(paper.Why) > 15
    monkeypatch.setattr(paper, "cell_reasons", lambda *a, **k: list(reasons))
    write_all(tmp_path)
    assert _aggregate(tmp_path) == 0
    md = (tmp_path / "btad" / "tables" / "paper_comparison.md").read_text()
    csv = pd.read_csv(tmp_path / "btad" / "tables" / "paper_comparison.csv", keep_default_na=False)
    page = _page(tmp_path)
    assert not csv["comparable"].any()
    for r in reasons:
        assert r.text in md and r.text in page, r.why
        assert csv["reason"].str.contains(r.text, regex=False).all(), r.why


def test_run_reasons_are_typed_and_each_kind_carries_its_text(tmp_path, inclad_presets):
    """No reason is a bare (category, text) pair: each is a Reason whose kind is a declared Why."""
    write_all(tmp_path, feature_dtype="float16", pixel_eval="native", mask_threshold=None, version=0,
              counts={t: (1, 1) for t in BTAD})
    from bench.report.collect import collect

    c = collect(tmp_path, "btad")
    configs = paper._configs(c.runs, c.details)
    found = {r.why for k in configs for r in paper.run_reasons(*configs[k])}
    assert {paper.Why.FEATURE_DTYPE, paper.Why.PIXEL_EVALUATION, paper.Why.MASK_THRESHOLD, paper.Why.DATASET,
            paper.Why.MODEL_VERSION} <= found
    assert all(isinstance(w, paper.Why) and w.template for w in found)


def test_an_edited_table_is_labelled_the_users_not_the_published_one(tmp_path, monkeypatch, inclad_presets):
    write_all(tmp_path / "out")
    out = tmp_path / "out"
    assert _aggregate(out) == 0
    md = (out / "btad" / "tables" / "paper_comparison.md").read_text()
    assert paper.SHIPPED_SOURCE in md and paper.SHIPPED_SOURCE in _page(out)
    edited_paper(tmp_path, monkeypatch, "inclad_table2.csv", lambda t: t.replace("0.861", "0.761", 1))
    assert _aggregate(out, "--own-paper-tables") == 0
    md = (out / "btad" / "tables" / "paper_comparison.md").read_text()
    page = _page(out)
    for text in (md, page):
        assert "the user's table" in text and "not InCLAD's published Table 2" in text
        assert "SHA-256 checked" not in text and paper.SHIPPED_SOURCE not in text
    source = pd.read_csv(out / "btad" / "tables" / "paper_comparison.csv")["published_source"]
    assert source.str.startswith("the user's table").all()


def test_verify_reads_the_numbers_on_the_page(tmp_path, inclad_presets, capsys):
    write_all(tmp_path)
    assert _aggregate(tmp_path) == 0
    args = ["verify", "--dataset", "btad", "--outputs", str(tmp_path)]
    assert main(args) == 0
    page = tmp_path / "btad" / "report" / "index.html"
    original = page.read_text()
    cells = re.findall(r'<td class="num[^"]*"[^>]*data-value="([0-9.]+)"[^>]*>([0-9.]+)', original)
    value, shown = next((v, s) for v, s in cells if "." in s and float(v) != round(float(v)))
    for edited, named in ((f'data-value="{value}"', 'data-value="0.123456"'),  # a number no table holds
                          (f'data-value="{value}">{shown}', f'data-value="{value}">{float(shown) + 0.01:.3f}')):
        page.write_text(original.replace(edited, named, 1))
        capsys.readouterr()
        assert main(args) == 1
        err = capsys.readouterr().err
        assert "index.html" in err and ("0.123456" in err or f"{float(shown) + 0.01:.3f}" in err)
    page.write_text(original)
    assert main(args) == 0
