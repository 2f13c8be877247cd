"""The stream-assembly analyses (bench.assembly.analyses) run over a result set's run files, for `make aggregate`.

The runs of one corpus and split rule form a `Study`: per scorer (a detector, and its preset where the set ran
several) its ScoredStream on each arm (the run of the lowest seed: the analyses compare scorers, not seeds). Every
§1 and §2 analysis the study's runs allow is run; one whose inputs are absent is kept as an `Outcome` with a
one-line reason instead of tables (no second arm over the same records for the pair analyses, no corpus to refit a
batch detector on, no stored branches). Where an analysis must refit or rescore a detector (a batch detector's
refit per cut, its batches, the prevalence sweep's fresh runs, the crossed design's cells) the corpus is rebuilt
once from the spec the runs recorded (bench.assembly.runs.load_corpus, which checks its digest).

`Settings` holds the resample counts and the released design (cuts, levels, seeds); `settings_for` takes the
released 1,000 resamples, or a modest count on a demo-size corpus, which the page states.
"""

from __future__ import annotations

import itertools
import json
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np
import pandas as pd

from bench.assembly import records, runs, store
from bench.assembly.analyses import (batchladder, bootstrap, branches, crossed, cutsweep, events, prevalence,
                                     shared)
from bench.assembly.analyses.common import FittedRescore
from bench.errors import BenchError

QUICK_RECORDS = 100_000  # a corpus at most this size is a demo: modest resample counts
QUICK_RESAMPLES = 200
QUICK_CUTS = (0.60, 0.75, 0.90)  # demo: three of the released seven cuts (a batch detector is refit at each)
QUICK_SEEDS = (11,)  # demo: the first of the released three prevalence seeds
PAPER_PREVALENCE_ARM = "day_round_robin"  # the arm the paper's §8 sweep resampled
# every analysis, in the page's order; `--skip` names them (prevalence and crossed rerun detectors: on a real
# corpus they cost 15 and 4 detector passes per scorer)
TITLES = {
    "heldout": "Intervals on the runs' held-out slices",
    "shared": "Shared records (§6.1): both arms on the records both held out",
    "cutsweep": "Where the split falls (§6.2): the chronological cut sweep",
    "batchladder": "Batch dependence (§6.3): the same records inside other batches",
    "branches": "Branches of a composed score (§7)",
    "prevalence": "Prevalence sweep (§8): one arm resampled to named prevalence levels",
    "crossed": "Crossed history × sample (§11): history from one arm, sample from the other",
    "events": "Event-based metrics (§11): range-based precision and recall beside flow-wise AP",
}


@dataclass(frozen=True)
class Settings:
    resamples: int = bootstrap.RELEASED_RESAMPLES
    cuts: tuple[float, ...] = cutsweep.RELEASED_CUTS
    levels: tuple[str, ...] = prevalence.RELEASED_LEVELS
    seeds: tuple[int, ...] = prevalence.RELEASED_SEEDS
    quick: bool = False  # demo-size corpus: fewer resamples than released
    skip: frozenset[str] = frozenset()  # analyses left out on request (--skip)

    def note(self) -> str:
        what = f"{self.resamples} block-bootstrap resamples per interval"
        if self.quick:
            what = (f"demo settings (a corpus of at most {QUICK_RECORDS:,} records): {what}, "
                    f"{len(self.cuts)} cuts and {len(self.seeds)} prevalence seed, where the released analyses drew "
                    f"{bootstrap.RELEASED_RESAMPLES} resamples over {len(cutsweep.RELEASED_CUTS)} cuts and "
                    f"{len(prevalence.RELEASED_SEEDS)} seeds")
        if self.skip:
            what += f"; left out on request: {', '.join(sorted(self.skip))}"
        return (f"Settings: {what}; cuts at {', '.join(f'{100 * c:g}%' for c in self.cuts)}; prevalence levels "
                f"{', '.join(self.levels)} with seeds {', '.join(map(str, self.seeds))}.")


