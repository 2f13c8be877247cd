"""EfficientAD side by side, for what `inclad` aligned: the colour augmentation and the learning-rate drop
(InCLAD-benchmark `src/pyclad/models/efficientad/architecture.py`, `_choose_random_aug_image`; `efficientad.py`,
`EfficientAD.__init__` and `EfficientADModule.configure_optimizers`). Networks, losses and maps are not compared
here (the adapter needs only `architecture.py` up to `_choose_random_aug_image`).

1. Augmentation: the released method and the suite's `colour_augment` on the same images from the same global
   RNG state: identical outputs.
2. Learning rate per epoch: the released StepLR (step_size max(1, int(epochs · 0.95)), gamma 0.1, stepped once
   per epoch: its `configure_optimizers` with the step size its `__init__` computes, transcribed) beside the
   suite's `schedulers()` stepped by its loop, for several epoch counts.
"""

from __future__ import annotations

from types import SimpleNamespace

import torch

from harness import Report, arguments, max_gap, suite_detector, use_released


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


def main() -> None:
    import warnings

    warnings.filterwarnings("ignore", message="Detected call of")  # rates only: no optimiser step is taken
    args = arguments(__doc__.splitlines()[0])
    use_released(args.released, "InCLAD-benchmark")
    report = Report("efficientad")
    augmentation(report)
    rates(report)
    report.print()


if __name__ == "__main__":
    main()
