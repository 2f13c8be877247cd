"""Runs of the stream-assembly study: a typed run spec, its key, and executing it into one HDF5 run file.

A run is (corpus, arm, split rule, detector, preset, seed) (`RunSpec`). Its key hashes the spec, the detector's
resolved parameters and the corpus manifest's digest (`corpus.manifest_sha256`: the inputs' SHA-256, the rule,
budgets, scale and feature set), so a changed input never reuses a stale result. Executing a run builds the corpus
(once per process for a grid of runs: `load_corpus` caches it while the input files are unchanged), makes the arm,
splits it, then:

- an online detector scores every record of the stream in order, each before it is learned, in chunks; the deployed
  score and every branch of every record are kept. Every `checkpoint_every` records the detector's state and the
  scores so far go to `<run file>.ckpt` (atomically), and a run started again resumes there, to identical scores.
- a batch detector is fitted on the benign training rows (all training rows when none is benign) and scores
  validation + test as one recorded batch (`BatchRecord`), as the released `run_streaming_eval.py` does; positions
  outside the batch hold NaN.

The run file (`store.write_run`, atomic) holds what `read_run` returns as a `records.ScoredStream`, plus provenance.
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable

import numpy as np

from bench.assembly import arms, detectors, store
from bench.assembly.analyses.common import score_batch
from bench.assembly.corpus import build_corpus, feature_set, manifest_sha256, source, subsample
from bench.assembly.records import Corpus, Kind, ScoredStream, SplitRule
from bench.errors import ConfigError, DatasetError, choice_error
from bench.io import file_version, write_text_atomic

KEY_VERSION = 1
CHUNK = 4096  # records per score_learn call (the scores do not depend on it: the detectors' chunk contract)
CHECKPOINT_EVERY = 200_000  # records between checkpoints of an online run


@dataclass(frozen=True)
class CorpusSpec:
    """How a corpus is built: `build_corpus(source, root, scale=, rule=, features=, budgets=, corpus_name=)`."""

    source: str  # a registered source (bench.assembly.sources.SOURCES), e.g. cicids2017
    root: str
    scale: float = 1.0
    rule: str | None = None  # a Subsample value; None: the source's released rule
    features: str = "released"  # a FeatureSet value
    budgets: tuple[tuple[str, int], ...] | None = None  # None: the source's released budgets
    name: str | None = None  # the corpus's name (default: the source's)

    def check_names(self) -> None:
        """Every named choice resolves (one line naming the setting otherwise)."""
        source(self.source)
        if self.rule is not None:
            subsample(self.rule)
        feature_set(self.features)

    def check(self) -> None:
        """The names resolve and the root exists (one line saying how to stage or generate it otherwise)."""
        self.check_names()
        src = source(self.source)
        if not Path(self.root).is_dir():
            how = ("generate it with `python -m bench assembly synthetic --root DIR` or `make demo-assembly`"
                   if self.name == "synthetic" else f"stage the {self.source} captures there ({src.layout}; "
                   f"data/README.md) or pass --root")
            raise DatasetError(f"{self.root}: no such dataset folder for {self.source}: {how}")

    def build(self) -> Corpus:
        self.check()
        return build_corpus(self.source, self.root, scale=self.scale,
                            rule=subsample(self.rule) if self.rule else None, features=feature_set(self.features),
                            budgets=dict(self.budgets) if self.budgets is not None else None, corpus_name=self.name)

    @property
    def corpus_name(self) -> str:
        return self.name or self.source

    def as_dict(self) -> dict:
        out = asdict(self)
        out["budgets"] = dict(self.budgets) if self.budgets is not None else None
        return out

    @classmethod
    def from_dict(cls, data: dict) -> CorpusSpec:
        budgets = data.get("budgets")
        return cls(**{**data, "budgets": tuple(sorted(budgets.items())) if budgets else None})


@dataclass(frozen=True)
class RunSpec:
    corpus: CorpusSpec
    arm: str  # arms.ARMS or capture:<name>
    detector: str  # bench.assembly.detectors.SPECS
    preset: str = "released"
    seed: int = 0
    split: SplitRule = field(default_factory=SplitRule)
    quick: bool = False  # the detector's smoke-test sizes (DetectorSpec.quick, e.g. HST's 4 trees) over the preset

    @property
    def label(self) -> str:
        """The preset as results name it: `<preset>+quick` when the smoke-test sizes replace some of its values."""
        return f"{self.preset}+quick" if self.quick and detectors.get(self.detector).quick else self.preset

    def params(self) -> dict:
        spec = detectors.get(self.detector)
        return spec.params(self.preset, **(spec.quick if self.quick else {}))

    def create(self):
        spec = detectors.get(self.detector)
        return spec.create(self.preset, self.seed, **(spec.quick if self.quick else {}))

    def check(self) -> None:
        """The detector, its preset and the arm's name resolve (one line each otherwise), before any data is read."""
        self.params()
        if not self.arm.startswith(arms.CAPTURE_PREFIX) and self.arm not in arms.ARMS:
            raise choice_error("arm", self.arm, [*arms.ARMS, arms.CAPTURE_PREFIX + "<capture>"])
        train, validation = self.split.train, self.split.validation
        if not (0 < train < 1 and 0 < validation < 1 and train + validation < 1):
            raise ConfigError(f"split train={train} validation={validation}: expected fractions in (0, 1) with "
                              f"train + validation < 1 (the test segment is the rest)")

    def identity(self, corpus_sha256: str) -> dict:
        """The run key's preimage: what the result depends on."""
        corpus = {k: v for k, v in self.corpus.as_dict().items() if k != "root"}  # where the files lie: no
        return {"version": KEY_VERSION, "corpus": corpus, "corpus_sha256": corpus_sha256, "arm": self.arm,
                "detector": self.detector, "preset": self.label, "params": _plain(self.params()),
                "seed": self.seed, "split": asdict(self.split)}

    def run_key(self, corpus_sha256: str) -> str:
        payload = json.dumps(self.identity(corpus_sha256), sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(payload.encode()).hexdigest()

    def run_name(self, run_key: str) -> str:
        # `capture:<name>` arms and `tabular:<name>` detectors: no colon in a file name (it is a path separator on
        # some file systems and breaks scp-style copies)
        arm, detector = self.arm.replace(":", "-"), self.detector.replace(":", "-")
        preset = self.label.replace("+", "-")
        return f"{self.corpus.corpus_name}_{arm}_{detector}_{preset}_s{self.seed}_{run_key[:12]}"

    def as_dict(self) -> dict:
        return {"corpus": self.corpus.as_dict(), "arm": self.arm, "detector": self.detector, "preset": self.preset,
                "seed": self.seed, "split": asdict(self.split), "quick": self.quick}

    def to_json(self) -> str:
        return json.dumps(self.as_dict(), sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> RunSpec:
        data = json.loads(text)
        return cls(corpus=CorpusSpec.from_dict(data["corpus"]), arm=data["arm"], detector=data["detector"],
                   preset=data["preset"], seed=int(data["seed"]), split=SplitRule(**data["split"]),
                   quick=bool(data.get("quick", False)))


def _plain(value):
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, np.generic):
        return value.item()
    return value


# ---- the corpus, once per process -------------------------------------------------------------------------------

_CORPORA: dict = {}


def _fingerprint(root: str) -> tuple:
    """(path, FileVersion) of every file under root: a corpus built earlier in this process, or its cached facts,
    are reused only while its inputs are unchanged (the manifest's SHA-256s are then still theirs). The version
    holds the inode and ctime, so a same-size rewrite given back its old mtime (`cp -p`, `rsync -t`) is a change."""
    out = []
    for dirpath, _, files in os.walk(root):
        for name in files:
            path = os.path.join(dirpath, name)
            out.append((path, *file_version(path)))
    return tuple(sorted(out))


def load_corpus(spec: CorpusSpec) -> tuple[Corpus, str]:
    """(corpus, manifest digest) of `spec`, built once per process while its input files are unchanged (the last
    one built is kept: a grid job's runs share one corpus)."""
    spec.check()
    key = (spec, _fingerprint(spec.root))
    if key not in _CORPORA:
        _CORPORA.clear()  # one corpus in memory at a time (a full corpus is ~1 GB)
        corpus = spec.build()
        _CORPORA[key] = (corpus, manifest_sha256(corpus))
    return _CORPORA[key]


@dataclass(frozen=True)
class CorpusFacts:
    """What planning needs of a corpus without holding it: its manifest digest, captures and size."""

    sha256: str
    captures: tuple[str, ...]
    records: int
    features: int


def corpus_facts(spec: CorpusSpec, cache_dir: Path | None = None) -> CorpusFacts:
    """The corpus's facts, from `cache_dir/<spec digest>.json` while the root's files keep their paths and
    versions (`_fingerprint`; so `make status` of a 1.6-million-record grid does not rebuild the corpus), else built.
    A run always builds its corpus and checks its key against it (`execute`), so a stale entry cannot pass."""
    spec.check()
    fingerprint = [list(f) for f in _fingerprint(spec.root)]
    name = hashlib.sha256(json.dumps(spec.as_dict(), sort_keys=True).encode()).hexdigest()[:24]
    path = Path(cache_dir) / f"{name}.json" if cache_dir is not None else None
    if path is not None and path.is_file():
        try:
            entry = json.loads(path.read_text())
            if entry["fingerprint"] == fingerprint:
                return CorpusFacts(entry["sha256"], tuple(entry["captures"]), entry["records"], entry["features"])
        except (OSError, ValueError, KeyError, TypeError):
            pass  # rebuilt and rewritten below
    corpus, sha = load_corpus(spec)
    facts = CorpusFacts(sha, corpus.captures, corpus.n, int(corpus.X.shape[1]))
    if path is not None:
        write_text_atomic(path, json.dumps({"spec": spec.as_dict(), "fingerprint": fingerprint, **asdict(facts)}))
    return facts


# ---- planning and executing -------------------------------------------------------------------------------------


@dataclass
class PreparedRun:
    """A run with its key and result file: what a grid plans and a job executes."""

    spec: RunSpec
    run_key: str
    out: Path
    chunk: int = CHUNK  # records per detector call
    checkpoint_every: int = CHECKPOINT_EVERY  # records between checkpoints of an online run

    @property
    def name(self) -> str:
        return self.out.stem


def prepare(spec: RunSpec, runs_dir: Path | None = None, out: Path | None = None,
            cache_dir: Path | None = None) -> PreparedRun:
    """The run's key (from the corpus's manifest digest: `corpus_facts`, cached in `cache_dir` when given) and
    result path (`runs_dir/<run name>.h5`, or `out`)."""
    spec.check()
    key = spec.run_key(corpus_facts(spec.corpus, cache_dir).sha256)
    if out is None:
        if runs_dir is None:
            raise ConfigError("a run needs a result path: --out FILE or a runs folder")
        out = Path(runs_dir) / f"{spec.run_name(key)}.h5"
    return PreparedRun(spec, key, Path(out))


def execute(run: PreparedRun, *, log: Callable[[str], None] = print, chunk: int | None = None,
            checkpoint_every: int | None = None, on_chunk: Callable[[int], None] | None = None) -> Path:
    """Execute `run` into its file; a complete file with its key is skipped. `chunk` and `checkpoint_every` default
    to the run's. `on_chunk(k)` is called after the k-th chunk of an online run has been scored (and checkpointed
    when due): tests interrupt a run there."""
    spec = run.spec
    chunk, checkpoint_every = chunk or run.chunk, checkpoint_every or run.checkpoint_every
    corpus, sha = load_corpus(spec.corpus)
    key = spec.run_key(sha)
    if key != run.run_key:
        raise ConfigError(f"{run.out}: the run key changed since it was planned ({run.run_key[:12]} -> {key[:12]}): "
                          f"the corpus inputs or settings changed; plan (submit) it again")
    held = store.file_run_key(run.out)
    if held == key and store.is_complete(run.out):
        log(f"{run.out}: already complete (run key {key[:12]}); nothing to do")
        return run.out
    if held is None and run.out.exists():
        raise ConfigError(f"{run.out}: exists and is not an assembly run file; write the run elsewhere (--out)")
    if held is not None and held != key:
        raise ConfigError(f"{run.out}: holds run key {held[:12]}, this run's is {key[:12]} (its inputs or settings "
                          f"differ): remove the file or write the run elsewhere")
    arm = arms.make_arm(corpus, spec.arm)
    split = arms.split(arm, spec.split)
    det_spec = detectors.get(spec.detector)
    detector = spec.create()
    if det_spec.kind is Kind.ONLINE:
        score, branches = _score_online(run, corpus, arm, detector, det_spec.branches, log=log, chunk=chunk,
                                        checkpoint_every=checkpoint_every, on_chunk=on_chunk)
        batch = None
    else:
        scored = score_batch(detector, corpus, arm.rows, corpus.y[arm.rows], split.i_tr)
        score, batch, branches = scored.score, scored.batch, {}
    stream = ScoredStream(corpus=corpus.name, corpus_sha256=sha, arm=arm.name, detector=spec.detector,
                          preset=spec.label, seed=spec.seed, kind=det_spec.kind, rows=arm.rows,
                          y=corpus.y[arm.rows].astype(np.int8), bounds=(split.i_tr, split.i_va), score=score,
                          branches=branches, batch=batch)
    store.write_run(run.out, stream, key=key, spec=spec, corpus=corpus, det_spec=det_spec)
    store.checkpoint_path(run.out).unlink(missing_ok=True)
    log(f"{run.out}: {spec.detector}/{spec.label} on {corpus.name} {arm.name} ({stream.n} records) written")
    return run.out


def _score_online(run: PreparedRun, corpus: Corpus, arm, detector, branch_names, *, log, chunk: int,
                  checkpoint_every: int, on_chunk) -> tuple[np.ndarray, dict]:
    n = len(arm.rows)
    score = np.full(n, np.nan)
    branches = {b: np.full(n, np.nan) for b in branch_names}
    ckpt = store.checkpoint_path(run.out)
    start = store.read_checkpoint(ckpt, run.run_key, detector, score, branches)
    if start:
        log(f"{run.out}: resuming at record {start} of {n} from {ckpt}")
    last_saved, k = start, 0
    for a in range(start, n, chunk):
        b = min(n, a + chunk)
        out = detector.score_learn(corpus.X[arm.rows[a:b]])
        score[a:b] = out.score
        for name in branches:
            branches[name][a:b] = out.branches[name]
        k += 1
        if b - last_saved >= checkpoint_every and b < n:
            store.write_checkpoint(ckpt, run.run_key, b, detector, score, branches)
            last_saved = b
        if on_chunk is not None:
            on_chunk(k)
    return score, branches
