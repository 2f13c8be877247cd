"""RD4AD: the reverse decoder reproduces the encoder's layer shapes for resnet18 and wide_resnet50_2; the loss is
the official per-sample flattened cosine; the map sums per-location 1 − cos, upsampled to the input size."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from bench.features import create_backbone
from bench.models.rd4ad import ReverseDistillation, cosine_loss, cosine_map

LAYERS = ("layer1", "layer2", "layer3")


@pytest.mark.parametrize("backbone", ["resnet18", "wide_resnet50_2"])
@pytest.mark.parametrize("size", [64, 224])
def test_decoder_shapes_match_the_encoder(backbone, size):
    """On the meta device: shapes propagate without allocating or computing (WRN50's decoder is large)."""
    with torch.device("meta"):
        encoder = create_backbone(backbone, "none", LAYERS)
        feats = encoder(torch.zeros(2, 3, size, size))
        out = ReverseDistillation(backbone, [f.shape[1] for f in feats]).eval()(feats)
    assert [o.shape for o in out] == [f.shape for f in feats]
    assert [f.shape[1] for f in feats] == ([64, 128, 256] if backbone == "resnet18" else [256, 512, 1024])


def test_loss_and_map_equal_references():
    """The map is upsampled with align_corners=True, as InCLAD-benchmark `src/pyclad/models/rd4ad/architecture.py:87`
    (`post_process`) and Deng & Li's `cal_anomaly_map` do."""
    g = torch.Generator().manual_seed(0)
    enc = [torch.randn(2, 4, 4, 4, generator=g), torch.randn(2, 8, 2, 2, generator=g)]
    dec = [torch.randn(2, 4, 4, 4, generator=g), torch.randn(2, 8, 2, 2, generator=g)]
    expected = 0.0
    for e, d in zip(enc, dec):
        for b in range(2):
            a, c = e[b].flatten(), d[b].flatten()
            expected += (1 - a @ c / (a.norm() * c.norm())) / 2
    torch.testing.assert_close(cosine_loss(enc, dec), expected)
    maps = cosine_map(enc, dec, 8)
    assert maps.shape == (2, 8, 8)
    per_location = 1 - (F.normalize(enc[1], dim=1) * F.normalize(dec[1], dim=1)).sum(1)
    up = F.interpolate(per_location[:, None], size=(8, 8), mode="bilinear", align_corners=True)[:, 0]
    first = 1 - (F.normalize(enc[0], dim=1) * F.normalize(dec[0], dim=1)).sum(1)
    first = F.interpolate(first[:, None], size=(8, 8), mode="bilinear", align_corners=True)[:, 0]
    torch.testing.assert_close(maps, first + up, rtol=1e-5, atol=1e-5)


def test_bottleneck_and_decoder_use_the_official_initialisation():
    """Official RD4AD (torchvision resnet's loop): every Conv2d Kaiming-normal with mode fan_out / ReLU gain, so
    its weights' std is sqrt(2 / (out_channels · k²)); every BatchNorm weight 1 and bias 0."""
    torch.manual_seed(0)
    net = ReverseDistillation("resnet18", [64, 128, 256])
    convs = [m for m in net.modules() if type(m) is torch.nn.Conv2d]
    assert len(convs) > 10
    for conv in convs:
        out_channels, _, kh, kw = conv.weight.shape
        expected = (2 / (out_channels * kh * kw)) ** 0.5
        if conv.weight.numel() >= 10_000:  # enough draws for the std to be within 5 %
            assert abs(conv.weight.std().item() / expected - 1) < 0.05, conv
    for bn in (m for m in net.modules() if isinstance(m, torch.nn.BatchNorm2d)):
        assert torch.equal(bn.weight, torch.ones_like(bn.weight)) and torch.equal(bn.bias, torch.zeros_like(bn.bias))


@pytest.mark.parametrize("size", [32, 48, 100])
def test_sizes_the_decoder_cannot_mirror_are_refused(size):
    from bench.errors import ConfigError
    from helpers import create, model_extractor

    with pytest.raises(ConfigError, match=f"multiple of 32 and at least 64.*got {size}"):
        create("rd4ad", model_extractor(), size)
