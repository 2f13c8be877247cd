"""GANomaly side by side: the suite's `inclad` GANomaly and InCLAD's released one (InCLAD-benchmark
`src/pyclad/models/ganomaly/{architecture.py,loss.py,standard/networks.py}`).

1. Starts: the released `weights_init` call leaves every weight as drawn (shown by drawing with and without it);
   per layer the released and the suite's networks (own draws) have the same spreads and BatchNorm weights; the
   first convolution's output side at 256 px.
2. Same weights: the released generator and discriminator get the suite's (copied in registration order); on the
   same images both give the same z, x̂, ẑ, discriminator probabilities and generator loss (released
   `GeneratorLoss`, anomalib's), and in eval mode the same image scores (released: mean over the latent, the
   suite: the sum, × latent size).
3. Padded (`input_pad=pow2`), at sizes that are not a power of two (PADDED_SIZES, run as the next one): from the
   same weights, the padded batch, x̂, z, ẑ, the generator and discriminator losses on the padded batch (released
   `GeneratorLoss`/`DiscriminatorLoss` as its `training_step` calls them), the weights after one Adam step of
   each (the released `training_step` done by hand: generator then discriminator), then in eval mode the image
   scores and the maps cropped back to the image size.
4. CL = Replay over the 3-task stream (chip → disc → grain), same weights, at `--size`: the suite's Replay protocol
   beside upstream pyCLAD v0.3.0's ReplayEnhancedStrategy + AdaptiveBalancedReplayBuffer (staged under
   `<folder>/pyCLAD`: tools/released/replay.py), `--cl-steps` lock-step updates (the released `training_step` by
   hand, as in 3) of 8 images per task (not the `inclad` batch of 16: 8 as every other replay comparison), the
   released buffer's draw imposed on the suite's; printed: both R matrices (released scores: mean over the
   latent; the suite's sum / latent size), the image-score gap, each side's own buffer composition.
"""

from __future__ import annotations

import torch
from torch import nn

from harness import Report, arguments, copy_by_order, max_gap, suite_detector, tiny_stream, tiny_task, use_released

FEATURES, LATENT = 8, 100
PADDED_SIZES = (100, 224)  # run as 128 and 256 px by both sides
CL_BATCH = 8  # images per lock-step update of the replay comparison


def released_arch(size: int, init: bool = True):
    from pyclad.models.ganomaly.architecture import GANomalyArchitecture

    if not init:  # the same construction with the weights_init calls skipped
        original = GANomalyArchitecture.__dict__["weights_init"]  # the staticmethod itself
        GANomalyArchitecture.weights_init = staticmethod(lambda module: None)
        try:
            return GANomalyArchitecture((size, size), 3, FEATURES, LATENT, 0, True)
        finally:
            GANomalyArchitecture.weights_init = original
    return GANomalyArchitecture((size, size), 3, FEATURES, LATENT, 0, True)


def layer_spreads(module: nn.Module) -> list[float]:
    return [float(m.weight.detach().std()) for m in module.modules()
            if isinstance(m, (nn.Conv2d, nn.ConvTranspose2d))]


def starts(report: Report) -> None:
    torch.manual_seed(0)
    with_init = released_arch(256).state_dict()
    torch.manual_seed(0)
    without = released_arch(256, init=False).state_dict()
    report.row("released weights_init changes a weight", "", "", max(max_gap(with_init[k], without[k])
                                                                      for k in with_init))
    torch.manual_seed(0)
    arch = released_arch(256)
    det = suite_detector("ganomaly", 256, seed=0, n_features=FEATURES, latent=LATENT)
    x = torch.zeros(1, 3, 256, 256)
    with torch.no_grad():
        ours = det.generator_.encoder1[0](x).shape[-1]
        theirs = list(arch.generator.encoder1.input_layers.children())[0](x).shape[-1]
    report.row("first convolution's output side at 256 px", ours, theirs)
    for name, net, mine in (("generator", arch.generator, det.generator_),
                            ("discriminator", arch.discriminator, det.discriminator_)):
        ratios = [a / b for a, b in zip(layer_spreads(mine), layer_spreads(net))]
        report.note(f"{name}: conv spread suite / released per layer (own draws): {min(ratios):.3f} to "
                    f"{max(ratios):.3f}")
        ones = all(torch.equal(m.weight, torch.ones_like(m.weight)) for m in net.modules()
                   if isinstance(m, nn.BatchNorm2d))
        mine_ones = all(torch.equal(m.weight, torch.ones_like(m.weight)) for m in mine.modules()
                        if isinstance(m, nn.BatchNorm2d))
        report.row(f"{name}: every BatchNorm weight 1", mine_ones, ones)


