"""The published settings, pinned: every default a paper states, checked against the registry, so a changed default
is a failing test that names its source. Extend PAPER with a dict per detector as detectors are added (InCLAD
Table 6 for the CL-specific ones, Table 7 for the others). TABLE_7 is typed from InCLAD's Table 7 (App. D);
PRESETS pins every image detector's named presets (`inclad`, the default, is InCLAD's released code; `original`
the method's own paper/code where it differs).

Settings Table 6 lists that are not hyperparameters of the detector: batch size 32 and input size 224 (RunConfig),
pretrained and frozen backbone (the FeatureExtractor), threshold quantile 0.99 (no reported metric uses a
threshold), PatchCore's one neighbour at inference (nn_distance is 1-NN)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from bench.config import RunConfig
from bench.models.base import route
from bench.registry import get

# InCLAD Table 6 (App. D.4), and where a default comes from elsewhere, that source.
PAPER = {
    "patchcore": {
        "coreset_ratio": 0.1,  # Table 6: coreset sampling ratio
        "projection_dim": 128,  # Table 6: coreset projection dim.
        "n_starts": 10,  # Table 6: coreset starting points
        "previous_ratio": 0.25,  # Table 6: previous-ratio (CL), ρ of App. C.1
        "layers": ["layer2", "layer3"],  # not in Table 6: PatchCore's layers 2+3 (docs/models.md)
        "embedding": "released",  # Roth et al.'s released code, which InCLAD's PatchCore follows
        "embed_dim": 1024,  # ... its per-layer and final pooling dimension
        "blur_sigma": 4.0,  # not in Table 6: map blurred with σ = 4 (docs/models.md)
    },
    "padim": {
        "n_features": 100,  # Table 6: n_features
        "eps": 0.01,  # Table 6: regularization
        "layers": ["layer1", "layer2", "layer3"],  # not in Table 6: PaDiM's layers 1–3
        "route_by": "max",  # InCLAD §4.3 / App. C.2: routed by the image-level (map max) Mahalanobis score
    },
    "cfa": {
        "epochs": 50,  # Table 6: epochs
        "lr": 1e-3,  # Table 6: learning rate
        "weight_decay": 5e-4,  # Table 6: weight decay
        "k_neighbors": 3,  # Table 6: k-neighbors (K)
        "repulsion_neighbors": 3,  # Table 6: repulsion neighbors (J)
        "blur_sigma": 4.0,  # not in Table 6: σ = 4, as for PatchCore
        "route_by": "max",  # InCLAD §4.3 / App. C.3: routed by the image-level (map max) anomaly score
    },
}

# InCLAD Table 7, column by column: batch size, epochs, learning rate, weight decay (None: the optimiser has none,
# i.e. 0), input size, and the model-specific rows
TABLE_7 = {
    "fastflow": {"batch_size": 8, "epochs": 200, "lr": 1e-3, "weight_decay": 0.0, "image_size": 256,
                 "flow_steps": 8, "hidden_ratio": 1.0},
    "ganomaly": {"batch_size": 16, "epochs": 15, "lr": 2e-4, "weight_decay": None, "image_size": 256,
                 "n_features": 64, "latent": 100},
    "paste": {"batch_size": 32, "epochs": 100, "lr": 0.4, "weight_decay": 1e-4, "image_size": 224,
              "bootstrap_layer": 0},
    # smoothing kernel 1: a kernel size, and InCLAD's code blurs only for a kernel > 1 → no blur (σ = 0)
    "rd4ad": {"batch_size": 16, "epochs": 200, "lr": 5e-3, "weight_decay": None, "image_size": 224,
              "blur_sigma": 0.0},
    "stfpm": {"batch_size": 32, "epochs": 100, "lr": 0.4, "weight_decay": 1e-4, "image_size": 256},
    "efficientad": {"batch_size": 1, "epochs": 50, "lr": 1e-4, "weight_decay": 1e-5, "image_size": 256,
                    "out_channels": 384},  # model size "small": the PDN-S is the only one built
}

# every image detector's presets (values that differ from the defaults), its default preset (inclad everywhere),
# and which torchvision ImageNet weights `--weights imagenet` means under each (absent: IMAGENET1K_V1)
PRESETS = {
    # Roth et al.'s paper: App. C.1's compression formula as written, a Gaussian (JL) projection
    "patchcore": {"inclad": {}, "original": {"compression": "exact", "projection": "gaussian"}},
    # Defard et al.'s code: layers upsampled nearest, image score the max of the upsampled map blurred with σ = 4
    "padim": {"inclad": {}, "original": {"blur_sigma": 4.0, "align": "nearest", "image_score": "map"}},
    # Lee et al.'s descriptor over layers 1–3 and scipy's 4σ filter; App. C.3's rebuilt bank; the suite's water filling
    "cfa": {"inclad": {}, "original": {"layers": ["layer1", "layer2", "layer3"], "blur_kernel": 0,
                                       "ncl_bank": "after", "replay_share": "water"}},
    "stfpm": {"inclad": {}, "original": {"product_at": "input", "replay_share": "water"}},  # Wang et al.'s map
    # Deng & Li's code: gaussian_filter σ = 4; its init loop matches nn.Conv2d only (transposed convs left default)
    "rd4ad": {"inclad": {}, "original": {"blur_sigma": 4.0, "replay_share": "water", "deconv_init": "default"}},
    # the paper's lr drop at 95 % of the iterations
    "efficientad": {"inclad": {}, "original": {"teacher": "required", "penalty": "required", "pdn_padding": True,
                                               "holdout_fraction": 0.1, "image_score": "map",
                                               "replay_share": "water", "lr_drop": "step"}},
    "paste": {"inclad": {}, "original": {"replay_share": "water"}},
    "fastflow": {"inclad": {}, "original": {"replay_share": "water"}},
    # Akcay et al.'s code: DCGAN init applied layer by layer, DCGAN's first padding 1
    "ganomaly": {"inclad": {}, "original": {"losses": "akcay", "replay_share": "water", "init": "dcgan",
                                            "first_padding": 1, "input_pad": "none"}},
}
# InCLAD's RD4AD/PaSTe (and STFPM through the same code path) ask torchvision for DEFAULT weights, and so do its CFA,
# FastFlow, PatchCore and PaDiM (routing-cad-icdm src/pyclad/models/vision/backbones.py:72-75
# `get_model_weights(model_fn).DEFAULT`, reached from src/pyclad/models/{patchcore,padim}/builder.py)
IMAGENET_WEIGHTS = {"rd4ad": {"inclad": "DEFAULT"}, "paste": {"inclad": "DEFAULT"}, "stfpm": {"inclad": "DEFAULT"},
                    "cfa": {"inclad": "DEFAULT"}, "fastflow": {"inclad": "DEFAULT"},
                    "patchcore": {"inclad": "DEFAULT"}, "padim": {"inclad": "DEFAULT"}}
# what InCLAD's released code does beyond Table 7's rows (the `inclad` preset's values)
INCLAD_CODE = {
    # routing-cad-icdm src/pyclad/models/patchcore/patchcore_cl.py:96-105 → patchcore.py:196-222 (run_weighted); the
    # sampler's projection is a bias-free nn.Linear (patchcore.py:126-133), i.e. uniform entries
    "patchcore": {"compression": "released", "projection": "uniform"},
    # routing-cad-icdm src/pyclad/models/padim/padim.py:56 (align_feature_maps: bilinear), :137-140 (image score = max
    # of the raw map), _resize_maps (bilinear, no blur); padim_cl.py:129-133 (routing by that raw max)
    "padim": {"blur_sigma": 0.0, "align": "bilinear", "image_score": "raw"},
    # routing-cad-icdm src/pyclad/models/cfa/: architecture.py:13-17 layers, config.py:36-37 kernel 3 σ 4, cfa.py:76
    # the bank built before training; architecture.py:188-196 the mean of batch means; pyCLAD v0.3.0
    # adaptive_balanced.py:20 the floor shares
    "cfa": {"layers": ["layer2", "layer3"], "blur_kernel": 3, "blur_sigma": 4.0, "ncl_bank": "before",
            "bank_mean": "batches", "replay_share": "floor"},
    "fastflow": {"global_affine": True, "replay_share": "floor"},  # routing-cad-icdm@6fc5a98 standard/flow.py:49-82
    # routing-cad-icdm stfpm.py `_batch_score_maps`; builder.py:59-64 → vision/backbones.py:57 torchvision student
    "stfpm": {"product_at": "layer", "replay_share": "floor", "student_init": "torchvision"},
    # InCLAD-benchmark src/pyclad/models/rd4ad/standard/deresnet.py:174-179: Kaiming for nn.ConvTranspose2d too
    "rd4ad": {"blur_sigma": 0.0, "replay_share": "floor", "deconv_init": "kaiming"},
    # the first student layer's loss un-normalised; standard/backbones.py:81-91 a torchvision student
    "paste": {"normalize_first": False, "replay_share": "floor", "student_init": "torchvision"},
    # image_score: InCLAD-benchmark src/pyclad/models/efficientad/efficientad.py `score_data` (apply_padding=False)
    "efficientad": {"teacher": "random", "penalty": "", "pdn_padding": False, "holdout_fraction": 0.0,
                    "image_score": "grid", "replay_share": "floor", "lr_drop": "epoch"},  # efficientad.py StepLR
    # InCLAD-benchmark src/pyclad/models/ganomaly/architecture.py:48-49 (weights_init a no-op: PyTorch's default),
    # standard/networks.py:24 (first convolution padding 4), architecture.py:28-31 (inputs padded to a power of two)
    "ganomaly": {"losses": "anomalib", "replay_share": "floor", "init": "pytorch", "first_padding": 4,
                 "input_pad": "pow2"},
}


@pytest.mark.parametrize("model", sorted(PAPER))
def test_registry_defaults_are_the_papers(model):
    defaults = get(model).defaults()
    assert {k: defaults[k] for k in PAPER[model]} == PAPER[model]


@pytest.mark.parametrize("model", sorted(TABLE_7))
def test_defaults_are_table_7s(model):
    spec, row = get(model), dict(TABLE_7[model])
    assert spec.image_size == row.pop("image_size")
    if row.pop("weight_decay") is None:
        assert "weight_decay" not in spec.params  # Adam without weight decay: nothing to set
    else:
        assert spec.defaults()["weight_decay"] == TABLE_7[model]["weight_decay"]
    defaults = spec.defaults()
    assert {k: defaults[k] for k in row} == row


@pytest.mark.parametrize("model", sorted(PRESETS))
def test_presets_are_pinned(model):
    spec = get(model)
    assert spec.presets == PRESETS[model]
    assert spec.default_preset == "inclad"
    assert {p: spec.imagenet_generation(p) for p in spec.presets} == {
        p: IMAGENET_WEIGHTS.get(model, {}).get(p, "IMAGENET1K_V1") for p in spec.presets}
    inclad = spec.resolve(preset="inclad")
    assert inclad == spec.defaults()
    assert {k: inclad[k] for k in INCLAD_CODE.get(model, {})} == INCLAD_CODE.get(model, {})
    for name, values in PRESETS[model].items():
        resolved = spec.resolve(preset=name)
        assert {k: resolved[k] for k in values} == values


def test_run_defaults_are_table_6s():
    cfg = RunConfig(dataset="synthetic", root=".", model="patchcore", tasks=["a"])
    assert (cfg.image.image_size, cfg.image.batch_size, cfg.image.weights) == (224, 32, "imagenet")  # input 224², batch 32, pretrained


def test_patchcore_cl_routes_by_the_mean_patch_distance(tiny_root):
    """App. C.1: j*(x) = argmin_j mean_z d_NN(z, C_j). PatchCore has no route_by: its rule is fixed."""
    assert "route_by" not in get("patchcore").params
    from helpers import create, model_extractor, task_split_pair

    protocol = create("patchcore", model_extractor(("layer2", "layer3"), batch_size=None), 64).continual(seed=0)
    splits = {t: task_split_pair(tiny_root, t, 64) for t in ("disc", "checker")}
    for step, (train, _) in enumerate(splits.values()):
        protocol.learn(train, step)
    test = splits["disc"][1]
    idx = np.arange(len(test))
    patches, shape = protocol.detector._patches(test, idx)
    per_bank = torch.stack([protocol.detector.patch_scores(patches, bank, shape) for bank in protocol.banks_])
    expected = per_bank.flatten(2).mean(2).argmin(0).numpy()
    np.testing.assert_array_equal(protocol.predict(test, idx).routed, expected)


def test_route_rules_differ_where_mean_and_max_disagree():
    """Task 0 fits the image better on average, task 1 has the lower peak: mean picks 0, max picks 1."""
    per_task = torch.zeros(2, 1, 8, 8)
    per_task[0] += 1.0
    per_task[0, 0, 4, 4] = 2.0  # one hot spot, mean ≈ 1.02
    per_task[1] += 1.5  # flat, mean 1.5, peak 1.5
    assert route(per_task, "mean")[1].tolist() == [0]
    assert route(per_task, "max", image_size=8, sigma=0.0)[1].tolist() == [1]
    chosen, _ = route(per_task, "max", image_size=8, sigma=0.0)
    torch.testing.assert_close(chosen[0], per_task[1, 0])
