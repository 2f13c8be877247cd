"""The `inclad` preset read line by line against InCLAD's released code (issue 45): what the reading established,
pinned offline. Each test's docstring names the released file and line it stands for; none needs the released
code. Released files: routing-cad-icdm@6fc5a98 `src/pyclad/models/fastflow/`, InCLAD-benchmark@b6f4414
`src/pyclad/models/{efficientad,paste}/`, and pyCLAD@5a09cbc `src/pyclad/vision/models/paste/config.py` (the library
InCLAD's PaSTe was copied from; InCLAD's own `paste/config.py` is not in the reference index).
"""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from bench import registry
from bench.models.efficientad.detector import hard_feature_loss, normalise_map
from bench.models.efficientad.pdn import Autoencoder, pdn_output_size, pdn_small
from bench.models.fastflow import CouplingStep, Flow
from bench.models.paste import Student
from helpers import create, model_extractor


# --- FastFlow --------------------------------------------------------------------------------------------------
def _released_step(step: CouplingStep, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """routing-cad-icdm@6fc5a98 `src/pyclad/models/fastflow/standard/flow.py:70-83` (`FastFlowStep.forward`),
    written out with `step`'s parameters: split the input as it comes, couple (:62-68), the global affine (:76-77),
    then the permutation (:78), log|J| plus H·W·Σ log scale (:80-82)."""
    c = x.shape[1]
    x1, x2 = torch.split(x, [c - c // 2, c // 2], dim=1)
    params = step.subnet(x1) * 0.1
    log_scale = step.clamp * torch.tanh(params[:, : c // 2])
    out = torch.cat((x1, x2 * torch.exp(log_scale) + params[:, c // 2 :]), dim=1)
    scale = 0.1 * F.softplus(step.global_scale, beta=0.5)
    out = (out * scale + step.global_offset)[:, step.perm, :, :]
    return out, log_scale.sum((1, 2, 3)) + x.shape[2] * x.shape[3] * torch.log(scale).sum()


def _randomised_flow(permute: str, channels: int = 5, steps: int = 4) -> Flow:
    torch.manual_seed(0)
    flow = Flow(channels, steps, hidden_ratio=1.0, clamp=2.0, generator=torch.Generator().manual_seed(0),
                global_affine=True, permute=permute).double()
    for p in flow.parameters():  # far from the identity start, so the comparison is not trivial
        p.data.normal_(0, 1.0)
    return flow


def test_fastflow_step_permutes_after_its_coupling_as_released():
    """routing-cad-icdm@6fc5a98 `src/pyclad/models/fastflow/standard/flow.py:71-78`: a step splits its input as it
    comes, couples, applies the global affine and permutes last (as FrEIA's AllInOneBlock), so the first step
    conditions on the first ⌈C/2⌉ channels in the backbone's order. `inclad` (every preset) does the same; a stack
    of such steps equals the released stack step by step."""
    for preset in ("inclad", "original"):
        assert registry.get("fastflow").resolve(preset=preset)["permute"] == "after"
    flow = _randomised_flow("after")
    x = torch.randn(2, 5, 3, 4, dtype=torch.float64)
    expected, expected_log_det = x, torch.zeros(2, dtype=torch.float64)
    for step in flow.steps:
        expected, log_det = _released_step(step, expected)
        expected_log_det = expected_log_det + log_det
    z, ours = flow(x)
    torch.testing.assert_close(z, expected, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(ours, expected_log_det, rtol=1e-12, atol=1e-12)
    before = _randomised_flow("before")
    before.load_state_dict(flow.state_dict())
    assert not torch.allclose(before(x)[0], z)  # the suite's flow before version 4: another function


def test_fastflow_detector_builds_released_steps():
    """The detector passes `permute` to every step of every level: flow.py:78 holds for every `FastFlowStep` that
    `FastFlowSequence` stacks (`create_fast_flow_block`, one per level)."""
    det = create("fastflow", model_extractor(), 64, flow_steps=2)
    det.build(0)
    steps = [s for flow in det.net_.flows for s in flow.steps]
    assert len(steps) == 6 and all(s.permute_after for s in steps)
    det = create("fastflow", model_extractor(), 64, flow_steps=2, permute="before")
    det.build(0)
    assert not any(s.permute_after for flow in det.net_.flows for s in flow.steps)


@pytest.mark.parametrize("permute", ["after", "before"])
def test_fastflow_flow_stays_invertible_with_its_exact_log_det(permute):
    """The permutation's place changes the function, not the flow's exactness: invertible, and log|det J| equal to
    the autograd Jacobian's (float64, tiny input)."""
    flow = _randomised_flow(permute, channels=4)
    x = torch.randn(1, 4, 2, 2, dtype=torch.float64)
    z, log_det = flow(x)
    torch.testing.assert_close(flow.inverse(z), x, rtol=1e-9, atol=1e-9)
    jac = torch.autograd.functional.jacobian(lambda v: flow(v.view(1, 4, 2, 2))[0].flatten(), x.flatten())
    torch.testing.assert_close(log_det[0], torch.linalg.slogdet(jac).logabsdet, rtol=1e-9, atol=1e-9)


# --- EfficientAD ----------------------------------------------------------------------------------------------
def test_efficientad_pdn_is_the_released_unpadded_pdn_s():
    """InCLAD-benchmark `src/pyclad/models/efficientad/standard/pdn.py:26-32` (`SmallPatchDescriptionNetwork`,
    padding=False, the config default): conv 4×4/128, avg-pool 2/2, conv 4×4/256, avg-pool 2/2, conv 3×3/256,
    conv 4×4/C, no padding anywhere; ReLU after the first three (:34-41). 56 × 56 out at 256 px."""
    net = pdn_small(384, padding=False)
    convs = [(m.in_channels, m.out_channels, m.kernel_size[0], m.padding[0]) for m in net if isinstance(m, nn.Conv2d)]
    assert convs == [(3, 128, 4, 0), (128, 256, 4, 0), (256, 256, 3, 0), (256, 384, 4, 0)]
    pools = [(m.kernel_size, m.stride, m.padding) for m in net if isinstance(m, nn.AvgPool2d)]
    assert pools == [(2, 2, 0), (2, 2, 0)]
    assert [type(m) for m in net] == [nn.Conv2d, nn.ReLU, nn.AvgPool2d, nn.Conv2d, nn.ReLU, nn.AvgPool2d,
                                      nn.Conv2d, nn.ReLU, nn.Conv2d]
    assert pdn_output_size(256, False) == 56
    assert registry.get("efficientad").resolve()["pdn_padding"] is False


def test_efficientad_autoencoder_is_the_released_one_at_256_px():
    """InCLAD-benchmark `src/pyclad/models/efficientad/standard/autoencoder.py:15-20` (encoder: five 4×4 stride-2
    convolutions, 32-32-64-64-64 channels, then an 8×8 one) and `:53-84` (decoder: bilinear upsampling to S/64 − 1,
    S/32, S/16 − 1, S/8, S/4 − 1, S/2 − 1, each followed by a 4×4 convolution with padding 2, then to ⌈S/4⌉ − 8 for
    the unpadded PDN and two 3×3 convolutions; dropout 0.2 after the six 4×4 ones, :45-50)."""
    s = 256
    ae = Autoencoder(384, s, pdn_output_size(s, False))
    enc = [(m.out_channels, m.kernel_size[0], m.stride[0], m.padding[0])
           for m in ae.encoder if isinstance(m, nn.Conv2d)]
    assert enc == [(32, 4, 2, 1), (32, 4, 2, 1), (64, 4, 2, 1), (64, 4, 2, 1), (64, 4, 2, 1), (64, 8, 1, 0)]
    assert ae.sizes == [s // 64 - 1, s // 32, s // 16 - 1, s // 8, s // 4 - 1, s // 2 - 1, math.ceil(s / 4) - 8]
    assert all((c.kernel_size[0], c.padding[0]) == (4, 2) for c in ae.up) and ae.dropout.p == 0.2
    head = [(m.kernel_size[0], m.padding[0]) for m in ae.head if isinstance(m, nn.Conv2d)]
    assert head == [(3, 1), (3, 1)]
    with torch.no_grad():
        assert ae.eval()(torch.zeros(1, 3, s, s)).shape == (1, 384, 56, 56)


def test_efficientad_hard_loss_is_the_released_quantile_mean():
    """InCLAD-benchmark `src/pyclad/models/efficientad/architecture.py:119-121` (`compute_losses`): the mean of the
    squared differences at or above their `torch.quantile(·, 0.999)` (linear interpolation); the released random
    subset (`reduce_tensor_elems`, :13-18) applies only above 2²⁴ differences (1.2 M at batch 1, 256 px)."""
    gen = torch.Generator().manual_seed(0)
    teacher, student = torch.randn(2, 8, 9, 7, generator=gen), torch.randn(2, 8, 9, 7, generator=gen)
    d = (teacher - student) ** 2
    for q in (0.999, 0.9, 0.5):
        expected = d[d >= torch.quantile(d.flatten(), q)].mean()
        torch.testing.assert_close(hard_feature_loss(teacher, student, q), expected, rtol=1e-6, atol=0)
    assert registry.get("efficientad").resolve()["hard_quantile"] == 0.999


def test_efficientad_map_normalisation_is_the_released_one():
    """InCLAD-benchmark `src/pyclad/models/efficientad/architecture.py:83-84` (`_normalize_map`):
    0.1 · (m − q_a) / (q_b − q_a), with q_a, q_b the 0.9 and 0.995 quantiles (`config.py`, `map_quantile_low/high`)
    of the unnormalised maps over the training images."""
    from bench.models.efficientad.detector import Q_HIGH, Q_LOW

    assert (Q_LOW, Q_HIGH) == (0.9, 0.995)
    m = torch.rand(2, 6, 6, generator=torch.Generator().manual_seed(1))
    qa, qb = torch.tensor(0.2), torch.tensor(0.7)
    torch.testing.assert_close(normalise_map(m, qa, qb), 0.1 * (m - qa) / torch.clamp(qb - qa, min=1e-6))


# --- PaSTe ----------------------------------------------------------------------------------------------------
def test_paste_optimiser_is_the_released_sgd_over_the_student():
    """InCLAD-benchmark `src/pyclad/models/paste/paste.py`, `PaSTeModule.configure_optimizers` (the file's last
    lines): SGD over the student's parameters only, lr / momentum / weight decay from the config, no scheduler;
    pyCLAD@5a09cbc `src/pyclad/vision/models/paste/config.py` (InCLAD's copy is not indexed): lr 0.4, momentum 0.9,
    weight decay 1e-4, batch 32, 100 epochs, `student_bootstrap_layer` 0."""
    det = create("paste", model_extractor(("stem", "layer1", "layer2", "layer3")), 64)
    det.build(0)
    (opt,) = det.optimizers()
    assert type(opt) is torch.optim.SGD and det.schedulers([opt]) == []
    group = opt.param_groups[0]
    assert (group["lr"], group["momentum"], group["weight_decay"]) == (0.4, 0.9, 1e-4)
    assert group["dampening"] == 0 and group["nesterov"] is False
    assert {id(p) for p in group["params"]} == {id(p) for p in det.student_.parameters()}
    hp = registry.get("paste").resolve()
    assert (hp["batch_size"], hp["epochs"], hp["bootstrap_layer"]) == (32, 100, 0)


def test_paste_student_starts_after_the_stems_max_pool():
    """InCLAD-benchmark `src/pyclad/models/paste/standard/backbones.py:17-19` (stage 0 = conv1, bn1, relu, maxpool)
    and `:133-134`, `:152` (bootstrap 0: the student is stages 1-3, fed stage 0's output): the suite caches the stem
    before its max-pool and gives the student that max-pool (3×3, stride 2, padding 1), which has no weights."""
    student = Student("resnet18", 0)
    pool = student.stages[0][0]
    assert isinstance(pool, nn.MaxPool2d) and (pool.kernel_size, pool.stride, pool.padding) == (3, 2, 1)
    assert len(student.stages) == 3 and not list(pool.parameters())


# --- EfficientAD, side by side (tools/released/efficientad.py) -----------------------------------------------
def _released_shapes(c: int) -> list[tuple[int, ...]]:
    """Parameter shapes, in registration order, of the released teacher (C = c) and student (C = 2c): InCLAD-benchmark
    `src/pyclad/models/efficientad/standard/pdn.py:27-30`, `builder.py:40-41`; and autoencoder:
    `standard/autoencoder.py:15-20` (encoder) and `:36-43` (decoder, deconv1-8), each weight then its bias."""
    def convs(*layers):
        return [shape for out, inp, k in layers for shape in ((out, inp, k, k), (out,))]

    pdn = lambda out: convs((128, 3, 4), (256, 128, 4), (256, 256, 3), (out, 256, 4))  # noqa: E731
    ae = convs((32, 3, 4), (32, 32, 4), (64, 32, 4), (64, 64, 4), (64, 64, 4), (64, 64, 8),
               *[(64, 64, 4)] * 6, (64, 64, 3), (c, 64, 3))
    return [*pdn(c), *pdn(2 * c), *ae]


def test_efficientad_networks_have_the_released_parameter_shapes_in_order():
    """The suite's teacher, student and autoencoder at 256 px, 384 channels (the released config defaults,
    `config.py:8-12`), hold the released networks' parameters shape for shape in registration order (what lets
    tools/released/efficientad.py copy one side's weights into the other): 2,694,144 + 4,267,392 + 1,096,320."""
    c, s = 384, 256
    nets = [pdn_small(c, False), pdn_small(2 * c, False), Autoencoder(c, s, pdn_output_size(s, False))]
    assert [tuple(p.shape) for net in nets for p in net.parameters()] == _released_shapes(c)
    assert [sum(p.numel() for p in net.parameters()) for net in nets] == [2_694_144, 4_267_392, 1_096_320]


class _FixedImages:
    """A split of fixed random [0, 1] images (what ImageSource reads through load_images)."""

    def __init__(self, n: int, size: int):
        self.images = torch.rand(n, 3, size, size, generator=torch.Generator().manual_seed(3))
        self.keys = [f"img{i}" for i in range(n)]

    def load_images(self, idx, workers: int = 0, normalize=None) -> torch.Tensor:
        return self.images[torch.as_tensor(idx, dtype=torch.long)]


def _fitted_teacher_detector(split):
    from bench.features import ImageSource

    det = create("efficientad", ImageSource(torch.device("cpu"), progress=False), 64, out_channels=8)
    det.build(0)
    det._lay_out_modules()
    det.fit_teacher([(split, r) for r in range(len(split.keys))])
    return det


def _released_augment(batch: torch.Tensor) -> torch.Tensor:
    """InCLAD-benchmark `src/pyclad/models/efficientad/architecture.py:86-100` (`_choose_random_aug_image`)."""
    from torchvision.transforms import functional as tvf

    out = []
    for image in batch:
        coefficient = float(torch.empty(1).uniform_(0.8, 1.2).item())
        choice = int(torch.randint(0, 3, (1,)).item())
        adjust = (tvf.adjust_brightness, tvf.adjust_contrast, tvf.adjust_saturation)[choice]
        out.append(adjust(image, coefficient).clamp(0.0, 1.0))
    return torch.stack(out, dim=0)


def test_efficientad_loss_is_the_released_compute_losses_with_its_draws_in_order():
    """InCLAD-benchmark `src/pyclad/models/efficientad/architecture.py:111-153` (`compute_losses`), written out with
    the suite's networks in the released order: student on the clean batch and the hard loss (:117-121), no penalty
    (the config's penalty sources default to None, `config.py:32-33`), the augmentation (:130), the autoencoder on
    it (:131, six dropouts), teacher and student on it (:133-137); loss = hard + mean (teacher − AE)² + mean
    (AE − student's second half)² (:139-144). From one RNG state the suite's `loss` draws the same augmentation and
    dropout masks, so the two agree to float rounding (train mode, dropout on)."""
    split = _FixedImages(4, 64)
    det = _fitted_teacher_detector(split)
    batch = [(split, 1), (split, 2)]
    det.student_.train()
    det.ae_.train()  # dropout on, as in training
    torch.manual_seed(11)
    ours = det.loss(batch)
    torch.manual_seed(11)
    x, c = det.layout_samples(batch), det.out_channels
    with torch.no_grad():
        d = (det.teacher_out(x) - det.student_(det.imagenet(x))[:, :c]) ** 2
    hard = d[d >= torch.quantile(d.flatten(), 0.999)].mean()
    aug = _released_augment(x)
    ae = det.ae_(det.imagenet(aug))
    with torch.no_grad():
        student_aug = det.student_(det.imagenet(aug))[:, c:]
        loss = hard + ((det.teacher_out(aug) - ae) ** 2).mean() + ((ae - student_aug) ** 2).mean()
    torch.testing.assert_close(ours.detach(), loss, rtol=1e-5, atol=0)


def test_efficientad_teacher_normalisation_is_the_released_population_std():
    """InCLAD-benchmark `src/pyclad/models/efficientad/efficientad.py:84-93` (`_compute_teacher_channel_stats`):
    per channel the mean and sqrt(E[t²] − mean²) (the population std, not the unbiased one) of the raw teacher
    outputs over every training image, then std clamped at 1e-6 (`architecture.py:68`)."""
    split = _FixedImages(3, 64)
    det = _fitted_teacher_detector(split)
    with torch.no_grad():
        t = det.teacher_(det.imagenet(split.images)).double()
    mean, std = t.mean((0, 2, 3)), t.var((0, 2, 3), unbiased=False).sqrt()
    torch.testing.assert_close(det.stats_["t_mean"].flatten().double(), mean, rtol=1e-5, atol=1e-7)
    torch.testing.assert_close(det.stats_["t_std"].flatten().double(), std.clamp_min(1e-6), rtol=1e-5, atol=0)


def test_efficientad_adam_is_the_released_configure_optimizers():
    """InCLAD-benchmark `src/pyclad/models/efficientad/efficientad.py:419-423` (`configure_optimizers`): one Adam
    over the student's then the autoencoder's parameters, lr 1e-4 and weight decay 1e-5 (`config.py:19-20`),
    torch's other defaults."""
    from bench.features import ImageSource

    det = create("efficientad", ImageSource(torch.device("cpu"), progress=False), 64, out_channels=8)
    det.build(0)
    (opt,) = det.optimizers()
    assert type(opt) is torch.optim.Adam and len(opt.param_groups) == 1
    group = opt.param_groups[0]
    assert [id(p) for p in group["params"]] == [id(p) for net in (det.student_, det.ae_) for p in net.parameters()]
    assert (group["lr"], group["weight_decay"], group["betas"], group["eps"]) == (1e-4, 1e-5, (0.9, 0.999), 1e-8)
    assert group["amsgrad"] is False
