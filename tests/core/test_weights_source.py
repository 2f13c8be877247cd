"""ImageNet weights are recognised by content, not by name or by a record anyone can write (issue 31 §6, issue 46
§1): random-init weights staged as `resnet18.tv_in1k` with a self-written provenance file counted as ImageNet. A
staged file is accepted only while the torchvision `.pth` kept beside it has the full published SHA-256
(`features.PUBLISHED_SHA256`) and the staged tensors are that file's. The tests make a small "published" file and
patch its digest into the shipped table (never the checking code); nothing touches the network."""

from __future__ import annotations

import json

import pytest
import timm
import torch
from safetensors.torch import save_file

from bench import features
from bench.errors import WeightsError
from bench.features import (is_published_id, kept_source_path, resolve_weights, stage_weights, staged_weights_path,
                            torchvision_url)
from bench.io import file_sha256


def _random_resnet18(seed: int) -> dict:
    torch.manual_seed(seed)
    return {k: v.contiguous() for k, v in timm.create_model("resnet18").state_dict().items()}


@pytest.fixture
def weights_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("BENCH_WEIGHTS_DIR", str(tmp_path))
    monkeypatch.setattr(features, "_VERDICTS", {})
    monkeypatch.setattr(features, "_CHECKED_TENSORS", {})
    return tmp_path


@pytest.fixture
def published(weights_dir, monkeypatch):
    """A small stand-in for torchvision's resnet18 file, kept where `make weights` keeps it, whose digest the test
    ships as the published one."""
    source = kept_source_path("resnet18", "tv_in1k")
    torch.save(_random_resnet18(1), source)
    monkeypatch.setitem(features.PUBLISHED_SHA256, source.name, file_sha256(source))
    return source


def test_the_shipped_digests_extend_the_prefixes_torchvision_publishes():
    """Every file `make weights` stages has a full SHA-256 shipped, and it starts with the prefix torchvision puts
    in the file name (the addresses come from torchvision's Weights enums)."""
    assert torchvision_url("resnet18", "tv_in1k") == "https://download.pytorch.org/models/resnet18-f37072fd.pth"
    for backbone, tag in features.staged_files():
        url = torchvision_url(backbone, tag)
        digest = features.published_sha256(url)
        assert len(digest) == 64 and digest.startswith(published_prefix(url))
    assert published_prefix(torchvision_url("wide_resnet50_2", "tv2_in1k")) == "9ba9bcbe"


def published_prefix(url: str) -> str:
    """The SHA-256 prefix in a torch.hub file name (`resnet18-f37072fd.pth` -> f37072fd), read as torch.hub's
    check_hash reads it."""
    return torch.hub.HASH_REGEX.search(url.rsplit("/", 1)[-1]).group(1)


def test_random_weights_with_a_self_written_record_are_refused(weights_dir):
    """The issue's case: random init staged under the ImageNet name, a provenance file claiming the published
    address and a digest with the right prefix. No kept .pth: refused, naming how to restage."""
    path = staged_weights_path("resnet18", "tv_in1k")
    save_file(_random_resnet18(0), str(path))
    url = torchvision_url("resnet18", "tv_in1k")
    record = {"url": url, "source_sha256": published_prefix(url).ljust(64, "0"), "sha256": file_sha256(path)}
    path.with_name("resnet18.tv_in1k.source.json").write_text(json.dumps(record))
    with pytest.raises(WeightsError, match=r"resnet18\.tv_in1k\.safetensors: nothing shows these are torchvision's "
                                           r"weights .*resnet18-f37072fd\.pth is missing.*restage with `make weights`"):
        resolve_weights("resnet18", "imagenet")


def test_a_kept_file_that_is_not_the_published_one_is_refused(weights_dir):
    """A .pth under torchvision's name whose full digest is not the shipped one (its own random weights, staged
    consistently) is refused, although the staged tensors are its tensors."""
    source = kept_source_path("resnet18", "tv_in1k")
    torch.save(_random_resnet18(0), source)
    save_file(_random_resnet18(0), str(staged_weights_path("resnet18", "tv_in1k")))
    with pytest.raises(WeightsError, match=r"resnet18-f37072fd\.pth: SHA-256 .* is not torchvision's published "
                                           r"f37072fd47e89c5e…: restage"):
        resolve_weights("resnet18", "imagenet")


