"""RD4AD (Deng & Li, 2022): reverse distillation from a one-class bottleneck embedding.

Encoder: the run's frozen backbone, layers 1–3 (features from the run's cache: training runs only the
bottleneck and the decoder). OCBE: multi-scale fusion (layer 1 through two stride-2 3×3 convolutions, layer 2
through one, concatenated with layer 3) then the one-class embedding block, a residual stage of stride 2
(2 basic blocks for resnet18, 3 bottlenecks for wide_resnet50_2, as the official code). Decoder: the encoder
mirrored with transposed convolutions, three stages producing layer 3's, layer 2's and layer 1's shapes (stage
depths as the official de_resnet). Loss: Σ_l mean over the batch of 1 − cos(flatten(E_l), flatten(D_l)) (the
official code's per-sample flattened cosine). Map: Σ_l of the per-location 1 − cos over channels, upsampled
(bilinear, corners aligned, as InCLAD's `post_process` and Deng & Li's `cal_anomaly_map`) to the input size, then a Gaussian blur (σ = `blur_sigma`, 0 = none); image score = map max. Adam
lr 5e-3, β = (0.5, 0.999), 200 epochs, batch 16 (InCLAD Table 7). Initialisation: every Conv2d of the OCBE and the decoder Kaiming-normal (fan_out, ReLU), every BatchNorm
weight 1 and bias 0, as both codes; the transposed convolutions (`deconv_init`): "kaiming" (`inclad`) the same
Kaiming-normal, as InCLAD's decoder (InCLAD-benchmark `src/pyclad/models/rd4ad/standard/deresnet.py:174-179`:
its loop matches nn.ConvTranspose2d too), "default" (`original`) PyTorch's default, as Deng & Li's de_resnet
(whose loop matches nn.Conv2d only, which a transposed convolution is not): a spread about √3 smaller.

Presets: `inclad` (default) = InCLAD's released code: Table 7's "smoothing kernel 1" is a kernel size and its
code blurs only for a kernel > 1, so no blur; ImageNet weights are torchvision's DEFAULT (V2 for
wide_resnet50_2). `original` = Deng & Li's code: σ = 4 blur, IMAGENET1K_V1 weights, default-initialised
transposed convolutions.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn
from torchvision.models.resnet import BasicBlock, Bottleneck

from bench.errors import ConfigError
from bench.models.base import Prediction
from bench.models.gradient import GradientDetector, training_params
from bench.models.ops.blur import MAX_SIGMA, gaussian_blur
from bench.registry import Choice, Float, Layers, ModelSpec, pixel_memory, register, trained_state
from bench.training.loop import seeded

# backbone → (block kind, width per group, blocks per decoder stage deepest-first, OCE blocks): official RD4AD
DECONV_INITS = ("kaiming", "default")  # see the module docstring
ARCHITECTURES = {"resnet18": ("basic", 64, (2, 2, 2), 2), "wide_resnet50_2": ("bottleneck", 128, (3, 4, 6), 3)}


def conv_bn_relu(cin: int, cout: int) -> nn.Module:
    return nn.Sequential(nn.Conv2d(cin, cout, 3, stride=2, padding=1, bias=False), nn.BatchNorm2d(cout),
                         nn.ReLU(inplace=True))


class Ocbe(nn.Module):
    """Multi-scale feature fusion + one-class embedding: layers 1–3 → one [B, 512·e, h/2, w/2] embedding."""

    def __init__(self, channels: list[int], kind: str, width: int, blocks: int):
        super().__init__()
        c1, c2, c3 = channels
        self.down1 = nn.Sequential(conv_bn_relu(c1, c2), conv_bn_relu(c2, c3))
        self.down2 = conv_bn_relu(c2, c3)
        block = BasicBlock if kind == "basic" else Bottleneck
        planes = 2 * c3 // block.expansion  # 512 for resnet18 (c3 = 256), 512 for WRN50 (c3 = 1024)
        out = planes * block.expansion
        downsample = nn.Sequential(nn.Conv2d(3 * c3, out, 1, stride=2, bias=False), nn.BatchNorm2d(out))
        extra = {} if kind == "basic" else {"base_width": width}
        layers = [block(3 * c3, planes, stride=2, downsample=downsample, **extra)]
        layers += [block(out, planes, **extra) for _ in range(blocks - 1)]
        self.oce = nn.Sequential(*layers)

    def forward(self, feats: list[torch.Tensor]) -> torch.Tensor:
        f1, f2, f3 = feats
        return self.oce(torch.cat([self.down1(f1), self.down2(f2), f3], 1))


class DeBasicBlock(nn.Module):
    expansion = 1

    def __init__(self, cin: int, planes: int, upsample: bool, width: int = 64):
        super().__init__()
        first = (nn.ConvTranspose2d(cin, planes, 2, stride=2, bias=False) if upsample
                 else nn.Conv2d(cin, planes, 3, padding=1, bias=False))
        self.body = nn.Sequential(first, nn.BatchNorm2d(planes), nn.ReLU(inplace=True),
                                  nn.Conv2d(planes, planes, 3, padding=1, bias=False), nn.BatchNorm2d(planes))
        self.skip = _skip(cin, planes, upsample)

    def forward(self, x):
        return F.relu(self.body(x) + self.skip(x))


class DeBottleneck(nn.Module):
    expansion = 4

    def __init__(self, cin: int, planes: int, upsample: bool, width: int = 64):
        super().__init__()
        w = planes * width // 64
        middle = (nn.ConvTranspose2d(w, w, 2, stride=2, bias=False) if upsample
                  else nn.Conv2d(w, w, 3, padding=1, bias=False))
        self.body = nn.Sequential(nn.Conv2d(cin, w, 1, bias=False), nn.BatchNorm2d(w), nn.ReLU(inplace=True),
                                  middle, nn.BatchNorm2d(w), nn.ReLU(inplace=True),
                                  nn.Conv2d(w, planes * 4, 1, bias=False), nn.BatchNorm2d(planes * 4))
        self.skip = _skip(cin, planes * 4, upsample)

    def forward(self, x):
        return F.relu(self.body(x) + self.skip(x))


def _skip(cin: int, cout: int, upsample: bool) -> nn.Module:
    if upsample:
        return nn.Sequential(nn.ConvTranspose2d(cin, cout, 2, stride=2, bias=False), nn.BatchNorm2d(cout))
    return nn.Identity() if cin == cout else nn.Sequential(nn.Conv2d(cin, cout, 1, bias=False), nn.BatchNorm2d(cout))


class Decoder(nn.Module):
    """Three upsampling stages from the embedding back to layer 3's, layer 2's and layer 1's shapes."""

    def __init__(self, embedding_channels: int, channels: list[int], kind: str, width: int, depths):
        super().__init__()
        block = DeBasicBlock if kind == "basic" else DeBottleneck
        stages, cin = [], embedding_channels
        for cout, depth in zip(reversed(channels), depths):
            planes = cout // block.expansion
            blocks = [block(cin, planes, upsample=True, width=width)]
            blocks += [block(cout, planes, upsample=False, width=width) for _ in range(depth - 1)]
            stages.append(nn.Sequential(*blocks))
            cin = cout
        self.stages = nn.ModuleList(stages)

    def forward(self, x: torch.Tensor) -> list[torch.Tensor]:
        outs = []
        for stage in self.stages:
            x = stage(x)
            outs.append(x)
        return outs[::-1]  # shallowest first, as the encoder's layers


