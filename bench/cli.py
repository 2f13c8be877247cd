"""`python -m bench <command>`: every Makefile target goes through here.

User errors (BenchError) print one line and exit 2; argparse also exits 2 on unknown choices, listing them.
"""

from __future__ import annotations

import argparse
import importlib
import sys
import warnings
from pathlib import Path

from bench.config import DATASETS  # noqa: F401 - the built-in image datasets, importable from here
from bench.datasets import names as dataset_names
from bench.errors import BenchError, ConfigError, WeightsError

# Modules that add their own subcommands through register(subparsers).
COMMAND_MODULES: tuple[str, ...] = ("bench.tools.commands", "bench.report.cli", "bench.hpc.commands",
                                    "bench.scenarios.commands", "bench.tabular.commands", "bench.assembly.commands")


def add_run_arguments(p: argparse.ArgumentParser) -> None:
    """The options of an image run. Each run setting's default, choices and meaning come from its field of
    RunConfig or ImageInputs (`bench.config.setting`); only what the command resolves itself is said here."""
    from bench.config import IMAGE_PROTOCOLS, ImageInputs, RunConfig, add_setting_options
    from bench.registry import INCLAD_MODELS, names

    p.add_argument("--dataset", required=True, choices=dataset_names("image"),
                   help="a dataset of bench/datasets.py or of an installed plugin (entry points bench.datasets)")
    p.add_argument("--root", type=Path, help="dataset root (default: $BENCH_ROOT_<DATASET> or data/raw/<dataset>)")
    p.add_argument("--model", default=INCLAD_MODELS[0], choices=names(),
                   help="a detector of bench/models or of an installed plugin (entry points bench.detectors)")
    add_setting_options(p, ImageInputs, ("backbone", "weights"))
    add_setting_options(p, RunConfig, ("protocol",), protocol={"choices": IMAGE_PROTOCOLS, "help": (
        "ncl: train on each task as it comes; cl: the detector's continual variant (task banks) or replay; "
        "cumulative: retrain on every past task's images (gradient-trained detectors only)")})
    order = p.add_mutually_exclusive_group(required=True)
    order.add_argument("--ordering", help="easy_to_hard | hard_to_easy | random | alphabetical")
    order.add_argument("--tasks", help="explicit comma-separated task order, e.g. bottle,cable,screw")
    add_setting_options(p, RunConfig, ("seed",))
    add_setting_options(p, ImageInputs, ("image_size", "batch_size"), image_size={
        "default": None, "default_text": "the model's paper input size, e.g. 256 for STFPM"})
    add_setting_options(p, RunConfig, ("device",))
    add_setting_options(p, ImageInputs, ("workers",))
    add_setting_options(p, RunConfig, ("preset", "label"), preset={"metavar": "NAME"}, label={"metavar": "NAME"})
    p.add_argument("--set", action="append", metavar="KEY=VALUE", help="override a model hyperparameter")
    add_setting_options(p, ImageInputs, ("pixel_eval", "mask_threshold", "feature_dtype", "resize", "cache_budget"),
                        cache_budget={"metavar": "SIZE"})


def paper_image_size(model: str, image_size: int | None, log=print) -> int:
    """`image_size`, or the model's paper input size when None; a size other than the paper's is one note
    line (such a run is not comparable with the paper's tables)."""
    from bench.registry import get

    spec = get(model)
    if image_size is None:
        return spec.image_size
    if spec.image_size is not None and image_size != spec.image_size:
        from bench.registry import INCLAD_MODELS

        if model in INCLAD_MODELS:
            log(f"note: --image-size {image_size} differs from {spec.label}'s paper input size {spec.image_size} "
                f"(InCLAD Tables 6-7); the run is not comparable with the paper's tables")
        else:  # a plugin: its size is its own registration's, and InCLAD has no row for it
            log(f"note: --image-size {image_size} differs from {spec.label}'s registered input size "
                f"{spec.image_size}")
    return image_size


def config_from_args(args) -> "RunConfig":  # noqa: F821
    from bench.config import ImageInputs, parse_overrides
    from bench.image.config import build_run_config
    from bench.data.multi import default_root

    image_size = paper_image_size(args.model, args.image_size)
    inputs = ImageInputs(backbone=args.backbone, weights=args.weights, image_size=image_size,
                         batch_size=args.batch_size, pixel_eval=args.pixel_eval, feature_dtype=args.feature_dtype,
                         resize=args.resize, mask_threshold=args.mask_threshold, workers=args.workers, cache_budget=args.cache_budget)
    return build_run_config(args.dataset, args.root or default_root(args.dataset), args.model,
                            ordering=args.ordering, tasks=args.tasks, protocol=args.protocol, seed=args.seed,
                            device=args.device, hparams=parse_overrides(args.set), preset=args.preset,
                            label=args.label, inputs=inputs)


