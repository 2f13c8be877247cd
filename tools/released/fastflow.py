"""FastFlow side by side: the suite's `inclad` FastFlow and InCLAD's released one (routing-cad-icdm@6fc5a98
`src/pyclad/models/fastflow/{architecture.py,standard/flow.py}`; the detector is not in InCLAD-benchmark's indexed
files, only in this fork).

Both sides see the same backbone features (the released `feature_extractor` is replaced by the suite's extractor,
fed row indices). Same weights: a released step couples, scales, then permutes, as a suite step under `inclad`
(`permute=after`), so each released step gets its suite step's permutation. A suite step with `permute=before`
permutes first: then the released network gets each level's features with the suite's first permutation already
applied (and its LayerNorm weights permuted alike), step i gets the suite's step i + 1 permutation (the last one
none: the loss and the map do not see a final permutation). Every subnet and global affine gets the suite's weights.
Both take one Adam step (the suite's lr and weight decay, InCLAD Table 7; the released fastflow.py optimiser was not
read) on the same batch, then `--steps` more; printed: the first loss, the flows after one step, the image scores
and maps. Own draws: the released flows drawn by their own code (global torch RNG) over `--seeds` seeds, the first
loss compared as a distribution.
CL = Replay over the 3-task stream (chip → disc → grain), same weights: the suite's Replay protocol beside upstream
pyCLAD v0.3.0's ReplayEnhancedStrategy + AdaptiveBalancedReplayBuffer (staged under `<folder>/pyCLAD`:
tools/released/replay.py), `--cl-steps` lock-step Adam steps of 8 images (the `inclad` batch) per task, the
released buffer's draw imposed on the suite's; the released network sees the suite's features of any task's rows
(TaskRowsToFeatures); printed: both R matrices, the image-score gap, each side's own buffer composition.
"""

from __future__ import annotations

import torch

import numpy as np

from harness import Report, RowsToFeatures, compare_on_test, descend, lockstep, max_gap, mean_std, \
    rows_tensor, run_sections, suite_detector, tiny_stream


class PermutedFeatures(RowsToFeatures):
    """The suite's features of the given rows, each level's channels in the order `perms` gives."""

    def __init__(self, extractor, split, perms):
        super().__init__(extractor, split)
        self.perms = perms

    def forward(self, rows: torch.Tensor) -> list[torch.Tensor]:
        return [f[:, p] for f, p in zip(super().forward(rows), self.perms)]


def released_arch(det, split, size: int):
    from pyclad.models.fastflow.architecture import FastFlowArchitecture

    arch = FastFlowArchitecture(3, (size, size), "resnet18", det.layers, pretrained_backbone=False,
                                freeze_backbone=True, normalize_features=True, flow_steps=det.flow_steps,
                                conv3x3_only=False, hidden_ratio=det.hidden_ratio, affine_clamping=det.clamp,
                                score_mode="max")
    arch.feature_extractor = RowsToFeatures(det.extractor, split)
    return arch


def layout(flow) -> tuple[torch.Tensor, list[torch.Tensor]]:
    """(the permutation the released level's input needs, each released step's permutation) for a suite flow."""
    identity = torch.arange(flow.steps[0].perm.numel())
    if flow.steps[0].permute_after:  # the released step's own order
        return identity, [s.perm for s in flow.steps]
    return flow.steps[0].perm, [s.perm for s in flow.steps[1:]] + [identity]


def pairs(det, arch):
    """(suite tensor, released tensor, channel permutation applied to the suite's dim 0 or None) for every
    trained tensor."""
    for norm, flow, theirs_norm, block in zip(det.net_.norms, det.net_.flows, arch.norms, arch.fast_flow_blocks):
        first = layout(flow)[0]
        yield norm.weight, theirs_norm.weight, first
        yield norm.bias, theirs_norm.bias, first
        for ours, theirs in zip(flow.steps, block.steps):
            for a, b in ((ours.subnet[0], theirs.subnet.layers[0]), (ours.subnet[2], theirs.subnet.layers[2])):
                yield a.weight, b.weight, None
                yield a.bias, b.bias, None
            yield ours.global_scale, theirs.global_scale, None
            yield ours.global_offset, theirs.global_offset, None


