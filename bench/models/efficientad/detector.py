"""EfficientAD-S (Batzner et al., WACV 2024): a PDN-S teacher, a student PDN with twice the teacher's output
channels (the first half imitates the teacher, the second half the autoencoder) and a convolutional autoencoder.

Training (per step, batch 1 by default): teacher outputs normalised per channel by their mean and std over the
training images; hard-feature loss = mean of the squared student–teacher differences at or above their 0.999
quantile; optional penalty = mean squared student output on an image of the `penalty` folder; autoencoder loss =
mean squared difference between the autoencoder and the teacher on a colour-augmented copy; student–autoencoder
loss = mean squared difference between the autoencoder and the student's second half on that copy. Adam
(lr 1e-4, wd 1e-5) over student + autoencoder, lr × 0.1 late in training (`lr_drop`): "epoch" (`inclad`) from
epoch ⌊0.95 · epochs⌋ on, a per-epoch StepLR as InCLAD's released code (`drop_epoch`); "step" (`original`) once
95 % of the steps are done, as the paper (its 66,500th of 70,000 iterations).

Scoring: M_ST = channel mean of (teacher − student)², M_AE = channel mean of (autoencoder − student)²; each is
mapped linearly so that its 0.9 quantile goes to 0 and its 0.995 quantile to 0.1, with quantiles fitted on a
held-out slice of the task's *training* normals (never test images); map = 0.5·M_ST + 0.5·M_AE (padded back by
4 px for the unpadded PDN) upsampled to the image. Image score (`image_score`): "grid" (`inclad`) the max of
0.5·M_ST + 0.5·M_AE at the PDN's resolution, unpadded and unresized, as InCLAD's released `score_data`
(InCLAD-benchmark `src/pyclad/models/efficientad/efficientad.py`: `anomaly_map(x, apply_padding=False)`, then
`amax`); "map" (`original`, anomalib's) the max of the padded, upsampled map, which can differ: bilinear
upsampling lowers peaks and the zero padding lifts an all-negative map to 0.

Teachers: `teacher=random` (what InCLAD's released code ran: its teacher-weights path defaults to none) is a
frozen PDN seeded from the run seed; `teacher=PATH` loads a file made by `python -m bench distill-teacher`.

Presets: `inclad` (default) = InCLAD's released code: random teacher, no penalty, the released code's unpadded
PDN with the maps padded back, teacher statistics and map quantiles over all training images
(holdout_fraction=0). `original` = Batzner et al.: the distilled teacher and the ImageNet penalty (both files:
the preset sets them to `required`, and a run fails at once until `--set teacher=PATH --set penalty=FOLDER`
names them), the padded PDN, quantiles over a 10 % hold-out of the training normals.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from bench.data.images import IMAGENET_MEAN, IMAGENET_STD, load_image
from bench.errors import ConfigError, DatasetError
from bench.io import file_sha256
from bench.models.base import Prediction
from bench.models.gradient import GradientDetector, training_params
from bench.models.efficientad.pdn import Autoencoder, load_teacher, pdn_output_size, pdn_small
from bench.registry import Bool, Choice, Float, Int, ModelSpec, Param, pixel_memory, register, trained_state
from bench.training.loop import descend, seeded

Q_LOW, Q_HIGH = 0.9, 0.995  # map normalisation quantiles (the paper)
IMAGE_SCORES = ("grid", "map")  # see the module docstring
LR_DROPS = ("epoch", "step")  # see the module docstring


def drop_epoch(epochs: int, fraction: float) -> int:
    """The epoch from which the learning rate is × 0.1 under lr_drop="epoch": InCLAD's released StepLR steps once
    per epoch with step_size max(1, ⌊fraction · epochs⌋) (InCLAD-benchmark
    `src/pyclad/models/efficientad/efficientad.py`, `EfficientADModule.configure_optimizers`), so ⌊0.95 · 50⌋ =
    47 full-rate epochs, then 3 at the low rate."""
    return max(1, int(epochs * fraction))
TEACHER_CACHE_BYTES = 2 << 30  # clean-image teacher outputs of a training are kept when they fit
IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg", ".bmp", ".tif", ".tiff")


def quantile(values: torch.Tensor, q: float) -> torch.Tensor:
    """torch.quantile's linear interpolation by two order statistics: any size (torch.quantile stops at 2^24
    elements, a batch of 16 at 256 px is 25M)."""
    flat = values.flatten()
    pos = q * (flat.numel() - 1)
    lo, frac = int(pos), pos - int(pos)
    v_lo = flat.kthvalue(lo + 1).values
    if frac == 0:
        return v_lo
    return v_lo + frac * (flat.kthvalue(lo + 2).values - v_lo)


def hard_feature_loss(teacher: torch.Tensor, student: torch.Tensor, q: float) -> torch.Tensor:
    """Mean of the squared differences at or above their `q` quantile (the paper's L_hard)."""
    d = (teacher - student) ** 2
    return d[d >= quantile(d.detach(), q)].mean()


def normalise_map(m: torch.Tensor, q_low: torch.Tensor, q_high: torch.Tensor) -> torch.Tensor:
    """q_low → 0, q_high → 0.1 (the paper's linear map normalisation)."""
    return 0.1 * (m - q_low) / (q_high - q_low).clamp_min(1e-12)


def colour_augment(images: torch.Tensor) -> torch.Tensor:
    """The paper's autoencoder augmentation: one of brightness, contrast or saturation, factor in [0.8, 1.2],
    on [0, 1] images, by torchvision's functions (its grey weights 0.2989 / 0.587 / 0.114), as InCLAD's
    released `_choose_random_aug_image` (InCLAD-benchmark `src/pyclad/models/efficientad/architecture.py`) and
    Batzner et al.'s code. Per image from the global RNG, in the released order: the factor, then the kind."""
    from torchvision.transforms import functional as tvf

    adjust = (tvf.adjust_brightness, tvf.adjust_contrast, tvf.adjust_saturation)
    out = []
    for x in images:
        factor = float(torch.empty(1).uniform_(0.8, 1.2))
        kind = int(torch.randint(0, 3, (1,)))
        out.append(adjust[kind](x, factor).clamp(0, 1))
    return torch.stack(out)


def image_files(folder: Path, what: str) -> list[Path]:
    """The image files under `folder` (recursively, sorted); a missing or empty folder is one line."""
    folder = Path(folder)
    if not folder.is_dir():
        raise DatasetError(f"{folder}: EfficientAD {what} image folder not found (expected a folder of natural "
                           f"images, e.g. ImageNet training images)")
    files = sorted(p for p in folder.rglob("*") if p.suffix.lower() in IMAGE_SUFFIXES and p.is_file())
    if not files:
        raise DatasetError(f"{folder}: EfficientAD {what} folder holds no images ({', '.join(IMAGE_SUFFIXES)})")
    return files


def folder_id(files: list[Path], root: Path) -> str:
    """Content id of an image folder: SHA-256 over (relative path, file SHA-256) pairs."""
    h = hashlib.sha256()
    for p in files:
        h.update(str(p.relative_to(root)).encode() + b"\0" + hashlib.sha256(p.read_bytes()).digest())
    return h.hexdigest()


REQUIRED = "required"  # a preset's placeholder for a file the user must name (the `original` preset's assets)
REQUIRED_HINT = {"teacher": "PATH (a teacher made by `python -m bench distill-teacher`)",
                 "penalty": "FOLDER (natural images, e.g. ImageNet training images)"}


def check_required(hparams: dict) -> None:
    """A placeholder asset left unnamed is one line saying what to pass."""
    for key, hint in REQUIRED_HINT.items():
        if hparams[key] == REQUIRED:
            raise ConfigError(f"efficientad {key}={REQUIRED}: this preset needs a file the suite cannot make; "
                              f"set {key}={hint} (--set on the command line, hparams in a grid)")


def asset_ids(hparams: dict) -> dict:
    """What the run key needs of the external assets: the teacher file's and the penalty folder's content ids.
    Missing assets fail here, before any work."""
    check_required(hparams)
    out = {}
    if hparams["teacher"] != "random":
        path = Path(hparams["teacher"])
        load_teacher(path, hparams["out_channels"], hparams["pdn_padding"])  # fails fast, names the command
        out["teacher"] = f"sha256:{file_sha256(path)}"
    if hparams["penalty"]:
        folder = Path(hparams["penalty"])
        out["penalty"] = f"sha256:{folder_id(image_files(folder, 'penalty'), folder)}"
    return out


class EfficientAd(GradientDetector):
    name = "efficientad"
    inputs_features = False  # raw images (ImageSource), ImageNet-normalised here as the paper's PDN expects

    def __init__(self, source, *, image_size: int, teacher: str, penalty: str, out_channels: int,
                 pdn_padding: bool, epochs: int, batch_size: int, lr: float, weight_decay: float,
                 lr_step_fraction: float, hard_quantile: float, holdout_fraction: float, replay_size: int,
                 replay_share: str, image_score: str, lr_drop: str):
        check_required({"teacher": teacher, "penalty": penalty})
        if pdn_output_size(image_size, pdn_padding) < 1:  # the unpadded PDN's 4×4 kernels outgrow a small input
            smallest = next(s for s in range(image_size, 4097) if pdn_output_size(s, pdn_padding) >= 1)
            raise ConfigError(f"efficientad at --image-size {image_size}: its {'' if pdn_padding else 'un'}padded "
                              f"PDN needs at least {smallest} px (or --set pdn_padding=true)")
        super().__init__(source, image_size=image_size, epochs=epochs, batch_size=batch_size,
                         replay_size=replay_size, replay_share=replay_share)
        self.teacher_spec, self.penalty = teacher, penalty
        self.out_channels, self.pdn_padding = out_channels, pdn_padding
        self.lr, self.weight_decay = lr, weight_decay
        self.lr_step_fraction, self.hard_quantile, self.holdout_fraction = lr_step_fraction, hard_quantile, \
            holdout_fraction
        self.image_score, self.lr_drop = image_score, lr_drop
        self.teacher_: nn.Module | None = None
        self.student_: nn.Module | None = None
        self.ae_: nn.Module | None = None
        self.stats_: dict[str, torch.Tensor] = {}  # teacher mean/std per channel, map quantiles
        self.holdout_keys_: list[str] = []  # the training images the quantiles were fitted on
        self._teacher_cache: dict[str, torch.Tensor] = {}  # clean-image teacher outputs, during one training
        self._penalty_files: list[Path] = []
        self._milestone = 0

    # --- networks -----------------------------------------------------------------------------------------
    def build(self, seed: int) -> None:
        """Fresh student and autoencoder (seeded) unless continuing; the teacher is frozen: a seeded random PDN
        (teacher=random) or the distilled file."""
        if self.student_ is not None:
            return
        with seeded(seed):
            if self.teacher_spec == "random":
                teacher = pdn_small(self.out_channels, self.pdn_padding)
            else:
                teacher = load_teacher(Path(self.teacher_spec), self.out_channels, self.pdn_padding)
            student = pdn_small(2 * self.out_channels, self.pdn_padding)
            ae = Autoencoder(self.out_channels, self.image_size, pdn_output_size(self.image_size, self.pdn_padding))
        self.teacher_ = teacher.to(self.device).eval().requires_grad_(False)
        self.student_, self.ae_ = student.to(self.device), ae.to(self.device)

    def modules(self) -> dict[str, nn.Module]:
        return {"student": self.student_, "ae": self.ae_}

    @staticmethod
    def imagenet(x: torch.Tensor) -> torch.Tensor:
        return (x - IMAGENET_MEAN.to(x.device)) / IMAGENET_STD.to(x.device)

    @torch.no_grad()
    def teacher_out(self, images01: torch.Tensor) -> torch.Tensor:
        """Normalised teacher features of [0, 1] images."""
        t = self.teacher_(self.imagenet(images01))
        return (t - self.stats_["t_mean"]) / self.stats_["t_std"]

    # --- training -----------------------------------------------------------------------------------------
    def split_holdout(self, samples, seed: int) -> tuple[list, list]:
        """(training samples, held-out samples for the map quantiles): a seeded slice of the training normals;
        holdout_fraction=0 (InCLAD's code): all of them for both."""
        if self.holdout_fraction == 0:
            return list(samples), list(samples)
        if len(samples) < 2:
            raise ConfigError("EfficientAD needs at least 2 training images (one is held out for the map "
                              "normalisation quantiles)")
        n_hold = min(len(samples) - 1, max(1, round(self.holdout_fraction * len(samples))))
        order = np.random.default_rng(seed).permutation(len(samples))
        return [samples[i] for i in sorted(order[n_hold:])], [samples[i] for i in sorted(order[:n_hold])]

    @torch.no_grad()
    def fit_teacher(self, samples) -> None:
        """Per-channel mean and std of the raw teacher outputs over the training images (float64 sums), and the
        normalised outputs kept for training when they fit TEACHER_CACHE_BYTES: the teacher is frozen and the
        clean images are not augmented, so each is computed once per training, in fixed batches of the sample
        order (a resumed training gets bit-identical targets)."""
        total, total_sq, count, raw = 0.0, 0.0, 0, []
        bs = self.extractor.batch_size
        for s in range(0, len(samples), bs):
            t = self.teacher_(self.imagenet(self.layout_samples(samples[s : s + bs])))
            if (len(raw) + len(t)) * t[0].numel() * t.element_size() <= TEACHER_CACHE_BYTES:
                raw += list(t.cpu())
            t = t.double()
            total, total_sq = total + t.sum((0, 2, 3)), total_sq + (t * t).sum((0, 2, 3))
            count += t.shape[0] * t.shape[2] * t.shape[3]
        mean = total / count
        std = (total_sq / count - mean**2).clamp_min(0).sqrt()
        self.stats_["t_mean"] = mean.float().view(1, -1, 1, 1)
        self.stats_["t_std"] = std.float().clamp_min(1e-6).view(1, -1, 1, 1)
        if len(raw) == len(samples):
            m, sd = self.stats_["t_mean"][0].cpu(), self.stats_["t_std"][0].cpu()
            self._teacher_cache = {split.keys[r]: (t - m) / sd for (split, r), t in zip(samples, raw)}

    def optimizers(self) -> list[torch.optim.Optimizer]:
        params = [*self.student_.parameters(), *self.ae_.parameters()]
        return [torch.optim.Adam(params, lr=self.lr, weight_decay=self.weight_decay)]

    def clean_teacher(self, batch, x: torch.Tensor) -> torch.Tensor:
        """Normalised teacher outputs of the un-augmented training images: cached (see fit_teacher) or computed."""
        if self._teacher_cache:
            return torch.stack([self._teacher_cache[split.keys[r]] for split, r in batch]).to(self.device)
        return self.teacher_out(x)

    def loss(self, batch) -> torch.Tensor:
        """The paper's L_ST + L_AE + L_STAE. Random draws (augmentation, penalty image) use the global RNG,
        which the loop seeds per epoch."""
        x = self.layout_samples(batch)
        c, b = self.out_channels, len(x)
        aug = colour_augment(x)
        s = self.student_(self.imagenet(torch.cat([x, aug])))  # one pass: the clean and augmented copies
        loss = hard_feature_loss(self.clean_teacher(batch, x), s[:b, :c], self.hard_quantile)
        if self._penalty_files:
            pick = int(torch.randint(len(self._penalty_files), (1,)))
            p = load_image(self._penalty_files[pick], self.image_size).to(self.device)[None]
            loss = loss + (self.student_(p)[:, :c] ** 2).mean()
        a = self.ae_(self.imagenet(aug))
        return loss + ((self.teacher_out(aug) - a) ** 2).mean() + ((a - s[b:, c:]) ** 2).mean()

    def schedulers(self, optimizers) -> list:
        """lr_drop="epoch": InCLAD's per-epoch StepLR (the loop steps it after every epoch and checkpoints it)."""
        if self.lr_drop != "epoch":
            return []
        return [torch.optim.lr_scheduler.StepLR(optimizers[0], drop_epoch(self.epochs, self.lr_step_fraction), 0.1)]

    def train_step(self, batch, optimizers) -> float:
        """One step. lr_drop="step": the learning rate drops ×0.1 once 95 % of the task's steps are done (counted
        by Adam's own step counter, so a resumed training drops it at the same step)."""
        if self.lr_drop == "epoch":
            return descend(self.loss(batch), optimizers)
        opt = optimizers[0]
        state = opt.state.get(opt.param_groups[0]["params"][0], {})
        done = int(state["step"]) if "step" in state else 0
        for group in opt.param_groups:
            group["lr"] = self.lr * (0.1 if done >= self._milestone else 1.0)
        return descend(self.loss(batch), optimizers)

    def fit_samples(self, samples: list, seed: int) -> "EfficientAd":
        train_samples, hold = self.split_holdout(samples, seed)
        self.build(seed)
        self.fit_teacher(train_samples)
        self._penalty_files = image_files(Path(self.penalty), "penalty") if self.penalty else []
        self._milestone = int(self.lr_step_fraction * self.epochs * -(-len(train_samples) // self.batch_size))
        try:
            super().fit_samples(train_samples, seed)
        finally:
            self._teacher_cache.clear()
        self.fit_quantiles(hold)
        return self

    # --- scoring ------------------------------------------------------------------------------------------
    @torch.no_grad()
    def raw_maps(self, images01: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(M_ST, M_AE) [B, h, w] at the PDN's resolution."""
        c = self.out_channels
        x = self.imagenet(images01)
        s = self.student_(x)
        return ((self.teacher_out(images01) - s[:, :c]) ** 2).mean(1), ((self.ae_(x) - s[:, c:]) ** 2).mean(1)

    @torch.no_grad()
    def fit_quantiles(self, hold) -> None:
        """The 0.9 / 0.995 quantiles of M_ST and M_AE over the held-out training images (never test data)."""
        for module in self.modules().values():
            module.eval()
        st, ae = [], []
        for s in range(0, len(hold), self.extractor.batch_size):
            m_st, m_ae = self.raw_maps(self.layout_samples(hold[s : s + self.extractor.batch_size]))
            st.append(m_st.flatten().double().cpu())
            ae.append(m_ae.flatten().double().cpu())
        for name, values in (("st", torch.cat(st)), ("ae", torch.cat(ae))):
            q = np.quantile(values.numpy(), [Q_LOW, Q_HIGH])
            self.stats_[f"q_{name}"] = torch.tensor(q, dtype=torch.float32, device=self.device)
        self.holdout_keys_ = [split.keys[r] for split, r in hold]

    def score(self, split, idx) -> Prediction:
        m_st, m_ae = self.raw_maps(self.extractor(split, idx))
        q_st, q_ae = self.stats_["q_st"], self.stats_["q_ae"]
        m = 0.5 * normalise_map(m_st, q_st[0], q_st[1]) + 0.5 * normalise_map(m_ae, q_ae[0], q_ae[1])
        grid_max = m.flatten(1).max(1).values
        if not self.pdn_padding:  # the unpadded PDN loses 4 px at each border: pad back, as the released code
            m = F.pad(m, (4, 4, 4, 4))
        m = F.interpolate(m[:, None], size=(self.image_size, self.image_size), mode="bilinear",
                          align_corners=False)[:, 0]
        scores = grid_max if self.image_score == "grid" else m.flatten(1).max(1).values
        return Prediction(scores.double().cpu().numpy(), m.float().cpu().numpy())

    def state_dict(self) -> dict:
        """Trained networks plus the frozen teacher (a random teacher's seed is the first task's) and the
        normalisation statistics."""
        return {**super().state_dict(), "teacher": {k: v.cpu() for k, v in self.teacher_.state_dict().items()},
                "stats": {k: v.cpu() for k, v in self.stats_.items()}}

    def load_state_dict(self, state: dict) -> None:
        super().load_state_dict(state)
        self.teacher_.load_state_dict(state["teacher"])
        self.stats_ = {k: v.to(self.device) for k, v in state["stats"].items()}


# Bytes per input pixel at out_channels 384, measured on CPU (peak RSS at 64 and 160 px, the parameters' share
# taken off; docs/cluster.md): a training image (teacher, student and autoencoder passes, gradients) and a scored
# one (the three networks forward, the maps at the input size).
TRAIN_BYTES_PER_PIXEL, SCORE_BYTES_PER_PIXEL = 1500, 1800


def memory_bytes(image_size: int, batch_size: int, hparams: dict) -> int:
    """Peak bytes of EfficientAD at `image_size`: 16 per trained parameter (weights, gradients, Adam's two
    moments), 4 per teacher parameter, plus the larger of a training or a scoring batch's activations."""
    c, padding = hparams["out_channels"], hparams["pdn_padding"]
    with torch.device("meta"):  # shapes only: nothing is allocated
        teacher, student = pdn_small(c, padding), pdn_small(2 * c, padding)
        ae = Autoencoder(c, image_size, pdn_output_size(image_size, padding))
    count = lambda *nets: sum(p.numel() for net in nets for p in net.parameters())  # noqa: E731
    activations = pixel_memory(TRAIN_BYTES_PER_PIXEL, SCORE_BYTES_PER_PIXEL, features=False,
                               scale=lambda hp: max(1.0, hp["out_channels"] / 384))
    return 16 * count(student, ae) + 4 * count(teacher) + activations(image_size, batch_size, hparams)


register(ModelSpec(
    name="efficientad", label="EfficientAD", factory=EfficientAd, inputs="images", assets=asset_ids,
    image_size=256,  # the paper's input size (InCLAD Tables 6-7)
    source="InCLAD Table 7",
    # 2: channels-last training (float rounding differs from version 1); 3: the default is InCLAD's code
    # (unpadded PDN, quantiles over all training images; version 2 used the paper's padding and a 10 % hold-out);
    # 4: the image score from the unpadded map at the PDN's resolution by default (InCLAD's score_data)
    # 5: the learning rate dropped per epoch from epoch ⌊0.95 · epochs⌋ by default (InCLAD's StepLR), torchvision's
    # colour augmentation
    version=5,
    presets={"inclad": {},
             "original": {"teacher": REQUIRED, "penalty": REQUIRED, "pdn_padding": True, "holdout_fraction": 0.1,
                          "image_score": "map", "replay_share": "water", "lr_drop": "step"}},
    default_preset="inclad",
    quick={"epochs": 3, "out_channels": 64},
    params={
        **training_params(epochs=50, batch_size=1),
        "teacher": Param("random", "str", doc="random (seeded frozen PDN, InCLAD's code) or a teacher file "
                                                "made by `python -m bench distill-teacher`"),
        "penalty": Param("", "str", doc="folder of images for the student penalty (empty = none)"),
        "out_channels": Int(384, 1, doc="teacher channels; the student has twice as many"),
        "pdn_padding": Bool(False, doc="true: the paper's PDN paddings; false: the released code's unpadded PDN "
                                       "(maps padded back by 4 px)"),
        "lr": Float(1e-4, 0, low_open=True),
        "weight_decay": Float(1e-5, 0),
        "lr_step_fraction": Float(0.95, 0, 1, doc="lr × 0.1 after this fraction of the epochs or steps (lr_drop)"),
        "lr_drop": Choice("epoch", LR_DROPS, doc="epoch: from epoch ⌊fraction · epochs⌋ on (InCLAD's StepLR); "
                                                 "step: once that fraction of the steps is done (the paper)"),
        "hard_quantile": Float(0.999, 0, 1, doc="hard-feature loss: differences at or above this quantile"),
        "holdout_fraction": Float(0.0, 0, 1, high_open=True,
                                  doc="training normals held out to fit the map quantiles; 0 = fit them (and "
                                      "train) on all training images, as InCLAD's code"),
        "image_score": Choice("grid", IMAGE_SCORES, doc="image score: max of the map at the PDN's resolution, "
                                                        "unpadded (grid), or of the padded, upsampled map (map)"),
    },
    memory_bytes=memory_bytes,
    # host memory (bench.hpc.memory): trains on the images themselves (no feature cache); its networks, optimiser
    # and replay indices
    host_state_bytes=trained_state,
))
