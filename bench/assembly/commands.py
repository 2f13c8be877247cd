"""`python -m bench assembly {run,synthetic,aggregate}`: the stream-assembly study's command line (registered through
bench.cli.COMMAND_MODULES). Grids go through `make submit DATASET=<corpus>-assembly` (bench/hpc/assembly_grid.py);
`make aggregate DATASET=<corpus>-assembly` is routed here by bench.cli. Bad input is one line, exit 2."""

from __future__ import annotations

import argparse
from pathlib import Path

from bench.datasets import ASSEMBLY_SUFFIX
from bench.datasets import is_assembly_set as is_result_set  # noqa: F401 (this module's name for it)


def result_set(corpus_name: str) -> str:
    """The outputs/<name>/ folder (and `make ... DATASET=<name>`) of a corpus's assembly runs."""
    return f"{corpus_name}{ASSEMBLY_SUFFIX}"


def result_sets() -> tuple[str, ...]:
    """Every assembly result set: the synthetic week's, then each registered corpus source's."""
    from bench.assembly.corpus import SOURCES

    return tuple(result_set(name) for name in ("synthetic", *sorted(SOURCES)))


def _budgets(text: str | None):
    from bench.errors import ConfigError

    if not text:
        return None
    out = {}
    for item in text.split(","):
        name, sep, value = item.partition("=")
        if not sep or not value.strip().isdigit():
            raise ConfigError(f"--budgets {text!r}: expected CAPTURE=RECORDS,... (e.g. Monday=300000,...)")
        out[name.strip()] = int(value)
    return tuple(sorted(out.items()))


def cmd_run(args) -> int:
    from bench.assembly import runs
    from bench.assembly.records import SplitRule

    corpus = runs.CorpusSpec(args.source, str(Path(args.root).resolve()), scale=args.scale, rule=args.rule,
                             features=args.features, budgets=_budgets(args.budgets), name=args.name)
    spec = runs.RunSpec(corpus, args.arm, args.detector, preset=args.preset, seed=args.seed,
                        split=SplitRule(args.train, args.validation), quick=args.quick)
    runs_dir = Path(args.outputs) / result_set(corpus.corpus_name) / "runs"
    run = runs.prepare(spec, runs_dir, args.out)
    runs.execute(run, chunk=args.chunk, checkpoint_every=args.checkpoint_every)
    print(f"results: {run.out}")
    return 0


def cmd_synthetic(args) -> int:
    from bench.assembly import synthetic

    release = synthetic.Release(args.release)
    if args.litnet:
        root = synthetic.generate_litnet(args.root, K=args.K, seed=args.seed)
    else:
        root = synthetic.generate(args.root, K=args.K, seed=args.seed, release=release)
    print(f"synthetic {'LITNET-2020 trio' if args.litnet else 'week'} (K={args.K}) at {root}; build it with "
          f"--scale {args.K / 1000:g}")
    return 0


def cmd_aggregate(args) -> int:
    from bench.assembly.report import aggregate

    skip = [k for k in (getattr(args, "skip", None) or "").split(",") if k]
    page = aggregate(Path(args.outputs), args.dataset, resamples=getattr(args, "bootstrap", 1000), skip=skip)
    print(f"tables: {page.parent}\nreport: {page}")
    return 0


def _add_run(sub) -> None:
    # names are checked by the registries when the run is planned (one line, exit 2): the CLI imports none of them
    p = sub.add_parser("run", help="one run: build the corpus, assemble an arm, split, score, write HDF5")
    p.add_argument("--source", default="cicids2017",
                   help="a registered corpus source: cicids2017 (default), cicids2018, litnet")
    p.add_argument("--root", required=True, help="the capture files' folder")
    p.add_argument("--name", help="the corpus's name (default: the source's); results go to "
                                  "OUTPUTS/<name>-assembly/runs")
    p.add_argument("--scale", type=float, default=1.0, help="budgets × SCALE (the synthetic week at K: K/1000)")
    p.add_argument("--rule", help="released, even or head (default: the source's released rule)")
    p.add_argument("--features", default="released", help="released (default) or suite")
    p.add_argument("--budgets", help="CAPTURE=RECORDS,... (default: the released budgets)")
    p.add_argument("--arm", default="timestamp", help="timestamp, day_round_robin, pooled or capture:<name>")
    p.add_argument("--detector", default="bocpd", help="bocpd, hst, ecod, lof or iforest")
    p.add_argument("--preset", default="released")
    p.add_argument("--quick", action="store_true", help="the detector's smoke-test sizes (e.g. HST's 4 trees)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--train", type=float, default=0.70, help="train fraction (released 0.70)")
    p.add_argument("--validation", type=float, default=0.15, help="validation fraction (released 0.15)")
    p.add_argument("--outputs", default="outputs")
    p.add_argument("--out", type=Path, help="result file (default OUTPUTS/<name>-assembly/runs/<run name>.h5)")
    p.add_argument("--chunk", type=int, default=4096, help="records per detector call (scores do not depend on it)")
    p.add_argument("--checkpoint-every", type=int, default=200_000, help="records between checkpoints")
    p.set_defaults(func=cmd_run)


def register(sub) -> None:
    parser = sub.add_parser("assembly", help="the stream-assembly study: runs, the synthetic week, the report "
                                             "(docs/assembly.md)")
    inner = parser.add_subparsers(dest="assembly_command", required=True)
    _add_run(inner)
    p = inner.add_parser("synthetic", help="write the synthetic CICIDS2017-format week (or the LITNET-2020 trio)")
    p.add_argument("--root", type=Path, required=True)
    p.add_argument("-K", type=int, default=1, help="scale: 1600·K records in the corpus (default 1)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--release", default="traffic-labelling", choices=["traffic-labelling", "improved"])
    p.add_argument("--litnet", action="store_true", help="the LITNET-2020-format trio instead of the week")
    p.set_defaults(func=cmd_synthetic)
    p = inner.add_parser("aggregate", help="audit, per-run AP/AUC-ROC, every analysis the runs allow, the paper's "
                                           "numbers beside them, and the HTML page")
    p.add_argument("--dataset", required=True, help="a result set <corpus>-assembly with runs under --outputs")
    p.add_argument("--outputs", default="outputs")
    p.add_argument("--bootstrap", type=int, default=1000, help="block-bootstrap resamples per interval (released "
                                                               "1000; a demo-size corpus uses at most 200)")
    p.add_argument("--skip", help="analyses to leave out, comma-separated (e.g. prevalence,crossed: they rerun "
                                   "the detectors; names in docs/assembly.md)")
    p.set_defaults(func=cmd_aggregate)


def route(args: argparse.Namespace) -> argparse.Namespace:
    """`bench aggregate --dataset <corpus>-assembly` (make aggregate) runs this study's aggregate: the report
    package sits below bench.assembly and cannot import it."""
    if getattr(args, "command", None) == "aggregate" and is_result_set(getattr(args, "dataset", None)):
        args.func = cmd_aggregate
    return args
