"""`make demo`: the whole pipeline on the built-in synthetic benchmark, on the CPU, in minutes.

Generates the synthetic benchmark, runs PatchCore, PaDiM, CFA and FastFlow, NCL and CL, over three orderings
(random-init resnet18: weights=none, since this machine cannot download ImageNet weights), each with its
registered quick setting on top of its default hyperparameter preset (`inclad`; `--model-preset NAME` picks
another; both printed), writes one HDF5 file per run and a Table 2 (via `make aggregate`'s code) under
outputs/synthetic/tables/, and prints the comparison with InCLAD's published Table 2 (every cell not comparable
here, with the reasons). `python -m bench demo --all` (`make demo-all`) runs every registered detector.
"""

from __future__ import annotations

import time
from pathlib import Path

import pandas as pd

from bench.data.multi import default_root
from bench.config import ImageInputs, RunConfig
from bench.continual.runner import execute, prepare
from bench.data import read_index
from bench.data.reuse import reuse_reads
from bench.data.stream import resolve_tasks
from bench.data.synthetic import PRESETS, generate
from bench.registry import get, specs
from bench.report import paper
from bench.report.aggregate import Options, aggregate

ORDERINGS = ("easy_to_hard", "hard_to_easy", "random")
def demo_models(everything: bool = False) -> dict[str, dict]:
    """model → the quick setting it runs with (registered with the detector; the grids and `run` keep Table 6/7).
    The demo's own are those whose spec says `demo` (the three task-bank methods and FastFlow, which trains only
    its flows on cached features): all nine × 3 orderings × 2 protocols take longer than the demo's 10 minutes on
    2 CPU cores, so `--all` runs them."""
    names = list(specs()) if everything else [m for m, s in specs().items() if s.demo]
    return {m: dict(get(m).quick) for m in names}


def demo_configs(root: Path, preset: str = "demo", everything: bool = False,
                 model_preset: str | None = None) -> list[RunConfig]:
    """The demo's runs: model × ordering × protocol on the synthetic benchmark at `root` (also jobs/synthetic.yaml's
    grid, so `make submit DATASET=synthetic` finds a demo's results done). `preset`: the synthetic benchmark's
    size; `model_preset`: the hyperparameter preset the quick settings apply on (None: each model's default)."""
    available = sorted(read_index("synthetic", root)["task"].unique())
    streams = {ordering: resolve_tasks("synthetic", root, available, ordering=ordering)[1] for ordering in ORDERINGS}
    return [RunConfig(dataset="synthetic", root=str(root), model=model, tasks=list(streams[ordering]),
                      ordering=ordering, protocol=protocol, seed=0, device="auto", hparams=dict(hparams),
                      preset=get(model).preset_name(model_preset), inputs=ImageInputs(backbone="resnet18", weights="none", image_size=PRESETS[preset]["image_size"],
                                         batch_size=32))
            for model, hparams in demo_models(everything).items() for ordering in ORDERINGS
            for protocol in ("ncl", "cl")]


def demo(outputs: Path, preset: str = "demo", progress: bool = True, everything: bool = False,
         model_preset: str | None = None) -> int:
    """Everything lands in outputs/synthetic/: runs/*.h5, tables/, figures/."""
    t_start = time.perf_counter()
    out = outputs / "synthetic"
    root = default_root("synthetic")
    generate(root, preset=preset, seed=0)
    configs = demo_configs(root, preset, everything, model_preset)
    print(f"synthetic benchmark ({preset}): {len(configs[0].tasks)} tasks at {root}, {configs[0].image.image_size}px")
    print("weights=none: random-init backbones (no ImageNet download here); numbers show the pipeline, "
          "not paper-comparable accuracy")
    runs_dir = out / "runs"
    for model, hparams in demo_models(everything).items():
        name = get(model).preset_name(model_preset)
        print(f"{model}: preset {name}" + (f" + demo settings {hparams}" if hparams else ""))
    with reuse_reads():  # every run is validated before any work, reading the dataset once
        runs = [prepare(cfg, out_dir=runs_dir) for cfg in configs]
    for cfg, run in zip(configs, runs):
        print(f"\n== {cfg.model} {cfg.protocol.upper()} {cfg.ordering}: {' → '.join(cfg.tasks)}")
        execute(run, progress=progress)
    # The same aggregation as `make figures`: provenance checked, every cell traceable to its run files, and the
    # report's per-method figures drawn as PNG and PDF too (a demo's few dozen take seconds)
    aggregate(outputs, "synthetic", Options(paper_figures=True), log=lambda *_: None)
    tables = out / "tables"
    print("\n" + (tables / "table2.md").read_text())
    # what a run on real data with ImageNet weights is compared with: here every cell says why it is not comparable
    print("\n".join(paper.summary_lines(pd.read_csv(tables / "paper_comparison.csv"))))
    print(f"results: {runs_dir}/\nTable 2: {tables / 'table2.md'} (also .tex, .csv)\n"
          f"per-run table: {tables / 'runs.csv'}\nheatmaps: {out / 'figures'}/\n"
          f"beside InCLAD's published tables: {tables / 'paper_comparison.md'}\n"
          f"took {time.perf_counter() - t_start:.0f}s")
    print(f"report (open in a browser): {out / 'report' / 'index.html'}")  # last, so it is what a reader sees
    return 0
