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
CFA-CL: the released `CFACLStrategy` (`src/pyclad/strategies/vision/cfa_cl.py`) driving `ContinualCFA`
(`src/pyclad/models/cfa/{cfa_cl,cfa}.py`) with upstream pyCLAD v0.3.0's replay buffer (tools/released/replay.py,
staged under `<folder>/pyCLAD`), beside the suite's `CfaTaskBanks`, over the 3-task stream from the same descriptor
and with the same replay content; the R matrix and the image scores of every cell, at feature batch 32 and 8 (both
sides build the training bank over replay + current: at batch 8 the order moves the mean of batch means).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from harness import Report, RowsToFeatures, compare_on_test, descend, lockstep, max_gap, mean_std, \
    print_matrices, r_matrix, rows_tensor, run_sections, suite_detector
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



# CFA-CL over the 3-task stream ---------------------------------------------------------------------------------
CL_BATCH = 8  # training images per lock-step step (16-image tasks plus replay: three batches a task)
# bank batches: the suite's default feature batch (32: every bank of the tiny stream is one batch, so its order
# cannot matter) and 8 (several batches: the mean of batch means depends on where replay images sit)
BANK_BATCHES = (32, 8)


@dataclass
class ClRun:
    """One CFA-CL comparison: both R matrices, each side's buffer composition per task, the worst score gap."""

    ours: np.ndarray
    theirs: np.ndarray
    own: list[str]
    contents: list[str]
    score_gap: float


def released_cl_model(det, stream, size: int, seed: int):
    """The released ContinualCFA (routing-cad-icdm src/pyclad/models/cfa/cfa_cl.py) with the suite's descriptor,
    its backbone the suite's extractor over the stream's splits; attributes set as CFA.__init__ (cfa.py) sets
    them, with a fixed threshold (the threshold calibration is not compared)."""
    from types import SimpleNamespace

    from pyclad.models.cfa.cfa import CFAModule
    from pyclad.models.cfa.cfa_cl import ContinualCFA
    from replay import TaskRowsToFeatures

    arch = released_arch(det, stream.trains[0], size, seed)
    arch.feature_extractor = TaskRowsToFeatures(det.extractor, stream.trains)
    copy_descriptor(det, arch)
    model = ContinualCFA.__new__(ContinualCFA)
    model.config = SimpleNamespace(batch_size=det.extractor.batch_size, threshold=0.0, threshold_quantile=0.99)
    model._device, model._threshold, model._last_loss = torch.device("cpu"), 0.0, None
    model.module = CFAModule(network=arch, learning_rate=det.lr, weight_decay=det.weight_decay, use_amsgrad=True)
    model._preprocessor = SimpleNamespace(transform=lambda d: torch.as_tensor(np.asarray(d), dtype=torch.float32),
                                          spatial_size=lambda d: (size, size))
    model._task_inference_banks = []
    return model


def released_cl_matrix(model, stream, tasks, args, capacity: int, seen: list):
    """R of the released CFACLStrategy (routing-cad-icdm src/pyclad/strategies/vision/cfa_cl.py) with upstream
    pyCLAD v0.3.0's AdaptiveBalancedReplayBuffer; its Lightning fit replaced by lock-step steps. Returns R and the
    buffer's content after each task; every cell's image scores are appended to `seen`."""
    from pyclad.strategies.vision.cfa_cl import CFACLStrategy
    from replay import LockSide, lock_fit, recorded, released_buffer, snapshot

    def begin(_data):
        model._ensure_fitted()
        optimizer = model.module.configure_optimizers()  # a new Trainer per call: a fresh optimiser
        model.module.train()
        return lambda rows: descend(optimizer,
                                    model.module.network.forward_train(torch.as_tensor(rows, dtype=torch.float32)))

    model.fit_descriptor_only = lock_fit(LockSide(begin, None), stream, [], CL_BATCH, args.cl_steps)
    buffer = released_buffer(capacity)
    strategy, contents = CFACLStrategy(model, buffer), []
    features = model.module.network.feature_extractor

    def learn(i, train):
        strategy.learn(stream.rows(i))
        contents.append(snapshot(buffer, stream))

    def scores(test):
        features.splits = [*stream.trains, test]
        rows = np.stack([np.full(len(test), len(stream.trains)), np.arange(len(test))], 1)
        out = model.score_data(rows)
        features.splits = list(stream.trains)
        return out

    return r_matrix(tasks, learn, recorded(scores, seen)), contents


