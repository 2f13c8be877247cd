"""RD4AD side by side: the suite's `inclad` RD4AD and InCLAD's released one (InCLAD-benchmark
`src/pyclad/models/rd4ad/{architecture.py,standard/resnet.py,standard/deresnet.py}`).

1. Starts: the released decoder drawn by its own code beside the suite's, per transposed convolution (spread) and
   per BatchNorm (weights): different draws, so compared as statistics.
2. Same weights: the released encoder, OCBE and decoder get the suite's (copied in registration order); both
   take one Adam step (lr 5e-3, β (0.5, 0.999), over OCBE + decoder as the released `configure_optimizers`) on
   the same batch, then `--steps` more; printed: the first loss, the weights after one step, the image scores
   and maps of the test images (released `post_process`, kernel 1 = no blur).
3. The 3-task stream, same weights, CL = Replay: the suite's Replay protocol beside upstream pyCLAD v0.3.0's
   ReplayEnhancedStrategy and AdaptiveBalancedReplayBuffer (staged under `<folder>/pyCLAD`) around the released
   network, `--cl-steps` lock-step Adam steps of 8 images per task (tools/released/replay.py); printed: each
   side's buffer composition, the R matrices, the image scores' largest gap; then the same with the suite's
   network trained contiguous (`channels_last = False`), the released code's layout, where the rounding of the
   two sides is the same.
"""

from __future__ import annotations

import functools

import torch
from torch import nn

from harness import Report, arguments, copy_by_order, copy_into, descend, lockstep, max_gap, released_image_scores, \
    roc_auc, state_gap, suite_detector, tiny_stream, tiny_task, use_released


def released_arch(size: int):
    from pyclad.models.rd4ad.architecture import RD4ADArchitecture

    return RD4ADArchitecture("resnet18", (size, size), pretrained_encoder=False, freeze_encoder=True,
                             score_smoothing_kernel=1, score_smoothing_sigma=4.0)


def starts(report: Report, size: int) -> None:
    torch.manual_seed(0)
    theirs = released_arch(size).decoder
    ours = suite_detector("rd4ad", size, seed=0).net_.decoder
    spread = [(m.weight.detach().std(), n) for n, m in theirs.named_modules() if isinstance(m, nn.ConvTranspose2d)]
    mine = [m.weight.detach().std() for m in ours.modules() if isinstance(m, nn.ConvTranspose2d)]
    for (s, name), t in zip(spread, mine):
        report.row(f"transposed conv {name} spread", float(t), float(s), abs(float(t) - float(s)))
    bn = [float(m.weight.detach().min()) == float(m.weight.detach().max()) == 1.0
          for net in (theirs, ours) for m in net.modules() if isinstance(m, nn.BatchNorm2d)]
    report.row("every decoder BatchNorm weight 1", all(bn[len(bn) // 2:]), all(bn[: len(bn) // 2]))


def one_step_gap(report: Report, det, arch) -> None:
    released = {**arch.bn.state_dict(), **arch.decoder.state_dict()}
    ours_state = dict(zip(released, det.net_.state_dict().values()))
    gap, key = state_gap(ours_state, released)
    report.row(f"OCBE + decoder after one step (worst: {key})", "", "", gap)
    moved = sum(int(((v.double() - released[k].double()).abs() > 1e-4).sum()) for k, v in ours_state.items()
                if v.is_floating_point())
    report.row("  weights differing by more than 1e-4", moved,
               sum(v.numel() for v in released.values() if v.is_floating_point()))


def same_start(size: int, seed: int = 0, channels_last: bool = True):
    """The suite's seeded RD4AD (laid out) and the released network holding its weights: encoder by name, OCBE
    and decoder in registration order."""
    det = suite_detector("rd4ad", size, seed=seed)
    det.channels_last = channels_last  # False: trained in the released code's (contiguous) layout
    det._lay_out_modules()
    arch = released_arch(size)
    copy_into(arch.encoder, {k: v.contiguous() for k, v in det.extractor.model.state_dict().items()})
    copy_by_order(det.net_.state_dict(), [arch.bn, arch.decoder])
    return det, arch


def released_optimizer(arch) -> torch.optim.Adam:
    """The released `RD4ADModule.configure_optimizers` (decoder + OCBE, the encoder frozen; config defaults)."""
    return torch.optim.Adam(list(arch.decoder.parameters()) + list(arch.bn.parameters()), lr=5e-3,
                            betas=(0.5, 0.999))


def released_step(arch, optimizer, images: torch.Tensor) -> float:
    """One step of the released `RD4ADModule.training_step`, optimised as Lightning does."""
    arch.train()
    teacher, _, student = arch.forward_train(images)
    return descend(optimizer, arch.cosine_loss(teacher, student))


def same_weights(report: Report, train, test, args) -> None:
    det, arch = same_start(args.size)
    optimizer = released_optimizer(arch)

    def first(step):
        if step.index == 0:
            report.row("loss of the first step", step.suite, step.released, abs(step.suite - step.released))
            one_step_gap(report, det, arch)

    last = lockstep(det, det.net_, train, 1 + args.steps, functools.partial(released_step, arch, optimizer), first)
    report.row(f"loss of step {1 + args.steps}", last.suite, last.released, abs(last.suite - last.released))
    idx = list(range(len(test)))
    pred = det.predict(test, idx)
    arch.eval()
    with torch.no_grad():
        maps, scores = arch(test.load_images(idx))
    report.row("image scores (max)", float(pred.scores.max()), float(scores.max()), max_gap(pred.scores, scores))
    report.row("pixel maps, max |Δ| / max", "", "", max_gap(pred.maps, maps) / float(maps.max()))
    report.row("image ROC-AUC", roc_auc(pred.scores, test.labels), roc_auc(scores.numpy(), test.labels))


def stream_replay(report: Report, args, seed: int = 0, channels_last: bool = True) -> None:
    """RD4AD CL = Replay over the 3-task stream (replay.replay_section), from the same weights, 8 images a step;
    each released fit a fresh Adam, as each suite task. `channels_last=False`: the suite's network in the released
    code's layout."""
    from replay import image_side, replay_section, suite_side

    det, arch = same_start(args.size, seed, channels_last)

    def sides(stream):
        new_step = lambda: functools.partial(released_step, arch, released_optimizer(arch))  # noqa: E731
        return (suite_side(det, stream, [det.net_]),
                image_side(new_step, stream, functools.partial(released_image_scores, arch)))

    label = "RD4AD" if channels_last else "RD4AD (suite contiguous)"
    replay_section(report, label, det, tiny_stream(args.size), sides, args, batch=8, seed=seed)


def main() -> None:
    args = arguments(__doc__.splitlines()[0])
    use_released(args.released, "InCLAD-benchmark")
    train, test = tiny_task(args.size)
    report = Report("rd4ad")
    starts(report, args.size)
    same_weights(report, train, test, args)
    stream_replay(report, args)
    stream_replay(report, args, channels_last=False)
    report.print()


if __name__ == "__main__":
    main()
