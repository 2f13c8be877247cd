"""`python -m bench scenarios <ste|rank|multi|index|check>` (docs/scenarios.md)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING

from bench.errors import ConfigError, DatasetError
from bench.io import file_sha256
from bench.scenarios import multi as multi_stream

if TYPE_CHECKING:
    import pandas as pd

INCLAD_DATASETS = ("btad", "dagm", "mpdd", "mvtec", "visa")
STE_CLUSTERS = ("inprocess", "slurm", "local", "debug")
PENDING = "ste.pending"  # in the STE folder while submitted STE jobs are outstanding (make scenarios stops there)


def register(sub) -> None:
    p = sub.add_parser("scenarios", help="scenario extraction: single-task experts, difficulty orderings, "
                                         "Spearman agreement, the multi-dataset stream, manifests")
    cmds = p.add_subparsers(dest="scenarios_command", required=True)
    _register_ste(cmds)
    _register_rank(cmds)
    _register_multi(cmds)
    _register_manifest_commands(cmds)


def _register_ste(cmds) -> None:
    # Only light imports here: this runs for every `python -m bench` command (the runner checks the backbone).
    from bench.config import ImageInputs, RunConfig, add_setting_options
    from bench.datasets import names

    q = cmds.add_parser("ste", help="one single-task NCL run per concept × method, collected into ste.csv")
    q.add_argument("--dataset", required=True, choices=names("image"))
    q.add_argument("--root", type=Path, help="dataset root (default: $BENCH_ROOT_<DATASET>, data/roots.yaml, "
                                              "data/raw/<dataset>)")
    q.add_argument("--methods", help="comma-separated (default: those of patchcore,padim,cfa implemented)")
    add_setting_options(q, ImageInputs, ("backbone", "weights", "image_size", "batch_size"))
    add_setting_options(q, RunConfig, ("seed", "device"))
    add_setting_options(q, ImageInputs, ("workers",))
    q.add_argument("--out", type=Path, help="folder for runs/ and ste.csv (default outputs/<dataset>/scenarios)")
    q.add_argument("--collect-only", action="store_true",
                   help="run nothing; build ste.csv from the result files (after a cluster array made them)")
    q.add_argument("--no-progress", action="store_true")
    q.add_argument("--cluster", choices=STE_CLUSTERS, default="inprocess",
                   help="inprocess (default: one run after another in this process) | slurm (a job array per "
                        "resource group, as `make submit`) | local (background processes) | debug (submitit's "
                        "debug executor, here, to the end); slurm/local return once submitted: rerun with "
                        "--collect-only (or the same command) when the jobs are done")
    q.add_argument("--profile", default="cpu", help="jobs/profiles/<name>.yaml for --cluster slurm|local|debug: "
                                                     "h100 | l40 | cpu (default cpu)")
    q.add_argument("--grid", type=Path, help="grid file whose per-model resources the jobs ask for "
                                              "(default jobs/<dataset>.yaml)")
    q.add_argument("--container", type=Path, help="run every job inside this Apptainer .sif (cluster jobs only)")
    q.add_argument("--parallelism", type=int, help="array tasks running at once (SLURM %%N; local: processes); "
                                                   "default: the profile's (local: 1)")
    q.add_argument("--dry-run", action="store_true",
                   help="with --cluster slurm|local|debug: print the sbatch parameters and the runs; submit nothing")
    q.set_defaults(func=cmd_ste)


def _register_rank(cmds) -> None:
    q = cmds.add_parser("rank", help="orderings, ordering tables (Tables 9-13), Spearman (Table 8), manifest")
    q.add_argument("--ste", type=Path, required=True, help="STE table CSV: dataset,concept,method,backbone,roc_auc")
    q.add_argument("--out", type=Path, help="folder for the tables (default: the STE table's folder)")
    q.add_argument("--backbone", help="the backbone to rank when the table holds several")
    q.add_argument("--seed", type=int, help="seed of the random ordering (default 0)")
    q.add_argument("--force", action="store_true", help="replace a manifest that came from another source")
    q.set_defaults(func=cmd_rank)


def _register_multi(cmds) -> None:
    q = cmds.add_parser("multi", help="select the multi-dataset stream and write data/scenarios/multi.json")
    q.add_argument("--ste", type=Path, help="STE table of several datasets (default: the datasets' manifests)")
    q.add_argument("--datasets", help=f"comma-separated (default: {','.join(INCLAD_DATASETS)}, or all in --ste)")
    q.add_argument("--criterion", default="roc_auc", choices=multi_stream.CRITERIA,
                   help="select by average ROC-AUC (InCLAD's text) or by the datasets' average-rank ordering")
    q.add_argument("--backbone", help="the backbone to use when the STE table holds several")
    q.add_argument("--out", type=Path, default=Path("outputs/multi/scenarios"), help="folder for the table")
    q.add_argument("--force", action="store_true", help="replace a manifest that came from another source")
    q.set_defaults(func=cmd_multi)


def _register_manifest_commands(cmds) -> None:
    from bench.datasets import names

    for name, func, text in (("index", cmd_index, "write the file lists (+ SHA-256) of the data at --root into "
                                                   "the dataset's manifest"),
                             ("check", cmd_check, "compare the data at --root with the manifest's file lists")):
        q = cmds.add_parser(name, help=text)
        q.add_argument("--dataset", required=True, choices=names("image"))
        q.add_argument("--root", type=Path, help="dataset root (for multi: the roots file)")
        if name == "index":
            q.add_argument("--force", action="store_true", help="overwrite file lists that differ from the data")
        q.set_defaults(func=func)


def _csv(text: str | None) -> list[str] | None:
    return [t.strip() for t in text.split(",") if t.strip()] if text else None


def cmd_ste(args) -> int:
    from bench.config import ImageInputs
    from bench.data.multi import default_root
    from bench.scenarios import ste

    if args.dry_run and args.cluster == "inprocess":
        raise ConfigError("--dry-run prints a cluster submission: give --cluster slurm, local or debug")
    root = args.root or default_root(args.dataset)
    out = args.out or Path(f"outputs/{args.dataset}/scenarios")
    methods = _csv(args.methods) or ste.default_methods()
    skipped = [m for m in ste.STE_METHODS if m not in methods]
    if skipped and not args.methods:
        print(f"note: {', '.join(skipped)} not implemented yet; the STE table covers {', '.join(methods)}")
    inputs = ImageInputs(backbone=args.backbone, weights=args.weights, image_size=args.image_size,
                         batch_size=args.batch_size, workers=args.workers)
    configs = ste.plan(args.dataset, root, methods, inputs, seed=args.seed, device=args.device)
    runs_dir = out / "runs"
    if not args.collect_only:
        if args.cluster == "inprocess":
            ste.run_local(configs, runs_dir, progress=not args.no_progress)
        elif not _submit_ste(args, configs, Path(root), out, methods):
            return 0  # dry run, or jobs still to finish: nothing to collect yet
    table = ste.collect(configs, runs_dir)
    out.mkdir(parents=True, exist_ok=True)
    table.to_csv(out / "ste.csv", index=False)
    (out / PENDING).unlink(missing_ok=True)
    print(f"STE table: {out / 'ste.csv'} ({len(table)} rows: {table['concept'].nunique()} concepts × "
          f"{table['method'].nunique()} methods)")
    return 0


def _submit_ste(args, configs, root: Path, out: Path, methods: list[str]) -> bool:
    """Send the STE runs through `make submit`'s machinery (bench.hpc): complete runs and runs still queued or
    running are skipped, failed and new ones submitted. Records go to <out>/submissions/, logs to <out>/logs/,
    apart from the dataset grid's. True when every run is complete (the table can be collected now)."""
    from bench.hpc import commands as hpc, grid as grids, records as recs
    from bench.hpc.submission import Submission, submit_runs
    from bench.scenarios import ste

    out = out.resolve()
    records_at = (out.parent, out.name)  # records_dir(*records_at) == <out>/submissions
    profile = grids.load_profile(args.profile)
    planned = ste.planned_runs(configs, out / "runs", profile, args.grid)
    statuses = hpc.plan_status(planned, recs.load_records(*records_at))
    todo = hpc.triage(planned, statuses, f"STE ({args.cluster})")
    if todo:
        meta = {"command": "scenarios ste", "dataset": args.dataset,
                "grid": str(args.grid or grids.grid_path(args.dataset)), "parallelism": args.parallelism,
                "root": str(root.resolve()),
                "outputs": str(out), "methods": methods, "argv": sys.argv}
        sub = Submission(todo, dataset=args.dataset, records_at=records_at, logs=out / "logs",
                         name=f"bench-ste-{args.dataset}", cluster=args.cluster, profile=profile,
                         root=root.resolve(), outputs=out, meta=meta, container=args.container,
                         parallelism=args.parallelism)
        submission = submit_runs(sub, dry_run=args.dry_run)
        if submission is None:
            return False
        if args.cluster == "debug":
            return True  # ran to the end here (a failed run raised)
    elif args.dry_run:
        print("nothing to submit")
        return False
    if not todo and all(s.state == "complete" for s in statuses):
        return True
    out.mkdir(parents=True, exist_ok=True)
    (out / PENDING).write_text("".join(f"{p.name}\n" for p in planned))
    print(f"STE jobs outstanding; once they finish, build the STE table with\n  {_collect_command(args)}\n"
          f"(rerunning this command resubmits failed runs, and collects once every run is complete)")
    return False


