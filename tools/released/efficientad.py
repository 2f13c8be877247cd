"""EfficientAD side by side: the suite's `inclad` EfficientAD and InCLAD's released one (InCLAD-benchmark
`src/pyclad/models/efficientad/{architecture,efficientad,builder,config}.py`, `standard/{pdn,autoencoder}.py`;
`simulator.py` only because `efficientad.py` imports it).

1. Augmentation: the released `_choose_random_aug_image` and the suite's `colour_augment` on the same images from
   the same global RNG state.
2. Learning rate per epoch: the released StepLR (step_size max(1, int(epochs · 0.95)), gamma 0.1, stepped once per
   epoch: its `configure_optimizers` with the step size its `EfficientAD.__init__` computes) beside the suite's
   `schedulers()`, for several epoch counts.
3. Same weights, at 256 px (the only size at which the two autoencoders have the same shapes: the released encoder's
   last kernel is 8 at every size, the suite's S/32), the config defaults (384 teacher channels, batch 1): the
   released teacher, student and autoencoder (its `builder.build`) get the suite's seeded networks, copied in
   registration order (every shape checked), so no comparison over seeds is needed. Printed: parameter counts per
   network; the three networks' outputs on the same images; the teacher normalisation (the released
   `_compute_teacher_channel_stats` over its normalisation loader beside the suite's `fit_teacher`); the loss of the
   first step, the student and autoencoder after one step and the loss of step 1 + `--steps`; then the map quantiles
   (the released `_compute_map_quantiles` beside `fit_quantiles`, all training images), and the test images'
   scores (released `score_data`), maps (`score_maps`) and image ROC-AUC.
   The released step is its own `EfficientADModule.training_step` (its `self.log` calls are no-ops outside a
   Trainer) and Adam from its `configure_optimizers`, stepped by hand as Lightning's automatic optimisation does.
   Both sides draw each step's augmentation and dropout from `torch.manual_seed(BASE_SEED + step)` in the same
   order (augmentation, then the autoencoder's six dropouts); the released network is laid out channels-last like
   the suite's, because dropout draws its mask in memory order. The penalty is off on both sides: the released
   `penalty_source_root` / `penalty_source_paths` default to None (no penalty image, `has_penalty` false) and the
   suite's `inclad` has penalty="" — neither could read ImageNet offline anyway.
4. CL = Replay over the 3-task stream (chip → disc → grain) at 256 px, same weights: the suite's Replay protocol
   beside upstream pyCLAD v0.3.0's ReplayEnhancedStrategy + AdaptiveBalancedReplayBuffer (staged under
   `<folder>/pyCLAD`: tools/released/replay.py), the released buffer's draw imposed on the suite's. Each fit, on
   buffer ∪ task: the teacher normalisation over its images (released `_compute_teacher_channel_stats`, suite
   `fit_teacher`), `--cl-steps` lock-step steps of 1 image (the batch of both the released config and `inclad`),
   step k of the run drawing from `torch.manual_seed(BASE_SEED + k)` on both sides, a fresh Adam per fit and no
   learning-rate drop (a few steps of the first epoch), then the map quantiles over its images. Kept small (256 px
   only): printed both R matrices, the image-score gap, each side's own buffer composition.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from types import SimpleNamespace

import torch
from torch import nn

from harness import Report, arguments, compare_predictions, copy_by_order, descend, lockstep, max_gap, state_gap, \
    suite_detector, tiny_task, use_released

SIZE = 256  # the released autoencoder's shapes equal the suite's only here (see the docstring)
BASE_SEED = 1000  # step k's augmentation and dropout draws come from torch.manual_seed(BASE_SEED + k), both sides
PROBE_IMAGES = 4  # training images whose network outputs are compared before training


def augmentation(report: Report) -> None:
    from bench.models.efficientad.detector import colour_augment
    from pyclad.models.efficientad.architecture import EfficientADArchitecture

    images = torch.rand(64, 3, 16, 16, generator=torch.Generator().manual_seed(0))
    torch.manual_seed(7)
    theirs = EfficientADArchitecture._choose_random_aug_image(
        SimpleNamespace(ae_augmentation_min=0.8, ae_augmentation_max=1.2), images)
    torch.manual_seed(7)
    ours = colour_augment(images)
    report.row("colour augmentation, 64 images, same RNG state", "", "", max_gap(ours, theirs))


def rates(report: Report) -> None:
    for epochs in (50, 20, 3, 1):
        det = suite_detector("efficientad", 48, seed=0, out_channels=8, epochs=epochs)
        opt = det.optimizers()[0]
        (sched,) = det.schedulers([opt])
        probe = torch.optim.Adam([torch.nn.Parameter(torch.zeros(1))], lr=1e-4)
        step_size = max(1, int(epochs * 0.95)) if epochs > 0 else 1  # EfficientAD.__init__
        released = torch.optim.lr_scheduler.StepLR(probe, step_size=max(1, step_size), gamma=0.1)
        ours, theirs = [], []
        for _ in range(epochs):
            ours.append(opt.param_groups[0]["lr"])
            theirs.append(probe.param_groups[0]["lr"])
            sched.step()
            released.step()
        low = lambda values: sum(v < 1e-4 for v in values)  # noqa: E731
        report.row(f"{epochs} epochs: low-rate epochs", low(ours), low(theirs), max_gap(ours, theirs))


class Preloaded:
    """Stands in for the released ImagePreprocessor (`pyclad.models.vision.preprocessing`, not in the index): the
    images come already resized, as [0, 1] tensors, the way the suite loads them."""

    def transform(self, data: torch.Tensor) -> torch.Tensor:
        return data

    def spatial_size(self, data: torch.Tensor) -> tuple[int, int]:
        return tuple(data.shape[-2:])


@dataclass
class Released:
    """The released side: its network, its EfficientAD (scoring and normalisation loaders only: fit needs
    Lightning's Trainer), and the Adam its configure_optimizers builds."""

    arch: nn.Module
    model: object
    optimizer: torch.optim.Optimizer


def released_side(det) -> Released:
    """The released network built by its builder from its config defaults, holding the suite's weights."""
    from pyclad.models.efficientad.builder import build
    from pyclad.models.efficientad.config import EfficientADConfig
    from pyclad.models.efficientad.efficientad import EfficientAD, EfficientADModule

    config = EfficientADConfig(input_size=(SIZE, SIZE), teacher_out_channels=det.out_channels,
                               show_training_progress=False)
    arch = build(config)
    for ours, theirs in ((det.teacher_, arch.teacher), (det.student_, arch.student), (det.ae_, arch.autoencoder)):
        copy_by_order(ours.state_dict(), [theirs])
    arch.to(memory_format=torch.channels_last)
    module = EfficientADModule(arch, config.learning_rate, config.weight_decay, config.use_lr_scheduler,
                               max(1, int(config.epochs * config.lr_decay_fraction)), config.lr_decay_gamma)
    model = EfficientAD.__new__(EfficientAD)  # __init__ needs the unread preprocessor and device helpers
    model.config, model._device, model.module, model._preprocessor = config, torch.device("cpu"), module, Preloaded()
    return Released(arch, model, module.configure_optimizers()["optimizer"])


def images(split, rows) -> torch.Tensor:
    """[0, 1] images of `rows`, channels-last as the suite lays out its inputs."""
    return split.load_images(list(rows), normalize=False).contiguous(memory_format=torch.channels_last)


def networks(report: Report, det, side: Released, train) -> None:
    pairs = (("teacher", det.teacher_, side.arch.teacher), ("student", det.student_, side.arch.student),
             ("autoencoder", det.ae_, side.arch.autoencoder))
    for name, ours, theirs in pairs:
        count = lambda net: sum(p.numel() for p in net.parameters())  # noqa: E731
        report.row(f"{name}: parameters", count(ours), count(theirs))
    x = images(train, range(PROBE_IMAGES))
    det.ae_.eval()  # no dropout: the outputs are compared as they are scored
    side.arch.eval()
    with torch.no_grad():
        outs = ((det.teacher_(det.imagenet(x)), side.arch.teacher(x)), (det.student_(det.imagenet(x)),
                side.arch.student(x)), (det.ae_(det.imagenet(x)), side.arch.autoencoder(x, image_size=x.shape[-2:])))
    for (name, _, _), (ours, theirs) in zip(pairs, outs):
        report.row(f"{name} outputs, {PROBE_IMAGES} images (max |·|)", float(ours.abs().max()),
                   float(theirs.abs().max()), max_gap(ours, theirs))


def teacher_normalisation(report: Report, det, side: Released, train) -> None:
    from pyclad.models.efficientad.efficientad import _compute_teacher_channel_stats

    det.fit_teacher([(train, r) for r in range(len(train))])
    loader = side.model._normalization_loader(images(train, range(len(train))))
    mean, std = _compute_teacher_channel_stats(side.arch, loader, torch.device("cpu"))
    side.arch.set_teacher_normalization(mean, std)
    report.row("teacher channel mean (max |·|)", float(det.stats_["t_mean"].abs().max()),
               float(side.arch.teacher_mean.abs().max()), max_gap(det.stats_["t_mean"], side.arch.teacher_mean))
    report.row("teacher channel std (max)", float(det.stats_["t_std"].max()), float(side.arch.teacher_std.max()),
               max_gap(det.stats_["t_std"], side.arch.teacher_std))


def trained_gap(report: Report, det, side: Released) -> None:
    released = {**{f"s.{k}": v for k, v in side.arch.student.state_dict().items()},
                **{f"a.{k}": v for k, v in side.arch.autoencoder.state_dict().items()}}
    ours = dict(zip(released, [*det.student_.state_dict().values(), *det.ae_.state_dict().values()]))
    gap, key = state_gap(ours, released)
    report.row(f"student + AE after one step (worst: {key})", "", "", gap)
    moved = sum(int(((v.double() - released[k].double()).abs() > 1e-7).sum()) for k, v in ours.items())
    report.row("  weights differing by > 1e-7 (of all)", moved, sum(v.numel() for v in released.values()))


def train_both(report: Report, det, side: Released, train, steps: int) -> None:
    taken = [0]

    def released_step(x: torch.Tensor) -> float:
        torch.manual_seed(BASE_SEED + taken[0])
        taken[0] += 1
        side.arch.train()
        batch = (x, torch.zeros_like(x), torch.zeros(len(x), dtype=torch.bool))  # no penalty image: the default
        return descend(side.optimizer, side.model.module.training_step(batch, 0))

    def after(step) -> None:
        if step.index == 0:
            report.row("loss of the first step", step.suite, step.released, abs(step.suite - step.released))
            trained_gap(report, det, side)
        torch.manual_seed(BASE_SEED + step.index + 1)  # the suite's next step

    torch.manual_seed(BASE_SEED)
    last = lockstep(det, nn.ModuleList([det.student_, det.ae_]), train, steps, released_step, after,
                    batch=det.batch_size, load=lambda rows: images(train, rows))
    report.row(f"loss of step {steps}", last.suite, last.released, abs(last.suite - last.released))


def quantiles_and_scores(report: Report, det, side: Released, train, test) -> None:
    from pyclad.models.efficientad.efficientad import _compute_map_quantiles

    det.fit_quantiles([(train, r) for r in range(len(train))])
    cfg = side.model.config
    loader = side.model._normalization_loader(images(train, range(len(train))))
    qs = _compute_map_quantiles(side.arch, loader, torch.device("cpu"), cfg.map_quantile_low, cfg.map_quantile_high)
    side.arch.set_map_quantiles(*qs)
    ours = [*det.stats_["q_st"].tolist(), *det.stats_["q_ae"].tolist()]
    for name, mine, theirs in zip(("q_st start (0.9)", "q_st end (0.995)", "q_ae start (0.9)", "q_ae end (0.995)"),
                                  ours, qs):
        report.row(f"map quantile {name}", mine, float(theirs), abs(mine - float(theirs)))
    idx = list(range(len(test)))
    x = images(test, idx)
    pred = det.predict(test, idx)
    compare_predictions(report, pred, side.model.score_data(x), side.model.score_maps(x), test.labels)


def same_weights(report: Report, args) -> None:
    if args.size != SIZE:
        raise SystemExit(f"error: --size {args.size}: the released autoencoder matches the suite's only at {SIZE} px "
                         f"(its encoder's last kernel is 8 at every size)")
    train, test = tiny_task(SIZE)
    det = suite_detector("efficientad", SIZE, seed=0)
    det._lay_out_modules()
    side = released_side(det)
    networks(report, det, side, train)
    teacher_normalisation(report, det, side, train)
    train_both(report, det, side, train, 1 + args.steps)
    quantiles_and_scores(report, det, side, train, test)


def stream_images(stream, rows) -> torch.Tensor:
    """[0, 1] images of (task, row) rows of the stream's training splits, channels-last, in order."""
    return torch.cat([images(stream.trains[int(t)], [int(r)]) for t, r in rows]).contiguous(
        memory_format=torch.channels_last)


def suite_replay_side(det, stream):
    """The suite's fit_samples cut into lock-step pieces: fit_teacher, the steps, fit_quantiles (holdout 0:
    every image of the fit for both, as under `inclad`)."""
    from replay import LockSide

    taken = [0]

    def begin(data):
        det.fit_teacher(stream.samples(data))
        opts = det.optimizers()

        def step(rows):
            torch.manual_seed(BASE_SEED + taken[0])
            taken[0] += 1
            det.student_.train(), det.ae_.train()
            det.train_step(stream.samples(rows), opts)
        return step

    def end(data):
        det._teacher_cache.clear()
        det.fit_quantiles(stream.samples(data))

    return LockSide(begin, lambda test: det.predict(test, list(range(len(test)))).scores, end)


def released_replay_side(side: Released, stream):
    """The released `EfficientAD.fit` with Lightning's loop replaced by lock-step steps of its own
    `training_step` (a new Trainer per fit: a fresh Adam from its `configure_optimizers`)."""
    from pyclad.models.efficientad.efficientad import _compute_map_quantiles, _compute_teacher_channel_stats
    from replay import LockSide

    taken, cpu, cfg = [0], torch.device("cpu"), side.model.config

    def begin(data):
        loader = side.model._normalization_loader(stream_images(stream, data))
        side.arch.set_teacher_normalization(*_compute_teacher_channel_stats(side.arch, loader, cpu))
        optimizer = side.model.module.configure_optimizers()["optimizer"]

        def step(rows):
            torch.manual_seed(BASE_SEED + taken[0])
            taken[0] += 1
            side.arch.train()
            x = stream_images(stream, rows)
            batch = (x, torch.zeros_like(x), torch.zeros(len(x), dtype=torch.bool))  # no penalty image
            descend(optimizer, side.model.module.training_step(batch, 0))
        return step

    def end(data):
        loader = side.model._normalization_loader(stream_images(stream, data))
        side.arch.set_map_quantiles(*_compute_map_quantiles(side.arch, loader, cpu, cfg.map_quantile_low,
                                                            cfg.map_quantile_high))

    return LockSide(begin, lambda test: side.model.score_data(images(test, range(len(test)))), end)


def stream_replay(report: Report, args, seed: int = 0) -> None:
    """EfficientAD CL = Replay over the 3-task stream at 256 px (replay.replay_section), from the same weights,
    the `inclad` batch a step."""
    from harness import tiny_stream
    from replay import replay_section

    det = suite_detector("efficientad", SIZE, seed=seed)
    det._lay_out_modules()  # what the suite's fit does before training
    if det.holdout_fraction != 0:
        raise SystemExit("error: the replay comparison needs holdout_fraction=0 (the released fit holds none out)")
    side = released_side(det)
    replay_section(report, "EfficientAD", det, tiny_stream(SIZE),
                   lambda stream: (suite_replay_side(det, stream), released_replay_side(side, stream)), args,
                   det.batch_size, seed)


def main() -> None:
    warnings.filterwarnings("ignore", message="Detected call of")  # rates: no optimiser step is taken
    warnings.filterwarnings("ignore", message=".*self.log.*")  # the released training_step outside a Trainer
    args = arguments(__doc__.splitlines()[0], size=SIZE)
    use_released(args.released, "InCLAD-benchmark")
    report = Report("efficientad")
    augmentation(report)
    rates(report)
    same_weights(report, args)
    stream_replay(report, args)
    report.print()


if __name__ == "__main__":
    main()