def official_init(module: nn.Module, deconv_init: str = "kaiming") -> None:
    """RD4AD's initialisation of the OCBE and the decoder: Conv2d Kaiming-normal (fan_out, ReLU), BatchNorm
    weight 1 / bias 0; nn.ConvTranspose2d (not an nn.Conv2d) Kaiming-normal too under "kaiming" (InCLAD's
    code), left at PyTorch's default under "default" (Deng & Li's)."""
    deconv = isinstance(module, nn.ConvTranspose2d) and deconv_init == "kaiming"
    if isinstance(module, nn.Conv2d) or deconv:
        nn.init.kaiming_normal_(module.weight, mode="fan_out", nonlinearity="relu")
    elif isinstance(module, nn.BatchNorm2d):
        nn.init.ones_(module.weight)
        nn.init.zeros_(module.bias)


class ReverseDistillation(nn.Module):
    def __init__(self, backbone: str, channels: list[int], deconv_init: str = "kaiming"):
        super().__init__()
        kind, width, depths, oce_blocks = ARCHITECTURES[backbone]
        self.bottleneck = Ocbe(channels, kind, width, oce_blocks)
        self.decoder = Decoder(2 * channels[2], channels, kind, width, depths)
        self.apply(lambda m: official_init(m, deconv_init))

    def forward(self, feats: list[torch.Tensor]) -> list[torch.Tensor]:
        return self.decoder(self.bottleneck(feats))


def cosine_loss(encoder: list[torch.Tensor], decoder: list[torch.Tensor]) -> torch.Tensor:
    return sum((1 - F.cosine_similarity(e.flatten(1), d.flatten(1), dim=1)).mean() for e, d in zip(encoder, decoder))


def cosine_map(encoder: list[torch.Tensor], decoder: list[torch.Tensor], image_size: int) -> torch.Tensor:
    """[B, S, S]: Σ over layers of the per-location 1 − cos over channels, upsampled (bilinear with
    align_corners=True: InCLAD-benchmark `src/pyclad/models/rd4ad/architecture.py:83-88`)."""
    return sum(F.interpolate((1 - F.cosine_similarity(e, d, dim=1))[:, None], size=(image_size, image_size),
                             mode="bilinear", align_corners=True)[:, 0] for e, d in zip(encoder, decoder))


