"""`python -m bench aggregate|verify`: the report subcommands (registered through bench.cli.COMMAND_MODULES)."""

from __future__ import annotations

import sys
from pathlib import Path


def cmd_aggregate(args) -> int:
    from bench.report.aggregate import Options, aggregate

    options = Options(bootstrap=args.bootstrap, bootstrap_seed=args.bootstrap_seed, select_by=args.select_by,
                      select_top=args.select_top, per_method_heatmaps=args.per_method_heatmaps,
                      figure_formats=_formats(args.figures), paper_figures=args.paper_figures, pool=args.pool,
                      own_paper_tables=args.own_paper_tables)
    manifest = aggregate(args.outputs, args.dataset, options)
    tables = manifest.parent  # the md tables this result set has (image: table2.md...; tabular: tabular_table2.md...)
    print(f"manifest: {manifest}\ntables:   {', '.join(str(p) for p in sorted(tables.glob('*.md')))}\n"
          f"report:   {tables.parent / 'report' / 'index.html'}")
    return 0


def _formats(text: str) -> tuple[str, ...]:
    from bench.errors import choice_error

    formats = tuple(f for f in text.split(",") if f and f != "none")
    for f in formats:
        if f not in ("png", "pdf"):
            raise choice_error("figure format", f, ("png", "pdf", "none"))
    return formats


def cmd_verify(args) -> int:
    from bench.report.aggregate import verify

    problems = verify(args.outputs, args.dataset)
    if problems:
        for line in problems:
            print(line, file=sys.stderr)
        print(f"verify {args.dataset}: {len(problems)} mismatch(es) between the published tables and the run files",
              file=sys.stderr)
        return 1
    return 0


def register(sub) -> None:
    from bench.report.choices import POOLS, SELECT_BY

    p = sub.add_parser("aggregate", help="Table 2, per-method, timing and routing tables, the comparison with the "
                       "published tables, heatmaps, manifest")
    p.add_argument("--dataset", required=True, help="a dataset with results under --outputs, or all")
    p.add_argument("--outputs", type=Path, default=Path("outputs"), help="results root (default: outputs)")
    p.add_argument("--bootstrap", type=int, default=1000,
                   help="resamples for each run's image ROC-AUC_CL interval in runs.csv (0: none)")
    p.add_argument("--bootstrap-seed", type=int, default=0)
    p.add_argument("--select-by", default="image-cl", choices=sorted(SELECT_BY),
                   help="criterion for the MultiDataset method selection (default: image-cl)")
    p.add_argument("--select-top", type=int, default=3, help="methods the MultiDataset rows pool (default: 3)")
    p.add_argument("--per-method-heatmaps", action="store_true", help="also one heatmap per model × backbone")
    p.add_argument("--figures", default="png,pdf", help="heatmap formats, comma-separated: png,pdf or none "
                   "(none: the values in heatmaps.csv only)")
    p.add_argument("--paper-figures", action="store_true",
                   help="also draw every per-method figure of the report (its R heatmap and curves) as PNG and PDF "
                        "for papers (about 0.1-0.4 s each; `make figures`); without it the page shows them inline "
                        "and keeps those drawn before from the same values")
    p.add_argument("--pool", default="entries", choices=POOLS,
                   help="the paper comparison's reading of Table 2's pooling that is judged (the other is shown): "
                        "entries (16 method × backbone results) or methods (9 methods) (default: entries)")
    p.add_argument("--own-paper-tables", action="store_true",
                   help="accept edited data/paper tables as yours (default: refuse a table whose SHA-256 is not "
                        "the shipped one)")
    p.set_defaults(func=cmd_aggregate)

    p = sub.add_parser("verify", help="recompute every published cell from the run files; exit 1 on a mismatch")
    p.add_argument("--dataset", required=True, help="a dataset with published tables under --outputs, or all")
    p.add_argument("--outputs", type=Path, default=Path("outputs"))
    p.set_defaults(func=cmd_verify)
