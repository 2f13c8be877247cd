"""PatchCore side by side: the suite's `inclad` PatchCore and InCLAD's released one (routing-cad-icdm
`src/pyclad/models/patchcore/patchcore.py`: PatchMaker, FeaturePreprocessor, FeatureAggregator,
ApproximateGreedyCoresetSampler, RescaleSegmentor and PatchCore's embedding, fit and scoring methods; the
detectors are not in InCLAD-benchmark's indexed files, only in this fork).

Both sides see the same backbone features: the released `module` is the suite's feature extractor (fed row
indices through the released DataLoader), so the released code's unfolding, pooling, coreset, nearest-neighbour
scoring and map (bilinear upsampling + scipy's Gaussian, σ 4) run on the suite's tensors.
1. Same features: the patch embeddings (max |Δ|).
2. Whole bank (coreset ratio 1 on both sides, no random choice left): the bank, image scores and maps.
3. Coreset ratio 0.1: the projection (the released nn.Linear under torch.manual_seed, the suite's generator) and the
   starting points (numpy's default_rng, the suite's generator) are different draws, so over `--seeds` seeds the
   bank size, the mean image score and the ROC-AUC are compared as distributions.
"""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import torch

from harness import Report, RowsToFeatures, max_gap, mean_std, print_matrices, r_matrix, roc_auc, run_sections, \
    suite_detector, tiny_stream

SIGMA = 4.0


def released_model(det, split, ratio: float, seed: int, size: int, continual: bool = False):
    from pyclad.models.patchcore.patchcore import (ApproximateGreedyCoresetSampler, FeatureAggregator,
                                                   FeaturePreprocessor, PatchCore, PatchMaker, RescaleSegmentor)
    from pyclad.models.patchcore.patchcore_cl import ContinualPatchCore

    cpu = torch.device("cpu")
    cls = ContinualPatchCore if continual else PatchCore
    model = cls.__new__(cls)  # __init__ builds its own backbone: attributes set as it sets them
    model.config = SimpleNamespace(batch_size=8, n_neighbors=1, threshold=0.0, threshold_quantile=0.99,
                                   coreset_starting_points=10, coreset_projection_dimension=det.projection_dim,
                                   random_seed=seed)
    model._task_memory_state = None
    model._device, model.module = cpu, RowsToFeatures(det.extractor, split)
    model._preprocessor = SimpleNamespace(transform=lambda rows: torch.as_tensor(rows, dtype=torch.float32)[:, None])
    model._patch_maker = PatchMaker(patchsize=3, stride=1)
    channels = [f.shape[1] for f in det.extractor(split, [0])]
    model._feature_preprocessor = FeaturePreprocessor(input_dims=channels, output_dim=det.embed_dim)
    model._feature_aggregator = FeatureAggregator(target_dim=det.embed_dim)
    model._segmentor = RescaleSegmentor(device=cpu, target_size=(size, size), smoothing=SIGMA)
    model._coreset_sampler = ApproximateGreedyCoresetSampler(ratio, cpu, 10, det.projection_dim, random_seed=seed)
    model._memory_bank = model._feature_map_size = model._nn_index = None
    model._threshold = None
    return model


def whole_bank(report: Report, train, test, args) -> None:
    size = args.size
    det = suite_detector("patchcore", size, seed=0, coreset_ratio=1.0)
    model = released_model(det, train, 1.0, 0, size)
    rows = np.arange(len(train))
    ours, _ = det._patches(train, rows.tolist())
    report.row("patch embeddings of the training images", tuple(ours.shape),
               model._extract_embeddings(rows).shape, max_gap(ours, model._extract_embeddings(rows)))
    det.fit(train, 0)
    model.fit(rows)
    report.row("memory bank, ratio 1 (sorted rows)", tuple(det.memory_bank_.shape), model._memory_bank.shape,
               max_gap(sort_rows(det.memory_bank_), sort_rows(torch.as_tensor(model._memory_bank))))
    idx = list(range(len(test)))
    pred = det.predict(test, idx)
    model.module.split = test
    scores, maps = model._predict_scores_and_masks(np.asarray(idx))
    report.row("image scores (max), ratio 1", float(pred.scores.max()), float(scores.max()),
               max_gap(pred.scores, scores))
    report.row("pixel maps, max |Δ| / max", "", "", max_gap(pred.maps, maps) / float(maps.max()))
    report.row("image ROC-AUC, ratio 1", roc_auc(pred.scores, test.labels), roc_auc(scores, test.labels))