def _collect_command(args) -> str:
    """`python -m bench scenarios ste` with the options that select the runs, and --collect-only."""
    import shlex

    parts = ["python", "-m", "bench", "scenarios", "ste", "--dataset", args.dataset]
    for flag, value, default in (("--root", args.root, None), ("--out", args.out, None),
                                 ("--methods", args.methods, None), ("--backbone", args.backbone, "resnet18"),
                                 ("--weights", args.weights, "imagenet"), ("--image-size", args.image_size, 224),
                                 ("--batch-size", args.batch_size, 32), ("--seed", args.seed, 0)):
        if value is not None and value != default:
            parts += [flag, str(value)]
    return shlex.join(parts + ["--collect-only"])


def cmd_rank(args) -> int:
    from bench.data import manifest
    from bench.scenarios import rank as ranking

    ste = ranking.read_ste(args.ste)
    rankings = ranking.rank_ste(ste, args.backbone, str(args.ste))
    out = args.out or args.ste.parent
    ranking.write_tables(rankings, out)
    ste_sha = file_sha256(args.ste)
    for dataset, r in rankings.items():
        m = {"schema": manifest.SCHEMA_VERSION, "dataset": dataset, "tasks": sorted(r.hard_to_easy),
             "orderings": r.orderings(ranking.RANDOM_SEED if args.seed is None else args.seed),
             "source": {"kind": "ste", "file": str(args.ste), "sha256": ste_sha,
                        "backbone": args.backbone or ste.loc[ste["dataset"] == dataset, "backbone"].iloc[0],
                        "methods": r.methods},
             "difficulty": r.difficulty()}
        path = install(m, args.force)
        print(f"{dataset} hard-to-easy: {', '.join(r.hard_to_easy)}\nmanifest: {path}")
    if any(len(r.methods) > 1 for r in rankings.values()):
        print("\nSpearman correlation between the methods' concept ROC-AUCs:\n"
              + ranking.markdown(ranking.spearman_table(rankings), default_digits=3))
    print(f"\ntables: {out}/")
    return 0