def check_skip(names) -> frozenset[str]:
    from bench.errors import ConfigError

    unknown = sorted(set(names) - set(TITLES))
    if unknown:
        raise ConfigError(f"--skip {','.join(sorted(names))}: {unknown[0]!r} is not an analysis (one of: "
                          f"{', '.join(TITLES)})")
    return frozenset(names)


def settings_for(n_records: int, resamples: int = bootstrap.RELEASED_RESAMPLES, skip=()) -> Settings:
    skip = check_skip(skip)
    if n_records <= QUICK_RECORDS:
        return Settings(resamples=min(resamples, QUICK_RESAMPLES), cuts=QUICK_CUTS, seeds=QUICK_SEEDS, quick=True,
                        skip=skip)
    return Settings(resamples=resamples, skip=skip)


@dataclass(frozen=True)
class Scorer:
    """One detector (and preset) of a study: its run spec and its ScoredStream per arm (lowest seed)."""

    name: str
    spec: runs.RunSpec
    batch_dependent: bool
    streams: dict[str, records.ScoredStream]

    @property
    def kind(self) -> records.Kind:
        return next(iter(self.streams.values())).kind

    def detector_spec(self):
        from bench.assembly.detectors import get

        return get(self.spec.detector)

    def overrides(self) -> dict:
        spec = self.detector_spec()
        return dict(spec.quick) if self.spec.quick else {}


@dataclass
class Study:
    corpus_spec: runs.CorpusSpec
    corpus_sha256: str
    split: records.SplitRule
    arms: tuple[str, ...]
    scorers: tuple[Scorer, ...]
    manifest: dict
    corpus: records.Corpus | None = None
    corpus_error: str = ""

    @property
    def n(self) -> int:
        return next(iter(self.scorers[0].streams.values())).n

    def pair(self) -> tuple[str, str] | None:
        """The first two arms (registry order) that hold the same records: the pair analyses' arms."""
        rows = {}
        for sc in self.scorers:
            for arm, s in sc.streams.items():
                rows.setdefault(arm, np.sort(s.rows))
        for a, b in itertools.combinations(self.arms, 2):
            if a in rows and b in rows and np.array_equal(rows[a], rows[b]):
                return a, b
        return None

    def with_arms(self, arms, kind: records.Kind | None = None) -> list[Scorer]:
        return [sc for sc in self.scorers if all(a in sc.streams for a in arms) and (kind is None or sc.kind is kind)]


@dataclass(frozen=True)
class Outcome:
    """One analysis on one study: its tables, or the one-line reason it was skipped; notes for the page."""

    key: str
    title: str
    tables: dict[str, pd.DataFrame] = field(default_factory=dict)
    skipped: str = ""
    notes: tuple[str, ...] = ()


# ------------------------------------------------------------------ loading

def _scorer_name(detector: str, preset: str, presets_of: dict) -> str:
    return detector if len(presets_of[detector]) == 1 else f"{detector}:{preset}"


def load_studies(files: list[Path]) -> list[Study]:
    """Group the run files by corpus (spec and digest) and split rule; per (detector, preset) the lowest seed."""
    from bench.assembly import arms as arm_registry

    groups: dict = {}
    for path in files:
        a = store.run_attrs(path)
        spec = runs.RunSpec.from_json(a["spec"])
        key = (json.dumps(spec.corpus.as_dict(), sort_keys=True), a["corpus_sha256"],
               (spec.split.train, spec.split.validation))
        groups.setdefault(key, []).append((spec, a, path))
    order = {name: i for i, name in enumerate(arm_registry.ARMS)}
    studies = []
    for (_, sha, split), members in groups.items():
        chosen: dict = {}
        for spec, a, path in sorted(members, key=lambda m: m[0].seed):
            chosen.setdefault((spec.detector, spec.preset), {}).setdefault(spec.arm, (spec, a, path))
        presets_of: dict = {}
        for det, preset in chosen:
            presets_of.setdefault(det, []).append(preset)
        scorers = tuple(Scorer(_scorer_name(det, preset, presets_of), next(iter(by_arm.values()))[0],
                               bool(next(iter(by_arm.values()))[1].get("batch_dependent", False)),
                               {arm: store.read_run(p) for arm, (_, _, p) in by_arm.items()})
                        for (det, preset), by_arm in chosen.items())
        arms = tuple(sorted({m[0].arm for m in members}, key=lambda x: (order.get(x, len(order)), x)))
        manifest = json.loads(members[0][1].get("manifest", "{}"))
        studies.append(Study(members[0][0].corpus, sha, records.SplitRule(*split), arms, scorers, manifest))
    return studies