def sort_rows(bank: torch.Tensor) -> torch.Tensor:
    """Rows in lexicographic order: two banks holding the same patches in another order compare equal."""
    keys = bank.double().cpu().numpy()
    return torch.as_tensor(keys[np.lexsort(keys.T[::-1])])


def over_seeds(report: Report, train, test, args) -> None:
    size, seeds = args.size, args.seeds
    sizes, means, aucs = {"suite": [], "released": []}, {"suite": [], "released": []}, {"suite": [], "released": []}
    idx = list(range(len(test)))
    for seed in range(seeds):
        det = suite_detector("patchcore", size, seed=seed)
        det.fit(train, seed)
        pred = det.predict(test, idx)
        model = released_model(det, train, det.coreset_ratio, seed, size)
        model.fit(np.arange(len(train)))
        model.module.split = test
        scores, _ = model._predict_scores_and_masks(np.asarray(idx))
        for side, bank, s in (("suite", det.memory_bank_, pred.scores), ("released", model._memory_bank, scores)):
            sizes[side].append(len(bank))
            means[side].append(float(np.mean(s)))
            aucs[side].append(roc_auc(s, test.labels))
    report.row(f"bank size, ratio 0.1 ({seeds} seeds)", sizes["suite"][0], sizes["released"][0])
    report.row("mean image score, own draws", mean_std(means["suite"]), mean_std(means["released"]))
    report.row("image ROC-AUC, own draws", mean_std(aucs["suite"]), mean_std(aucs["released"]))


def stream(report: Report, _train, _test, args, seed: int = 0) -> None:
    """PatchCore-CL over the 3-task stream: the suite's protocol (what its runner calls: learn, then predict on
    every task) beside the released PatchCoreCLStrategy driving ContinualPatchCore (routing-cad-icdm
    src/pyclad/strategies/vision/patchcore_cl.py, src/pyclad/models/patchcore/patchcore_cl.py)."""
    from pyclad.strategies.vision.patchcore_cl import PatchCoreCLStrategy

    size = args.size
    tasks = tiny_stream(size)
    det = suite_detector("patchcore", size, seed=seed)
    protocol = det.continual(seed)
    model = released_model(det, tasks[0][0], det.coreset_ratio, seed, size, continual=True)
    strategy = PatchCoreCLStrategy(model, previous_ratio=det.previous_ratio)
    sizes = {"suite": [], "released": []}

    def learn_ours(i, train):
        protocol.learn(train, i)
        sizes["suite"].append([len(b) for b in protocol.banks_])

    def learn_theirs(i, train):
        model.module.split = train
        strategy.learn(np.arange(len(train)))
        sizes["released"].append([len(b) for b in strategy._task_banks])

    def theirs(test):
        model.module.split = test
        return model.score_data(np.arange(len(test)))

    ours_r = r_matrix(tasks, learn_ours, lambda test: protocol.predict(test, list(range(len(test)))).scores)
    theirs_r = r_matrix(tasks, learn_theirs, theirs)
    report.row("bank sizes after each task", str(sizes["suite"]), str(sizes["released"]))
    print_matrices(report, f"PatchCore-CL, seed {seed}", ours_r, theirs_r)


if __name__ == "__main__":
    run_sections(__doc__, "patchcore", "routing-cad-icdm", whole_bank, over_seeds, stream)
