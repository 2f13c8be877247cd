"""STFPM (Wang et al., 2021): student–teacher feature pyramid matching.

Teacher: the run's frozen backbone, layers 1–3 (its features come from the run's cache: the teacher runs once
per image, not once per epoch). Student: the same architecture up to layer 3, randomly initialised (seeded), fed
the raw image; the only trained part. Loss: Σ_l mean_hw Σ_c (l2n(T_l) − l2n(S_l))², l2n = unit norm over
channels. Map: the product over layers of ½‖l2n(T_l) − l2n(S_l)‖², taken where `product_at` says: "layer"
(`inclad`) on the first layer's grid, each later layer upsampled (bilinear) to it, image score = the max there and
the map that product upsampled (bilinear) to the input size, as InCLAD's released STFPM (routing-cad-icdm
`src/pyclad/models/stfpm/stfpm.py`, `_batch_score_maps`: the product at `teacher_features[0]`'s size, and
`score_data` scores the map unresized); "input" (`original`, Wang et al.'s code) each layer upsampled to the input
size, image score = the max of that map. (The released code has no ½: a constant factor, which no score order
sees.) SGD lr 0.4, momentum 0.9, weight decay 1e-4, 100 epochs, batch 32 (InCLAD Table 7). ImageNet weights:
torchvision's DEFAULT under `inclad`, as InCLAD's code path (V2 for wide_resnet50_2; the paper used resnet18,
whose DEFAULT is V1), V1 under `original`.

Student initialisation (`student_init`): "torchvision" (both presets) = torchvision's resnet initialisation,
which InCLAD's released student (routing-cad-icdm `src/pyclad/models/stfpm/builder.py:59-64` builds it as a
`TorchvisionFeatureExtractor` with `pretrained=False`, i.e. `src/pyclad/models/vision/backbones.py:57`
`model_fn(weights=None)`) and Wang et al.'s (`main.py`, `resnet18(pretrained=False)`) both get: Kaiming-normal
(fan_out, ReLU) convolutions, every BatchNorm weight 1 and bias 0. "timm" = timm's resnet default, which also
zeroes each residual block's last BatchNorm weight (every block starts as the identity): measured, a different
distribution of losses after training, not another draw (docs/models.md).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from bench.features import LAYERS
from bench.models.base import Prediction
from bench.models.gradient import GradientDetector, training_params
from bench.registry import Choice, Float, Layers, ModelSpec, pixel_memory, register, trained_state
from bench.training.loop import seeded


PRODUCT_AT = ("layer", "input")  # see the module docstring
STUDENT_INITS = ("torchvision", "timm")  # see the module docstring


def resnet_student(backbone: str, student_init: str, **kwargs) -> nn.Module:
    """A randomly initialised timm resnet. timm draws its convolutions as torchvision does (Kaiming-normal, fan_out)
    and differs only in zeroing each block's last BatchNorm weight, which "torchvision" switches off."""
    import timm

    return timm.create_model(backbone, pretrained=False, zero_init_last=student_init == "timm", **kwargs)


def feature_distances(teacher: list[torch.Tensor], student: list[torch.Tensor]) -> list[torch.Tensor]:
    """Per layer [B, h, w]: Σ_c (l2n(T) − l2n(S))², l2n normalising each location's channel vector."""
    return [(F.normalize(t, dim=1) - F.normalize(s, dim=1)).pow(2).sum(1) for t, s in zip(teacher, student)]


def pyramid_loss(distances: list[torch.Tensor]) -> torch.Tensor:
    """STFPM's loss: Σ over layers of the per-image mean over locations, averaged over the batch."""
    return sum(d.flatten(1).mean(1) for d in distances).mean()


def product_map(distances: list[torch.Tensor], size) -> torch.Tensor:
    """[B, h, w]: the product over layers of ½·distance, each upsampled (bilinear) to `size` (the input size S,
    or a (h, w) grid)."""
    out = None
    for d in distances:
        up = F.interpolate(0.5 * d[:, None], size=size, mode="bilinear", align_corners=False)
        out = up[:, 0] if out is None else out * up[:, 0]
    return out