def attach_corpus(study: Study) -> None:
    """Rebuild the corpus the runs scored (once), or record why it cannot be."""
    try:
        corpus, sha = runs.load_corpus(study.corpus_spec)
    except BenchError as e:
        study.corpus_error = str(e)
        return
    if sha != study.corpus_sha256:
        study.corpus_error = (f"{study.corpus_spec.root}: the corpus built there now (manifest {sha[:12]}) is not "
                              f"the one the runs scored ({study.corpus_sha256[:12]})")
        return
    study.corpus = corpus


# ------------------------------------------------------------------ the analyses

class LatestModel(FittedRescore):
    """A FittedRescore that keeps only its latest model. The cut sweep fits one model per (arm, cut) and uses it
    once, and a fitted batch detector holds its training rows (ECOD several arrays of them): kept all together
    they dominate the aggregate's memory on a large corpus. The other analyses use one model several times in a
    row, so one kept model refits nothing they need."""

    def model(self, arm: str, train_end: int | None = None):
        det = super().model(arm, train_end)
        self._models = {k: v for k, v in self._models.items() if v is det}
        return det


def rescorers(study: Study) -> dict[str, LatestModel]:
    """One rescorer per batch scorer of the study (none without the corpus), over all its arms: the shared-records,
    batch-ladder and cut-sweep analyses all take theirs from here, so a model one of them fitted at (arm, i_tr) is
    not fitted again by the next."""
    if study.corpus is None:
        return {}
    return {sc.name: LatestModel(study.corpus, sc.detector_spec(), sc.streams, preset=sc.spec.preset,
                                 seed=sc.spec.seed) for sc in study.scorers if sc.kind is records.Kind.BATCH}


def _refits(study: Study, scorers: list[Scorer], refit: dict[str, LatestModel] | None
            ) -> tuple[dict, list[Scorer], tuple[str, ...]]:
    """The rescorers of the batch scorers among `scorers` (built here when not given); the scorers kept, and a
    note for any left out (refitting needs the corpus)."""
    batch = [sc for sc in scorers if sc.kind is records.Kind.BATCH]
    if batch and study.corpus is None:
        kept = [sc for sc in scorers if sc.kind is not records.Kind.BATCH]
        return {}, kept, (f"Batch detectors ({', '.join(sc.name for sc in batch)}) left out: refitting them needs "
                          f"the corpus ({study.corpus_error}).",)
    refit = rescorers(study) if refit is None else refit
    return {sc.name: refit[sc.name] for sc in batch}, scorers, ()


def heldout(study: Study, st: Settings) -> tuple[Outcome, list[bootstrap.SliceBootstrap]]:
    """Every scorer's AP and AUC on each arm's held-out slice with intervals, and every pair's paired margin."""
    results = []
    for arm in study.arms:
        scorers = [sc for sc in study.scorers if arm in sc.streams]
        s0 = scorers[0].streams[arm]
        y = s0.y[s0.test()]
        scores = {sc.name: sc.streams[arm].score[s0.test()] for sc in scorers}
        results.append(bootstrap.bootstrap_slice(f"heldout|{arm}", y, scores, list(itertools.combinations(scores, 2)),
                                                 resamples=st.resamples))
    t = bootstrap.tables(results)
    return Outcome("heldout", TITLES["heldout"],
                   {"heldout_values": t["bootstrap_values"], "heldout_margins": t["bootstrap_margins"]}), results


