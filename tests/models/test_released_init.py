"""The `inclad` starts equal InCLAD's released code: what tools/released/ established by running both side by side
(docs/models.md, "Side by side with the released classes"), pinned here offline. Each test names the released file
and line it stands for; none needs the released code.

Reference statistics: torchvision's resnet init (Kaiming-normal fan_out for convolutions, BatchNorm 1 / 0) is what
the released students get; torch's own `_calculate_fan_in_and_fan_out` gives the fan_out a Kaiming-normal draw uses.
"""

from __future__ import annotations

import dataclasses
import json
import math

import h5py
import pytest
import torch
from torch import nn

from bench import registry, results
from bench.continual.runner import execute, prepare
from bench.features import ImageSource
from bench.models.efficientad.detector import colour_augment, drop_epoch
from bench.models.ganomaly import Discriminator, Generator
from bench.models.paste import Student
from bench.models.rd4ad import ReverseDistillation
from bench.models.stfpm import resnet_student
from helpers import create, model_extractor


def _kaiming_fan_out_std(weight: torch.Tensor) -> float:
    _, fan_out = nn.init._calculate_fan_in_and_fan_out(weight)
    return math.sqrt(2.0 / fan_out)


def _bn_weights(module: nn.Module) -> dict[str, torch.Tensor]:
    return {n: m.weight.detach() for n, m in module.named_modules() if isinstance(m, nn.BatchNorm2d)}


def _assert_torchvision_resnet_start(module: nn.Module) -> None:
    """Every BatchNorm weight 1 and bias 0, every convolution's spread Kaiming fan_out's (within sampling error)."""
    bns = _bn_weights(module)
    assert bns, "no BatchNorm found"
    for name, w in bns.items():
        assert torch.equal(w, torch.ones_like(w)), f"{name}: BatchNorm weight not 1"
    for name, m in module.named_modules():
        if isinstance(m, nn.BatchNorm2d):
            assert torch.equal(m.bias.detach(), torch.zeros_like(m.bias)), name
        if isinstance(m, nn.Conv2d) and m.weight.numel() >= 4096:
            ratio = float(m.weight.detach().std()) / _kaiming_fan_out_std(m.weight)
            assert 0.95 < ratio < 1.05, f"{name}: spread {ratio:.3f} × Kaiming fan_out"


def test_stfpm_student_starts_as_torchvision_resnet():
    """routing-cad-icdm `src/pyclad/models/stfpm/builder.py:59-64`: the student is a TorchvisionFeatureExtractor
    with pretrained=False, i.e. `src/pyclad/models/vision/backbones.py:57` `model_fn(weights=None)`: torchvision's
    resnet init, every BatchNorm weight 1 (timm's default zeroes each block's last one)."""
    det = create("stfpm", model_extractor(), 64)
    det.build(0)
    _assert_torchvision_resnet_start(det.student_)
    last = {n: w for n, w in _bn_weights(det.student_).items() if n.endswith("bn2")}
    assert len(last) == 6  # resnet18 layers 1-3: two blocks each, every last BN kept at 1
    timm_start = _bn_weights(resnet_student("resnet18", "timm", features_only=True, out_indices=(1, 2, 3)))
    assert all(float(w.abs().max()) == 0 for n, w in timm_start.items() if n.endswith("bn2"))


def test_stfpm_student_matches_a_torchvision_resnet_layer_by_layer():
    """routing-cad-icdm `src/pyclad/models/vision/backbones.py:57`: the released student is torchvision's resnet18;
    per layer, the suite's student has its BatchNorm weights and its convolution spread."""
    import torchvision

    tv = torchvision.models.resnet18(weights=None)
    ours = resnet_student("resnet18", "torchvision", features_only=True, out_indices=(1, 2, 3))
    tv_bn = _bn_weights(tv)
    for name, w in _bn_weights(ours).items():
        torch.testing.assert_close(w, tv_bn[name], rtol=0, atol=0)
    tv_conv = {n: m.weight for n, m in tv.named_modules() if isinstance(m, nn.Conv2d)}
    for name, m in ours.named_modules():
        if isinstance(m, nn.Conv2d) and m.weight.numel() >= 4096:
            assert abs(float(m.weight.detach().std()) / float(tv_conv[name].detach().std()) - 1) < 0.05, name


def test_paste_student_starts_as_torchvision_resnet():
    """InCLAD-benchmark `src/pyclad/models/paste/standard/backbones.py:81-91`: `_create_torchvision_model` builds
    the student with `model_fn(weights=None)` (pretrained_student false): every BatchNorm weight 1."""
    det = create("paste", model_extractor(("stem", "layer1", "layer2", "layer3")), 64)
    det.build(0)
    _assert_torchvision_resnet_start(det.student_)
    assert len(_bn_weights(det.student_)) == 14  # layers 1-3 of resnet18: 6 blocks × 2 BN + 2 downsample BN
    assert any(float(w.max()) == 0 for w in _bn_weights(Student("resnet18", 0, "timm")).values())