def suite_cl_matrix(det, protocol, stream, tasks, args, contents, seen: list):
    """R of the suite's CfaTaskBanks with lock-step training and, after each task, the released buffer content."""
    from bench.models.cfa import Radius
    from replay import LockSide, composition, impose, lock_fit, recorded

    own = []

    def begin(_data):
        opts = det.optimizers()

        def step(rows):
            det.descriptor_.train()
            det.train_step(stream.samples(rows), opts)
        return step

    def end(_data):
        det.radius_ = det._radius.value.detach()
        det._radius = det._train_bank = None

    fit = lock_fit(LockSide(begin, None, end), stream, [], CL_BATCH, args.cl_steps)

    def train(samples, bank, _seed):
        det._radius, det._train_bank = Radius(det.radius_), bank  # what the suite's train sets up, then its steps
        fit(stream.data(samples))

    det.train = train

    def learn(i, train_split):
        protocol.learn(train_split, i)
        own.append(composition(protocol.replay_.items_))
        impose(protocol.replay_, contents[i])

    r = r_matrix(tasks, learn, recorded(lambda test: protocol.predict(test, list(range(len(test)))).scores, seen))
    return r, own


def cl_run(args, bank_batch: int, seed: int = 0):
    """Both sides of CFA-CL from the same descriptor."""
    from bench.image.protocols import make_protocol
    from harness import tiny_stream
    from replay import Stream, composition, score_gap, seed_python

    tasks = tiny_stream(args.size)
    stream = Stream([train for train, _ in tasks])
    det = suite_detector("cfa", args.size, seed=seed)
    det.extractor.batch_size = bank_batch
    protocol = make_protocol("cl", det, seed, [len(s) for s in stream.trains])
    det.init_descriptor(det.cache(stream.trains[0]), protocol.step_seed(0))  # what learn(step 0) would draw
    model = released_cl_model(det, stream, args.size, seed)
    seed_python(seed)
    seen_theirs, seen_ours = [], []
    theirs, contents = released_cl_matrix(model, stream, tasks, args, det.replay_size, seen_theirs)
    ours, own = suite_cl_matrix(det, protocol, stream, tasks, args, contents, seen_ours)
    return ClRun(ours, theirs, own, [composition(c) for c in contents], score_gap(seen_ours, seen_theirs))


def stream_cl(report: Report, _train, _test, args) -> None:
    """CFA-CL over the 3-task stream (chip → disc → grain): the suite's CfaTaskBanks beside the released
    CFACLStrategy driving ContinualCFA, same descriptor, same replay content (the released draw imposed on the
    suite's buffer), `--cl-steps` lock-step AdamW steps of 8 images per task; at feature batch 32 and 8."""
    from replay import use_upstream

    use_upstream(args.released)
    for bank_batch in BANK_BATCHES:
        run = cl_run(args, bank_batch)
        if bank_batch == BANK_BATCHES[0]:
            report.note(f"CFA-CL replay buffer after each task: suite's own draw "
                        f"[{'; '.join(run.own)}], released [{'; '.join(run.contents)}]")
        what = f"CFA-CL, bank batch {bank_batch}"
        print_matrices(report, f"{what}, {args.cl_steps} steps per task", run.ours, run.theirs)
        report.row(f"{what}: image scores, all cells, max |Δ| / max", "", "", run.score_gap)


if __name__ == "__main__":
    run_sections(__doc__, "cfa", "routing-cad-icdm", same_weights, own_draws, stream_cl)
