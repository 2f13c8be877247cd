"""GANomaly (Akcay et al., ACCV 2018): a DCGAN encoder → decoder → encoder generator and a DCGAN discriminator.

Losses (`losses`):
- `anomalib` (preset `inclad`, the default: InCLAD ran anomalib's GANomaly): adversarial = mean squared
  difference of the discriminator's probabilities on the real and the generated images × 1, contextual =
  L1(x, x̂) × 50, latent = SmoothL1(z, ẑ) × 1; discriminator: binary cross-entropy on real vs generated, never
  re-initialised.
- `akcay` (preset `original`, Akcay et al.'s released code): adversarial = feature matching (mean squared
  difference of the discriminator's last feature map on real and generated images) × 1, contextual × 50,
  latent = mean squared (z − ẑ) × 1; discriminator binary cross-entropy, re-initialised when its loss collapses
  below 1e-5.
Adam lr 2e-4, β = (0.5, 0.999) for both; inputs scaled to [−1, 1].

Initialisation (`init`): "pytorch" (`inclad`) = PyTorch's default for every layer. That is what InCLAD's released
code trains from: its `weights_init` (InCLAD-benchmark `src/pyclad/models/ganomaly/architecture.py:48-49`)
is called on the top-level generator and discriminator, not applied to their layers, and it matches only class
names containing "Conv" or "BatchNorm", which "Generator" and "Discriminator" do not: the call changes nothing.
"dcgan" (`original`, Akcay et al.'s code, which applies it to every layer) = N(0, 0.02) convolutions, N(1, 0.02)
BatchNorm scales, zero BatchNorm shifts.

First convolution (`first_padding`) of both encoders and the discriminator: padding 4 (`inclad`, InCLAD's
`standard/networks.py` `Encoder`: 131 × 131 after it at 256 px) or 1 (`original`, DCGAN's: 128 × 128). The
later strided convolutions bring both to the same final side for sizes with three or more halvings (4 × 4 at
256 px, 7 × 7 at 224 px under `input_pad=none`); the last convolution's kernel is the side actually reached, so
z is always 1 × 1.

Input padding (`input_pad`): "pow2" (`inclad`) zero-pads every [−1, 1] input to a square whose side is the next
power of two of the image size, centred (top = ⌊pad / 2⌋, the rest at the bottom; the same across), builds and
trains both networks at that side (the losses see the padded batch), takes the image score from the padded
image's latents and crops the pixel map back to the image size: InCLAD's `GANomalyArchitecture`
(InCLAD-benchmark `src/pyclad/models/ganomaly/architecture.py:12-13, 28-31, 52-62, 75-88, 100-108`; its
`training_step` in `ganomaly.py` gives the losses the padded batch). 224 px runs as 256 px; a power of two is
left as is. "none" (`original`): the networks are built at the image size itself (224 px ends at 7 × 7).

Image score = raw ‖z − ẑ‖² (no min–max over the test set: that would make one image's score depend on the other
test images); pixel map = channel mean of the squared reconstruction error (this suite's choice: GANomaly defines
no map). BatchNorm runs in eval mode while scoring, as InCLAD's released code (Akcay et al.'s scores in train
mode, so a test image's score depends on its batch).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from bench.errors import ConfigError
from bench.models.base import Prediction
from bench.models.gradient import GradientDetector, training_params
from bench.registry import Choice, Float, Int, ModelSpec, pixel_memory, register, trained_state
from bench.training.loop import descend, seeded

D_COLLAPSE = 1e-5  # discriminator loss below this: re-initialise it (Akcay et al.'s released code)
LOSSES = ("anomalib", "akcay")
INITS = ("pytorch", "dcgan")  # see the module docstring


class InputPad(str, Enum):
    """How an input reaches the networks (module docstring)."""
    POW2 = "pow2"  # zero-padded to the next power of two, as InCLAD's code
    NONE = "none"  # the image size itself


INPUT_PADS = tuple(p.value for p in InputPad)


def next_power_of_two(value: int) -> int:
    """InCLAD-benchmark `architecture.py:12-13`, `2 ** ceil(log2(max(1, value)))`, in integers (no float log)."""
    return 1 << (max(1, value) - 1).bit_length()


@dataclass(frozen=True)
class InputPadding:
    """Zero padding of a square `image_size` input to the networks' `net_size`: InCLAD's `_compute_padding`
    (`architecture.py:52-62`): top = ⌊(net − image) / 2⌋, bottom the rest; left and right the same."""
    image_size: int
    net_size: int

    @classmethod
    def of(cls, image_size: int, input_pad: str) -> "InputPadding":
        pow2 = InputPad(input_pad) is InputPad.POW2
        return cls(image_size, next_power_of_two(image_size) if pow2 else image_size)

    @property
    def before(self) -> int:
        """Rows above (= columns left of) the image."""
        return (self.net_size - self.image_size) // 2

    @property
    def after(self) -> int:
        """Rows below (= columns right of) the image."""
        return self.net_size - self.image_size - self.before

    def pad(self, x: torch.Tensor) -> torch.Tensor:
        """[..., S, S] → [..., N, N], zeros around (0 is grey in the [−1, 1] scale, as the released code pads the
        normalised batch)."""
        if self.net_size == self.image_size:
            return x
        return F.pad(x, [self.before, self.after, self.before, self.after])

    def crop(self, maps: torch.Tensor) -> torch.Tensor:
        """[..., N, N] → [..., S, S]: the image's own pixels (`crop_to_input_size`, `architecture.py:81-88`)."""
        lo, hi = self.before, self.before + self.image_size
        return maps[..., lo:hi, lo:hi]