@pytest.mark.parametrize("backbone, channels", [("resnet18", [64, 128, 256])])
def test_rd4ad_transposed_convolutions_get_kaiming_fan_out(backbone, channels):
    """InCLAD-benchmark `src/pyclad/models/rd4ad/standard/deresnet.py:174-179`: the decoder's init loop matches
    nn.ConvTranspose2d as well as nn.Conv2d, so every 2×2 transposed convolution is Kaiming-normal (fan_out);
    Deng & Li's loop (`original`) leaves them at PyTorch's default, a spread about √3 smaller where the input has
    twice the output's channels."""
    torch.manual_seed(0)
    net = ReverseDistillation(backbone, channels, "kaiming")
    deconvs = {n: m for n, m in net.named_modules() if isinstance(m, nn.ConvTranspose2d)}
    assert len(deconvs) == 6  # per stage: the first block's 2×2 upsampling and its skip
    for name, m in deconvs.items():
        ratio = float(m.weight.detach().std()) / _kaiming_fan_out_std(m.weight)
        assert 0.95 < ratio < 1.05, f"{name}: spread {ratio:.3f} × Kaiming fan_out"
    for name, m in net.named_modules():
        if isinstance(m, nn.BatchNorm2d):
            assert torch.equal(m.weight.detach(), torch.ones_like(m.weight)), name
    default = ReverseDistillation(backbone, channels, "default").decoder.stages[0][0].skip[0]
    ratio = float(deconvs["decoder.stages.0.0.skip.0"].weight.detach().std()) / float(default.weight.detach().std())
    assert 1.6 < ratio < 1.9  # √3 = 1.73: 512 → 256 channels
    rd4ad = create("rd4ad", model_extractor(), 64)
    assert rd4ad.deconv_init == "kaiming"
    assert registry.get("rd4ad").resolve(preset="original")["deconv_init"] == "default"


def test_ganomaly_first_layer_pads_by_four():
    """InCLAD-benchmark `src/pyclad/models/ganomaly/standard/networks.py:24` (`Encoder`, first convolution
    `padding=4`), used by both encoders and the discriminator: 131 × 131 after it at 256 px; z stays 1 × 1."""
    gen, disc = Generator(256, 2, 8, first_padding=4), Discriminator(256, 2, first_padding=4)
    x = torch.zeros(1, 3, 256, 256)
    with torch.no_grad():
        for first in (gen.encoder1[0], gen.encoder2[0], disc.features[0]):
            assert first.padding == (4, 4) and first(x).shape[-2:] == (131, 131)
        gen.eval(), disc.eval()
        fake, z, z_hat = gen(x)
        logit, _ = disc(x)
    assert fake.shape == x.shape and z.shape == z_hat.shape == (1, 8) and logit.shape == (1,)
    assert Generator(256, 2, 8).encoder1[0](x).shape[-2:] == (128, 128)  # original: DCGAN's padding 1
    assert registry.get("ganomaly").resolve()["first_padding"] == 4


def test_ganomaly_starts_from_pytorch_default_init():
    """InCLAD-benchmark `src/pyclad/models/ganomaly/architecture.py:48-49` calls `weights_init` on the generator and
    the discriminator themselves; its rules (`:65-73`) match only class names containing "Conv" or "BatchNorm", so
    nothing changes: BatchNorm weights stay exactly 1, convolutions keep PyTorch's kaiming_uniform(a=√5) bound."""
    det = create("ganomaly", ImageSource(torch.device("cpu"), progress=False), 32, n_features=4)
    det.build(0)
    for net in (det.generator_, det.discriminator_):
        for name, m in net.named_modules():
            if isinstance(m, nn.BatchNorm2d):
                assert torch.equal(m.weight.detach(), torch.ones_like(m.weight)), name
            if isinstance(m, (nn.Conv2d, nn.ConvTranspose2d)):
                fan_in, _ = nn.init._calculate_fan_in_and_fan_out(m.weight)
                assert float(m.weight.detach().abs().max()) <= 1 / math.sqrt(fan_in) + 1e-7, name
    dcgan = create("ganomaly", ImageSource(torch.device("cpu"), progress=False), 32, n_features=4, init="dcgan")
    dcgan.build(0)
    bn = next(m for m in dcgan.generator_.modules() if isinstance(m, nn.BatchNorm2d))
    assert not torch.equal(bn.weight.detach(), torch.ones_like(bn.weight))  # N(1, 0.02)