def shared_analysis(study: Study, st: Settings, refit: dict[str, LatestModel] | None = None) -> Outcome:
    key, title = "shared", TITLES["shared"]
    pair = study.pair()
    if pair is None:
        return Outcome(key, title, skipped=_no_pair(study))
    refit, scorers, notes = _refits(study, study.with_arms(pair), refit)
    dependent = frozenset(sc.name for sc in scorers if sc.batch_dependent and sc.name in refit)
    streams = {sc.name: {a: sc.streams[a] for a in pair} for sc in scorers}
    r = shared.analyse(streams, rescore={k: v for k, v in refit.items() if k in dependent},
                       batch_dependent=dependent, resamples=st.resamples)
    return Outcome(key, title, shared.tables(r), notes=notes)


def _no_pair(study: Study) -> str:
    return (f"skipped: the set has no second arm over the same records (arms: {', '.join(study.arms)}); the pair "
            "analyses need two assemblies of one corpus")


def cut_analysis(study: Study, st: Settings, refit: dict[str, LatestModel] | None = None) -> Outcome:
    key, title = "cutsweep", TITLES["cutsweep"]
    # two assemblies of one corpus; else every arm (LITNET's per-capture streams), each swept on its own
    arms = study.pair() or tuple(a for a in study.arms if study.with_arms((a,)) == list(study.scorers))
    if not arms:
        return Outcome(key, title, skipped="skipped: no arm was scored by every scorer of the set")
    refit, scorers, notes = _refits(study, study.with_arms(arms), refit)
    if not scorers:
        return Outcome(key, title, skipped="skipped: no scorer left without refitting: " + " ".join(notes))
    streams = {sc.name: {a: sc.streams[a] for a in arms} for sc in scorers}
    r = cutsweep.sweep(streams, refit=refit, fractions=st.cuts, rule=study.split, resamples=st.resamples)
    if study.pair() is None:
        notes += (f"Arms {', '.join(arms)}: no two hold the same records, so 'agree' compares orderings on "
                  "different records." if len(arms) > 1 else f"One arm ({arms[0]}): the arms' agreement at each cut "
                  "needs a second arm.",)
    return Outcome(key, title, cutsweep.tables(r), notes=notes)


def ladder_analysis(study: Study, st: Settings, held: list[bootstrap.SliceBootstrap],
                    refit: dict[str, LatestModel] | None = None) -> Outcome:
    key, title = "batchladder", TITLES["batchladder"]
    batch = [sc for sc in study.scorers if sc.kind is records.Kind.BATCH]
    if not batch:
        return Outcome(key, title, skipped="skipped: the set ran no batch detector")
    if study.corpus is None:
        return Outcome(key, title, skipped=f"skipped: rescoring needs the corpus ({study.corpus_error})")
    pair = study.pair()
    refit = rescorers(study) if refit is None else refit
    ladders, comps, vs = [], [], []
    for sc in batch:
        rescore = refit[sc.name]
        for arm, s in sc.streams.items():
            ld = batchladder.ladder(rescore, s, scorer=sc.name)
            ladders.append(ld)
            margins = {f"{arm}: {m.a} − {m.b} ({m.metric})": m for r in held if r.slice == f"heldout|{arm}"
                       for m in r.margins if m.metric == "ap" and sc.name in (m.a, m.b)}
            vs += batchladder.against_span(ld.span_ap, margins)
        if pair and all(a in sc.streams for a in pair):
            comps.append(batchladder.composition(rescore, sc.streams[pair[0]], sc.streams[pair[1]], scorer=sc.name))
    notes = () if pair else ("Composition at equal size skipped: " + _no_pair(study).removeprefix("skipped: "),)
    tables = batchladder.tables(ladders, comps, vs)
    if comps:  # the shared records' prevalence: both batches' APs are of these records, so one chance level
        tables["batch_composition"].insert(6, "prevalence", [c.values[0].prevalence for c in comps])
    return Outcome(key, title, tables, notes=notes)