def dcgan_depth(image_size: int) -> tuple[int, int]:
    """(halvings k, final side f) with image_size = f · 2^k: stride-2 layers halve the side while it stays even
    and at least 4 (DCGAN's 4×4 end for powers of two; 224 px ends at 7×7)."""
    k, side = 0, image_size
    while side % 2 == 0 and side // 2 >= 4:
        k, side = k + 1, side // 2
    if k == 0:
        raise ConfigError(f"GANomaly's DCGAN needs an image size f·2^k with k ≥ 1 and f ≥ 4 (e.g. 64, 224, 256), "
                          f"got {image_size}")
    return k, side


def encoder_side(image_size: int, first_padding: int) -> int:
    """The side the encoder's strided 4×4 convolutions reach: the first with `first_padding`, the k − 1 later
    ones with padding 1."""
    k, _ = dcgan_depth(image_size)
    side = (image_size + 2 * first_padding - 4) // 2 + 1
    for _ in range(k - 1):
        side = (side + 2 - 4) // 2 + 1
    return side


def dcgan_encoder(image_size: int, features: int, latent: int, first_padding: int = 1) -> nn.Sequential:
    """Strided 4×4 convolutions halving the side (channels doubling from `features`), then a convolution over
    the whole remaining side to `latent` × 1 × 1. The discriminator is the same with latent = 1."""
    k, _ = dcgan_depth(image_size)
    layers: list[nn.Module] = [nn.Conv2d(3, features, 4, 2, first_padding, bias=False),
                               nn.LeakyReLU(0.2, inplace=True)]
    ch = features
    for _ in range(k - 1):
        layers += [nn.Conv2d(ch, ch * 2, 4, 2, 1, bias=False), nn.BatchNorm2d(ch * 2), nn.LeakyReLU(0.2, inplace=True)]
        ch *= 2
    layers.append(nn.Conv2d(ch, latent, encoder_side(image_size, first_padding), 1, 0, bias=False))
    return nn.Sequential(*layers)


