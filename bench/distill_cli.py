"""`python -m bench distill-teacher`: EfficientAD's teacher from a staged wide_resnet50_2 (bench/models/efficientad/distill.py)."""

from __future__ import annotations

import argparse
from pathlib import Path


def register(sub) -> None:
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
    p.add_argument("--device", default="auto", choices=("auto", "cpu", "cuda"))
    p.set_defaults(func=cmd_distill)


def cmd_distill(args: argparse.Namespace) -> int:
    from bench.models.efficientad.distill import distill_teacher
    from bench.errors import ConfigError

    for name in ("steps", "batch_size", "out_channels"):
        if getattr(args, name) < 1:
            raise ConfigError(f"--{name.replace('_', '-')} must be ≥ 1, got {getattr(args, name)}")
    if args.image_size < 32:
        raise ConfigError(f"--image-size must be ≥ 32, got {args.image_size}")
    distill_teacher(args.images, args.out, weights=args.weights, image_size=args.image_size, steps=args.steps,
                    batch_size=args.batch_size, out_channels=args.out_channels, padding=not args.no_padding,
                    seed=args.seed, device=args.device)
    print(f"teacher: {args.out} (use it with --set teacher={args.out})")
    return 0