@pytest.mark.filterwarnings("ignore:Detected call of:UserWarning")  # no training step: rates only
@pytest.mark.parametrize("epochs", [50, 3, 2, 1, 20])
def test_efficientad_lr_drops_after_epoch_floor_095_epochs(epochs):
    """InCLAD-benchmark `src/pyclad/models/efficientad/efficientad.py`: `lr_step_size=max(1, int(epochs *
    lr_decay_fraction))` and a StepLR stepped every epoch (`configure_optimizers`, interval "epoch"): the rate is
    × 0.1 from epoch ⌊0.95 · epochs⌋ on (47 of 50: three low-rate epochs)."""
    expected = max(1, math.floor(0.95 * epochs))
    assert drop_epoch(epochs, 0.95) == expected
    det = create("efficientad", ImageSource(torch.device("cpu"), progress=False), 48, out_channels=8, epochs=epochs)
    det.build(0)
    opt = det.optimizers()[0]
    (sched,) = det.schedulers([opt])
    rates = []
    for _ in range(epochs):
        rates.append(opt.param_groups[0]["lr"])
        sched.step()
    assert rates == [1e-4] * min(expected, epochs) + [pytest.approx(1e-5)] * (epochs - min(expected, epochs))
    paper = create("efficientad", ImageSource(torch.device("cpu")), 48, out_channels=8, lr_drop="step")
    assert paper.schedulers([opt]) == []


def test_efficientad_colour_augmentation_is_torchvisions():
    """InCLAD-benchmark `src/pyclad/models/efficientad/architecture.py`, `_choose_random_aug_image`: per image a
    factor U(0.8, 1.2), then one of torchvision's adjust_brightness / adjust_contrast / adjust_saturation (grey
    weights 0.2989 / 0.587 / 0.114), clamped to [0, 1]."""
    from torchvision.transforms import functional as tvf

    images = torch.rand(12, 3, 8, 8, generator=torch.Generator().manual_seed(0))
    torch.manual_seed(3)
    ours = colour_augment(images)
    torch.manual_seed(3)
    kinds = set()
    for i, x in enumerate(images):
        f = float(torch.empty(1).uniform_(0.8, 1.2))
        kind = int(torch.randint(0, 3, (1,)))
        kinds.add(kind)
        ref = (tvf.adjust_brightness, tvf.adjust_contrast, tvf.adjust_saturation)[kind](x, f).clamp(0, 1)
        torch.testing.assert_close(ours[i], ref, rtol=0, atol=0)
    assert kinds == {0, 1, 2}
    # torchvision's grey, not 0.299: a pure-red image desaturated by half keeps 0.5 + 0.5 · 0.2989 in red
    red = torch.zeros(3, 2, 2)
    red[0] = 1
    assert float(tvf.adjust_saturation(red, 0.5)[0, 0, 0]) == pytest.approx(0.5 + 0.5 * 0.2989, abs=1e-6)


BUMPED = {"stfpm": {"epochs": 1, "batch_size": 8}, "paste": {"epochs": 1, "batch_size": 8},
          "rd4ad": {"epochs": 1, "batch_size": 8},
          "ganomaly": {"epochs": 1, "batch_size": 8, "n_features": 4},  # 4: inputs padded to a power of two
          "efficientad": {"epochs": 1, "batch_size": 4, "out_channels": 8},
          "fastflow": {"epochs": 1, "batch_size": 8, "flow_steps": 2},  # 4: the released step's permutation order
          "patchcore": {}, "padim": {},  # 4: scipy's blur borders (rd4ad: 6, the same)
          "cfa": {"epochs": 1}}  # 5: CL's training bank over the buffer, then the task


@pytest.mark.parametrize("model", sorted(BUMPED))
def test_results_of_the_previous_version_are_recomputed(model, tiny_root, tmp_path, make_config, monkeypatch):
    """A result file written before this alignment (the spec's previous version) is not reused: the current
    version has another run key, another file, and learns every task again."""
    spec = registry.get(model)
    size = 64 if model != "efficientad" else 48

    def config():
        return make_config(tiny_root, ["chip"], model=model, image_size=size, hparams=dict(BUMPED[model]))

    monkeypatch.setitem(registry._SPECS, model, dataclasses.replace(spec, version=spec.version - 1))
    old = execute(prepare(config(), out_dir=tmp_path), progress=False, log=lambda *_: None)
    with h5py.File(old, "r", locking=False) as f:
        assert json.loads(f.attrs["config"])["model_version"] == spec.version - 1
    monkeypatch.setitem(registry._SPECS, model, spec)
    log: list[str] = []
    current = prepare(config(), out_dir=tmp_path)
    assert current.run_key != results.file_run_key(old) and current.out != old
    execute(current, progress=False, log=log.append)
    assert not any("already complete" in line for line in log)
    assert any("learning task" in line for line in log)
