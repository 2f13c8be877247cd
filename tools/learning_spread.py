"""The spread behind the learning thresholds of tests/training/test_training.py, measured over training seeds and
CPU thread counts: each (model, seed, threads) runs in its own process with OMP_NUM_THREADS and
torch.set_num_threads set, on the same inputs the tests use (tiny synthetic benchmark, held-out textures, 64 px,
random-init resnet18, the models' quick settings).

    .venv/bin/python tools/learning_spread.py --models stfpm paste --seeds 0 1 2 --threads 1 2 > spread.jsonl

One JSON line per case: per-task synthetic AUROC, the held-out texture's trained/untrained AUROC and whether the
loss fell, and the replay stream's BWT under NCL and CL. Slow (minutes per case on a laptop core); not a test."""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1] / "tests"
MEASURES = ("synthetic", "held_out", "replay")


def _measure(model: str, seed: int, measures: list[str], work: Path) -> dict:
    sys.path[:0] = [str(TESTS), str(TESTS / "training")]
    import numpy as np

    from helpers import create, make_run_config, model_extractor, task_split_pair
    from test_training import HELD_OUT, HELD_OUT_SETTINGS, REPLAY_TEST_SETTINGS
    from textures import generate as textures, splits

    from bench import results
    from bench.continual.runner import execute, prepare
    from bench.data import read_index
    from bench.data.synthetic import generate
    from bench.metrics import roc_auc, summarize
    from bench.registry import get

    spec = get(model)
    quick = spec.quick
    extractor = model_extractor(spec.layers(spec.resolve(quick)))
    out: dict = {}
    tiny = generate(work / "tiny", preset="tiny", seed=0)
    if "synthetic" in measures:
        aucs = {}
        for task in sorted(read_index("synthetic", tiny)["task"].unique()):
            train, test = task_split_pair(tiny, task)
            det = create(model, extractor, 64, **quick).fit(train, seed=seed)
            aucs[task] = round(roc_auc(test.labels, det.predict(test, np.arange(len(test))).scores), 3)
        out["synthetic"] = aucs
    if "held_out" in measures:
        task, _ = HELD_OUT[model]
        root = textures(work / "textures", size=64, textures=("clouds", "weave"))  # the test's fixture: same draws
        settings = {**quick, **HELD_OUT_SETTINGS.get(model, {})}
        train, test = splits(root, task, 64)
        untrained = create(model, extractor, 64, **settings)
        untrained.build(seed)
        det = create(model, extractor, 64, **settings).fit(train, seed=seed)
        idx = np.arange(len(test))
        out["held_out"] = {"task": task, "trained": round(roc_auc(test.labels, det.predict(test, idx).scores), 3),
                           "untrained": round(roc_auc(test.labels, untrained.predict(test, idx).scores), 3),
                           "loss_fell": bool(det.losses_[-1] < det.losses_[0])}
    if "replay" in measures:
        bwt = {}
        for protocol in ("ncl", "cl"):
            cfg = make_run_config(tiny, ["chip", "stripes", "disc"], protocol=protocol, model=model, seed=seed,
                                  hparams={**quick, **REPLAY_TEST_SETTINGS.get(model, {})})
            run = results.read_run(execute(prepare(cfg, out_dir=work / protocol), progress=False,
                                           log=lambda *_: None))
            bwt[protocol] = round(float(summarize(run["R/image"])["bwt"]), 3)
        out["replay_bwt"] = bwt
    return out


def _child(args) -> int:
    import torch

    torch.set_num_threads(args.threads)
    with tempfile.TemporaryDirectory() as work:
        result = _measure(args.models[0], args.seeds[0], args.measures, Path(work))
    print(json.dumps({"model": args.models[0], "seed": args.seeds[0], "threads": args.threads, **result}))
    return 0


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", default=["stfpm", "fastflow", "rd4ad", "paste"])
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    parser.add_argument("--threads", nargs="+", type=int, default=[1, 2])
    parser.add_argument("--measures", nargs="+", choices=MEASURES, default=list(MEASURES))
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        args.threads = args.threads[0]
        return _child(args)
    for model in args.models:
        for seed in args.seeds:
            for threads in args.threads:
                env = {**os.environ, "OMP_NUM_THREADS": str(threads), "MKL_NUM_THREADS": str(threads)}
                cmd = [sys.executable, __file__, "--child", "--models", model, "--seeds", str(seed),
                       "--threads", str(threads), "--measures", *args.measures]
                done = subprocess.run(cmd, env=env, capture_output=True, text=True)
                if done.returncode != 0:
                    print(json.dumps({"model": model, "seed": seed, "threads": threads,
                                      "error": done.stderr.strip().splitlines()[-1:]}), flush=True)
                    continue
                print(done.stdout.strip(), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