def print_summary(path: Path) -> None:
    from bench.results import summary_lines

    print("\n".join(summary_lines(path)))


def cmd_run(args) -> int:
    from bench.config import check_max_steps
    from bench.continual.runner import execute, prepare
    from bench.data.reuse import reuse_reads

    check_max_steps(args.max_steps)
    with reuse_reads():  # config_from_args and prepare both read the index: once is enough
        config = config_from_args(args)
        run = prepare(config, out=args.out)
    print(f"run {run.out.stem}: {config.model}/{config.protocol} on {config.dataset} "
          f"({len(config.tasks)} task{'s' if len(config.tasks) != 1 else ''}, {config.ordering}: "
          f"{', '.join(config.tasks)})")
    path = execute(run, progress=not args.no_progress, max_steps=args.max_steps)
    print(f"results: {path}")
    print_summary(path)
    return 0


def cmd_data(args) -> int:
    from bench.data import read_index
    from bench.data.multi import default_root
    from bench.data.readers import missing_concepts

    root = Path(args.root or default_root(args.dataset)).expanduser()
    if args.dataset == "synthetic":
        from bench.data.synthetic import generate

        generate(root, preset=args.preset, seed=args.seed)
    index = read_index(args.dataset, root)
    counts = index.groupby(["task", "split", "label"]).size().unstack(["split", "label"], fill_value=0)
    print(f"{args.dataset} at {root}: {index['task'].nunique()} tasks, {len(index)} images")
    missing = missing_concepts(args.dataset, index["task"])
    if missing:  # told here, where data is staged, rather than by every run of a grid
        print(f"note: {args.dataset} concepts not found: {', '.join(missing)} (the others are indexed)")
    print(counts.to_string())
    return 0


def cmd_weights(args) -> int:
    from bench.features import check_torchvision_file, stage_weights, staged_files, staged_weights_path

    if args.stage:
        for path in stage_weights():
            print(f"staged {path}")
        return 0
    for name, tag in staged_files():
        path = staged_weights_path(name, tag)
        state = "missing"
        if path.is_file():
            try:
                check_torchvision_file(path, name, tag)
                state = "staged"
            except WeightsError:  # there, but not shown to be torchvision's: runs refuse it
                state = "unverified"
        print(f"{name + '.' + tag:<26} {state:<10}  {path}")
    return 0


def cmd_track_of(args) -> int:
    """`<track> <dataset>` of a result set (what `make` routes DATASET= by: make/scenarios.mk, make/tabular.mk)."""
    from bench.datasets import of_result_set

    print(*of_result_set(args.result_set))
    return 0


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
    p.add_argument("--dataset", required=True, choices=dataset_names("image"))
    p.add_argument("--root", type=Path)
    p.add_argument("--preset", default="demo", help="synthetic preset: tiny | demo | visa-scale")
    p.add_argument("--seed", type=int, default=0)
    p.set_defaults(func=cmd_data)

    p = sub.add_parser("track-of", help="print the track and dataset of a result set, e.g. `tabular synthetic` for "
                                        "tabular-synthetic (how make routes DATASET=)")
    p.add_argument("result_set", metavar="RESULT_SET", help="a dataset name as `make ... DATASET=` takes it")
    p.set_defaults(func=cmd_track_of)

    p = sub.add_parser("weights", help="show staged ImageNet weights; --stage downloads them (needs internet)")
    p.add_argument("--stage", action="store_true")
    p.set_defaults(func=cmd_weights)

    for module in COMMAND_MODULES:
        importlib.import_module(module).register(sub)
    return parser


def main(argv=None) -> int:
    format_warning = warnings.formatwarning
    warnings.formatwarning = _one_line_warning  # a broken plugin's warning while the parser lists them: one line too
    try:
        args = build_parser().parse_args(argv)
        from bench.assembly.commands import route

        args = route(args)  # `aggregate` of a stream-assembly result set is that study's (bench.report is below it)
        return args.func(args)
    except BenchError as e:
        print(f"error: {e}", file=sys.stderr)
        return e.exit_code
    except OSError as e:  # an unreadable folder, a full disk: one line naming the file
        where = f"{e.filename}: " if e.filename else ""
        print(f"error: {where}{e.strerror or e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt as e:
        signame = str(e) or "SIGINT"
        print(f"interrupted ({signame}); the run keeps its checkpoint: run the same command again to resume",
              file=sys.stderr)
        return 130 if signame == "SIGINT" else 143
    finally:
        warnings.formatwarning = format_warning


def _one_line_warning(message, category, filename, lineno, line=None) -> str:
    """Warnings as users read them: `warning: <what>`, without the source file and line of the library."""
    return f"warning: {' '.join(str(message).split())}\n"