def same_weights(report: Report, test, size: int) -> None:
    from bench.models.ganomaly import generator_loss
    from pyclad.models.ganomaly.loss import GeneratorLoss

    det = suite_detector("ganomaly", size, seed=0, n_features=FEATURES, latent=LATENT)
    arch = released_arch(size)
    copy_by_order(det.generator_.state_dict(), [arch.generator])
    copy_by_order(det.discriminator_.state_dict(), [arch.discriminator])
    x = det.scale(det.extractor(test, list(range(8))))
    det.generator_.train(), det.discriminator_.train(), arch.train()
    fake, z, z_hat = det.generator_(x)
    r_fake, r_z, r_zhat = arch.generator(x)
    report.row("x̂ (generated image)", "", "", max_gap(fake, r_fake))
    report.row("z, ẑ", "", "", max(max_gap(z, r_z.flatten(1)), max_gap(z_hat, r_zhat.flatten(1))))
    ours = float(generator_loss(det.discriminator_, x, fake, z, z_hat, 1.0, 50.0, 1.0, "anomalib").detach())
    with torch.no_grad():
        pred_real, _ = arch.discriminator(x)
    pred_fake, _ = arch.discriminator(r_fake)
    theirs = float(GeneratorLoss()(r_z, r_zhat, x, r_fake, pred_real, pred_fake).detach())
    report.row("generator loss (anomalib's)", ours, theirs, abs(ours - theirs))
    det.generator_.eval(), arch.eval()
    with torch.no_grad():
        pred = det.predict(test, list(range(len(test))))
        maps, scores = arch(det.scale(det.extractor(test, list(range(len(test))))))
    report.row("image scores (suite / latent size)", float(pred.scores.max() / LATENT), float(scores.max()),
               max_gap(pred.scores / LATENT, scores))
    report.row("pixel maps", "", "", max_gap(pred.maps, maps))


def module_gap(ours: nn.Module, theirs: nn.Module) -> float:
    """max |Δ| over two networks' state entries taken in registration order (names differ, shapes match)."""
    return max(max_gap(a, b) for a, b in zip(ours.state_dict().values(), theirs.state_dict().values()))


def released_step(arch, x: torch.Tensor, opt_g, opt_d) -> tuple[float, float]:
    """InCLAD-benchmark `ganomaly.py` `GANomalyModule.training_step` without Lightning: the generator's loss on the
    padded batch, a step, then the discriminator's on the detached padded and generated batches, a step."""
    from pyclad.models.ganomaly.loss import DiscriminatorLoss, GeneratorLoss

    padded, fake, latent_i, latent_o = arch.forward_train(x)
    pred_real, _ = arch.discriminator(padded)
    pred_fake, _ = arch.discriminator(fake)
    loss_g = GeneratorLoss()(latent_i, latent_o, padded, fake, pred_real, pred_fake)
    opt_g.zero_grad()
    loss_g.backward()
    opt_g.step()
    loss_d = DiscriminatorLoss()(arch.discriminator(padded.detach())[0], arch.discriminator(fake.detach())[0])
    opt_d.zero_grad()
    loss_d.backward()
    opt_d.step()
    return float(loss_g.detach()), float(loss_d.detach())


def padded_forward(report: Report, det, arch, x: torch.Tensor, size: int) -> None:
    """Train-mode forward from the same weights: the padded batch, x̂, z, ẑ, and both losses on the padded batch
    (the released ones as its `training_step` calls them)."""
    from bench.models.ganomaly import discriminator_loss, generator_loss
    from pyclad.models.ganomaly.loss import DiscriminatorLoss, GeneratorLoss

    det.generator_.train(), det.discriminator_.train(), arch.train()
    with torch.no_grad():
        ours_x = det.padding.pad(x)
        fake, z, z_hat = det.generator_(ours_x)
        ours_g = float(generator_loss(det.discriminator_, ours_x, fake, z, z_hat, 1.0, 50.0, 1.0, "anomalib"))
        ours_d = float(discriminator_loss(det.discriminator_, ours_x, fake))
        padded, r_fake, r_z, r_zhat = arch.forward_train(x)
        pred_real, pred_fake = arch.discriminator(padded)[0], arch.discriminator(r_fake)[0]
        theirs_g = float(GeneratorLoss()(r_z, r_zhat, padded, r_fake, pred_real, pred_fake))
        theirs_d = float(DiscriminatorLoss()(arch.discriminator(padded)[0], arch.discriminator(r_fake)[0]))
    report.row(f"{size} px: networks' side (suite / released)", det.padding.net_size, arch.model_input_size[0])
    report.row(f"{size} px: padded batch", "", "", max_gap(ours_x, padded))
    report.row(f"{size} px: x̂", "", "", max_gap(fake, r_fake))
    report.row(f"{size} px: z, ẑ", "", "", max(max_gap(z, r_z.flatten(1)), max_gap(z_hat, r_zhat.flatten(1))))
    report.row(f"{size} px: generator loss (padded batch)", ours_g, theirs_g, abs(ours_g - theirs_g))
    report.row(f"{size} px: discriminator loss (padded batch)", ours_d, theirs_d, abs(ours_d - theirs_d))


