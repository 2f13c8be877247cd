"""STFPM side by side: the suite's `inclad` STFPM and InCLAD's released one (routing-cad-icdm
`src/pyclad/models/stfpm/{builder,config,stfpm}.py`, `src/pyclad/models/vision/{backbones,utils}.py`).

1. Same weights: the released teacher and student get the suite's random-init teacher and its seeded student;
   both take one SGD step on the same batch, then `--steps` more; printed: the first loss, the student's weights
   after one step, the image scores and maps of the test images (the suite's map carries ½ per layer: × 8).
2. Same distribution: the released student drawn by torchvision (its own seed) and the suite's drawn by timm
   cannot share weights; over `--seeds` seeds each trains `--dist-steps` steps on the same batches with the same
   teacher, and the final losses' mean ± std are compared, with timm's own start (`student_init=timm`) beside.
3. The 3-task stream, same weights: NCL (warm-start fine-tuning) and CL = Replay (the suite's Replay protocol
   beside upstream pyCLAD v0.3.0's ReplayEnhancedStrategy and AdaptiveBalancedReplayBuffer, staged under
   `<folder>/pyCLAD`: tools/released/replay.py); printed: the R matrices.
"""

from __future__ import annotations

import functools

import torch

from harness import Report, arguments, copy_into, max_gap, mean_std, print_matrices, r_matrix, roc_auc, state_gap, \
    suite_detector, tiny_stream, tiny_task, use_released

BATCH = 8


def released_model(teacher_state: dict, student_state: dict | None, size: int):
    from pyclad.models.stfpm.builder import build
    from pyclad.models.stfpm.config import STFPMConfig
    from pyclad.models.stfpm.stfpm import STFPM, STFPMModule

    config = STFPMConfig(backbone_name="resnet18", pretrained_teacher=False, input_size=(size, size))
    network = build(config)
    copy_into(network.teacher._extractor, teacher_state)
    if student_state is not None:
        copy_into(network.student._extractor, student_state)
    module = STFPMModule(network, config.learning_rate, config.momentum, config.weight_decay)
    model = STFPM.__new__(STFPM)  # scoring methods only: fit needs Lightning's Trainer and the preprocessor
    model.config, model._device, model.module = config, torch.device("cpu"), module
    return model


def released_step(module, optimizer, x: torch.Tensor) -> float:
    module.network.train()
    loss = module.feature_loss(*module(x))
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    return float(loss.detach())


def contiguous_state(module: torch.nn.Module) -> dict:
    return {k: v.detach().contiguous().clone() for k, v in module.state_dict().items()}


def batches(train):
    rows = list(range(len(train)))
    return [[(train, r) for r in rows[s:s + BATCH]] for s in range(0, len(rows), BATCH)]


def same_weights(report: Report, train, test, args) -> None:
    det = suite_detector("stfpm", args.size, seed=0)
    det._lay_out_modules()
    teacher, student = contiguous_state(det.extractor.model), contiguous_state(det.student_)
    model = released_model(teacher, student, args.size)
    module = model.module
    optimizer = module.configure_optimizers()
    opts = det.optimizers()
    plan = batches(train)
    for step in range(1 + args.steps):
        batch = plan[step % len(plan)]
        x = train.load_images([r for _, r in batch])
        det.student_.train()
        ours = det.train_step(batch, opts)
        theirs = released_step(module, optimizer, x)
        if step == 0:
            report.row("loss of the first step", ours, theirs, abs(ours - theirs))
            gap, key = state_gap(contiguous_state(det.student_), contiguous_state(module.network.student._extractor))
            report.row(f"student after one step (worst: {key})", "", "", gap)
    report.row(f"loss of step {1 + args.steps}", ours, theirs, abs(ours - theirs))
    idx = list(range(len(test)))
    pred = det.predict(test, idx)
    grid = model._batch_score_maps(test.load_images(idx))
    scores, maps = grid.flatten(1).amax(1), model._resize_maps(grid, (args.size, args.size))
    report.row("image scores (suite × 8: ½ per layer)", float(pred.scores.max() * 8), float(scores.max()),
               max_gap(pred.scores * 8, scores))
    report.row("pixel maps, max |Δ| / max", "", "", max_gap(pred.maps * 8, maps) / float(maps.max()))
    labels = test.labels
    report.row("image ROC-AUC", roc_auc(pred.scores, labels), roc_auc(scores.numpy(), labels))