def test_staging_checks_the_full_digest(published, monkeypatch):
    monkeypatch.setitem(features.PUBLISHED_SHA256, published.name, "f37072fd".ljust(64, "0"))
    with pytest.raises(WeightsError, match=r"is not the f37072fd00000000… torchvision publishes .*stage again"):
        stage_weights([("resnet18", "tv_in1k")])
    assert not staged_weights_path("resnet18", "tv_in1k").exists()


def test_the_published_file_staged_is_accepted_and_marked(published):
    [path] = stage_weights([("resnet18", "tv_in1k")])
    assert path == staged_weights_path("resnet18", "tv_in1k") and path.parent == published.parent
    resolved, weights_id = resolve_weights("resnet18", "imagenet")
    assert resolved == path and weights_id.startswith("resnet18.tv_in1k:") and is_published_id(weights_id)
    model = features.create_backbone("resnet18", "imagenet", ("layer1",))
    assert torch.equal(model.conv1.weight, torch.load(published, weights_only=True)["conv1.weight"])


def test_a_fresh_process_reads_the_staged_file_once_to_check_and_load_it(published, monkeypatch):
    """A run checks the staged file against the kept .pth (resolve_weights) and then loads it (create_backbone):
    the tensors the check read are the ones loaded, not read again."""
    [path] = stage_weights([("resnet18", "tv_in1k")])
    monkeypatch.setattr(features, "_VERDICTS", {})  # a new process: nothing judged yet
    monkeypatch.setattr(features, "_CHECKED_TENSORS", {})
    reads, read = [], features._read_tensors
    monkeypatch.setattr(features, "_read_tensors", lambda p: (reads.append(p), read(p))[1])
    resolve_weights("resnet18", "imagenet")
    model = features.create_backbone("resnet18", "imagenet", ("layer1",))
    assert reads.count(path) == 1 and not features._CHECKED_TENSORS
    assert torch.equal(model.conv1.weight, torch.load(published, weights_only=True)["conv1.weight"])


def test_a_staged_file_whose_tensors_differ_from_the_kept_file_is_refused(published):
    """The published .pth beside it, but other tensors in the staged file: refused (the check reads both
    files' tensors, so no record and no file name can stand in for them)."""
    [path] = stage_weights([("resnet18", "tv_in1k")])
    resolve_weights("resnet18", "imagenet")
    save_file({k: (v + 1 if v.is_floating_point() else v) for k, v in _random_resnet18(1).items()}, str(path))
    with pytest.raises(WeightsError, match=r"tensor .* differs from resnet18-f37072fd\.pth's: restage"):
        resolve_weights("resnet18", "imagenet")
    save_file(_random_resnet18(2), str(path))
    with pytest.raises(WeightsError, match="differs from"):
        resolve_weights("resnet18", "imagenet")


def test_a_users_own_file_still_loads_and_is_not_marked_published(weights_dir):
    path = weights_dir / "mine.safetensors"
    save_file(_random_resnet18(0), str(path))
    resolved, weights_id = resolve_weights("resnet18", str(path))
    assert resolved == path and weights_id.startswith("file:") and not is_published_id(weights_id)
    assert not is_published_id("resnet18.tv_in1k:0123456789abcdef")  # a run from before the check
    assert is_published_id("resnet18.tv_in1k:0123456789abcdef:published;teacher=abc")


def test_bench_weights_lists_a_renamed_file_as_unverified(weights_dir, capsys):
    from bench.cli import main

    save_file(_random_resnet18(0), str(staged_weights_path("resnet18", "tv_in1k")))
    assert main(["weights"]) == 0
    lines = {line.split()[0]: line.split()[1] for line in capsys.readouterr().out.splitlines()}
    assert lines == {"resnet18.tv_in1k": "unverified", "wide_resnet50_2.tv2_in1k": "missing",
                     "wide_resnet50_2.tv_in1k": "missing"}
