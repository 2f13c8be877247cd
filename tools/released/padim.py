"""PaDiM side by side: the suite's `inclad` PaDiM and InCLAD's released one (routing-cad-icdm
`src/pyclad/models/padim/padim.py`; the detector is not in InCLAD-benchmark's indexed files, only in this fork).

Both sides see the same backbone features (the released `module` is the suite's feature extractor, fed row
indices); the released `align_feature_maps` (pyclad.models.vision.features, in neither repository) is the
harness's stand-in: later layers upsampled bilinearly to the first layer's grid and concatenated.
1. Same channels: the released model is given the suite's random channel subset; printed: the per-location means
   and precisions (inverse covariances), the image scores and the maps.
2. Own channels: the released subset (numpy's default_rng) and the suite's (torch's randperm) are different
   draws, so over `--seeds` seeds the mean image score and the ROC-AUC are compared as distributions.
"""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import torch

from harness import Report, RowsToFeatures, compare_predictions, max_gap, mean_std, print_matrices, r_matrix, roc_auc, \
    run_sections, suite_detector, tiny_stream


def released_model(det, split, seed: int, size: int, continual: bool = False):
    from pyclad.models.padim.padim import PaDiM
    from pyclad.models.padim.padim_cl import ContinualPaDiM

    cls = ContinualPaDiM if continual else PaDiM
    model = cls.__new__(cls)  # __init__ builds its own backbone: attributes set as it sets them
    model._task_gaussians = []
    model.config = SimpleNamespace(batch_size=8, n_features=det.n_features, random_seed=seed, threshold=0.0,
                                   threshold_quantile=0.99, covariance_regularization=det.eps, score_mode="max")
    model._device, model.module = torch.device("cpu"), RowsToFeatures(det.extractor, split)
    model._preprocessor = SimpleNamespace(
        transform=lambda rows: torch.as_tensor(rows, dtype=torch.float32)[:, None],
        spatial_size=lambda rows: (size, size))
    model._selected_feature_indices = model._feature_mean = model._feature_precision = None
    model._feature_map_size = model._total_feature_channels = None
    model._threshold = None
    return model


def same_channels(report: Report, train, test, args) -> None:
    size = args.size
    det = suite_detector("padim", size, seed=0)
    det.fit(train, 0)
    model = released_model(det, train, 0, size)
    model._selected_feature_indices = det.feature_idx_.numpy().astype(np.int64)
    model.fit(np.arange(len(train)))
    h, w = model._feature_map_size
    report.row("per-location means [h·w, d]", tuple(det.mean_.shape), model._feature_mean.shape,
               max_gap(det.mean_.reshape(model._feature_mean.shape), model._feature_mean))
    ours = det.inv_cov_.reshape(model._feature_precision.shape)
    report.row("precisions [h·w, d, d], max |Δ| / max", tuple(det.inv_cov_.shape), model._feature_precision.shape,
               max_gap(ours, model._feature_precision) / float(np.abs(model._feature_precision).max()))
    idx = np.arange(len(test))
    pred = det.predict(test, idx.tolist())
    model.module.split = test
    scores, maps = model.score_data(idx), model.score_maps(idx)
    report.note(f"grid {h}×{w}")
    compare_predictions(report, pred, scores, maps, test.labels)


def own_channels(report: Report, train, test, args) -> None:
    size, seeds = args.size, args.seeds
    means, aucs = {"suite": [], "released": []}, {"suite": [], "released": []}
    idx = np.arange(len(test))
    for seed in range(seeds):
        det = suite_detector("padim", size, seed=seed)
        det.fit(train, seed)
        pred = det.predict(test, idx.tolist())
        model = released_model(det, train, seed, size)
        model.fit(np.arange(len(train)))
        model.module.split = test
        scores = model.score_data(idx)
        for side, s in (("suite", pred.scores), ("released", scores)):
            means[side].append(float(np.mean(s)))
            aucs[side].append(roc_auc(s, test.labels))
    report.row(f"mean image score, own channels ({seeds} seeds)", mean_std(means["suite"]),
               mean_std(means["released"]))
    report.row("image ROC-AUC, own channels", mean_std(aucs["suite"]), mean_std(aucs["released"]))


def stream(report: Report, _train, _test, args, seed: int = 0) -> None:
    """PaDiM-CL over the 3-task stream: the suite's protocol (learn, then predict on every task) beside the
    released PaDiMCLStrategy driving ContinualPaDiM (routing-cad-icdm src/pyclad/strategies/vision/padim_cl.py,
    src/pyclad/models/padim/padim_cl.py), the released model given the suite's channel subset (drawn at the
    suite's first task) each time its continual run resets."""
    from pyclad.strategies.vision.padim_cl import PaDiMCLStrategy

    tasks = tiny_stream(args.size)
    det = suite_detector("padim", args.size, seed=seed)
    protocol = det.continual(seed)
    ours = r_matrix(tasks, lambda i, train: protocol.learn(train, i),
                    lambda test: protocol.predict(test, list(range(len(test)))).scores)
    model = released_model(det, tasks[0][0], seed, args.size, continual=True)
    reset = model.reset_continual_state

    def reset_to_the_suite_channels():
        reset()
        model._selected_feature_indices = det.feature_idx_.numpy().astype(np.int64)

    model.reset_continual_state = reset_to_the_suite_channels
    strategy = PaDiMCLStrategy(model)

    def learn(i, train):
        model.module.split = train
        strategy.learn(np.arange(len(train)))

    def scores(test):
        model.module.split = test
        return model.score_data(np.arange(len(test)))

    print_matrices(report, f"PaDiM-CL, seed {seed}, same channels", ours, r_matrix(tasks, learn, scores))


if __name__ == "__main__":
    run_sections(__doc__, "padim", "routing-cad-icdm", same_channels, own_channels, stream)
