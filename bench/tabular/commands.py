"""`python -m bench tabular <synthetic|index|run|ste|scenarios>` (docs/tabular.md)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from bench.config import TABULAR_DATASETS, task_list
from bench.errors import ConfigError

# what --dataset names: one dataset (a multi-dataset scenario is --multi's); the built-ins, then any plugin's
DATASETS = tuple(d for d in TABULAR_DATASETS if d != "multi")


def dataset_names() -> tuple[str, ...]:
    """DATASETS, then the dataset plugins' names (bench.datasets.names: read from metadata, nothing imported)."""
    from bench.datasets import names

    return DATASETS + tuple(d for d in names("tabular") if d not in DATASETS and d != "multi")
DEFAULT_DATASET = "synthetic"  # the offline benchmark (generated when missing), as Make's TABULAR_DATASET


def register(sub) -> None:
    """The `bench tabular` commands. Every option with a default or choices is built from where that value lives
    (bench.tabular.options: a setting field, a dataclass field, a ParamTable, the registry): none is typed twice."""
    p = sub.add_parser("tabular", help="the CAD scenario-construction framework on tabular data (CIC datasets, "
                                       "synthetic): record index, STE matrices, FC1-FC5, orderings, W, Borda")
    cmds = p.add_subparsers(dest="tabular_command", required=True)
    _register_synthetic(cmds)
    _register_index(cmds)
    _register_ste(cmds)
    _register_run(cmds)
    _register_scenarios(cmds)


def _register_synthetic(cmds) -> None:
    from bench.config import RunConfig
    from bench.tabular import options as opt
    from bench.tabular import synthetic
    from bench.tabular.synthetic import SYNTHETIC_ROOT, generate

    q = cmds.add_parser("synthetic", help="write the synthetic tabular benchmark (CICIDS2017 CSV format)")
    q.add_argument("--out", type=Path, default=SYNTHETIC_ROOT, help=f"folder (default: {SYNTHETIC_ROOT})")
    opt.last_action(q).source = (synthetic, "SYNTHETIC_ROOT")
    opt.setting(q, RunConfig, "seed", help="seed of every generated record")
    opt.parameter_option(q, generate, "n_normal", "normal records per capture day")
    opt.parameter_option(q, generate, "n_anomal", "attack records per capture day", flag="--n-anomalous")
    q.set_defaults(func=cmd_synthetic)


def _register_index(cmds) -> None:
    q = cmds.add_parser("index", help="read, clean, discover tasks, split, scale → record index folder")
    _data_args(q)
    _candidate_args(q)
    _discovery_preset(q)
    q.add_argument("--out", type=Path, required=True)
    q.set_defaults(func=cmd_index)


def _register_ste(cmds) -> None:
    from bench.config import RunConfig
    from bench.tabular import options as opt

    q = cmds.add_parser("ste", help="one model's STE matrix on a record index (a cross-evaluation run file)")
    q.add_argument("--index", type=Path, required=True, help="record index folder (`bench tabular index`)")
    opt.model_option(q, "tabular", "a registered tabular detector", required=True)
    q.add_argument("--out", type=Path, required=True, help="result file (.h5)")
    opt.setting(q, RunConfig, "seed")
    q.add_argument("--tasks", help="comma-separated task order (default: the index's tasks, sorted)")
    q.add_argument("--quick", action="store_true", help="the model's small test setting")
    q.add_argument("--set", action="append", metavar="KEY=VALUE", help="override a hyperparameter")
    q.add_argument("--max-steps", type=int, help="stop after K experts; the same command resumes")
    q.set_defaults(func=cmd_ste)


def _register_run(cmds) -> None:
    from bench.config import RunConfig, TabularInputs
    from bench.tabular import options as opt

    q = cmds.add_parser("run", help="one continual run on a record index (the continual runner, tabular track)")
    q.add_argument("--index", type=Path, required=True, help="record index folder (`bench tabular index`)")
    opt.model_option(q, "tabular", "a registered tabular detector", required=True)
    opt.setting(q, RunConfig, "protocol", choices=opt.run_protocol_choices(), help=(
        "continual protocol, one of %(choices)s: ncl trains on each task as it comes, cl replays past records "
        "(Replay), cumulative retrains on every task so far, cumulative_fresh does so with a new model, mste keeps "
        "one expert per task"))
    opt.setting(q, TabularInputs, "replay_size", type=int, metavar="N")
    q.add_argument("--tasks", help="comma-separated task order (default: the index's tasks, sorted)")
    opt.field_option(q, RunConfig, "ordering", "the order's name, recorded with the results", metavar="NAME")
    opt.setting(q, RunConfig, "seed")
    opt.setting(q, RunConfig, "preset", metavar="NAME", help="hyperparameter preset of the model; --quick and --set "
                "apply on top", default_text="its default preset, suite; released: what the CAD framework's released "
                "code ran")
    opt.setting(q, RunConfig, "label", metavar="NAME",
                default_text="the dataset's name; e.g. an improved CIC-IDS2017 read via cicunsw")
    q.add_argument("--quick", action="store_true", help="the model's small test setting")
    q.add_argument("--set", action="append", metavar="KEY=VALUE", help="override a hyperparameter")
    q.add_argument("--out", type=Path, help="result file (default outputs/<result set>/runs/<run name>.h5)")
    q.add_argument("--max-steps", type=int, help="stop after K tasks; the same command resumes")
    q.set_defaults(func=cmd_run)