def start_distribution(report: Report, train, args) -> None:
    plan = batches(train)
    finals: dict[str, list[float]] = {"suite (torchvision init)": [], "released": [], "suite, student_init=timm": []}
    for seed in range(args.seeds):
        for label, init in (("suite (torchvision init)", "torchvision"), ("suite, student_init=timm", "timm")):
            det = suite_detector("stfpm", args.size, seed=seed, student_init=init)
            det._lay_out_modules()
            opts = det.optimizers()
            for step in range(args.dist_steps):
                det.student_.train()
                loss = det.train_step(plan[step % len(plan)], opts)
            finals[label].append(loss)
        torch.manual_seed(seed)
        model = released_model(contiguous_state(det.extractor.model), None, args.size)
        optimizer = model.module.configure_optimizers()
        for step in range(args.dist_steps):
            loss = released_step(model.module, optimizer, train.load_images([r for _, r in plan[step % len(plan)]]))
        finals["released"].append(loss)
    report.note(f"loss after {args.dist_steps} steps, {args.seeds} seeds (own draws, same teacher per seed):")
    for label, values in finals.items():
        report.note(f"  {label:<28} {mean_std(values)}")


def stream_ncl(report: Report, args) -> None:
    """STFPM over the 3-task stream, NCL (warm-start fine-tuning, a fresh optimiser per task: the suite's Naive
    protocol, and the released STFPM.fit, whose every call builds a new Trainer and so a new optimiser): both from
    the same weights, each task `--cl-steps` steps over its batches in order (no shuffle, so the two sides see the
    same batches), then every task's test split scored."""
    tasks = tiny_stream(args.size)
    det = suite_detector("stfpm", args.size, seed=0)
    det._lay_out_modules()
    model = released_model(contiguous_state(det.extractor.model), contiguous_state(det.student_), args.size)

    def learn_ours(i, train):
        opts, plan = det.optimizers(), batches(train)
        for step in range(args.cl_steps):
            det.student_.train()
            det.train_step(plan[step % len(plan)], opts)

    def learn_theirs(i, train):
        optimizer, plan = model.module.configure_optimizers(), batches(train)
        for step in range(args.cl_steps):
            released_step(model.module, optimizer, train.load_images([r for _, r in plan[step % len(plan)]]))

    def theirs(test):
        grid = model._batch_score_maps(test.load_images(list(range(len(test)))))
        return grid.flatten(1).amax(1).numpy()

    ours_r = r_matrix(tasks, learn_ours, lambda test: det.predict(test, list(range(len(test)))).scores)
    theirs_r = r_matrix(tasks, learn_theirs, theirs)
    print_matrices(report, f"STFPM NCL, {args.cl_steps} steps per task", ours_r, theirs_r)


def stream_replay(report: Report, args, seed: int = 0) -> None:
    """STFPM CL = Replay over the 3-task stream (replay.replay_section), from the same weights, BATCH images a
    step; each released fit a fresh optimiser from its `configure_optimizers`, as each suite task; the suite's
    scores × 8 (½ per layer)."""
    from replay import image_side, replay_section, suite_side

    det = suite_detector("stfpm", args.size, seed=seed)
    det._lay_out_modules()
    model = released_model(contiguous_state(det.extractor.model), contiguous_state(det.student_), args.size)

    def new_step():
        return functools.partial(released_step, model.module, model.module.configure_optimizers())

    def scores(test):
        return model._batch_score_maps(test.load_images(list(range(len(test))))).flatten(1).amax(1).numpy()

    def sides(stream):
        return suite_side(det, stream, [det.student_], scale=8.0), image_side(new_step, stream, scores)

    replay_section(report, "STFPM", det, tiny_stream(args.size), sides, args, BATCH, seed, " × 8")


def main() -> None:
    args = arguments(__doc__.splitlines()[0])
    use_released(args.released, "routing-cad-icdm")
    train, test = tiny_task(args.size)
    report = Report("stfpm")
    same_weights(report, train, test, args)
    if args.seeds:
        start_distribution(report, train, args)
    stream_ncl(report, args)
    stream_replay(report, args)
    report.print()


if __name__ == "__main__":
    main()