def copy_flows(det, arch, split) -> None:
    with torch.no_grad():
        for ours, theirs, perm in pairs(det, arch):
            theirs.copy_(ours if perm is None else ours[perm])
        for flow, block in zip(det.net_.flows, arch.fast_flow_blocks):
            for step, perm in zip(block.steps, layout(flow)[1]):
                step.permutation.copy_(perm)
                step.inverse_permutation.copy_(torch.argsort(perm))
    arch.feature_extractor = PermutedFeatures(det.extractor, split, [layout(f)[0] for f in det.net_.flows])


def flows_gap(det, arch) -> float:
    return max(max_gap(ours if perm is None else ours[perm], theirs) for ours, theirs, perm in pairs(det, arch))


def same_weights(report: Report, train, test, args) -> None:
    det = suite_detector("fastflow", args.size, seed=0)
    arch = released_arch(det, train, args.size)
    copy_flows(det, arch, train)
    optimizer = torch.optim.Adam([p for p in arch.parameters() if p.requires_grad], lr=det.lr,
                                 weight_decay=det.weight_decay)

    def released_step(rows):
        return descend(optimizer, arch.fastflow_loss(*arch.forward_train(rows)))

    def first(step):
        if step.index == 0:
            report.row("loss of the first step", step.suite, step.released, abs(step.suite - step.released))
            report.row("flows after one step", "", "", flows_gap(det, arch))

    last = lockstep(det, det.net_, train, 1 + args.steps, released_step, first, batch=det.batch_size,
                    load=rows_tensor)
    report.row(f"loss of step {1 + args.steps}", last.suite, last.released, abs(last.suite - last.released))
    compare_on_test(report, det, arch, test)


def own_draws(report: Report, train, _test, args) -> None:
    losses = {"suite": [], "released": []}
    rows = list(range(8))
    for seed in range(args.seeds):
        det = suite_detector("fastflow", args.size, seed=seed)
        torch.manual_seed(seed)
        arch = released_arch(det, train, args.size)
        with torch.no_grad():
            losses["suite"].append(float(det.loss([(train, r) for r in rows])))
            losses["released"].append(float(arch.fastflow_loss(*arch.forward_train(rows_tensor(rows)))))
    report.row(f"first loss, own draws ({args.seeds} seeds)", mean_std(losses["suite"]), mean_std(losses["released"]))


def released_adam(det, arch) -> torch.optim.Optimizer:
    """Table 7's Adam over the released flows (the released fastflow.py optimiser was not read)."""
    return torch.optim.Adam([p for p in arch.parameters() if p.requires_grad], lr=det.lr,
                            weight_decay=det.weight_decay)


def replay_sides(det, arch, stream):
    """(suite, released) LockSides: each fit a fresh Adam (the suite's training loop builds one per task, the
    released fit a new Trainer), the released network fed (task, row) rows through TaskRowsToFeatures."""
    from replay import LockSide, TaskRowsToFeatures, suite_side

    features = TaskRowsToFeatures(det.extractor, stream.trains)
    arch.feature_extractor = features

    def begin_theirs(_data):
        optimizer = released_adam(det, arch)

        def step(rows):
            arch.train()
            descend(optimizer, arch.fastflow_loss(*arch.forward_train(torch.as_tensor(rows, dtype=torch.float32))))
        return step

    def theirs(test):
        features.splits = [*stream.trains, test]
        rows = np.stack([np.full(len(test), len(stream.trains)), np.arange(len(test))], 1)
        arch.eval()
        with torch.no_grad():
            scores = arch(torch.as_tensor(rows, dtype=torch.float32))[1]
        features.splits = list(stream.trains)
        return scores.numpy()

    return suite_side(det, stream, [det.net_]), LockSide(begin_theirs, theirs)


def stream_replay(report: Report, _train, _test, args, seed: int = 0) -> None:
    """FastFlow CL = Replay over the 3-task stream (replay.replay_section), from the same flows, the `inclad`
    batch a step."""
    from replay import replay_section

    tasks = tiny_stream(args.size)
    det = suite_detector("fastflow", args.size, seed=seed)
    if not all(flow.steps[0].permute_after for flow in det.net_.flows):
        raise SystemExit("error: the replay comparison copies the flows as they are: it needs permute=after")
    det._lay_out_modules()  # what the suite's fit does before training
    arch = released_arch(det, tasks[0][0], args.size)
    copy_flows(det, arch, tasks[0][0])
    replay_section(report, "FastFlow", det, tasks, lambda stream: replay_sides(det, arch, stream), args,
                   det.batch_size, seed)


if __name__ == "__main__":
    run_sections(__doc__, "fastflow", "routing-cad-icdm", same_weights, own_draws, stream_replay)