def _register_scenarios(cmds) -> None:
    from bench.tabular import options as opt
    from bench.tabular import detectors, discovery
    from bench.tabular.discovery import DEFAULT_CANDIDATE, DISCOVERY
    from bench.tabular.filtering import FRAMEWORK

    q = cmds.add_parser("scenarios", help="the whole chain: candidates, STE matrices, filtering, orderings, "
                                          "W, selection, Borda, release (data.csv, orderings.json, manifest)")
    _data_args(q)
    q.add_argument("--candidates", default=DEFAULT_CANDIDATE,
                   help="comma-separated candidate splits: natural[:column] | METHOD:VARIANT:K with METHOD "
                        "kmeans|spectral|gmm and VARIANT joint|nearest|random, each optionally @COLUMN: discover "
                        f"within each group of that column (multi-dataset: @dataset) (default: {DEFAULT_CANDIDATE})")
    opt.last_action(q).source = (discovery, "DEFAULT_CANDIDATE")
    _sizes(q)
    q.add_argument("--models", type=opt.model_list("tabular"), default=detectors.CONSTRUCTION_MODELS,
                   metavar="NAME,...", help="comma-separated registered tabular detectors that build the scenario "
                                            f"(default: {','.join(detectors.CONSTRUCTION_MODELS)}, the framework's "
                                            f"phase 1)")
    opt.last_action(q).source = (detectors, "CONSTRUCTION_MODELS")
    opt.preset_option(q, FRAMEWORK, "FC1-FC5 settings, discovery sizes and semantics, and the construction models' "
                                    "preset: suite (this suite's) or released (the CAD framework's released code); "
                                    "--filter and --min-* override single values", DISCOVERY)
    q.add_argument("--quick", action="store_true", help="the models' small test settings")
    q.add_argument("--filter", action="append", metavar="KEY=VALUE",
                   help=f"filtering setting ({', '.join(_param_text(k, v) for k, v in FRAMEWORK.params.items())}), "
                        f"checked against its type and range")
    q.add_argument("--out", type=Path, help="default outputs/<dataset>/tabular")
    q.add_argument("--multi", metavar="NAME=ROOT,...",
                   help="a multi-dataset scenario over these datasets (e.g. cicids2017=DIR,cicunsw=DIR; synthetic= "
                        "needs no root); candidates natural:dataset (each dataset one task), natural:dataset_day "
                        "(decomposed by capture day), METHOD:VARIANT:K@dataset (each dataset clustered into K) "
                        "or METHOD:VARIANT:K (clustering of the union); replaces --dataset/--root")
    q.set_defaults(func=cmd_scenarios)


def _param_text(name: str, param) -> str:
    return f"{name}={'|'.join(param.choices)}" if param.choices else name


def _data_args(q) -> None:
    from bench.config import RunConfig
    from bench.tabular import options as opt
    from bench.tabular.preprocess import PrepSettings
    from bench.tabular.synthetic import SYNTHETIC_ROOT

    q.add_argument("--dataset", default=DEFAULT_DATASET, choices=opt.LazyChoices(dataset_names, (__name__, "DATASETS")),
                   help=f"the dataset read (default: {DEFAULT_DATASET}, generated offline; or a plugin's: entry "
                        f"points bench.datasets)")
    opt.last_action(q).source = (sys.modules[__name__], "DEFAULT_DATASET")
    opt.last_action(q).choices_source = (sys.modules[__name__], "DATASETS")  # plus plugins, where installed
    q.add_argument("--root", type=Path, help=f"folder with the dataset's CSV files (synthetic: generated into "
                                              f"{SYNTHETIC_ROOT} when missing)")
    opt.setting(q, RunConfig, "seed", help="seed of the split, the clustering and the construction models")
    opt.field_option(q, PrepSettings, "train_fraction", "share of each task's normals in its training split")
    opt.field_option(q, PrepSettings, "rebalance", "test anomalies at most 1:1 with test normals")


def _sizes(q) -> None:
    from bench.tabular import options as opt
    from bench.tabular.discovery import DISCOVERY

    for name in ("min_normal", "min_anomalous"):
        opt.table_option(q, DISCOVERY, name, "the framework preset's")


