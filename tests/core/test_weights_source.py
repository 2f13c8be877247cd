"""ImageNet weights are recognised by content, not by name (issue 31 §6): random weights saved as
`resnet18.tv_in1k.safetensors` counted as ImageNet (in the run's weights id and so in the paper comparison). A
staged file is accepted only with the source record `make weights` writes after checking the download against the
digest torchvision publishes in its file name, and only while the file's SHA-256 is the one recorded."""

from __future__ import annotations

import pytest
import timm
from safetensors.torch import save_file

from bench.errors import WeightsError
from bench.features import (published_prefix, resolve_weights, source_record_path, staged_weights_path,
                            torchvision_url, write_source_record)


@pytest.fixture
def renamed_random(tmp_path, monkeypatch):
    """Random-init resnet18 weights saved under the staged ImageNet name."""
    monkeypatch.setenv("BENCH_WEIGHTS_DIR", str(tmp_path))
    path = staged_weights_path("resnet18", "tv_in1k")
    save_file({k: v.contiguous() for k, v in timm.create_model("resnet18").state_dict().items()}, str(path))
    return path


def test_torchvision_publishes_the_digest_prefix_in_its_file_names():
    """The addresses come from torchvision's Weights enums (torchvision/models/resnet.py)."""
    assert torchvision_url("resnet18", "tv_in1k") == "https://download.pytorch.org/models/resnet18-f37072fd.pth"
    assert published_prefix(torchvision_url("wide_resnet50_2", "tv2_in1k")) == "9ba9bcbe"
    assert published_prefix(torchvision_url("wide_resnet50_2", "tv_in1k")) == "95faca4d"


def test_renamed_random_weights_are_not_imagenet(renamed_random):
    with pytest.raises(WeightsError, match=r"resnet18\.tv_in1k\.safetensors: nothing shows these are torchvision's "
                                           r"weights .*source\.json.*make weights"):
        resolve_weights("resnet18", "imagenet")


def test_a_source_record_must_name_torchvision_and_its_digest(renamed_random):
    """A record of another address, or of a download whose digest is not the published one, is refused."""
    url = torchvision_url("resnet18", "tv_in1k")
    write_source_record(renamed_random, "https://example.org/models/resnet18-f37072fd.pth", "f37072fd".ljust(64, "0"))
    with pytest.raises(WeightsError, match="not torchvision's resnet18 IMAGENET1K_V1 weights"):
        resolve_weights("resnet18", "imagenet")
    write_source_record(renamed_random, url, "0" * 64)
    with pytest.raises(WeightsError, match="whose SHA-256 starts f37072fd"):
        resolve_weights("resnet18", "imagenet")
    write_source_record(renamed_random, url, published_prefix(url).ljust(64, "0"))
    path, weights_id = resolve_weights("resnet18", "imagenet")
    assert path == renamed_random and weights_id.startswith("resnet18.tv_in1k:")


def test_a_staged_file_replaced_after_staging_is_refused(renamed_random):
    """The record holds the staged file's own SHA-256: random weights copied over a staged file are refused."""
    url = torchvision_url("resnet18", "tv_in1k")
    write_source_record(renamed_random, url, published_prefix(url).ljust(64, "0"))
    assert source_record_path(renamed_random).name == "resnet18.tv_in1k.source.json"
    torch_sd = timm.create_model("resnet18").state_dict()
    save_file({k: (v + 1 if v.is_floating_point() else v).contiguous() for k, v in torch_sd.items()},
              str(renamed_random))
    with pytest.raises(WeightsError, match="is not that of the file staged from .*the file was replaced"):
        resolve_weights("resnet18", "imagenet")


def test_bench_weights_lists_a_renamed_file_as_unverified(renamed_random, capsys):
    from bench.cli import main

    assert main(["weights"]) == 0
    lines = {line.split()[0]: line.split()[1] for line in capsys.readouterr().out.splitlines()}
    assert lines == {"resnet18.tv_in1k": "unverified", "wide_resnet50_2.tv2_in1k": "missing",
                     "wide_resnet50_2.tv_in1k": "missing"}