class Rd4ad(GradientDetector):
    name = "rd4ad"

    def __init__(self, extractor, *, image_size: int, layers, epochs: int, batch_size: int, replay_size: int,
                 replay_share: str, lr: float, beta1: float, beta2: float, blur_sigma: float, deconv_init: str):
        super().__init__(extractor, image_size=image_size, epochs=epochs, batch_size=batch_size,
                         replay_size=replay_size, replay_share=replay_share)
        if extractor.backbone_name not in ARCHITECTURES:
            raise ConfigError(f"rd4ad has no decoder for backbone {extractor.backbone_name!r} "
                              f"(valid: {', '.join(ARCHITECTURES)})")
        if len(layers) != 3:
            raise ConfigError(f"rd4ad fuses exactly three encoder layers, got {list(layers)}")
        # the decoder doubles the embedding (size/32 per side) back to layers 3, 2, 1 (size/16, /8, /4): only a
        # multiple of 32 mirrors exactly, and 32 itself leaves a 1×1 embedding BatchNorm cannot train on
        if image_size % 32 or image_size < 64:
            raise ConfigError(f"rd4ad needs an image size that is a multiple of 32 and at least 64 (e.g. 64, "
                              f"224, 256), got {image_size}")
        self.layers = tuple(layers)
        self.lr, self.betas, self.blur_sigma = lr, (beta1, beta2), blur_sigma
        self.deconv_init = deconv_init
        self.net_: ReverseDistillation | None = None

    def build(self, seed: int) -> None:
        if self.net_ is None:
            with seeded(seed):
                net = ReverseDistillation(self.extractor.backbone_name, [s[0] for s in self.feature_shapes()],
                                          self.deconv_init)
            self.net_ = net.to(self.device)

    def modules(self) -> dict[str, nn.Module]:
        return {"net": self.net_} if self.net_ is not None else {}

    def optimizers(self) -> list[torch.optim.Optimizer]:
        return [torch.optim.Adam(self.net_.parameters(), lr=self.lr, betas=self.betas)]

    def loss(self, batch) -> torch.Tensor:
        feats = self.features(batch)
        return cosine_loss(feats, self.net_(feats))

    def score(self, split, idx) -> Prediction:
        feats = self.extractor(split, idx)
        maps = gaussian_blur(cosine_map(feats, self.net_(feats), self.image_size), self.blur_sigma)
        return Prediction(maps.flatten(1).max(1).values.double().cpu().numpy(), maps.float().cpu().numpy())


register(ModelSpec(
    name="rd4ad", label="RD4AD", factory=Rd4ad, source="InCLAD Table 7", quick={"epochs": 10, "batch_size": 4},
    image_size=224,  # the paper's input size (InCLAD Tables 6-7)
    # 2: channels-last training (float rounding differs from version 1); 3: the official initialisation, and
    # no blur by default (InCLAD's code; version 2 blurred with σ = 1, which neither InCLAD nor the paper did);
    # 4: the map upsampled with align_corners=True, as InCLAD's and Deng & Li's code; 5: Kaiming-normal transposed
    # convolutions by default (InCLAD's decoder); 6: `original`'s σ = 4 blur is Deng & Li's scipy gaussian_filter
    # at the borders too (bench/models/ops/blur.py)
    version=6,
    presets={"inclad": {}, "original": {"blur_sigma": 4.0, "replay_share": "water", "deconv_init": "default"}},
    default_preset="inclad",
    imagenet_weights={"inclad": "DEFAULT"},  # InCLAD builds the encoder with torchvision's DEFAULT weights
    params={
        "layers": Layers(("layer1", "layer2", "layer3")),
        **training_params(epochs=200, batch_size=16),
        "lr": Float(5e-3, 0, low_open=True),
        "beta1": Float(0.5, 0, 1, high_open=True, doc="Adam β1 (< 1)"),
        "beta2": Float(0.999, 0, 1, high_open=True, doc="Adam β2 (< 1)"),
        "blur_sigma": Float(0.0, 0, MAX_SIGMA, doc="Gaussian blur σ of the map, 0 = none (InCLAD: Table 7's "
                                                   "kernel size 1 = no blur; the official code: 4)"),
        "deconv_init": Choice("kaiming", DECONV_INITS, doc="transposed convolutions' start: Kaiming-normal fan_out "
                                                           "(InCLAD's code) or PyTorch's default (Deng & Li's)"),
    },
    # measured on CPU at the default settings (peak RSS of a one-batch fit at 64 and 160 px; docs/cluster.md):
    # bytes per pixel of a training image (bottleneck and decoder activations and gradients),
    # and the trained weights with their gradients and optimiser state
    memory_bytes=pixel_memory(290, features=True, fixed=250 * 2**20),
    # host memory (bench.hpc.memory): the training loop revisits a task's features every epoch; its networks, optimiser and replay indices
    train_features="epochs", host_state_bytes=trained_state,
))
