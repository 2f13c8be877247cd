"""CFA side by side: the suite's `inclad` CFA and InCLAD's released one (routing-cad-icdm
`src/pyclad/models/cfa/{architecture.py,standard/descriptor.py,standard/coordconv.py}`; the detector is not in
InCLAD-benchmark's indexed files, only in this fork).

Both sides see the same backbone features (the released `feature_extractor` is replaced by the suite's extractor,
fed row indices) and the same descriptor: the released CoordConv gets the suite's weights, its two coordinate
input columns swapped (the released AddCoords appends (y, x), the suite's CoordConv (x, y)). The memory bank is
built by the released `initialize_memory_bank` over the suite's batches; both take one AdamW step (amsgrad, the
suite's lr and weight decay, over descriptor + radius as the released `CFAModule.configure_optimizers` in cfa.py
builds it) on the same batch, then `--steps` more; printed: the bank, the first loss, the descriptor and radius
after one step, the image scores and maps (the bank built before training, as the released `CFA.fit` scores).
Own draws: the released descriptor drawn by its own code (torch's default Conv2d initialisation, as the suite's)
over `--seeds` seeds, the first loss compared as a distribution.
"""

from __future__ import annotations

import torch

from harness import Report, RowsToFeatures, compare_on_test, descend, lockstep, max_gap, mean_std, \
    rows_tensor, run_sections, suite_detector
from bench.models.cfa import Radius, soft_boundary_loss


def released_arch(det, split, size: int, seed: int):
    from pyclad.models.cfa.architecture import CFAArchitecture

    arch = CFAArchitecture(3, (size, size), "resnet18", det.layers, pretrained_backbone=False, freeze_backbone=True,
                           gamma_c=1, gamma_d=1, k_neighbors=det.k_neighbors,
                           repulsion_neighbors=det.repulsion_neighbors, nu=1e-3, alpha=0.1, radius_init=1e-5,
                           score_smoothing_kernel=det.blur_kernel, score_smoothing_sigma=det.blur_sigma,
                           score_mode="max", random_seed=seed)
    arch.feature_extractor = RowsToFeatures(det.extractor, split)
    return arch


def suite_side(size: int, train, seed: int):
    """The suite's CFA with its descriptor drawn, its training bank built and its training state set up."""
    det = suite_detector("cfa", size, seed=seed)
    samples = det.cache(train)
    det.init_descriptor(samples, seed)
    before = det.bank(samples)
    det._radius, det._train_bank = Radius(det.radius_), before
    return det, samples, before


def copy_descriptor(det, arch) -> None:
    weight = det.descriptor_.conv.weight.detach().clone()
    weight[:, -2:] = weight[:, [-1, -2]]  # suite (x, y) → released (y, x)
    with torch.no_grad():
        arch.descriptor.layer.conv.weight.copy_(weight)
        arch.descriptor.layer.conv.bias.copy_(det.descriptor_.conv.bias)


def build_bank(arch, samples, batch: int) -> None:
    rows = [r for _, r in samples]
    arch.initialize_memory_bank([rows_tensor(rows[s:s + batch]) for s in range(0, len(rows), batch)],
                                torch.device("cpu"))


def same_weights(report: Report, train, test, args) -> None:
    det, samples, before = suite_side(args.size, train, 0)
    arch = released_arch(det, train, args.size, 0)
    copy_descriptor(det, arch)
    build_bank(arch, samples, det.extractor.batch_size)
    report.row("memory bank [h·w, C]", tuple(before.shape), tuple(arch.memory_bank.T.shape),
               max_gap(before, arch.memory_bank.T))
    params = [p for p in arch.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(params, lr=det.lr, weight_decay=det.weight_decay, amsgrad=True)

    def released_step(rows):
        return descend(optimizer, arch.forward_train(rows))

    def first(step):
        if step.index == 0:
            report.row("loss of the first step", step.suite, step.released, abs(step.suite - step.released))
            theirs = arch.descriptor.layer.conv.weight.detach()[:, list(range(theirs_cols(arch) - 2)) + [-1, -2]]
            report.row("descriptor after one step", "", "", max_gap(det.descriptor_.conv.weight, theirs))
            report.row("radius after one step", float(det._radius.value.detach()), float(arch.radius.detach()),
                       max_gap(det._radius.value, arch.radius))

    last = lockstep(det, det.descriptor_, train, 1 + args.steps, released_step, first,
                    batch=det.extractor.batch_size, load=rows_tensor)
    report.row(f"loss of step {1 + args.steps}", last.suite, last.released, abs(last.suite - last.released))
    det.radius_, det.bank_ = det._radius.value.detach(), before
    compare_on_test(report, det, arch, test)


def theirs_cols(arch) -> int:
    return arch.descriptor.layer.conv.weight.shape[1]


def own_draws(report: Report, train, _test, args) -> None:
    losses = {"suite": [], "released": []}
    for seed in range(args.seeds):
        det, samples, _ = suite_side(args.size, train, seed)
        torch.manual_seed(1000 + seed)
        arch = released_arch(det, train, args.size, seed)
        build_bank(arch, samples, det.extractor.batch_size)
        batch = samples[: det.extractor.batch_size]
        with torch.no_grad():
            phi = det.embed(det._features(batch))
            losses["suite"].append(float(soft_boundary_loss(phi, det._train_bank, det._radius.value,
                                                            det.k_neighbors, det.repulsion_neighbors)))
            losses["released"].append(float(arch.forward_train(rows_tensor([r for _, r in batch]))))
    report.row(f"first loss, own draws ({args.seeds} seeds)", mean_std(losses["suite"]), mean_std(losses["released"]))


if __name__ == "__main__":
    run_sections(__doc__, "cfa", "routing-cad-icdm", same_weights, own_draws)
