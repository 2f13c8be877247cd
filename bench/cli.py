"""`python -m bench <command>`: every Makefile target goes through here.

User errors (BenchError) print one line and exit 2; argparse also exits 2 on unknown choices, listing them.
"""

from __future__ import annotations

import argparse
import importlib
import json
import sys
from pathlib import Path

from bench.config import DATASETS
from bench.errors import BenchError, ConfigError

# Modules that add their own subcommands through register(subparsers).
COMMAND_MODULES: tuple[str, ...] = ("bench.report.cli", "bench.hpc.commands", "bench.scenarios.commands",
                                     "bench.tabular.commands")


def default_root(dataset: str) -> Path:
    """Where a dataset lives unless --root says otherwise: $BENCH_ROOT_<DATASET>, its entry in data/roots.yaml, or
    data/raw/<dataset>; for `multi`, the roots file ($BENCH_ROOT_MULTI or data/roots.yaml)."""
    from bench.data.multi import default_root as configured_root

    return configured_root(dataset)


def parse_overrides(items: list[str]) -> dict:
    """--set key=value (value parsed as JSON when it parses, else kept as a string)."""
    out = {}
    for item in items or []:
        key, sep, value = item.partition("=")
        if not sep:
            raise ConfigError(f"--set expects key=value, got {item!r}")
        try:
            out[key] = json.loads(value)
        except json.JSONDecodeError:
            out[key] = value
    return out


def add_run_arguments(p: argparse.ArgumentParser) -> None:
    from bench.config import BACKBONES
    from bench.models import ALL_MODELS

    p.add_argument("--dataset", required=True, choices=DATASETS)
    p.add_argument("--root", type=Path, help="dataset root (default: $BENCH_ROOT_<DATASET> or data/raw/<dataset>)")
    p.add_argument("--model", default="patchcore", choices=ALL_MODELS)
    p.add_argument("--backbone", default="resnet18", choices=BACKBONES)
    p.add_argument("--weights", default="imagenet", help="imagenet (staged by `make weights`) | none | PATH")
    p.add_argument("--protocol", default="cl", choices=("ncl", "cl", "cumulative"))
    order = p.add_mutually_exclusive_group(required=True)
    order.add_argument("--ordering", help="easy_to_hard | hard_to_easy | random | alphabetical")
    order.add_argument("--tasks", help="explicit comma-separated task order, e.g. bottle,cable,screw")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--image-size", type=int, default=224)
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--device", default="auto", choices=("auto", "cpu", "cuda"))
    p.add_argument("--workers", type=int, default=4, help="threads decoding images (does not change results)")
    p.add_argument("--set", action="append", metavar="KEY=VALUE", help="override a model hyperparameter")


def config_from_args(args) -> "RunConfig":  # noqa: F821
    from bench.config import RunConfig
    from bench.data import read_index
    from bench.data.stream import resolve_tasks

    root = args.root or default_root(args.dataset)
    available = sorted(read_index(args.dataset, root)["task"].unique())
    tasks = [t.strip() for t in args.tasks.split(",") if t.strip()] if args.tasks else None
    ordering, order = resolve_tasks(args.dataset, root, available, args.ordering, tasks)
    return RunConfig(dataset=args.dataset, root=str(root), model=args.model, tasks=order, ordering=ordering,
                     backbone=args.backbone, weights=args.weights, protocol=args.protocol, seed=args.seed,
                     image_size=args.image_size, batch_size=args.batch_size, device=args.device,
                     workers=args.workers, hparams=parse_overrides(args.set))


def print_summary(path: Path) -> None:
    from bench.continual.runner import final_summary

    for level, s in final_summary(path).items():
        nan = f"  ({s['nan_cells']}/{s['n_cells']} cells NaN)" if s["nan_cells"] else ""
        print(f"{level:>5}: ROC-AUC_CL {s['roc_auc_cl']:.4f}  BWT {s['bwt']:+.4f}  FM {s['forgetting']:.4f}{nan}")


def cmd_run(args) -> int:
    from bench.continual.runner import execute, prepare

    from bench.data.reuse import reuse_reads

    with reuse_reads():  # config_from_args and prepare both read the index: once is enough
        config = config_from_args(args)
        run = prepare(config, out=args.out)
    print(f"run {run.out.stem}: {config.model}/{config.protocol} on {config.dataset} "
          f"({len(config.tasks)} tasks, {config.ordering}: {', '.join(config.tasks)})")
    path = execute(run, progress=not args.no_progress, max_steps=args.max_steps)
    print(f"results: {path}")
    print_summary(path)
    return 0


def cmd_data(args) -> int:
    from bench.data import read_index

    root = args.root or default_root(args.dataset)
    if args.dataset == "synthetic":
        from bench.data.synthetic import generate

        generate(root, preset=args.preset, seed=args.seed)
    index = read_index(args.dataset, root)
    counts = index.groupby(["task", "split", "label"]).size().unstack(["split", "label"], fill_value=0)
    print(f"{args.dataset} at {root}: {index['task'].nunique()} tasks, {len(index)} images")
    print(counts.to_string())
    return 0


def cmd_weights(args) -> int:
    from bench.features import BACKBONES, stage_weights, staged_weights_path

    if args.stage:
        for path in stage_weights():
            print(f"staged {path}")
        return 0
    for name in BACKBONES:
        path = staged_weights_path(name)
        print(f"{name:<16} {'staged' if path.is_file() else 'missing'}  {path}")
    return 0


def cmd_demo(args) -> int:
    from bench.demo import demo

    return demo(Path(args.outputs), preset=args.preset, progress=not args.no_progress)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m bench", description="Continual anomaly detection benchmark")
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("run", help="one continual run: learn each task, evaluate all seen tasks, write HDF5")
    add_run_arguments(p)
    p.add_argument("--out", type=Path, help="result file (default outputs/<dataset>/runs/<name>.h5)")
    p.add_argument("--max-steps", type=int, help="stop after this many tasks (resume by running again)")
    p.add_argument("--no-progress", action="store_true", help="no progress bars")
    p.set_defaults(func=cmd_run)

    p = sub.add_parser("data", help="generate the synthetic benchmark, or index a real dataset and show counts")
    p.add_argument("--dataset", required=True, choices=DATASETS)
    p.add_argument("--root", type=Path)
    p.add_argument("--preset", default="demo", help="synthetic preset: tiny | demo | visa-scale")
    p.add_argument("--seed", type=int, default=0)
    p.set_defaults(func=cmd_data)

    p = sub.add_parser("weights", help="show staged ImageNet weights; --stage downloads them (needs internet)")
    p.add_argument("--stage", action="store_true")
    p.set_defaults(func=cmd_weights)

    p = sub.add_parser("demo", help="the main job on the built-in synthetic benchmark")
    p.add_argument("--outputs", default="outputs", help="results go to OUTPUTS/synthetic/ (default outputs)")
    p.add_argument("--preset", default="demo", help="synthetic preset: tiny | demo")
    p.add_argument("--no-progress", action="store_true")
    p.set_defaults(func=cmd_demo)

    # `perf` has its own parser (bench/perf.py); listed here for --help only, dispatched in main().
    sub.add_parser("perf", help="performance benchmark (figures, not pass/fail): perf [--only a,b] [--quick]",
                   add_help=False)

    for module in COMMAND_MODULES:
        importlib.import_module(module).register(sub)
    return parser


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv[:1] == ["perf"]:
        from bench.perf import main as perf_main

        return perf_main(argv[1:])
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except BenchError as e:
        print(f"error: {e}", file=sys.stderr)
        return e.exit_code
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