def install(m: dict, force: bool) -> Path:
    """Write a manifest into the scenarios folder. A manifest from another kind of source (the published ones)
    is only replaced with `force`; file lists of an identical task set are kept."""
    from bench.data import manifest

    path = manifest.manifest_path(m["dataset"])
    old = None
    if path.is_file():
        try:
            old = manifest.read(path)
        except ConfigError:
            if not force:
                raise
        if old is not None and old["source"]["kind"] != m["source"]["kind"] and not force:
            raise ConfigError(f"{path}: holds orderings from a {old['source']['kind']} source; pass --force "
                              f"(make ... FORCE=1) to replace it with this {m['source']['kind']} one")
    if old is not None and old.get("files") and sorted(old["tasks"]) == sorted(m["tasks"]):
        m["files"] = old["files"]
    return manifest.write(m, path)


def _difficulty_from_ste(args) -> tuple[pd.DataFrame, dict]:
    import pandas as pd

    from bench.scenarios import rank as ranking

    rankings = ranking.rank_ste(ranking.read_ste(args.ste), args.backbone, str(args.ste))
    wanted = _csv(args.datasets) or sorted(rankings)
    unknown = sorted(set(wanted) - set(rankings))
    if unknown:
        raise ConfigError(f"{args.ste}: no STE rows for {unknown} (it has: {', '.join(sorted(rankings))})")
    rows = []
    for dataset in wanted:
        r = rankings[dataset]
        rows += [{"dataset": dataset, "concept": d["task"], "avg_roc_auc": d["avg_roc_auc"], "avg_rank": d["avg_rank"],
                  "roc_auc": d["roc_auc"], "hard_position": i} for i, d in enumerate(r.difficulty())]
    return pd.DataFrame(rows), {"kind": "ste", "file": str(args.ste), "sha256": file_sha256(args.ste)}


