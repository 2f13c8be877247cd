"""`python -m bench perf | device-check | demo | distill-teacher`: the tools' subcommands (registered through
bench.cli.COMMAND_MODULES, as every other command).

Only argparse here: each command imports its tool when it runs, because every `python -m bench ...` builds the
whole parser, and the tools import torch and every detector.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from bench.config import DEVICES


def register(sub) -> None:
    p = sub.add_parser("demo", help="the main job on the built-in synthetic benchmark")
    p.add_argument("--all", action="store_true", help="every registered detector (longer than 10 minutes)")
    p.add_argument("--outputs", default="outputs", help="results go to OUTPUTS/synthetic/ (default outputs)")
    p.add_argument("--preset", default="demo", help="synthetic preset: tiny | demo")
    p.add_argument("--model-preset", default=None, metavar="NAME",
                   help="hyperparameter preset of every demo model (default: each model's, inclad)")
    p.add_argument("--no-progress", action="store_true")
    p.set_defaults(func=cmd_demo)

    p = sub.add_parser("perf", help="performance benchmarks (figures, not pass/fail)",
                       description="Performance benchmarks: each prints one line of figures; all are written to "
                                   "--out. Figures go in notes, never in timed tests.")
    p.add_argument("--only", help="comma-separated benchmarks to run, in their registered order (default: all; an "
                                  "unknown name is refused with the list of valid ones)")
    p.add_argument("--quick", action="store_true", help="smaller sizes: a smoke test, not a measurement")
    p.add_argument("--out", type=Path, default=Path("outputs/perf/perf.json"),
                   help="JSON results file (default outputs/perf/perf.json)")
    p.set_defaults(func=cmd_perf)

    p = sub.add_parser("device-check", help="CPU vs --device agreement of every detector, and throughput on both "
                                            "(exit 1: a disagreement; 2: the device is missing)")
    p.add_argument("--device", default="cuda", help="the device to check against the CPU (default cuda)")
    p.add_argument("--quick", action="store_true", help="agreement only, no throughput")
    p.add_argument("--models", default=None,
                   help="comma-separated detectors to check (default: every registered one)")
    p.add_argument("--out", type=Path, default=Path("outputs/device/check.json"),
                   help="JSON report (default outputs/device/check.json)")
    p.set_defaults(func=cmd_device_check)

    p = sub.add_parser("distill-teacher", help="distil EfficientAD's PDN-S teacher from wide_resnet50_2 "
                                               "(offline) on a folder of images; use it with --set teacher=PATH")
    p.add_argument("--images", type=Path, required=True, help="folder of natural images (searched recursively)")
    p.add_argument("--out", type=Path, required=True, help="teacher file to write (safetensors)")
    p.add_argument("--weights", default="imagenet", help="imagenet (staged by `make weights`) | none | PATH")
    p.add_argument("--steps", type=int, default=60_000, help="training steps (the paper: 60,000)")
    p.add_argument("--batch-size", type=int, default=16)
    p.add_argument("--image-size", type=int, default=256, help="the PDN's input size (the backbone sees 2×)")
    p.add_argument("--out-channels", type=int, default=384)
    p.add_argument("--no-padding", action="store_true", help="the released code's unpadded PDN")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--device", default="auto", choices=DEVICES)
    p.set_defaults(func=cmd_distill)


def cmd_demo(args: argparse.Namespace) -> int:
    from bench.tools.demo import demo

    return demo(Path(args.outputs), preset=args.preset, progress=not args.no_progress, everything=args.all,
                model_preset=args.model_preset)


def cmd_perf(args: argparse.Namespace) -> int:
    from bench.tools.perf import run_benchmarks

    return run_benchmarks(args)


def cmd_device_check(args: argparse.Namespace) -> int:
    from bench.tools.device_check import check

    return check(args)


def cmd_distill(args: argparse.Namespace) -> int:
    from bench.errors import ConfigError

    for name in ("steps", "batch_size", "out_channels"):
        if getattr(args, name) < 1:
            raise ConfigError(f"--{name.replace('_', '-')} must be ≥ 1, got {getattr(args, name)}")
    if args.image_size < 32:
        raise ConfigError(f"--image-size must be ≥ 32, got {args.image_size}")
    from bench.models.efficientad.distill import distill_teacher  # after the checks: it imports torch

    distill_teacher(args.images, args.out, weights=args.weights, image_size=args.image_size, steps=args.steps,
                    batch_size=args.batch_size, out_channels=args.out_channels, padding=not args.no_padding,
                    seed=args.seed, device=args.device)
    print(f"teacher: {args.out} (use it with --set teacher={args.out})")
    return 0
