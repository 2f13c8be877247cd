"""Performance benchmark of the bounded feature cache, registered into `bench.tools.perf`.

  feature_cache  peak RSS and wall time of a VisA-scale synthetic PatchCore-CL and CFA-CL run (preset
                 visa-scale: 12 tasks, 722 train / 180 test images each; resnet18, weights=none, 64 px) with an
                 unbounded cache and with a budget of a quarter of what the cache would hold unbounded
                 (`bench.hpc.memory.estimate_memory`); R must be identical, the time cost of the bound is the ratio.

CFA runs one epoch (the cost of the bound is in reading spilled features back, once per epoch). Each run is a
fresh spawned process, so its peak is its own. `--quick`: 2 tasks of 24 train / 8 test images, in this process
(a smoke test, not a measurement).
"""

from __future__ import annotations

import tempfile
import time
from pathlib import Path

import numpy as np

from bench.tools.perf import benchmark, peak_rss_mb, run_isolated

SIZE = 64


def _run_child(root: str, out: str, model: str, budget: str) -> dict:
    import h5py

    from bench.config import ImageInputs, RunConfig
    from bench.continual.runner import execute, prepare
    from bench.data import read_index

    tasks = sorted(read_index("synthetic", root)["task"].unique())
    cfg = RunConfig(dataset="synthetic", root=root, model=model, tasks=list(tasks), device="cpu",
                    hparams={"epochs": 1} if model == "cfa" else {},
                    inputs=ImageInputs(weights="none", image_size=SIZE, batch_size=32, cache_budget=budget))
    run = prepare(cfg, out=Path(out))
    t0 = time.perf_counter()
    execute(run, progress=False, log=lambda *_: None)
    seconds = time.perf_counter() - t0
    with h5py.File(out, "r", locking=False) as f:
        return {"s": seconds, "peak_mb": peak_rss_mb(), "R": f["R/image"][()].tolist(),
                "spilled": int(f.attrs["cache_spilled_images"]), "forward": int(f.attrs["backbone_forward_images"])}


def _cache_bytes(root: str, model: str) -> int:
    from bench.config import ImageInputs, RunConfig
    from bench.continual.runner import prepare
    from bench.data import read_index
    from bench.hpc.memory import estimate_memory

    tasks = sorted(read_index("synthetic", root)["task"].unique())
    cfg = RunConfig(dataset="synthetic", root=root, model=model, tasks=list(tasks), device="cpu",
                    inputs=ImageInputs(weights="none", image_size=SIZE))
    return estimate_memory(prepare(cfg, out_dir=Path(tempfile.gettempdir()))).cache


@benchmark("feature_cache")
def feature_cache(args) -> dict:
    from bench.data.synthetic import generate

    sizes = {"n_tasks": 2, "n_train": 24, "n_test": 8} if args.quick else {}
    out = {}
    with tempfile.TemporaryDirectory() as tmp:
        root = str(generate(Path(tmp) / "visa-scale", preset="visa-scale", seed=0, image_size=SIZE, **sizes))
        for model in ("patchcore", "cfa"):
            budget = str(_cache_bytes(root, model) // 4)
            figures = {}
            for name, setting in (("unbounded", "1T"), ("bounded", budget)):
                call = (_run_child, root, f"{tmp}/{model}-{name}.h5", model, setting)
                figures[name] = run_isolated(*call)
            free, bound = figures["unbounded"], figures["bounded"]
            out[f"{model}_budget_mb"] = round(int(budget) / 1e6)
            out[f"{model}_peak_mb_unbounded"] = round(free["peak_mb"])
            out[f"{model}_peak_mb_bounded"] = round(bound["peak_mb"])
            out[f"{model}_s_unbounded"] = round(free["s"], 1)
            out[f"{model}_s_bounded"] = round(bound["s"], 1)
            out[f"{model}_time_cost"] = round(bound["s"] / max(free["s"], 1e-9), 3)
            out[f"{model}_spilled_images"] = bound["spilled"]
            out[f"{model}_same_r"] = (np.array_equal(free["R"], bound["R"], equal_nan=True)
                                      and free["forward"] == bound["forward"])
    return out