def _difficulty_from_manifests(args) -> tuple[pd.DataFrame, dict]:
    import pandas as pd

    from bench.data import manifest

    rows, derived = [], {}
    for dataset in _csv(args.datasets) or INCLAD_DATASETS:
        m = manifest.load(dataset)
        if m is None or "difficulty" not in m or "hard_to_easy" not in m["orderings"]:
            raise ConfigError(f"{manifest.manifest_path(dataset)}: no manifest with a difficulty section and a "
                              f"hard_to_easy ordering for {dataset} (run `make scenarios DATASET={dataset}`)")
        position = {t: i for i, t in enumerate(m["orderings"]["hard_to_easy"]["tasks"])}
        rows += [{"dataset": dataset, "concept": d["task"], "avg_roc_auc": d["avg_roc_auc"], "avg_rank": d["avg_rank"],
                  "roc_auc": d["roc_auc"], "hard_position": position[d["task"]]} for d in m["difficulty"]]
        derived[dataset] = {k: v for k, v in m["source"].items() if k in ("kind", "reference", "file", "sha256")}
    kinds = {d["kind"] for d in derived.values()}
    kind = "publication" if kinds == {"publication"} else "manifests"
    source = {"kind": kind, "reference": "average ROC-AUC columns of the datasets' manifests"
              + (" (InCLAD Appendix E, Tables 9-13)" if kind == "publication" else ""), "derived_from": derived}
    return pd.DataFrame(rows), source


def cmd_multi(args) -> int:
    import pandas as pd

    from bench.data import manifest
    from bench.scenarios.rank import markdown

    frame, source = _difficulty_from_ste(args) if args.ste else _difficulty_from_manifests(args)
    selected = multi_stream.select(frame, args.criterion)
    released = _released_stream(args, frame)
    streams = multi_stream.orderings(selected, f"{args.criterion}_" if released else "")
    selection = {"rule": multi_stream.RULE, "criterion": args.criterion,
                 "max_per_dataset": multi_stream.MAX_PER_DATASET,
                 "roles": dict(zip(selected["task"], selected["role"]))}
    if released:
        streams = {**released, **streams}
        selection["released"] = {"orderings": list(released), "reference": multi_stream.RELEASED}
    tasks = sorted({t for o in streams.values() for t in o["tasks"]})
    frame = frame.assign(task=frame["dataset"] + "/" + frame["concept"])
    rows = frame[frame["task"].isin(tasks)].sort_values(["avg_roc_auc", "task"], kind="stable")
    m = {"schema": manifest.SCHEMA_VERSION, "dataset": manifest.MULTI, "tasks": tasks, "orderings": streams,
         "source": source, "selection": selection,
         "difficulty": [{"task": r.task, "avg_roc_auc": r.avg_roc_auc, "avg_rank": r.avg_rank, "roc_auc": r.roc_auc}
                        for r in rows.itertuples()]}
    path = install(m, args.force)
    table = pd.DataFrame({"Rank": range(1, len(selected) + 1), "Task": selected["task"], "Role": selected["role"],
                          "Avg. ROC-AUC": selected["avg_roc_auc"].astype(float)})
    args.out.mkdir(parents=True, exist_ok=True)
    table.to_csv(args.out / "multi_ordering.csv", index=False)
    name = f"{args.criterion}_hard_to_easy" if released else "hard_to_easy"
    (args.out / "multi_ordering.md").write_text(f"Multi-dataset stream selected by {args.criterion}, {name} (its "
                                                f"easy_to_hard is the reverse)\n\n" + markdown(table) + "\n")
    counts = selected.groupby("dataset").size()
    if released:
        alternative = ", ".join(o for o in streams if o not in released)
        print(f"released InCLAD-MD stream ({len(released['easy_to_hard']['tasks'])} tasks): easy_to_hard, "
              f"hard_to_easy; the {args.criterion}-selected stream: {alternative}")
    print(f"{args.criterion}-selected stream: {len(selected)} tasks "
          f"({', '.join(f'{d} {n}' for d, n in counts.items())})")
    print(markdown(table))
    print(f"manifest: {path}\ntable: {args.out / 'multi_ordering.md'}")
    return 0