def padded_step(report: Report, det, arch, train, size: int) -> None:
    """One update of each side on the same 8 training images: its generator loss and the weights after it."""
    samples = [(train, i) for i in range(8)]
    x = det.scale(det.extractor.samples(samples))
    opt_g = torch.optim.Adam(arch.generator.parameters(), lr=det.lr, betas=det.betas)
    opt_d = torch.optim.Adam(arch.discriminator.parameters(), lr=det.lr, betas=det.betas)
    det.generator_.train(), det.discriminator_.train(), arch.train()
    theirs = released_step(arch, x, opt_g, opt_d)[0]
    ours = det.train_step(samples, det.optimizers())
    report.row(f"{size} px: generator loss of the step (train images)", ours, theirs, abs(ours - theirs))
    report.row(f"{size} px: generator weights after one step", "", "", module_gap(det.generator_, arch.generator))
    report.row(f"{size} px: discriminator weights after one step", "", "",
               module_gap(det.discriminator_, arch.discriminator))


def padded(report: Report, size: int) -> None:
    """Section 3 at one size: same weights, forward, one step, eval-mode scores and cropped maps."""
    train, test = tiny_task(size)
    det = suite_detector("ganomaly", size, seed=0, n_features=FEATURES, latent=LATENT)
    torch.manual_seed(0)
    arch = released_arch(size)
    copy_by_order(det.generator_.state_dict(), [arch.generator])
    copy_by_order(det.discriminator_.state_dict(), [arch.discriminator])
    idx = list(range(len(test)))
    padded_forward(report, det, arch, det.scale(det.extractor(test, idx[:8])), size)
    padded_step(report, det, arch, train, size)
    pred = det.predict(test, idx)
    arch.eval()
    with torch.no_grad():
        maps, scores = arch(det.scale(det.extractor(test, idx)))
    report.row(f"{size} px: image scores (suite / latent size), max", float(pred.scores.max() / LATENT),
               float(scores.max()), max_gap(pred.scores / LATENT, scores))
    report.row(f"{size} px: pixel maps ({tuple(pred.maps.shape[1:])} / {tuple(maps.shape[1:])})", "", "",
               max_gap(pred.maps, maps))


def replay_sides(det, arch, stream):
    """(suite, released) LockSides: each fit fresh Adams for the generator and discriminator (the suite's
    training loop builds them per task, the released fit a new Trainer); the released update is its
    `training_step` done by hand (`released_step`)."""
    from replay import LockSide, suite_side

    def begin_theirs(_data):
        opt_g = torch.optim.Adam(arch.generator.parameters(), lr=det.lr, betas=det.betas)
        opt_d = torch.optim.Adam(arch.discriminator.parameters(), lr=det.lr, betas=det.betas)

        def step(rows):
            arch.train()
            released_step(arch, det.scale(det.extractor.samples(stream.samples(rows))), opt_g, opt_d)
        return step

    def theirs(test):
        arch.eval()
        with torch.no_grad():
            return arch(det.scale(det.extractor(test, list(range(len(test))))))[1].numpy()

    ours = suite_side(det, stream, [det.generator_, det.discriminator_], scale=1 / LATENT)
    return ours, LockSide(begin_theirs, theirs)


def stream_replay(report: Report, args, seed: int = 0) -> None:
    """GANomaly CL = Replay over the 3-task stream (replay.replay_section), from the same weights, CL_BATCH
    images an update."""
    from replay import replay_section

    det = suite_detector("ganomaly", args.size, seed=seed, n_features=FEATURES, latent=LATENT)
    det._lay_out_modules()  # what the suite's fit does before training (GANomaly keeps the contiguous layout)
    arch = released_arch(args.size)
    copy_by_order(det.generator_.state_dict(), [arch.generator])
    copy_by_order(det.discriminator_.state_dict(), [arch.discriminator])
    replay_section(report, "GANomaly", det, tiny_stream(args.size), lambda stream: replay_sides(det, arch, stream),
                   args, CL_BATCH, seed, " (suite / latent size)")


def main() -> None:
    args = arguments(__doc__.splitlines()[0])
    use_released(args.released, "InCLAD-benchmark")
    _, test = tiny_task(args.size)
    report = Report("ganomaly")
    starts(report)
    same_weights(report, test, args.size)
    for size in PADDED_SIZES:
        padded(report, size)
    stream_replay(report, args)
    report.print()


if __name__ == "__main__":
    main()
