"""The tabular track of the continual runner (bench/continual/runner.py): record tasks, record protocols, level
`record`.

A run's `root` is a record index folder (`bench tabular index`); its `index_sha256` (raw files' bytes + every
preprocessing and discovery setting) and the SHA-256 of its index.csv and features.npy (an index edited or rebuilt
otherwise) are the data identity in the run key. Each evaluated cell (step i, task j)
records ROC-AUC, raw average precision, the test set's prevalence p, normalised PR-AUC (AP − p)/(1 − p) and the
expected AP of a uniformly random ranking of that test set (not p on small sets), each as an [N, N] matrix; and the
per-record scores with each record's row in index.csv, so intervals can be recomputed per record. Where the index
has a timestamp for every record of a test set, each score also carries the record's position in that set's stream
(timestamp) order, so the reports can use the block bootstrap without reading the index again.

Non-finite scores: a run of the suite's presets stops (NumericalError: a diverged model is not a result). A run of
the `released` preset scores as the CAD framework's released metrics do (CAD `src/cadbench/pyclad/metrics.py`,
RocAucRobust / PrAuc / NormalizedPrAuc: NaN and +inf become the largest finite score of the cell, −inf the
smallest) and records how many scores of each cell were replaced (`nonfinite/record` [step, task]); a cell with no
finite score stops it as before.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

import numpy as np

from bench import tracks
from bench.continual.guards import check_terminated
from bench.continual.runner import TaskData
from bench.errors import ConfigError, NumericalError
from bench.metrics import normalized_pr_auc, roc_auc
from bench.tabular.fidelity import TrackBehaviour, behaviour, fidelity
from bench.tabular.protocols import REPLAY_RECORDS, RecordSplit

PROBE_RECORDS = 64  # what a resumed run's restored state scores first (TabularTrack.probe)
MATRICES = ("R/record", "R/record_ap", "R/record_npr_auc", "R/record_prevalence", "R/record_expected_ap")


@dataclass(frozen=True)
class LabelledRecords(RecordSplit):
    """A test split: feature rows, their labels, their rows in the record index (`record_ids`) and each record's
    rank in timestamp order within the split (`order`; None when some record has no timestamp)."""

    labels: np.ndarray | None = None
    order: np.ndarray | None = None


class TabularTrack(tracks.Track):
    name = "tabular"
    levels = ("record",)
    matrices = MATRICES
    unit = "records"
    weights_id = "none"  # no pretrained weights

    def __init__(self, spec, splits: dict | None = None, *, load_splits=None):
        """`splits` ({task: TaskData}), or `load_splits()` that reads them when a step first needs them."""
        self.spec, self._splits, self._load_splits = spec, splits, load_splits
        self.presets: list[str] = []  # every preset as near to the run's values as the named one (`prepare_tabular`)

    @property
    def splits(self) -> dict:
        """{task: TaskData}, read from the record index when a step first needs it: a rerun of a complete result
        (or a grid planning its runs) knows its key from index.json and the files' digests alone (the records of
        CICIDS2017 are ~860 MB)."""
        if self._splits is None:
            self._splits = self._load_splits()
        return self._splits

    # start, drop_training, close: the Track defaults (the index holds the records, in memory, for the whole run)

    def protocol(self, cfg):
        from bench.tabular.protocols import make_protocol
        from bench.tabular.ste import Expert

        if cfg.protocol == "ste":
            return Expert(lambda: self.spec.factory(**cfg.hparams), cfg.seed)
        if cfg.protocol == "cl":
            return make_protocol("cl", self.spec, cfg.hparams, cfg.seed, replay_size=cfg.tabular.replay_size,
                                 replay_share=cfg.tabular.replay_share or "water")
        return make_protocol(cfg.protocol, self.spec, cfg.hparams, cfg.seed)

    def attrs(self) -> dict:
        return {"backbone_forward_images": 0, "presets": json.dumps(self.presets)}

    def probe(self, cfg, protocol) -> np.ndarray:
        """Scores of the first task's first test records under a restored protocol (the runner checks a resumed
        state with them; scoring is pointwise, so nothing measured changes)."""
        if not getattr(protocol, "restores_model", True):  # the STE expert: the next step fits a fresh one
            return np.empty(0)
        split = self.splits[cfg.tasks[0]].test
        return protocol.predict(split, np.arange(min(len(split), PROBE_RECORDS)))

    def evaluate(self, cell: tracks.Cell) -> None:
        from bench.metrics import expected_random_ap

        check_terminated()
        cfg, t, j = cell.config, cell.step, cell.task
        split = self.splits[cell.task_name].test
        scores = cell.protocol.predict(split, np.arange(len(split)))
        a = cell.arrays
        bad = ~np.isfinite(scores)
        released = cfg.tabular.nonfinite == "released"
        if bad.any() and (not released or bad.all()):
            raise NumericalError(f"{cfg.model}: non-finite record scores on task {split.task} at step {t + 1} "
                                 f"(after learning {cfg.tasks[t]}); the model diverged or its settings are degenerate")
        if released:  # the released metrics' policy, recorded per cell (module docstring)
            scores = released_finite(scores)
            a.setdefault("nonfinite/record", np.zeros(a["R/record"].shape, dtype=np.int64))[t, j] = int(bad.sum())
        labels = split.labels
        a["R/record"][t, j] = roc_auc(labels, scores)
        npr, p = normalized_pr_auc(labels, scores)
        a["R/record_npr_auc"][t, j], a["R/record_prevalence"][t, j] = npr, p
        a["R/record_ap"][t, j] = npr * (1 - p) + p if np.isfinite(npr) else np.nan
        k = int(labels.sum())
        a["R/record_expected_ap"][t, j] = expected_random_ap(len(labels), k) if k else np.nan
        cell.scores.append(tracks.ScoreRecord(t, j, labels.astype(np.int8), scores.astype(np.float64),
                                              record=split.record_ids.astype(np.int32), order=split.order))


def released_finite(scores: np.ndarray) -> np.ndarray:
    """NaN and +inf → the largest finite score, −inf → the smallest (CAD metrics.py RocAucRobust.compute)."""
    finite = scores[np.isfinite(scores)]
    return np.nan_to_num(scores, nan=finite.max(), posinf=finite.max(), neginf=finite.min())


def prepare_tabular(config) -> tuple[TabularTrack, str]:
    """(track, index_sha256) of a tabular run: read the record index at `config.root`, resolve the model's
    hyperparameters, split every task; bad input fails here, before any work."""
    from bench.registry import get
    from bench.tabular.preprocess import load_index_meta

    spec = get(config.model, "tabular")
    asked = spec.preset_name(config.preset)
    config.hparams = spec.resolve(config.hparams, asked)
    # the preset the values are, not the name asked: one run key, one recorded name (docs/models.md, "Presets");
    # `released` also runs the released framework's replay share, evaluation and non-finite policy, so it is never
    # recorded as another preset of equal values (Isolation Forest's `released` values are its `suite` values)
    config.preset, presets = spec.recorded_preset(
        asked, config.hparams, weights_by_preset=False,
        same_run=lambda preset: fidelity(spec, preset) is fidelity(spec, asked))
    config.model_version = spec.version  # part of the run key: a fixed detector recomputes its runs
    run_as = behaviour(spec, config.preset)
    record_replay_size(config, run_as)
    record_evaluation(config, run_as)
    meta = load_index_meta(config.root)
    if meta.get("dataset") != config.dataset:
        raise ConfigError(f"{config.root}: a record index of {meta.get('dataset')!r}, not {config.dataset!r}")
    record_settings(config.tabular, meta.get("settings", {}), config.root)
    record_content(config.tabular, config.root)
    if isinstance(meta.get("tasks"), dict):  # the index's own per-task counts; index.csv is checked when read
        _check_tasks(config, sorted(meta["tasks"]))
    track = TabularTrack(spec, load_splits=lambda: _read_splits(config))
    track.presets = presets  # every preset as near to the values, beside the one name (docs/models.md)
    return track, meta["index_sha256"]


def _check_tasks(config, available: list) -> None:
    unknown = sorted(set(config.tasks) - set(available))
    if unknown:
        raise ConfigError(f"tasks {unknown} not in the record index {config.root} (available: "
                          f"{', '.join(available)})")


def _read_splits(config) -> dict:
    """Every task's training and test records, read from the index at `config.root`."""
    from bench.tabular.preprocess import load_index

    index, X, _ = load_index(config.root)
    task_of, split, labels = index["task"].to_numpy(), index["split"].to_numpy(), index["label"].to_numpy()
    _check_tasks(config, sorted(set(task_of)))
    splits = {}
    for task in config.tasks:
        train = np.flatnonzero((task_of == task) & (split == "train"))
        test = np.flatnonzero((task_of == task) & (split == "test"))
        splits[task] = TaskData(RecordSplit(task, X[train], train),
                                LabelledRecords(task, X[test], test, labels[test].astype(np.int8),
                                                stream_order(index["timestamp"].to_numpy()[test], test)))
    return splits


