"""PaSTe side by side: the suite's `inclad` PaSTe and InCLAD's released one (InCLAD-benchmark
`src/pyclad/models/paste/{architecture.py,standard/backbones.py}`), bootstrap layer 0.

1. Same weights: the released teacher and student get the suite's (copied in registration order: the released
   student's stages are layers 1-3, the suite's the stem's max-pool + layer 1, layers 2, 3); both take one SGD
   step (Table 7: lr 0.4, momentum 0.9, weight decay 1e-4, over the student) on the same batch, then `--steps`
   more; printed: the first loss (the released `feature_loss`, first layer un-normalised), the student after one
   step, the image scores and maps (released `post_process`; the suite's map carries ½ per layer: × 8).
2. The 3-task stream, same weights, CL = Replay: the suite's Replay protocol beside upstream pyCLAD v0.3.0's
   ReplayEnhancedStrategy and AdaptiveBalancedReplayBuffer (staged under `<folder>/pyCLAD`) around the released
   network, `--cl-steps` lock-step SGD steps of 8 images per task (tools/released/replay.py); printed: each
   side's buffer composition, the R matrices, the image scores' (suite × 8) largest gap; then the same with the
   suite's student trained contiguous (`channels_last = False`), the released code's layout, where the rounding
   of the two sides is the same.
"""

from __future__ import annotations

import functools

import torch

from harness import Report, arguments, copy_by_order, descend, lockstep, max_gap, released_image_scores, roc_auc, \
    state_gap, suite_detector, tiny_stream, tiny_task, use_released


def released_arch(size: int):
    from pyclad.models.paste.architecture import PaSTeArchitecture

    return PaSTeArchitecture("resnet18", None, 0, pretrained_teacher=False, pretrained_student=False,
                             freeze_teacher=True, input_size=(size, size))


def same_start(size: int, seed: int = 0, channels_last: bool = True):
    """The suite's seeded PaSTe (laid out) and the released network holding its teacher and student."""
    det = suite_detector("paste", size, seed=seed)
    det.channels_last = channels_last  # False: trained in the released code's (contiguous) layout
    det._lay_out_modules()
    arch = released_arch(size)
    copy_by_order(det.extractor.model.state_dict(), [arch.teacher])
    copy_by_order(det.student_.state_dict(), [arch.student])
    return det, arch


def released_optimizer(arch) -> torch.optim.SGD:
    """The released `PaSTeModule.configure_optimizers` over the student, at Table 7's values."""
    return torch.optim.SGD(arch.student.parameters(), lr=0.4, momentum=0.9, weight_decay=1e-4)


def released_step(arch, optimizer, images: torch.Tensor) -> float:
    """One step of the released `PaSTeModule.training_step`, optimised as Lightning does."""
    arch.train()
    return descend(optimizer, arch.feature_loss(*arch.forward_train(images)))


def same_weights(report: Report, train, test, args) -> None:
    det, arch = same_start(args.size)
    optimizer = released_optimizer(arch)

    def first(step):
        if step.index == 0:
            report.row("loss of the first step", step.suite, step.released, abs(step.suite - step.released))
            released = arch.student.state_dict()
            gap, _ = state_gap(dict(zip(released, det.student_.state_dict().values())), released)
            report.row("student after one step", "", "", gap)

    last = lockstep(det, det.student_, train, 1 + args.steps, functools.partial(released_step, arch, optimizer),
                    first)
    report.row(f"loss of step {1 + args.steps}", last.suite, last.released, abs(last.suite - last.released))
    idx = list(range(len(test)))
    pred = det.predict(test, idx)
    arch.eval()
    with torch.no_grad():
        maps, scores = arch(test.load_images(idx))
    report.row("image scores (suite × 8: ½ per layer)", float(pred.scores.max() * 8), float(scores.max()),
               max_gap(pred.scores * 8, scores))
    report.row("pixel maps, max |Δ| / max", "", "", max_gap(pred.maps * 8, maps) / float(maps.max()))
    report.row("image ROC-AUC", roc_auc(pred.scores, test.labels), roc_auc(scores.numpy(), test.labels))


def stream_replay(report: Report, args, seed: int = 0, channels_last: bool = True) -> None:
    """PaSTe CL = Replay over the 3-task stream (replay.replay_section), from the same weights, 8 images a step;
    each released fit a fresh SGD, as each suite task; the suite's scores × 8 (½ per layer).
    `channels_last=False`: the suite's student in the released code's layout."""
    from replay import image_side, replay_section, suite_side

    det, arch = same_start(args.size, seed, channels_last)

    def sides(stream):
        new_step = lambda: functools.partial(released_step, arch, released_optimizer(arch))  # noqa: E731
        return (suite_side(det, stream, [det.student_], scale=8.0),
                image_side(new_step, stream, functools.partial(released_image_scores, arch)))

    label = "PaSTe" if channels_last else "PaSTe (suite contiguous)"
    replay_section(report, label, det, tiny_stream(args.size), sides, args, batch=8, seed=seed, scale=" × 8")


def main() -> None:
    args = arguments(__doc__.splitlines()[0])
    use_released(args.released, "InCLAD-benchmark")
    train, test = tiny_task(args.size)
    report = Report("paste")
    same_weights(report, train, test, args)
    stream_replay(report, args)
    stream_replay(report, args, channels_last=False)
    report.print()


if __name__ == "__main__":
    main()