def branch_analysis(study: Study, st: Settings) -> Outcome:
    key, title = "branches", TITLES["branches"]
    results, notes = [], []
    for sc in study.scorers:
        for arm, s in sc.streams.items():
            if not s.branches:
                continue
            # named by the scorer (two presets of one detector are two scorers); the composition by the detector
            named, weights = replace(s, detector=sc.name), branches.COMPOSITIONS.get(s.detector)
            try:
                results.append(branches.analyse(named, weights, resamples=st.resamples))
            except BenchError as e:  # the composition names a branch this run does not store: values only
                notes.append(f"{sc.name} on {arm}: {e}")
                results.append(branches.analyse(named, {}, resamples=st.resamples))
    if not results:
        return Outcome(key, title, skipped="skipped: no run stores the branches of a composed score")
    return Outcome(key, title, branches.tables(results), notes=tuple(notes))


def _fresh_scorer(study: Study, by_name: dict[str, Scorer]) -> Callable:
    from bench.assembly.analyses.inmemory import score_arm

    def score(arm: records.Arm, name: str) -> records.ScoredStream:
        sc = by_name[name]
        return score_arm(study.corpus, arm, sc.detector_spec(), study.split, sc.spec.preset, sc.spec.seed,
                         **sc.overrides())
    return score


def prevalence_analysis(study: Study, st: Settings) -> Outcome:
    key, title = "prevalence", TITLES["prevalence"]
    if study.corpus is None:
        return Outcome(key, title, skipped=f"skipped: fresh runs on resampled streams need the corpus "
                                           f"({study.corpus_error})")
    arm = PAPER_PREVALENCE_ARM if PAPER_PREVALENCE_ARM in study.arms else study.arms[0]
    scorers = study.with_arms((arm,))
    stream = scorers[0].streams[arm]
    base = records.Arm(arm, stream.rows)
    score = _fresh_scorer(study, {sc.name: sc for sc in scorers})
    cells, notes = [], [f"Arm {arm} (the paper's §8 sweep resampled the day round robin); every draw is scored "
                        "by fresh runs of each detector."]
    for level in st.levels:
        try:
            cells += prevalence.sweep(base, stream.y, [sc.name for sc in scorers], score, levels=(level,),
                                      seeds=st.seeds, rule=study.split, resamples=st.resamples)
        except BenchError as e:
            notes.append(f"level {level}: {e}")
    if not cells:
        return Outcome(key, title, skipped="skipped: no level could be drawn: " + " ".join(notes[1:]))
    return Outcome(key, title, prevalence.tables(tuple(cells)), notes=tuple(notes))


def crossed_analysis(study: Study, st: Settings) -> Outcome:
    key, title = "crossed", TITLES["crossed"]
    pair = study.pair()
    if pair is None:
        return Outcome(key, title, skipped=_no_pair(study))
    online = study.with_arms(pair, records.Kind.ONLINE)
    if not online:
        return Outcome(key, title, skipped="skipped: the design needs an online detector; the set ran none")
    if study.corpus is None:
        return Outcome(key, title, skipped=f"skipped: the cells are fresh runs and need the corpus "
                                           f"({study.corpus_error})")
    frames: dict[str, list] = {}
    for sc in online:
        a, b = (records.Arm(arm, sc.streams[arm].rows) for arm in pair)
        r = crossed.crossed(sc.spec.create, study.corpus, a, b, study.split, detector=sc.name)
        for name, df in crossed.tables(r).items():
            frames.setdefault(name, []).append(df)
    out = {name: pd.concat(dfs, ignore_index=True) for name, dfs in frames.items()}
    out["crossed_design"] = out["crossed_design"].drop_duplicates(ignore_index=True)
    return Outcome(key, title, out, notes=(crossed.DESIGN_NOTE,))