def dcgan_decoder(image_size: int, features: int, latent: int) -> nn.Sequential:
    """The encoder's mirror: transposed convolutions from latent × 1 × 1 to 3 × S × S, tanh output."""
    k, side = dcgan_depth(image_size)
    ch = features * 2 ** (k - 1)
    layers: list[nn.Module] = [nn.ConvTranspose2d(latent, ch, side, 1, 0, bias=False), nn.BatchNorm2d(ch),
                               nn.ReLU(inplace=True)]
    for _ in range(k - 1):
        layers += [nn.ConvTranspose2d(ch, ch // 2, 4, 2, 1, bias=False), nn.BatchNorm2d(ch // 2), nn.ReLU(True)]
        ch //= 2
    layers += [nn.ConvTranspose2d(ch, 3, 4, 2, 1, bias=False), nn.Tanh()]
    return nn.Sequential(*layers)


def dcgan_init(module: nn.Module) -> None:
    if isinstance(module, (nn.Conv2d, nn.ConvTranspose2d)):
        nn.init.normal_(module.weight, 0.0, 0.02)
    elif isinstance(module, nn.BatchNorm2d):
        nn.init.normal_(module.weight, 1.0, 0.02)
        nn.init.zeros_(module.bias)


class Generator(nn.Module):
    def __init__(self, image_size: int, features: int, latent: int, first_padding: int = 1):
        super().__init__()
        self.encoder1 = dcgan_encoder(image_size, features, latent, first_padding)
        self.decoder = dcgan_decoder(image_size, features, latent)
        self.encoder2 = dcgan_encoder(image_size, features, latent, first_padding)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """(x̂, z, ẑ) with z, ẑ [B, latent]."""
        z = self.encoder1(x)
        fake = self.decoder(z)
        return fake, z.flatten(1), self.encoder2(fake).flatten(1)


class Discriminator(nn.Module):
    def __init__(self, image_size: int, features: int, first_padding: int = 1):
        super().__init__()
        enc = dcgan_encoder(image_size, features, 1, first_padding)
        self.features, self.classifier = enc[:-1], enc[-1]

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(logit [B], last feature map)."""
        f = self.features(x)
        return self.classifier(f).flatten(), f


def generator_loss(disc: Discriminator, x, fake, z, z_hat, w_adv: float, w_con: float, w_enc: float,
                   losses: str = "akcay"):
    """Adversarial + contextual L1 + latent. akcay: feature matching and a squared latent error; anomalib: the
    squared difference of the discriminator's probabilities and a SmoothL1 latent error."""
    with torch.no_grad():
        real_logit, real_features = disc(x)
    fake_logit, fake_features = disc(fake)
    if losses == "anomalib":
        adv = F.mse_loss(torch.sigmoid(fake_logit), torch.sigmoid(real_logit))
        latent = F.smooth_l1_loss(z_hat, z)
    else:
        adv = ((fake_features - real_features) ** 2).mean()
        latent = ((z_hat - z) ** 2).mean()
    return w_adv * adv + w_con * (fake - x).abs().mean() + w_enc * latent


def discriminator_loss(disc: Discriminator, x, fake) -> torch.Tensor:
    real, _ = disc(x)
    gen, _ = disc(fake.detach())
    return (F.binary_cross_entropy_with_logits(real, torch.ones_like(real))
            + F.binary_cross_entropy_with_logits(gen, torch.zeros_like(gen))) / 2


class Ganomaly(GradientDetector):
    name = "ganomaly"
    channels_last = False  # channels-last measured 17.1 vs 17.9 s per 256 px epoch: no clear gain, layout kept
    inputs_features = False  # raw images (ImageSource), scaled to [−1, 1] here

    def __init__(self, source, *, image_size: int, n_features: int, latent: int, epochs: int, batch_size: int,
                 lr: float, beta1: float, beta2: float, w_adv: float, w_con: float, w_enc: float,
                 replay_size: int, replay_share: str, losses: str, init: str, first_padding: int,
                 input_pad: str):
        self.padding = InputPadding.of(image_size, input_pad)
        dcgan_depth(self.padding.net_size)  # a size the DCGAN cannot mirror fails at construction
        super().__init__(source, image_size=image_size, epochs=epochs, batch_size=batch_size,
                         replay_size=replay_size, replay_share=replay_share)
        self.n_features, self.latent = n_features, latent
        self.lr, self.betas = lr, (beta1, beta2)
        self.w_adv, self.w_con, self.w_enc = w_adv, w_con, w_enc
        self.losses, self.init, self.first_padding = losses, init, first_padding
        self.generator_: Generator | None = None
        self.discriminator_: Discriminator | None = None

    @staticmethod
    def scale(images01: torch.Tensor) -> torch.Tensor:
        return images01 * 2 - 1

    def build(self, seed: int) -> None:
        """Seeded networks (PyTorch's or DCGAN's initialisation, `init`), unless continuing."""
        if self.generator_ is not None:
            return
        with seeded(seed):
            gen = Generator(self.padding.net_size, self.n_features, self.latent, self.first_padding)
            if self.init == "dcgan":
                gen.apply(dcgan_init)
            disc = Discriminator(self.padding.net_size, self.n_features, self.first_padding)
            if self.init == "dcgan":
                disc.apply(dcgan_init)
        self.generator_, self.discriminator_ = gen.to(self.device), disc.to(self.device)

    def modules(self) -> dict[str, nn.Module]:
        return {"generator": self.generator_, "discriminator": self.discriminator_}

    def optimizers(self) -> list[torch.optim.Optimizer]:
        return [torch.optim.Adam(self.generator_.parameters(), lr=self.lr, betas=self.betas),
                torch.optim.Adam(self.discriminator_.parameters(), lr=self.lr, betas=self.betas)]

    def train_step(self, batch, optimizers) -> float:
        """One GANomaly update: the generator first, then the discriminator (under `akcay` re-initialised from
        the global RNG, which the loop seeds per epoch, when it collapses). Both losses see the padded batch
        (`input_pad`), as InCLAD's `training_step`. Returns the generator loss."""
        opt_g, opt_d = optimizers
        x = self.padding.pad(self.scale(self.layout_samples(batch)))
        fake, z, z_hat = self.generator_(x)
        loss_g = generator_loss(self.discriminator_, x, fake, z, z_hat, self.w_adv, self.w_con, self.w_enc,
                                self.losses)
        value = descend(loss_g, [opt_g])
        if not np.isfinite(value):
            return value
        loss_d = discriminator_loss(self.discriminator_, x, fake)
        descend(loss_d, [opt_d])
        if self.losses == "akcay" and loss_d.item() < D_COLLAPSE:
            self.discriminator_.apply(dcgan_init)
        return value

    def score(self, split, idx) -> Prediction:
        """Score from the (padded) image's latents; the map computed on the padded image, cropped to the image."""
        x = self.padding.pad(self.scale(self.extractor(split, idx)))
        fake, z, z_hat = self.generator_(x)
        scores = ((z - z_hat) ** 2).sum(1)
        maps = self.padding.crop(((fake - x) ** 2).mean(1))
        return Prediction(scores.double().cpu().numpy(), maps.float().cpu().numpy())


# Bytes per input pixel at n_features 64, measured on CPU (peak RSS at 64 and 160 px, the parameters' share taken
# off; docs/cluster.md): a training image (the activations of G's three networks and D on real and generated
# images, kept for the backward pass) and a scored one (forward passes, the maps).
TRAIN_BYTES_PER_PIXEL, SCORE_BYTES_PER_PIXEL = 2500, 1000


def memory_bytes(image_size: int, batch_size: int, hparams: dict) -> int:
    """Peak bytes of GANomaly at `image_size`: 16 per parameter (weights, gradients, Adam's two moments), whose
    count grows faster than the image (the DCGAN doubles its channels at every halving of the side: 2.9 G
    parameters, 43 GiB, at 1024 px), plus the activations of the larger of a training or a scoring batch."""
    f, latent = hparams["n_features"], hparams["latent"]
    net_size = InputPadding.of(image_size, hparams["input_pad"]).net_size  # networks and activations run there
    with torch.device("meta"):  # shapes only: nothing is allocated
        nets = (Generator(net_size, f, latent, hparams["first_padding"]),
                Discriminator(net_size, f, hparams["first_padding"]))
    params = sum(p.numel() for net in nets for p in net.parameters())
    activations = pixel_memory(TRAIN_BYTES_PER_PIXEL, SCORE_BYTES_PER_PIXEL, features=False,
                               scale=lambda hp: hp["n_features"] / 64)
    return 16 * params + activations(net_size, batch_size, hparams)


register(ModelSpec(
    name="ganomaly", label="GANomaly", factory=Ganomaly, inputs="images", source="InCLAD Table 7",
    image_size=256,  # the paper's input size (InCLAD Tables 6-7)
    quick={"epochs": 40, "n_features": 16, "batch_size": 4},
    # 2: anomalib's losses by default (InCLAD's); version 1 ran Akcay et al.'s. 3: PyTorch's default initialisation
    # and a first-layer padding of 4 by default (InCLAD's code). 4: inputs zero-padded to the next power of two by
    # default (InCLAD's code; results change at sizes that are not one, e.g. 224 px)
    version=4,
    presets={"inclad": {},
             "original": {"losses": "akcay", "replay_share": "water", "init": "dcgan", "first_padding": 1,
                          "input_pad": "none"}},
    default_preset="inclad",
    params={
        **training_params(epochs=15, batch_size=16),
        "n_features": Int(64, 1, doc="feature maps of the first encoder layer (ngf = ndf)"),
        "latent": Int(100, 1, doc="latent vector size nz"),
        "lr": Float(2e-4, 0, low_open=True),
        "beta1": Float(0.5, 0, 1, high_open=True, doc="Adam β1 (< 1)"),
        "beta2": Float(0.999, 0, 1, high_open=True, doc="Adam β2 (< 1)"),
        "losses": Choice("anomalib", LOSSES, doc="anomalib: InCLAD's (anomalib's) losses; akcay: Akcay et al.'s"),
        "init": Choice("pytorch", INITS, doc="pytorch: PyTorch's default (what InCLAD's code trains from); dcgan: "
                                             "N(0, 0.02) convolutions, N(1, 0.02) BatchNorm scales (Akcay et al.)"),
        "first_padding": Int(4, 0, 8, doc="padding of the first convolution of both encoders and the "
                                          "discriminator: 4 InCLAD's code, 1 DCGAN's (Akcay et al.)"),
        "input_pad": Choice(InputPad.POW2.value, INPUT_PADS, doc="pow2: inputs zero-padded (centred) to the next "
                            "power of two, maps cropped back (InCLAD's code); none: the networks at the image size"),
        "w_adv": Float(1.0, 0, doc="adversarial loss weight"),
        "w_con": Float(50.0, 0, doc="contextual (L1 reconstruction) loss weight"),
        "w_enc": Float(1.0, 0, doc="latent (encoder) loss weight"),
    },
    memory_bytes=memory_bytes,
    # host memory (bench.hpc.memory): trains on the images themselves (no feature cache); its networks, optimiser
    # and replay indices
    host_state_bytes=trained_state,
))
