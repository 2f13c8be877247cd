"""STFPM (Wang et al., 2021): student–teacher feature pyramid matching.

Teacher: the run's frozen backbone, layers 1–3 (its features come from the run's cache: the teacher runs once
per image, not once per epoch). Student: the same architecture up to layer 3, randomly initialised (seeded), fed
the raw image; the only trained part. Loss: Σ_l mean_hw Σ_c (l2n(T_l) − l2n(S_l))², l2n = unit norm over
channels. Map: the product over layers of ½‖l2n(T_l) − l2n(S_l)‖² upsampled (bilinear) to the input size;
image score = map max. SGD lr 0.4, momentum 0.9, weight decay 1e-4, 100 epochs, batch 32 (InCLAD Table 7).
Preset `inclad` only (the paper's values are Table 7's); its ImageNet weights are torchvision's DEFAULT, as
InCLAD's code path (V2 for wide_resnet50_2; the paper used resnet18, whose DEFAULT is V1).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from bench.features import LAYERS
from bench.models.base import Prediction
from bench.models.gradient import GradientDetector, training_params
from bench.registry import Float, Layers, ModelSpec, pixel_memory, register
from bench.training.loop import seeded


def feature_distances(teacher: list[torch.Tensor], student: list[torch.Tensor]) -> list[torch.Tensor]:
    """Per layer [B, h, w]: Σ_c (l2n(T) − l2n(S))², l2n normalising each location's channel vector."""
    return [(F.normalize(t, dim=1) - F.normalize(s, dim=1)).pow(2).sum(1) for t, s in zip(teacher, student)]


def pyramid_loss(distances: list[torch.Tensor]) -> torch.Tensor:
    """STFPM's loss: Σ over layers of the per-image mean over locations, averaged over the batch."""
    return sum(d.flatten(1).mean(1) for d in distances).mean()


def product_map(distances: list[torch.Tensor], image_size: int) -> torch.Tensor:
    """[B, S, S]: the product over layers of ½·distance, each upsampled (bilinear) to the input size."""
    out = None
    for d in distances:
        up = F.interpolate(0.5 * d[:, None], size=(image_size, image_size), mode="bilinear", align_corners=False)
        out = up[:, 0] if out is None else out * up[:, 0]
    return out


def map_prediction(maps: torch.Tensor) -> Prediction:
    return Prediction(maps.flatten(1).max(1).values.double().cpu().numpy(), maps.float().cpu().numpy())


def sgd(params, lr: float, momentum: float, weight_decay: float) -> torch.optim.Optimizer:
    return torch.optim.SGD(params, lr=lr, momentum=momentum, weight_decay=weight_decay)


class Stfpm(GradientDetector):
    name = "stfpm"

    def __init__(self, extractor, *, image_size: int, layers, epochs: int, batch_size: int, replay_size: int,
                 replay_share: str, lr: float, momentum: float, weight_decay: float):
        super().__init__(extractor, image_size=image_size, epochs=epochs, batch_size=batch_size,
                         replay_size=replay_size, replay_share=replay_share)
        self.layers = tuple(layers)
        self.lr, self.momentum, self.weight_decay = lr, momentum, weight_decay
        self.student_: nn.Module | None = None

    def build(self, seed: int) -> None:
        if self.student_ is None:
            import timm

            with seeded(seed):
                student = timm.create_model(self.extractor.backbone_name, pretrained=False, features_only=True,
                                            out_indices=tuple(LAYERS.index(layer) for layer in self.layers))
            self.student_ = student.to(self.device)

    def modules(self) -> dict[str, nn.Module]:
        return {"student": self.student_} if self.student_ is not None else {}

    def optimizers(self) -> list[torch.optim.Optimizer]:
        return [sgd(self.student_.parameters(), self.lr, self.momentum, self.weight_decay)]

    def loss(self, batch) -> torch.Tensor:
        return pyramid_loss(feature_distances(self.features(batch), self.student_(self.images(batch))))

    def score(self, split, idx) -> Prediction:
        teacher = self.extractor(split, idx)
        student = self.student_(split.load_images(idx, workers=self.extractor.workers).to(self.device))
        return map_prediction(product_map(feature_distances(teacher, student), self.image_size))


register(ModelSpec(
    name="stfpm", label="STFPM", factory=Stfpm, source="InCLAD Table 7", quick={"epochs": 8, "batch_size": 4},
    image_size=256,  # the paper's input size (InCLAD Tables 6-7)
    version=2,  # 2: channels-last training (float rounding differs from version 1)
    presets={"inclad": {}, "original": {"replay_share": "water"}},  # the suite's replay shares
    default_preset="inclad",
    imagenet_weights={"inclad": "DEFAULT"},
    params={
        "layers": Layers(("layer1", "layer2", "layer3")),
        **training_params(epochs=100, batch_size=32),
        "lr": Float(0.4, 0, low_open=True),
        "momentum": Float(0.9, 0, 1, high_open=True),
        "weight_decay": Float(1e-4, 0),
    },
    # measured on CPU at the default settings (peak RSS of a one-batch fit at 64 and 160 px; docs/cluster.md):
    # bytes per pixel of a training image (the student's activations and gradients),
    # and the trained weights with their gradients and optimiser state
    memory_bytes=pixel_memory(370, features=True, fixed=45 * 2**20),
))
