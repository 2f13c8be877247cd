"""The CUDA path, checked: the same runs on the CPU and on the GPU agree, and how much faster the GPU is.

  python -m bench device-check [--device cuda] [--quick] [--models a,b] [--out outputs/device/check.json]
                                                                                          (make device-check)

Agreement: every registered detector with its quick setting (1 epoch), NCL and CL, over 3 tasks of the
tiny synthetic benchmark (64 px, resnet18, weights=none), once on the CPU and once on `--device`. PatchCore and
PaDiM train nothing, so each test image's score must agree within SCORE_RTOL and every R entry within R_ATOL
(cuDNN's TF32 convolutions move features by ~1e-3 relative). Trained detectors (CFA's descriptor, the students,
decoders and flows) carry float differences through every epoch: only their R is compared, within TRAINED_R_ATOL.

Throughput (not with --quick): backbone images per second at 224 px for both backbones, and train and eval
seconds of one 2-task CL run per model at 224 px, on both devices.

Exit 0: everything agrees; 1: a tolerance is exceeded (the printed table says where); 2: the device is missing.
`--device cpu` runs the check against the CPU itself (everything agrees exactly): the tests use it.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

import numpy as np
import torch

from bench import results
from bench.config import ImageInputs, RunConfig
from bench.continual.runner import execute, prepare
from bench.errors import BenchError, ConfigError
from bench.devices import resolve_device, synchronize
from bench.features import create_backbone
from bench.io import write_text_atomic
from bench.registry import specs
from bench.tools.perf import best_of, figure_line

TASKS = ["chip", "disc", "checker"]
SCORE_RTOL, R_ATOL, TRAINED_R_ATOL = 1e-2, 0.02, 0.05


def _check_settings() -> dict[str, dict]:
    """model → its quick setting cut to 1 epoch of batches of at least 16 (from the registry: every detector is
    checked; one epoch already carries the devices' float differences through training)."""
    out = {}
    for name, spec in specs().items():
        hparams = dict(spec.quick)
        if "epochs" in spec.params:
            hparams["epochs"] = 1
        if "batch_size" in spec.params:
            hparams["batch_size"] = max(hparams.get("batch_size", spec.params["batch_size"].default), 16)
        out[name] = hparams
    return out


MODELS = _check_settings()


def _run(root: Path, out: Path, model: str, protocol: str, device: str, tasks, image_size: int) -> dict:
    cfg = RunConfig(dataset="synthetic", root=str(root), model=model, tasks=list(tasks), protocol=protocol, seed=0,
                    device=device, hparams=dict(MODELS[model]),
                    inputs=ImageInputs(backbone="resnet18", weights="none", image_size=image_size, batch_size=8))
    return results.read_run(execute(prepare(cfg, out=out), progress=False, log=lambda *_: None))


def _r_difference(a: np.ndarray, b: np.ndarray) -> float:
    """Largest |a − b| over R's defined cells; a cell defined on one device only counts as infinitely apart."""
    if not np.array_equal(np.isnan(a), np.isnan(b)):
        return float("inf")
    both = ~np.isnan(a)
    return float(np.abs(a[both] - b[both]).max()) if both.any() else 0.0


def agreement(root: Path, work: Path, device: str, models=tuple(MODELS)) -> list[dict]:
    """One row per model × protocol: the largest CPU-vs-device differences and whether they are within tolerance."""
    rows = []
    for model in models:
        for protocol in ("ncl", "cl"):
            ref, dev = (_run(root, work / f"{model}_{protocol}_{name}.h5", model, protocol, d, TASKS, 64)
                        for name, d in (("reference", "cpu"), ("checked", device)))
            r_diff = max(_r_difference(ref[f"R/{level}"], dev[f"R/{level}"]) for level in ("image", "pixel"))
            a, b = ref["scores/value"], dev["scores/value"]
            score_diff = float(np.max(np.abs(a - b) / np.maximum(np.abs(a), 1e-6)))
            row = {"model": model, "protocol": protocol, "max_abs_dR": round(r_diff, 4),
                   "max_rel_dscore": float(f"{score_diff:.2g}")}
            if "routing/counts" in ref:
                row["routing_equal"] = bool(np.array_equal(ref["routing/counts"], dev["routing/counts"]))
            if "epochs" in MODELS[model]:
                row["ok"] = r_diff <= TRAINED_R_ATOL
            else:
                row["ok"] = r_diff <= R_ATOL and score_diff <= SCORE_RTOL
            rows.append(row)
    return rows


def backbone_throughput(device: torch.device, batch: int = 32, size: int = 224, repeats: int = 5) -> dict:
    """Images per second through each backbone's layers 1–3 (weights=none; the weights do not change the cost)."""
    out = {}
    images = torch.randn(batch, 3, size, size, generator=torch.Generator().manual_seed(0)).to(device)
    for name in ("resnet18", "wide_resnet50_2"):
        model = create_backbone(name, "none", ("layer1", "layer2", "layer3")).to(device)
        with torch.no_grad():
            model(images)  # warm-up: cuDNN autotuning, allocator
            synchronize(device)
            best = best_of(repeats, lambda: (model(images), synchronize(device)))  # timed up to the GPU's finish
        out[f"{name}_img_per_s"] = round(batch / best, 1)
    return out


def run_times(root: Path, work: Path, device: str, models=tuple(MODELS)) -> dict:
    """Train and eval seconds of a 2-task CL run per model at 224 px (trained ones 1 epoch) on `device`."""
    from bench.data import read_index

    out, tasks = {}, sorted(read_index("synthetic", root)["task"].unique())
    for model in models:
        run = _run(root, work / f"{model}_{device}_224.h5", model, "cl", device, tasks, 224)
        out[f"{model}_train_s"] = round(float(run["timing/train_s"].sum()), 2)
        out[f"{model}_eval_s"] = round(float(run["timing/eval_s"].sum()), 2)
    return out


def selected(models: str | None) -> list[str]:
    """The detectors `--models` names (comma-separated; None: every registered one); none or an unknown one is a
    ConfigError listing the known ones."""
    if models is None:
        return list(MODELS)
    chosen = [m.strip() for m in models.split(",") if m.strip()]
    unknown = sorted(set(chosen) - set(MODELS))
    if unknown or not chosen:
        raise ConfigError(f"--models {models!r}: unknown {', '.join(unknown) or '(none given)'}; "
                          f"known: {', '.join(MODELS)}")
    return chosen


def check(args: argparse.Namespace) -> int:
    """`python -m bench device-check`: args.device, args.quick, args.models, args.out (bench/tools/commands.py)."""
    models = selected(args.models)
    try:
        device = resolve_device(args.device)
    except BenchError as e:
        print(f"error: {e}; this check needs that device (`--device cpu` checks the CPU against itself)",
              file=sys.stderr)
        return 2

    from bench.data.synthetic import generate

    report: dict = {"device": str(device), "quick": args.quick}
    if device.type == "cuda":
        report["gpu"] = torch.cuda.get_device_name(device)
        report["tf32_conv"] = torch.backends.cudnn.allow_tf32
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        tiny = generate(tmp / "tiny", preset="tiny", seed=0)
        report["agreement"] = rows = agreement(tiny, tmp / "agree", args.device, models)
        for row in rows:
            print(figure_line(row), flush=True)
        if not args.quick:
            big = generate(tmp / "big", preset="demo", seed=0, image_size=224, n_tasks=2)
            report["throughput"] = {d: {**backbone_throughput(torch.device(d)),
                                        **run_times(big, tmp / "times", d, models)}
                                    for d in dict.fromkeys(("cpu", args.device))}
            for d, figures in report["throughput"].items():
                print(f"{d}: " + figure_line(figures), flush=True)
    report["ok"] = all(row["ok"] for row in rows)
    write_text_atomic(args.out, json.dumps(report, indent=2) + "\n")
    print(f"{'all agree' if report['ok'] else 'DISAGREEMENT: see the rows with ok=False'}; wrote {args.out}")
    return 0 if report["ok"] else 1
