"""Stream-assembly grids (`track: assembly`, jobs/<corpus>-assembly.yaml), loaded, expanded, and run as jobs.

A grid names one corpus (`corpus`: source, name, scale, rule, features, budgets), the positional `split`, the
`arms` (`capture:*`: every capture of the corpus), the `detectors` (each with optional `presets`, `seeds`, `quick`
and `resources`) and the `seeds`. Every (arm, detector, preset, seed) is one run (bench.assembly.runs), planned with
`runs.prepare`, the call `bench assembly run` makes, so its key and file are exactly a local run's. A detector
without a seed (BOCPD, ECOD, LOF) runs once, with the first seed. The command line's filters map onto the grid:
MODELS= picks detectors, ORDERINGS= arms, PROTOCOLS= presets, SEEDS= seeds.

The root: `--root`/ROOT=, else the result set's default root, else (when that folder does not exist) the source's
default root (data/raw/cicids2017, $BENCH_ROOT_CICIDS2017 or data/roots.yaml).

A job (`AssemblyJob`) re-plans its run, refuses it when the key changed since submission (the corpus inputs were
edited), and executes it; a requeued job resumes from the run's checkpoint.
"""

from __future__ import annotations

import itertools
import os
import socket
from dataclasses import dataclass, replace
from pathlib import Path

import submitit

from bench.errors import BenchError, ConfigError
from bench.hpc.gridschema import (Grid, PlannedRun, Profile, Resources, Selection, check_keys, filter_axis, list_of,
                                  parse_resources)
from bench.hpc.status import KEY_CHANGED

GRID_KEYS = ("dataset", "track", "corpus", "split", "arms", "detectors", "seeds", "resources", "chunk",
             "checkpoint_every")
CORPUS_KEYS = ("source", "name", "scale", "rule", "features", "budgets")
DETECTOR_KEYS = ("presets", "seeds", "quick", "resources")
CAPTURES = "capture:*"


@dataclass
class AssemblyGrid(Grid):
    """A Grid whose models are detectors, orderings arms and protocols presets (what the filters select)."""

    corpus: object = None  # bench.assembly.runs.CorpusSpec without its root (set when expanded)
    split: object = None  # bench.assembly.records.SplitRule
    chunk: int = 4096
    checkpoint_every: int = 200_000


def _corpus(data, path: Path):
    from bench.assembly.runs import CorpusSpec

    if not isinstance(data, dict) or "source" not in data:
        from bench.assembly.corpus import SOURCES

        raise ConfigError(f"{path}: corpus must be a mapping with at least a source ({', '.join(sorted(SOURCES))})")
    check_keys(data, CORPUS_KEYS, path, "corpus")
    budgets = data.get("budgets")
    if budgets is not None and not (isinstance(budgets, dict) and all(isinstance(v, int) for v in budgets.values())):
        raise ConfigError(f"{path}: corpus budgets must map each capture to a number of records, got {budgets!r}")
    scale = data.get("scale", 1.0)
    if isinstance(scale, bool) or not isinstance(scale, (int, float)) or not scale > 0:
        raise ConfigError(f"{path}: corpus scale must be a positive number, got {scale!r}")
    spec = CorpusSpec(source=str(data["source"]), root="", scale=float(scale), rule=data.get("rule"),
                      features=data.get("features", "released"),
                      budgets=tuple(sorted(budgets.items())) if budgets else None, name=data.get("name"))
    try:
        spec.check_names()
    except ConfigError as e:
        raise ConfigError(f"{path}: corpus: {e}") from None
    return spec


def _split(data, path: Path):
    from bench.assembly.records import SplitRule

    data = data or {}
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: split must be a mapping {{train: 0.70, validation: 0.15}}")
    check_keys(data, ("train", "validation"), path, "split")
    rule = SplitRule(data.get("train", 0.70), data.get("validation", 0.15))
    values = (rule.train, rule.validation)
    if not all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in values) or not (
            0 < rule.train < 1 and 0 < rule.validation < 1 and rule.train + rule.validation < 1):
        raise ConfigError(f"{path}: split needs train and validation fractions in (0, 1) with train + validation < "
                          f"1 (the test segment is the rest), got {data}")
    return SplitRule(float(rule.train), float(rule.validation))


def _detectors(data, path: Path) -> dict:
    from bench.assembly import detectors

    if isinstance(data, list):
        data = {d: {} for d in data}
    if not isinstance(data, dict) or not data:
        raise ConfigError(f"{path}: 'detectors' must be a non-empty list or a mapping detector -> settings")
    models = {}
    for name, settings in data.items():
        settings = settings or {}
        if not isinstance(settings, dict):
            raise ConfigError(f"{path}: settings of detector {name!r} must be a mapping, got {settings!r}")
        check_keys(settings, DETECTOR_KEYS, path, f"detector {name!r}")
        try:
            spec = detectors.get(name)
            presets = list_of(settings.get("presets", ["released"]), str, path, f"presets of {name!r}")
            for preset in presets:
                spec.params(preset)
        except ConfigError as e:
            raise ConfigError(f"{path}: {e}") from None
        entry = {"protocols": presets, "quick": bool(settings.get("quick", False))}
        if "seeds" in settings:
            entry["seeds"] = list_of(settings["seeds"], int, path, f"seeds of {name!r}")
        if "resources" in settings:
            entry["resources"] = settings["resources"]
        models[name] = entry
    return models


