"""PaSTe (Barusco et al., 2024): partially shared teacher–student, STFPM with a shared stem.

The frozen pretrained teacher (the run's backbone) runs up to the bootstrap layer (0 = the stem: conv1 + BN +
ReLU; 1 = layer 1, 2 = layer 2); the student is a randomly initialised (seeded) copy of only the later stages up
to layer 3, fed the teacher's bootstrap output. Both the teacher's features and its bootstrap output come from
the run's cache, so training runs only the student. Loss and map are STFPM's (bench.models.stfpm) over the layers
the student produces. InCLAD's code leaves the first of those layers un-normalised in the loss
(`normalize_first=false`, the default: preset `inclad`); `true` normalises every layer as STFPM's loss does (the
reading of PaSTe as "STFPM's loss"; the PaSTe paper was not at hand to confirm it, so no `original` preset claims
it). SGD lr 0.4, momentum 0.9, weight decay 1e-4, 100 epochs, batch 32 (InCLAD Table 7). ImageNet weights:
torchvision's DEFAULT, as InCLAD's code (V2 for wide_resnet50_2).

Student initialisation (`student_init`, as STFPM's): "torchvision" = torchvision's resnet initialisation (every
BatchNorm weight 1), what InCLAD's released student gets (InCLAD-benchmark
`src/pyclad/models/paste/standard/backbones.py:81-91`, `_create_torchvision_model` → `model_fn(weights=None)`);
"timm" zeroes each residual block's last BatchNorm weight.

Bootstrap layer: 0 (the stem), from InCLAD Table 7's PaSTe row. The released code reads it from its config
(`student_bootstrap_layer`, InCLAD-benchmark `src/pyclad/models/paste/architecture.py`), whose default sits in a
config file the reference index does not hold: the code's own default is unread (docs/models.md).
"""

from __future__ import annotations

import torch
from torch import nn

from bench.models.base import Prediction
from bench.models.gradient import GradientDetector, training_params
from bench.registry import Bool, Choice, Float, Int, ModelSpec, pixel_memory, register, trained_state
from bench.models.stfpm import (STUDENT_INITS, feature_distances, map_prediction, product_map, pyramid_loss,
                                resnet_student, sgd)
from bench.training.loop import seeded

BOOTSTRAP = ("stem", "layer1", "layer2")  # bootstrap layer index → the teacher feature the student starts from
STUDENT_LAYERS = ("layer1", "layer2", "layer3")


def paste_layers(hparams: dict) -> tuple[str, ...]:
    """The teacher features PaSTe reads: its bootstrap output, then the layers the student reproduces."""
    b = hparams["bootstrap_layer"]
    return (BOOTSTRAP[b], *STUDENT_LAYERS[b:])


class Student(nn.Module):
    """The stages of a resnet after the bootstrap layer; returns each stage's output."""

    def __init__(self, backbone: str, bootstrap: int, student_init: str = "torchvision"):
        super().__init__()
        net = resnet_student(backbone, student_init)
        stages = [net.layer1, net.layer2, net.layer3][bootstrap:]
        if bootstrap == 0:
            stages[0] = nn.Sequential(net.maxpool, net.layer1)  # the stem's output is taken before its max-pool
        self.stages = nn.ModuleList(stages)

    def forward(self, x: torch.Tensor) -> list[torch.Tensor]:
        outs = []
        for stage in self.stages:
            x = stage(x)
            outs.append(x)
        return outs


def distances(teacher: list[torch.Tensor], student: list[torch.Tensor], normalize_first: bool) -> list[torch.Tensor]:
    d = feature_distances(teacher, student)
    if not normalize_first:
        d[0] = (teacher[0] - student[0]).pow(2).sum(1)
    return d


class Paste(GradientDetector):
    name = "paste"

    def __init__(self, extractor, *, image_size: int, bootstrap_layer: int, epochs: int, batch_size: int,
                 replay_size: int, replay_share: str, lr: float, momentum: float, weight_decay: float,
                 normalize_first: bool, student_init: str):
        super().__init__(extractor, image_size=image_size, epochs=epochs, batch_size=batch_size,
                         replay_size=replay_size, replay_share=replay_share)
        self.bootstrap_layer, self.normalize_first = bootstrap_layer, normalize_first
        self.student_init = student_init
        self.layers = paste_layers({"bootstrap_layer": bootstrap_layer})
        self.lr, self.momentum, self.weight_decay = lr, momentum, weight_decay
        self.student_: Student | None = None

    def build(self, seed: int) -> None:
        if self.student_ is None:
            with seeded(seed):
                student = Student(self.extractor.backbone_name, self.bootstrap_layer, self.student_init)
            self.student_ = student.to(self.device)

    def modules(self) -> dict[str, nn.Module]:
        return {"student": self.student_} if self.student_ is not None else {}

    def optimizers(self) -> list[torch.optim.Optimizer]:
        return [sgd(self.student_.parameters(), self.lr, self.momentum, self.weight_decay)]

    def _distances(self, feats: list[torch.Tensor], normalize_first: bool) -> list[torch.Tensor]:
        return distances(feats[1:], self.student_(feats[0]), normalize_first)

    def loss(self, batch) -> torch.Tensor:
        return pyramid_loss(self._distances(self.features(batch), self.normalize_first))

    def score(self, split, idx) -> Prediction:
        return map_prediction(product_map(self._distances(self.extractor(split, idx), True), self.image_size))


register(ModelSpec(
    name="paste", label="PaSTe", factory=Paste, source="InCLAD Table 7",
    image_size=224,  # the paper's input size (InCLAD Tables 6-7)
    quick={"epochs": 5, "batch_size": 4, "lr": 0.1},  # lr: the best of a sweep at weights=none (docs/models.md)
    # 2: channels-last training (float rounding differs from version 1); 3: normalize_first=false by default;
    # 4: the student starts as torchvision's resnet (every BatchNorm weight 1), as InCLAD's code
    version=4,
    presets={"inclad": {}, "original": {"replay_share": "water"}},  # the suite's replay shares
    default_preset="inclad",
    imagenet_weights={"inclad": "DEFAULT"},
    layers_of=paste_layers,
    params={
        "bootstrap_layer": Int(0, 0, 2, doc="0 = the stem; the student reproduces the later stages up to layer 3"),
        **training_params(epochs=100, batch_size=32),
        "lr": Float(0.4, 0, low_open=True),
        "momentum": Float(0.9, 0, 1, high_open=True),
        "weight_decay": Float(1e-4, 0),
        "normalize_first": Bool(False, doc="false: InCLAD's code, the first student layer's loss un-normalised; "
                                           "true: every layer normalised, as STFPM"),
        "student_init": Choice("torchvision", STUDENT_INITS, doc="the student's start: torchvision's resnet init "
                                                                   "(InCLAD's code) or timm's (each block's last "
                                                                   "BatchNorm weight 0)"),
    },
    # measured on CPU at the default settings (peak RSS of a one-batch fit at 64 and 160 px; docs/cluster.md):
    # bytes per pixel of a training image (the student's activations and gradients),
    # and the trained weights with their gradients and optimiser state
    memory_bytes=pixel_memory(345, features=True, fixed=45 * 2**20),
    # host memory (bench.hpc.memory): the training loop revisits a task's features every epoch; its networks, optimiser and replay indices
    train_features="epochs", host_state_bytes=trained_state,
))