def event_analysis(study: Study, st: Settings) -> Outcome:
    """Range-based precision and recall on each held-out slice at the validation-F1 threshold."""
    from bench.assembly.analyses.metrics import normalised_lift
    from bench.assembly.decision import validation_f1_threshold

    rows = []
    for sc in study.scorers:
        for arm, s in sc.streams.items():
            i_tr, i_va = s.bounds
            t = validation_f1_threshold(s.y[i_tr:i_va], s.score[i_tr:i_va], default=float(np.median(s.score[i_va:])))
            row = events.evaluate(s.y[i_va:], s.score[i_va:], t)
            rows.append({"arm": arm, "scorer": sc.name, **row,
                         "normalised_lift": normalised_lift(row["flow_ap"], row["prevalence"])})
    note = ("Threshold: the score maximising F1 on the arm's validation segment (the released baselines' rule; the "
            "held-out median where validation holds one class). Range-based: α = 0, flat bias, reciprocal "
            "cardinality (Tatbul et al., 2018).")
    return Outcome("events", TITLES["events"],
                   events.tables(rows), notes=(note,))


def run_all(study: Study, st: Settings) -> list[Outcome]:
    """Every analysis the study allows, in the page's order; an analysis that fails on its inputs is skipped with
    its one-line reason (the others still run)."""
    with warnings.catch_warnings():  # PyOD's ECOD warns of a skewness on near-constant columns at every refit
        warnings.filterwarnings("ignore", category=RuntimeWarning, module="pyod")
        return _run_all(study, st)


def _run_all(study: Study, st: Settings) -> list[Outcome]:
    held: list[bootstrap.SliceBootstrap] = []
    refit = rescorers(study)

    def first(s: Study, t: Settings) -> Outcome:
        out, found = heldout(s, t)
        held.extend(found)
        return out
    # run in this order (shared and the ladder refit at each arm's i_tr, kept by the one-model rescorers; the cut
    # sweep's models at every cut then replace them), listed in the page's order
    steps = [("heldout", first), ("shared", lambda s, t: shared_analysis(s, t, refit)),
             ("batchladder", lambda s, t: ladder_analysis(s, t, held, refit)),
             ("cutsweep", lambda s, t: cut_analysis(s, t, refit)), ("branches", branch_analysis),
             ("prevalence", prevalence_analysis), ("crossed", crossed_analysis), ("events", event_analysis)]
    outcomes = []
    for key, step in steps:
        if key in st.skip:
            outcomes.append(Outcome(key, TITLES[key], skipped="skipped: left out on request (--skip)"))
            continue
        try:
            outcomes.append(step(study, st))
        except BenchError as e:
            outcomes.append(Outcome(key, TITLES[key], skipped=f"skipped: {e}"))
    page = list(TITLES)
    return sorted(outcomes, key=lambda o: page.index(o.key))


# ------------------------------------------------------------------ writing

def _markdown(name: str, df: pd.DataFrame) -> str:
    from bench.report.render import frame_markdown

    return "\n".join([f"# {name}", "", *frame_markdown(df)]) + "\n"


def write_tables(outcomes: list[Outcome], folder: Path) -> dict[str, Path]:
    """Each table as CSV and markdown under `folder` (report/analyses/ or a numbered subfolder), plus a
    skipped.md naming every skipped analysis and why; table name -> CSV path."""
    from bench.io import write_text_atomic

    written = {}
    for o in outcomes:
        for name, df in o.tables.items():
            write_text_atomic(folder / f"{name}.csv", df.to_csv(index=False, lineterminator="\n"))
            write_text_atomic(folder / f"{name}.md", _markdown(name, df))
            written[name] = folder / f"{name}.csv"
    skipped = [f"- {o.key}: {o.skipped}" for o in outcomes if o.skipped]
    write_text_atomic(folder / "skipped.md", "# Analyses skipped, and why\n\n" + ("\n".join(skipped) or "none") + "\n")
    return written