def load_assembly_grid(name: str, path: Path, data: dict) -> AssemblyGrid:
    """Parse and validate an assembly grid; every problem names the file and what was expected."""
    from bench.assembly.arms import ARMS, CAPTURE_PREFIX
    from bench.assembly.commands import result_set

    check_keys(data, GRID_KEYS, path, "the grid")
    corpus = _corpus(data.get("corpus"), path)
    if result_set(corpus.corpus_name) != name or data.get("dataset") != name:
        raise ConfigError(f"{path}: an assembly grid of corpus {corpus.corpus_name!r} is named "
                          f"{result_set(corpus.corpus_name)!r} (its dataset: key too), not {name!r}")
    arms = list_of(data.get("arms"), str, path, "arms")
    bad = [a for a in arms if a not in ARMS and not a.startswith(CAPTURE_PREFIX)]
    if bad:
        raise ConfigError(f"{path}: unknown arm {bad[0]!r} (valid: {', '.join(ARMS)}, capture:<name>, {CAPTURES})")
    models = _detectors(data.get("detectors"), path)
    grid = AssemblyGrid(dataset=name, path=path, models=models, backbones=["-"], orderings=arms,
                        protocols=sorted({p for m in models.values() for p in m["protocols"]}),
                        seeds=list_of(data.get("seeds", [0]), int, path, "seeds"),
                        resources=parse_resources(data.get("resources") or {}, Resources(mem_gb=4), path, "the grid"),
                        track="assembly", data=corpus.source, corpus=corpus, split=_split(data.get("split"), path))
    for key in ("chunk", "checkpoint_every"):
        if key in data:
            if not isinstance(data[key], int) or isinstance(data[key], bool) or data[key] < 1:
                raise ConfigError(f"{path}: {key} must be a positive integer, got {data[key]!r}")
            setattr(grid, key, data[key])
    for model in models:
        grid.model_resources(model)
    return grid


def assembly_root(grid: AssemblyGrid, root: Path) -> Path:
    """`root`, or the source's default root when `root` is the result set's default and does not exist."""
    from bench.data.multi import default_root

    if not Path(root).exists() and Path(root).resolve() == Path(default_root(grid.dataset)).resolve():
        return Path(default_root(grid.corpus.source)).resolve()
    return Path(root)


def _arms(grid: AssemblyGrid, corpus, selection: Selection) -> list[str]:
    from bench.assembly.arms import CAPTURE_PREFIX

    names = []
    for arm in filter_axis(grid.orderings, selection.orderings, "orderings", grid):
        names += [CAPTURE_PREFIX + c for c in corpus.captures] if arm == CAPTURES else [arm]
    return list(dict.fromkeys(names))


def expand_assembly(grid: AssemblyGrid, profile: Profile, selection: Selection, models: list, root: Path,
                    runs_dir: Path, log) -> list[PlannedRun]:
    from bench.assembly import detectors, runs

    if selection.backbones:
        raise ConfigError(f"{grid.path}: an assembly grid has no backbone axis (drop --backbones)")
    corpus_spec = replace(grid.corpus, root=str(assembly_root(grid, root)))
    cache = runs_dir.parent / "corpus"  # the corpus's facts while its files are unchanged: status stays quick
    facts = runs.corpus_facts(corpus_spec, cache)
    arm_names = _arms(grid, facts, selection)
    need_gb = round(facts.records * facts.features * 8 * 3 / 2**30 + 1, 1)  # the corpus, its reading, the scores
    planned = []
    for model in models:
        spec = detectors.get(model)
        resources = grid.model_resources(model)
        resources = replace(resources, gpus=0, mem_gb=max(resources.mem_gb, need_gb))
        presets = filter_axis(grid.axis(model, "protocols"), selection.protocols, "protocols", grid)
        seeds = filter_axis(grid.axis(model, "seeds"), selection.seeds, "seeds", grid)
        if not spec.seeded and len(seeds) > 1:
            log(f"note: {model} takes no seed: one run per arm and preset (seed {seeds[0]}), not {len(seeds)}")
            seeds = seeds[:1]
        for arm, preset, seed in itertools.product(arm_names, presets, seeds):
            run_spec = runs.RunSpec(corpus_spec, arm, model, preset=preset, seed=seed, split=grid.split,
                                    quick=grid.models[model]["quick"])
            run = replace(runs.prepare(run_spec, runs_dir, cache_dir=cache), chunk=grid.chunk,
                          checkpoint_every=grid.checkpoint_every)
            planned.append(PlannedRun(run, resources))
    return planned


class AssemblyJob(submitit.helpers.Checkpointable):
    """One assembly run as an array task (or a local process's share, or the debug executor's call)."""

    def __init__(self, spec_json: str, out: str, run_key: str, workdir: str, chunk: int, checkpoint_every: int):
        self.spec_json, self.out, self.run_key, self.workdir = spec_json, out, run_key, workdir
        self.chunk, self.checkpoint_every = chunk, checkpoint_every

    def __call__(self) -> str:
        from bench.assembly import runs

        os.chdir(self.workdir)
        run = runs.prepare(runs.RunSpec.from_json(self.spec_json), out=Path(self.out))
        if run.run_key != self.run_key:
            raise BenchError(f"{run.out}: {KEY_CHANGED} ({self.run_key[:12]} -> {run.run_key[:12]}): the corpus "
                             f"inputs were modified; submit again")
        print(f"run {run.out.stem} (key {run.run_key[:12]}) on {socket.gethostname()}", flush=True)
        runs.execute(run, log=lambda msg: print(msg, flush=True), chunk=self.chunk,
                     checkpoint_every=self.checkpoint_every)
        return str(run.out)


def job_for(planned: PlannedRun, workdir: Path) -> AssemblyJob:
    run = planned.run
    return AssemblyJob(run.spec.to_json(), str(run.out.resolve()), run.run_key, str(workdir), run.chunk,
                       run.checkpoint_every)


def is_assembly_run(planned: PlannedRun) -> bool:
    from bench.assembly.runs import PreparedRun

    return isinstance(planned.run, PreparedRun)