def record_replay_size(config, run_as: TrackBehaviour) -> None:
    """Record the Replay buffer's size and share rule in a cl run's config (the default size when none was asked
    for; the share rule of its preset's fidelity, bench.tabular.fidelity: released runs pyCLAD v0.3.0's
    ⌊capacity / tasks⌋ per task, the CAD framework's `AdaptiveBalancedReplayBuffer`, run_validation_strategies.py:115;
    the suite's water filling otherwise). Only cl has a bounded buffer (Cumulative keeps every record, Naive and the
    experts none), so a size asked of another protocol would change nothing and is refused rather than recorded as
    if it had."""
    inputs = config.tabular
    if config.protocol == "cl":
        inputs.replay_size = REPLAY_RECORDS if inputs.replay_size is None else inputs.replay_size
        share = run_as.replay_share
        if inputs.replay_share not in (None, share):
            raise ConfigError(f"replay_share={inputs.replay_share!r}: preset {config.preset} runs Replay with the "
                              f"{share!r} share rule (expected that or nothing)")
        inputs.replay_share = share
    elif inputs.replay_size is not None:
        raise ConfigError(f"replay_size={inputs.replay_size} sizes the Replay buffer of protocol cl; protocol "
                          f"{config.protocol} has none (drop the setting for this run)")