def _released_stream(args, frame: pd.DataFrame) -> dict:
    """The released InCLAD-MD orderings (data/paper/inclad_streams.csv) when the stream is built from the five
    InCLAD datasets' shipped difficulty tables; else none (another STE table or dataset set is another stream)."""
    from bench.data import manifest
    from bench.report.paper import published_streams

    if args.ste or sorted(set(frame["dataset"])) != sorted(INCLAD_DATASETS):
        return {}
    return {o: {"tasks": tasks} for (d, o), tasks in published_streams().items() if d == manifest.MULTI}


def _indexed_files(args) -> tuple[dict, dict, Path, int]:
    from bench.data import manifest, read_index
    from bench.data.multi import default_root

    m = manifest.load(args.dataset)
    if m is None:
        raise ConfigError(f"{manifest.manifest_path(args.dataset)}: no manifest for {args.dataset} "
                          f"(make one with `make scenarios DATASET={args.dataset}`)")
    root = args.root or default_root(args.dataset)
    index = read_index(args.dataset, root)
    missing = sorted(set(m["tasks"]) - set(index["task"]))
    if missing:
        raise DatasetError(f"{root}: tasks {missing} of {manifest.manifest_path(args.dataset)} are not in the data")
    index = index[index["task"].isin(m["tasks"])]
    return m, manifest.file_lists(index), root, len(index)


def cmd_index(args) -> int:
    from bench.data import manifest

    m, files, root, n_images = _indexed_files(args)
    path = manifest.manifest_path(args.dataset)
    if m.get("files") and not args.force:
        differ = [r for r in manifest.compare_files(m["files"], files) if not r["ok"]]
        if differ:
            raise DatasetError(f"{root}: {len(differ)} task splits differ from the file lists in {path} (see "
                               f"`python -m bench scenarios check --dataset {args.dataset}`); --force overwrites them")
    m["files"] = {t: files[t] for t in m["tasks"]}
    manifest.write(m, path)
    print(f"{path}: file lists of {len(m['tasks'])} tasks ({n_images} images) from {root}")
    published = m["source"].get("table1", {}).get("samples")
    if published is not None and published != n_images:
        print(f"note: {n_images} images indexed; the publication's Table 1 counts {published}")
    return 0


def cmd_check(args) -> int:
    from bench.data import manifest

    m, files, root, _ = _indexed_files(args)
    path = manifest.manifest_path(args.dataset)
    if not m.get("files"):
        raise ConfigError(f"{path}: no file lists yet (write them with `python -m bench scenarios index`)")
    report = manifest.compare_files(m["files"], files)
    for r in report:
        detail = "" if r["ok"] else (f"  missing {len(r['missing'])}, extra {len(r['extra'])}, changed "
                                     f"{len(r['changed'])}; e.g. {(r['missing'] + r['extra'] + r['changed'])[:3]}")
        print(f"{'ok ' if r['ok'] else 'BAD'} {r['task']}/{r['split']}: {r['found']} of {r['n']} images{detail}")
    bad = [r for r in report if not r["ok"]]
    if bad:
        raise DatasetError(f"{root}: {len(bad)} of {len(report)} task splits differ from {path}")
    print(f"{root}: all {len(report)} task splits match {path}")
    return 0