def layer_grid_prediction(distances: list[torch.Tensor], image_size: int) -> Prediction:
    """product_at="layer": the product on the first layer's grid, its max the image score; the map is that product
    upsampled (bilinear) to the input size."""
    grid = product_map(distances, tuple(distances[0].shape[-2:]))
    maps = F.interpolate(grid[:, None], size=(image_size, image_size), mode="bilinear", align_corners=False)[:, 0]
    return Prediction(grid.flatten(1).max(1).values.double().cpu().numpy(), maps.float().cpu().numpy())


def map_prediction(maps: torch.Tensor) -> Prediction:
    return Prediction(maps.flatten(1).max(1).values.double().cpu().numpy(), maps.float().cpu().numpy())


def sgd(params, lr: float, momentum: float, weight_decay: float) -> torch.optim.Optimizer:
    return torch.optim.SGD(params, lr=lr, momentum=momentum, weight_decay=weight_decay)


class Stfpm(GradientDetector):
    name = "stfpm"

    def __init__(self, extractor, *, image_size: int, layers, epochs: int, batch_size: int, replay_size: int,
                 replay_share: str, lr: float, momentum: float, weight_decay: float, product_at: str,
                 student_init: str):
        super().__init__(extractor, image_size=image_size, epochs=epochs, batch_size=batch_size,
                         replay_size=replay_size, replay_share=replay_share)
        self.layers = tuple(layers)
        self.lr, self.momentum, self.weight_decay = lr, momentum, weight_decay
        self.product_at, self.student_init = product_at, student_init
        self.student_: nn.Module | None = None

    def build(self, seed: int) -> None:
        if self.student_ is None:
            with seeded(seed):
                student = resnet_student(self.extractor.backbone_name, self.student_init, features_only=True,
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
        distances = feature_distances(teacher, student)
        if self.product_at == "layer":
            return layer_grid_prediction(distances, self.image_size)
        return map_prediction(product_map(distances, self.image_size))


register(ModelSpec(
    name="stfpm", label="STFPM", factory=Stfpm, source="InCLAD Table 7", quick={"epochs": 8, "batch_size": 4},
    image_size=256,  # the paper's input size (InCLAD Tables 6-7)
    # 2: channels-last training (float rounding differs from version 1); 3: the product map on the first layer's
    # grid by default (InCLAD's code); 4: the student starts as torchvision's resnet (every BatchNorm weight 1), as
    # InCLAD's and Wang et al.'s code
    version=4,
    presets={"inclad": {}, "original": {"product_at": "input", "replay_share": "water"}},
    default_preset="inclad",
    imagenet_weights={"inclad": "DEFAULT"},
    params={
        "layers": Layers(("layer1", "layer2", "layer3")),
        **training_params(epochs=100, batch_size=32),
        "lr": Float(0.4, 0, low_open=True),
        "momentum": Float(0.9, 0, 1, high_open=True),
        "weight_decay": Float(1e-4, 0),
        "product_at": Choice("layer", PRODUCT_AT, doc="where the layers' distances are multiplied and the image "
                                                     "score taken: the first layer's grid (layer) or the input size"),
        "student_init": Choice("torchvision", STUDENT_INITS, doc="the student's start: torchvision's resnet init "
                                                                   "(InCLAD's and Wang et al.'s code) or timm's "
                                                                   "(each block's last BatchNorm weight 0)"),
    },
    # measured on CPU at the default settings (peak RSS of a one-batch fit at 64 and 160 px; docs/cluster.md):
    # bytes per pixel of a training image (the student's activations and gradients),
    # and the trained weights with their gradients and optimiser state
    memory_bytes=pixel_memory(370, features=True, fixed=45 * 2**20),
    # host memory (bench.hpc.memory): the training loop revisits a task's features every epoch; its networks, optimiser and replay indices
    train_features="epochs", host_state_bytes=trained_state,
))