def record_evaluation(config, run_as: TrackBehaviour) -> None:
    """The evaluation and non-finite policy of the preset's fidelity (bench.tabular.fidelity). The non-finite
    policy is part of the run key, so a suite run that would stop is never taken for a released one that scored
    on; a suite preset keeps the evaluation it asks for (the continual default: its run key is unchanged)."""
    if run_as.evaluation is not None:
        config.evaluation = run_as.evaluation
    config.tabular.nonfinite = run_as.nonfinite


def record_settings(inputs, built: dict, root) -> None:
    """Check the settings a run asks of its record index against those the index was built with, then record them
    all in the run's inputs. A setting asked for and built otherwise (or not a setting of the index) is a
    ConfigError naming the index: the run would otherwise silently read data prepared another way."""
    for part in ("preprocessing", "discovery"):
        have = built.get(part) or {}
        for name, wanted in getattr(inputs, part).items():
            if name not in have:
                raise ConfigError(f"{root}/index.json: {part} has no setting {name!r} (its settings: "
                                  f"{', '.join(sorted(have)) or 'none'})")
            if have[name] != wanted:
                raise ConfigError(f"{root}/index.json: built with {part} {name}={have[name]!r}, but the run asks "
                                  f"for {wanted!r}; rebuild the index (`bench tabular index`) or drop the setting")
        setattr(inputs, part, dict(have))


def index_content_sha256(root) -> str:
    """One SHA-256 over the record index's data files (index.csv, features.npy): what a run reads besides the
    settings. File digests come from the image track's cache (bench/data/digests.py: by path, size and mtime)."""
    import hashlib
    from pathlib import Path

    from bench.data.digests import file_digests

    names = ("index.csv", "features.npy")
    shas = file_digests([Path(root).resolve() / n for n in names])
    h = hashlib.sha256()
    for name, sha in zip(names, shas):
        h.update(f"{name}\0{sha}\n".encode())
    return h.hexdigest()


def record_content(inputs, root) -> None:
    """Record the index files' SHA-256 in the run's inputs (the run key covers it); a value asked for and found
    otherwise is a ConfigError naming the index."""
    found = index_content_sha256(root)
    if inputs.index_content_sha256 not in (None, found):
        raise ConfigError(f"{root}: index.csv/features.npy changed (SHA-256 {found[:12]}, the run asks for "
                          f"{inputs.index_content_sha256[:12]}); rebuild the index or drop the setting")
    inputs.index_content_sha256 = found


def stream_order(stamps: np.ndarray, record_ids: np.ndarray) -> np.ndarray | None:
    """Each record's rank (int64, 0-based) in timestamp order, ties by record id; None when a record has no
    timestamp or one that does not parse (ISO 8601 text, else day-first dates as the CIC captures write them)."""
    import pandas as pd

    if not len(stamps) or any(s == "" for s in stamps):
        return None
    text = pd.Series(stamps, dtype=str)
    when = pd.to_datetime(text, format="ISO8601", errors="coerce")
    if when.isna().any():
        when = pd.to_datetime(text, format="mixed", dayfirst=True, errors="coerce")
    if when.isna().any():
        return None
    sequence = np.lexsort((np.asarray(record_ids), when.to_numpy().astype("datetime64[ns]").astype(np.int64)))
    rank = np.empty(len(sequence), dtype=np.int64)
    rank[sequence] = np.arange(len(sequence))
    return rank


tracks.register("tabular", prepare_tabular)
