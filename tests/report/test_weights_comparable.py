"""A cell of ours is compared with the paper only when every run's ImageNet weights were verified at run time as
torchvision's published file (issue 46 §1): a run whose weights id lacks the verdict (a file from before the check,
or random weights staged under the ImageNet name with a self-written record) is "not comparable: weights not the
published file"; a user's own file (`--weights PATH`) stays runnable and is not comparable."""

from __future__ import annotations

import pytest

from bench.features import is_published_id
from bench.report import paper
from bench.report.collect import collect
from test_paper_comparison import cell, compare, inclad_presets, write, write_all  # noqa: F401

UNVERIFIED = f"weights not the published file ({paper.UNVERIFIED})"


def test_the_comparison_needs_every_run_verified(tmp_path, inclad_presets):  # noqa: F811
    write_all(tmp_path / "verified")
    assert cell(compare(tmp_path / "verified"), "roc_auc_cl", "image", "cl")["comparable"]
    write_all(tmp_path / "old", skip={("padim", "resnet18")})
    write(tmp_path / "old", "padim", "resnet18", "ncl")
    tag = paper._inclad_tag("padim", "resnet18")  # a file from before the check: the id has no verdict
    write(tmp_path / "old", "padim", "resnet18", "cl", weights_id=f"resnet18.{tag}:{'0' * 16}")
    frame = compare(tmp_path / "old")
    cl = cell(frame, "roc_auc_cl", "image", "cl")
    assert not cl["comparable"] and f"{UNVERIFIED} (1 of 16 runs)" in cl["reason"]
    c = collect(tmp_path / "old", "btad")
    assert f"not comparable: {cl['reason']}" in paper.to_markdown(frame, paper.timing_comparison(c.runs, c.details))
    assert cell(frame, "roc_auc_cl", "image", "ncl")["comparable"]  # the other protocol's runs are all verified


def test_a_users_own_weights_file_is_not_comparable(tmp_path, inclad_presets):  # noqa: F811
    write_all(tmp_path, skip={("padim", "wide_resnet50_2")})
    write(tmp_path, "padim", "wide_resnet50_2", "ncl")
    write(tmp_path, "padim", "wide_resnet50_2", "cl", weights="/my/resnet.safetensors", weights_id="file:" + "1" * 16)
    reason = cell(compare(tmp_path), "roc_auc_cl", "image", "cl")["reason"]
    assert "weights from a file (1 of 16 runs)" in reason and "not the published file" not in reason


@pytest.mark.parametrize("weights_id, verified", [
    ("resnet18.tv_in1k:0123456789abcdef:published", True),
    ("resnet18.tv_in1k:0123456789abcdef:published;teacher=ab12", True),
    ("resnet18.tv_in1k:0123456789abcdef", False),
    ("resnet18.tv_in1k:0123456789abcdef;teacher=published", False),
    ("file:0123456789abcdef", False), ("none", False)])
def test_the_verdict_is_read_from_the_weights_id(weights_id, verified):
    assert is_published_id(weights_id) is verified
