"""FastFlow (Yu et al., 2021): 2D normalizing flows on frozen backbone features.

Backbone layers 1–3 (frozen; their features come from the run's cache, so training runs only the flows), each
level through a trainable LayerNorm over [C, h, w] and its own flow of `flow_steps` steps. A step is an affine
coupling and a fixed (seeded) channel permutation (`permute`, below): the first half of the channels x₁ passes
unchanged, the second becomes x₂·exp(s) + t with (s̃, t) = subnet(x₁) and s = clamp·tanh(0.1·s̃) (FrEIA's AllInOneBlock
soft clamp, which anomalib's FastFlow uses), so log|det J| = Σ s. Subnets alternate 3×3 and 1×1 convolutions
(conv → ReLU → conv, hidden channels = hidden_ratio × input channels). Written here, no FrEIA dependency. After
the coupling each step applies a learned per-channel global affine y·a + b with a = 0.1·softplus_β=0.5(ã),
initialised to a = 1, b = 0, and log|det J| += h·w·Σ_c log a (`global_affine`, on under `inclad`: the released
FastFlowStep, routing-cad-icdm@6fc5a98 `src/pyclad/models/fastflow/standard/flow.py:10-11, 42, 49-51, 59-60,
76-82`, as FrEIA's AllInOneBlock; off: the suite's flow before version 3). Where a step applies its permutation
(`permute`): "after" (all presets) couples, scales, then permutes, as the released step (flow.py:71-78) and FrEIA's
AllInOneBlock, so the first step couples the LayerNorm's channels in the backbone's own order (the first ⌈C/2⌉
condition the rest); "before" permutes first (the suite's flow before version 4): over a stack of steps that
moves one random permutation from the end, which neither the ½‖z‖² loss nor the channel-mean map sees, to the
front, where it changes which channels the first coupling conditions on.
Loss: mean over the batch of Σ_levels (½‖z‖² − log|det J|). Map: mean over levels of −exp(−½ mean_c z²),
upsampled (bilinear) to the input size; image score = map max. Adam lr 1e-3, weight decay 0, 200 epochs, batch 8
(InCLAD Table 7).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from bench.models.base import Prediction
from bench.models.gradient import GradientDetector, training_params
from bench.registry import Bool, Choice, Float, Int, Layers, ModelSpec, pixel_memory, register, trained_state
from bench.training.loop import seeded

SUBNET_SCALE = 0.1  # FrEIA's AllInOneBlock scales the subnet output before the soft clamp
GLOBAL_SCALE_FACTOR, GLOBAL_SCALE_BETA = 0.1, 0.5  # a = 0.1·softplus_β(ã), β = 0.5 (the released FastFlowStep)
# ã such that a starts at 1: softplus_β(ã) = 10 ⇔ ã = 2·log(e⁵ − 1) (the released _global_affine_init_value(1.0))
GLOBAL_SCALE_INIT = math.log(math.expm1(GLOBAL_SCALE_BETA / GLOBAL_SCALE_FACTOR)) / GLOBAL_SCALE_BETA
PERMUTE = ("after", "before")  # where a step applies its channel permutation (see the module docstring)


def subnet(in_channels: int, out_channels: int, kernel: int, hidden_ratio: float) -> nn.Module:
    hidden = max(1, int(in_channels * hidden_ratio))
    return nn.Sequential(nn.Conv2d(in_channels, hidden, kernel, padding=kernel // 2), nn.ReLU(),
                         nn.Conv2d(hidden, out_channels, kernel, padding=kernel // 2))


class CouplingStep(nn.Module):
    """An affine coupling with a soft-clamped log-scale, then (`global_affine`) the learned per-channel global
    affine, with a fixed channel permutation before ("before") or after ("after", the released step) them. The
    detector passes its `permute` hyperparameter; "before" is this class's default only so that a step built
    without it keeps the layout it always had."""

    def __init__(self, channels: int, kernel: int, hidden_ratio: float, clamp: float, generator: torch.Generator,
                 global_affine: bool, permute: str = "before"):
        super().__init__()
        if permute not in PERMUTE:
            raise ValueError(f"fastflow permute={permute!r}: expected one of {', '.join(PERMUTE)}")
        self.permute_after = permute == "after"
        self.keep = channels - channels // 2  # x₁: the channels that condition the transform of x₂
        self.clamp = clamp
        perm = torch.randperm(channels, generator=generator)
        self.register_buffer("perm", perm)
        self.register_buffer("inverse_perm", torch.argsort(perm))
        self.subnet = subnet(self.keep, 2 * (channels - self.keep), kernel, hidden_ratio)
        self.global_scale = self.global_offset = None
        if global_affine:
            self.global_scale = nn.Parameter(torch.full((1, channels, 1, 1), GLOBAL_SCALE_INIT))
            self.global_offset = nn.Parameter(torch.zeros(1, channels, 1, 1))

    def _global(self) -> torch.Tensor:
        """The global affine's per-channel scale a [1, C, 1, 1]."""
        return GLOBAL_SCALE_FACTOR * F.softplus(self.global_scale, beta=GLOBAL_SCALE_BETA)

    def _scale_shift(self, x1: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        a = self.subnet(x1) * SUBNET_SCALE
        half = a.shape[1] // 2
        return self.clamp * torch.tanh(a[:, :half]), a[:, half:]

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(z, log|det J| per sample [B])."""
        if not self.permute_after:
            x = x.index_select(1, self.perm)  # not x[:, perm]: its backward is a slow accumulating scatter
        x1, x2 = x[:, : self.keep], x[:, self.keep :]
        s, t = self._scale_shift(x1)
        y, log_det = torch.cat([x1, x2 * torch.exp(s) + t], 1), s.flatten(1).sum(1)
        if self.global_scale is not None:
            a = self._global()
            y, log_det = y * a + self.global_offset, log_det + y.shape[2] * y.shape[3] * torch.log(a).sum()
        return (y.index_select(1, self.perm) if self.permute_after else y), log_det

    def inverse(self, z: torch.Tensor) -> torch.Tensor:
        if self.permute_after:
            z = z.index_select(1, self.inverse_perm)
        if self.global_scale is not None:
            z = (z - self.global_offset) / self._global()
        z1, z2 = z[:, : self.keep], z[:, self.keep :]
        s, t = self._scale_shift(z1)
        x = torch.cat([z1, (z2 - t) * torch.exp(-s)], 1)
        return x if self.permute_after else x.index_select(1, self.inverse_perm)


class Flow(nn.Module):
    """One level's flow: `steps` coupling steps, subnets alternating 3×3 (even steps) and 1×1 (odd steps)."""

    def __init__(self, channels: int, steps: int, hidden_ratio: float, clamp: float, generator: torch.Generator,
                 global_affine: bool, permute: str = "before"):
        super().__init__()
        self.steps = nn.ModuleList(CouplingStep(channels, 3 if i % 2 == 0 else 1, hidden_ratio, clamp, generator,
                                                global_affine, permute) for i in range(steps))

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        log_det = torch.zeros(x.shape[0], device=x.device, dtype=x.dtype)
        for step in self.steps:
            x, ld = step(x)
            log_det = log_det + ld
        return x, log_det

    def inverse(self, z: torch.Tensor) -> torch.Tensor:
        for step in reversed(self.steps):
            z = step.inverse(z)
        return z


class FastFlowNet(nn.Module):
    """LayerNorm + flow per level."""

    def __init__(self, shapes, steps: int, hidden_ratio: float, clamp: float, generator: torch.Generator,
                 global_affine: bool, permute: str = "before"):
        super().__init__()
        self.norms = nn.ModuleList(nn.LayerNorm(list(shape), elementwise_affine=True) for shape in shapes)
        self.flows = nn.ModuleList(Flow(shape[0], steps, hidden_ratio, clamp, generator, global_affine, permute)
                                   for shape in shapes)

    def forward(self, feats: list[torch.Tensor]) -> list[tuple[torch.Tensor, torch.Tensor]]:
        return [flow(norm(f)) for f, norm, flow in zip(feats, self.norms, self.flows)]


def flow_loss(outputs) -> torch.Tensor:
    return sum((0.5 * z.pow(2).flatten(1).sum(1) - log_det).mean() for z, log_det in outputs)


def flow_map(outputs, image_size: int) -> torch.Tensor:
    """[B, S, S]: mean over levels of −exp(−½ mean_c z²), upsampled (bilinear) to the input size."""
    maps = [F.interpolate(-torch.exp(-0.5 * z.pow(2).mean(1, keepdim=True)), size=(image_size, image_size),
                          mode="bilinear", align_corners=False)[:, 0] for z, _ in outputs]
    return torch.stack(maps).mean(0)


class FastFlow(GradientDetector):
    name = "fastflow"

    def __init__(self, extractor, *, image_size: int, layers, epochs: int, batch_size: int, replay_size: int,
                 replay_share: str, lr: float, weight_decay: float, flow_steps: int, hidden_ratio: float,
                 clamp: float, global_affine: bool, permute: str):
        super().__init__(extractor, image_size=image_size, epochs=epochs, batch_size=batch_size,
                         replay_size=replay_size, replay_share=replay_share)
        self.layers = tuple(layers)
        self.lr, self.weight_decay = lr, weight_decay
        self.flow_steps, self.hidden_ratio, self.clamp = flow_steps, hidden_ratio, clamp
        self.global_affine, self.permute = global_affine, permute
        self.net_: FastFlowNet | None = None

    def build(self, seed: int) -> None:
        if self.net_ is None:
            with seeded(seed):
                generator = torch.Generator().manual_seed(seed)
                net = FastFlowNet(self.feature_shapes(), self.flow_steps, self.hidden_ratio, self.clamp, generator,
                                  self.global_affine, self.permute)
            self.net_ = net.to(self.device)

    def modules(self) -> dict[str, nn.Module]:
        return {"flows": self.net_} if self.net_ is not None else {}

    def optimizers(self) -> list[torch.optim.Optimizer]:
        return [torch.optim.Adam(self.net_.parameters(), lr=self.lr, weight_decay=self.weight_decay)]

    def loss(self, batch) -> torch.Tensor:
        return flow_loss(self.net_(self.features(batch)))

    def score(self, split, idx) -> Prediction:
        maps = flow_map(self.net_(self.extractor(split, idx)), self.image_size)
        return Prediction(maps.flatten(1).max(1).values.double().cpu().numpy(), maps.float().cpu().numpy())


register(ModelSpec(
    name="fastflow", label="FastFlow", factory=FastFlow, source="InCLAD Table 7", quick={"epochs": 5}, demo=True,
    image_size=256,  # the paper's input size (InCLAD Tables 6-7)
    # 2: channels-last training (float rounding differs from version 1); 3: the released global affine step and
    # DEFAULT weights under `inclad`; 4: each step permutes after its coupling and global affine, as the released
    # step (the first coupling splits the channels in the backbone's order)
    version=4,
    presets={"inclad": {}, "original": {"replay_share": "water"}},  # the suite's replay shares
    default_preset="inclad",
    # the released code loads torchvision's DEFAULT weights (routing-cad-icdm src/pyclad/models/vision/
    # backbones.py:72-75: V2 for wide_resnet50_2)
    imagenet_weights={"inclad": "DEFAULT"},
    params={
        "layers": Layers(("layer1", "layer2", "layer3")),
        **training_params(epochs=200, batch_size=8),
        "lr": Float(1e-3, 0, low_open=True),
        "weight_decay": Float(0.0, 0),
        "flow_steps": Int(8, 1),
        "hidden_ratio": Float(1.0, 0, 16, low_open=True, doc="coupling subnet width / input channels"),
        "clamp": Float(2.0, 0, low_open=True, doc="soft clamp of the coupling log-scale"),
        "global_affine": Bool(True, doc="a learned per-channel affine after each coupling (the released step)"),
        "permute": Choice("after", PERMUTE, doc="a step's channel permutation after its coupling and global affine "
                                                "(the released step, FrEIA's) or before them (the suite's before "
                                                "version 4)"),
    },
    # measured on CPU at the default settings (peak RSS of a one-batch fit at 64 and 160 px; docs/cluster.md):
    # bytes per pixel of a training image (the flow steps' activations and gradients),
    # and the trained weights with their gradients and optimiser state
    memory_bytes=pixel_memory(750, features=True, fixed=50 * 2**20),
    # host memory (bench.hpc.memory): the training loop revisits a task's features every epoch; its networks, optimiser and replay indices
    train_features="epochs", host_state_bytes=trained_state,
))