def _candidate_args(q) -> None:
    from bench.tabular import discovery
    from bench.tabular import options as opt
    from bench.tabular.discovery import DEFAULT_CANDIDATE

    q.add_argument("--candidate", default=DEFAULT_CANDIDATE,
                   help=f"natural[:column][@COLUMN] | METHOD:VARIANT:K[@COLUMN] (@COLUMN: within each group) "
                        f"(default: {DEFAULT_CANDIDATE})")
    opt.last_action(q).source = (discovery, "DEFAULT_CANDIDATE")
    _sizes(q)


def _discovery_preset(q) -> None:
    from bench.tabular import options as opt
    from bench.tabular.discovery import DISCOVERY

    opt.preset_option(q, DISCOVERY, "task discovery sizes and semantics (and the split they imply): suite (this "
                                    "suite's) or released (the CAD framework's released code); --min-* override")


def resolve_sizes(args, candidates: list[str]) -> None:
    """args.min_normal, .min_anomalous and .semantics from the DISCOVERY preset (--framework-preset) with --min-*
    on top. The released natural split has no minimum sizes (bench.tabular.discovery: only a concept without both
    classes is dropped), so a --min-* given for a natural candidate under it would be ignored: refused instead."""
    from bench.tabular.discovery import DISCOVERY

    given = {k: v for k, v in (("min_normal", args.min_normal), ("min_anomalous", args.min_anomalous))
             if v is not None}
    try:
        sizes = DISCOVERY.resolve(given, args.framework_preset)
    except ConfigError as e:
        raise ConfigError(f"--min-normal/--min-anomalous: {e}") from None
    natural = [c.strip() for c in candidates if c.strip().partition("@")[0].split(":")[0] == "natural"]
    if given and sizes["semantics"] == "released" and natural:
        flags = " and ".join(f"--{k.replace('_', '-')} {v}" for k, v in given.items())
        raise ConfigError(f"{flags}: the released natural split ({', '.join(natural)} under --framework-preset "
                          f"{args.framework_preset}) has no minimum task sizes, so it would be ignored; leave it out "
                          f"or use a clustering candidate")
    args.min_normal, args.min_anomalous, args.semantics = sizes["min_normal"], sizes["min_anomalous"], \
        sizes["semantics"]


def parse_candidate(text: str, args):
    from bench.tabular.discovery import DiscoverySettings

    split, at, within = text.strip().partition("@")
    parts = split.split(":")
    common = {"min_normal": args.min_normal, "min_anomalous": args.min_anomalous, "seed": args.seed,
              "within": within, "semantics": getattr(args, "semantics", "suite")}  # the framework preset's
    if within or not at:  # a trailing "@" names no column
        if parts[0] == "natural" and len(parts) <= 2:
            return DiscoverySettings(method="natural", column=parts[1] if len(parts) == 2 else "day", **common)
        if len(parts) == 3 and parts[2].isdigit():
            return DiscoverySettings(method=parts[0], variant=parts[1], n_tasks=int(parts[2]), **common)
    raise ConfigError(f"candidate {text!r} is not natural[:column][@column] or METHOD:VARIANT:K[@column] "
                      f"(e.g. kmeans:nearest:5, or kmeans:nearest:3@dataset: 3 clusters in each dataset)")


def _prep(args):
    from bench.tabular.preprocess import PrepSettings

    # the released discovery semantics split as the released code does too (bench.tabular.preprocess)
    return PrepSettings(train_fraction=args.train_fraction, rebalance=args.rebalance, seed=args.seed,
                        split="released" if getattr(args, "semantics", "suite") == "released" else "suite")


def _overrides(items, what: str) -> dict:
    from bench.config import parse_overrides

    try:
        return parse_overrides(items)
    except ConfigError as e:
        raise ConfigError(f"{what}: {e}") from None


def _filter_values(items) -> dict:
    """--filter key=value as raw text: FilterSettings.resolve types and checks each value (JSON parsing would
    turn p_t=2.5 into a float that an int setting then truncates, or keep 'False' as a truthy string)."""
    out = {}
    for item in items or []:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise ConfigError(f"--filter expects key=value, got {item!r}")
        out[key.strip()] = value.strip()
    return out


def _roots(text: str) -> dict:
    roots = {}
    for item in text.split(","):
        name, _, root = item.strip().partition("=")
        if name not in dataset_names():
            raise ConfigError(f"--multi: unknown dataset {name!r} (valid: {', '.join(dataset_names())})")
        roots[name] = Path(root) if root else None
    return roots


def cmd_synthetic(args) -> int:
    from bench.tabular.synthetic import generate

    root = generate(args.out, seed=args.seed, n_normal=args.n_normal, n_anomal=args.n_anomal)
    print(f"synthetic tabular benchmark (seed {args.seed}) in {root}/MachineLearningCVE")
    return 0


def cmd_index(args) -> int:
    from bench.tabular.discovery import discover
    from bench.tabular.preprocess import build_index
    from bench.tabular.scenario import raw_table

    if args.out.exists() and not args.out.is_dir():  # else the writer's failure reads like a full disk
        raise ConfigError(f"--out {args.out}: exists and is not a folder (a record index is a folder; give a new "
                          f"path or an earlier index's folder)")
    resolve_sizes(args, [args.candidate])
    cand = parse_candidate(args.candidate, args)
    meta = build_index(args.dataset, raw_table(args.dataset, args.root, args.seed),
                       lambda df: discover(df, cand), _prep(args), args.out, cand.to_dict())
    def counts(d: dict) -> str:  # "train normal 47,997, test normal 11,999, ...": no Python dict reprs in a log
        return ", ".join(f"{k.replace('_', ' ')} {v:,}" if isinstance(v, int) else f"{k.replace('_', ' ')} {v}"
                         for k, v in d.items())

    n = len(meta["tasks"])
    print(f"{args.dataset} ({cand.name}): {n} task{'s' * (n != 1)} in {args.out}; {counts(meta['counts'])}")
    for task, c in meta["tasks"].items():
        print(f"  {task}: {counts(c)}")
    return 0


def cmd_ste(args) -> int:
    from bench.registry import get
    from bench.tabular.ste import ste_run

    spec = get(args.model, "tabular")
    hp = {**(spec.quick if args.quick else {}), **_overrides(args.set, "--set")}
    tasks = task_list(args.tasks) if args.tasks is not None else None
    path = ste_run(args.index, args.model, args.out, seed=args.seed, hparams=hp, tasks=tasks,
                   max_steps=args.max_steps)  # each run on the track's thread count (runner.execute)
    print(f"results: {path}")
    return 0


def cmd_run(args) -> int:
    from bench.results import summary_lines
    from bench.config import RunConfig, TabularInputs
    from bench.continual.runner import execute, prepare
    from bench.registry import get
    from bench.tabular.ste import index_meta

    tasks = task_list(args.tasks) if args.tasks is not None else None  # a typo is named before the index is read
    spec = get(args.model, "tabular")
    meta = index_meta(args.index)
    tasks = tasks or sorted(meta.get("tasks", {}))
    config = RunConfig(dataset=meta.get("dataset", ""), root=str(args.index), model=args.model, tasks=tasks,
                       ordering=args.ordering, protocol=args.protocol, seed=args.seed, device="cpu",
                       inputs=TabularInputs(replay_size=args.replay_size), preset=args.preset, label=args.label,
                       hparams={**(spec.quick if args.quick else {}), **_overrides(args.set, "--set")})
    path = execute(prepare(config, out=args.out), max_steps=args.max_steps)  # on the track's thread count
    print(f"results: {path}")
    print("\n".join(summary_lines(path)))
    return 0


def cmd_scenarios(args) -> int:
    from bench.devices import use_threads
    from bench.registry import get
    from bench.tabular.filtering import FilterSettings
    from bench.tabular.scenario import construct

    models = list(args.models)  # registered tabular detectors (checked by argparse, bench.tabular.options)
    # the construction models' released preset with --framework-preset released (--quick's values on top)
    hparams = {m: get(m, "tabular").resolve(get(m, "tabular").quick if args.quick else {}, args.framework_preset)
               for m in models} if args.quick or args.framework_preset else {}
    try:  # typed and ranged: coverage_strict=False is false, p_t=2.5 or delta_r=-1 one line each
        fs = FilterSettings.resolve(_filter_values(args.filter), args.framework_preset)
    except ConfigError as e:
        raise ConfigError(f"--filter: {e}") from None
    resolve_sizes(args, args.candidates.split(","))
    candidates = [parse_candidate(c, args) for c in args.candidates.split(",") if c.strip()]
    roots = _roots(args.multi) if args.multi else None
    dataset = "multi" if roots else args.dataset
    out = args.out or Path("outputs") / dataset / "tabular"
    released = out / "release" / "manifest.json"
    if released.exists():  # runs made from it name its orderings: another release there would change what they mean
        raise ConfigError(f"{released}: this scenario folder already holds a release, and runs made from it name its "
                          f"orderings; build the new one into another --out (or move this folder away first)")
    with use_threads(parallel=False):
        manifest = construct(dataset, out, root=args.root, roots=roots, candidates=candidates, models=models,
                             seed=args.seed, hparams=hparams, prep=_prep(args), fs=fs)
    print(json.dumps({"selected": manifest["selected_candidate"], "tasks": manifest["tasks"],
                      "w": manifest["w_table"]}, indent=1))
    return 0
