"""Detector checks, one property each, for either track: what a detector author imports into their own tests (the
way scikit-learn's check_estimator is used).

    from bench.testing import check_detector

    def test_my_detector_keeps_the_contract():
        check_detector("my_detector")  # every check below, on tiny synthetic data, on CPU

Each check takes a registered detector's name (or a `Subject`, which fits the detector once and shares that fit
among the checks it is given to) and raises AssertionError naming the detector, the property and by how much it
failed: check_fit_returns_self, check_scores_shape_and_finite, check_pointwise_scores (alone vs. in a batch, each
scored with a fresh feature extractor, so a batch-dependent backbone or cache cannot hide), check_repeatable_scores,
check_scoring_leaves_buffers_unchanged, check_state_round_trip (through a checkpoint file),
check_seed_determinism and check_kill_and_resume (a run killed mid-task resumes to the identical R).

Pointwise: a sample's score never depends on the other samples scored with it. Equality is too
strict a test of that: a float32 kernel (BLAS GEMM, convolutions) picks its blocking and summation order from the
matrix shape, so the same record scored alone and inside a batch of 200 differs in the last bits (measured with the
locked packages: 2.4e-7 on the VAE's scores). A transductive scorer (ECOD's batch-wide empirical CDFs, a min-max or rank
normalisation over the scoring batch) moves scores by a sizeable fraction of their range instead, so one
tolerance separates the two by orders of magnitude (tests/models/test_contract.py shows it on a min-max scorer).
Every other property is exact: the same computation on the same inputs must give the same bits.
"""

from __future__ import annotations

import contextlib
import tempfile
from pathlib import Path

import numpy as np

from bench import checkpoint, features, registry, results
from bench.config import ImageInputs, RunConfig, TabularInputs
from bench.continual import runner
from bench.data import read_index, synthetic
from bench.data.tasks import task_splits
from bench.errors import ConfigError, choice_error
from bench.image.protocols import make_protocol
from bench.metrics import POINTWISE_RTOL, pointwise_gap
from bench.tabular import discovery, preprocess, scenario

# bench.testing sits with the tools (tests/test_layers.py): the checks drive the registry, both tracks' data and
# the runner, so it may import any of them, and nothing in the package imports it.
_QUIET = {"progress": False, "log": lambda *_: None}


def assert_pointwise(alone, batch, what: str) -> None:
    """AssertionError naming `what` when scores computed alone and in a batch differ beyond POINTWISE_RTOL."""
    gap = pointwise_gap(alone, batch)
    if not gap <= POINTWISE_RTOL:
        raise AssertionError(f"{what}: scores depend on the batch they are computed in (relative gap {gap:.3g} > "
                             f"{POINTWISE_RTOL:g} of their scale)")


def contract_settings(spec) -> dict:
    """The detector's quick settings with at most 2 epochs of batches of at least 16: the checks need a
    deterministic model, not a good one, and two epochs let a kill land in the second, after an epoch
    checkpoint."""
    settings = dict(spec.quick)
    if "epochs" in spec.params:
        settings["epochs"] = min(settings.get("epochs", 2), 2)
    if "batch_size" in spec.params:
        settings["batch_size"] = max(settings.get("batch_size", spec.params["batch_size"].default), 16)
    return settings


def tiny_images(folder: Path) -> Path:
    """The synthetic image benchmark's `tiny` preset (5 tasks, 64 px, 16 train / 16 test images per task) under
    `folder`; returns its root (what an ImageSubject's `root` may be given)."""
    return synthetic.generate(Path(folder) / "tiny", preset="tiny", seed=0)


def tiny_record_index(folder: Path) -> Path:
    """A record index of the synthetic tabular benchmark under `folder`; returns it (what a TabularSubject's
    `root` may be given)."""
    candidates = discovery.DiscoverySettings()
    preprocess.build_index("synthetic", scenario.raw_table("synthetic", Path(folder) / "raw", seed=0),
                           lambda df: discovery.discover(df, candidates), preprocess.PrepSettings(),
                           Path(folder) / "index", candidates.to_dict())
    return Path(folder) / "index"


class Subject:
    """One detector under test: its spec, tiny data of its track (made in a temp folder on first use unless `root`
    is given) and the settings the checks run it with (`contract_settings`). Fits once, with seed 0, on first use;
    checks given the same Subject share that fit."""

    track = ""
    run_tasks: tuple[str, ...] = ()  # the two tasks of the runs check_kill_and_resume compares

    def __init__(self, detector, root=None):
        self.spec = registry.get(detector, self.track) if isinstance(detector, str) else detector
        self.name = self.spec.name
        self.settings = contract_settings(self.spec)
        self._root = None if root is None else Path(root)
        self._tmp = None
        self._fit = None

    @property
    def root(self) -> Path:
        if self._root is None:
            self._tmp = tempfile.TemporaryDirectory(prefix=f"bench-check-{self.name}-")  # removed with the Subject
            self._root = self.make_data(Path(self._tmp.name))
        return self._root

    def fitted(self):
        """(the detector fitted with seed 0, what its fit returned)."""
        if self._fit is None:
            det = self.build()
            self._fit = det, det.fit(self.train, seed=0)
        return self._fit

    def detector_class(self) -> type:
        factory = self.spec.factory
        return factory if isinstance(factory, type) else type(self.build())

    def run_config(self) -> RunConfig:
        return RunConfig(dataset="synthetic", root=str(self.root), model=self.name, tasks=list(self.run_tasks),
                         ordering="custom", protocol=self.run_protocol(), seed=0, device="cpu",
                         inputs=self.inputs(), hparams=dict(self.settings))

    def run_protocol(self) -> str:
        """The protocol of the runs check_kill_and_resume compares: cl (Replay), whose checkpoint holds the
        detector and what the protocol keeps beside it."""
        return "cl"

    # --- what each track provides ---------------------------------------------------------------------------
    def make_data(self, folder: Path) -> Path:
        raise NotImplementedError

    def build(self):
        """A new, unfitted detector (for the image track: with a fresh feature extractor)."""
        raise NotImplementedError

    def inputs(self):
        raise NotImplementedError

    def scores(self, det, rows, fresh: bool = False):
        """(scores, maps or None) of test rows `rows`; `fresh`: through a new feature extractor."""
        raise NotImplementedError


class ImageSubject(Subject):
    """64 px synthetic images (the `tiny` preset: 16 train / 16 test per task), a random-init resnet18 on CPU."""

    track = "image"
    size = 64
    run_tasks = ("chip", "disc")

    def __init__(self, detector, root=None):
        super().__init__(detector, root)
        self._split_pair = None

    make_data = staticmethod(tiny_images)

    @property
    def train(self):
        return self._splits()[0]

    @property
    def test(self):
        return self._splits()[1]

    @property
    def n_test(self) -> int:
        return len(self.test)

    def _splits(self):
        if self._split_pair is None:
            self._split_pair = task_splits(read_index("synthetic", self.root), self.root, "disc",
                                                 self.size)
        return self._split_pair

    def extractor(self):
        import torch

        if self.spec.inputs == "images":  # backbone-less detectors read raw images
            return features.ImageSource(torch.device("cpu"), batch_size=8, progress=False)
        layers = self.spec.layers(self.spec.resolve(self.settings))
        return features.FeatureExtractor("resnet18", "none", layers, torch.device("cpu"), progress=False,
                                         batch_size=8)

    def build(self):
        return self.spec.factory(self.extractor(), image_size=self.size, **self.spec.resolve(self.settings))

    def inputs(self):
        return ImageInputs(backbone="resnet18", weights="none", batch_size=8, image_size=self.size)

    def run_protocol(self) -> str:
        """cl where the detector has a continual variant (its own, e.g. task banks, or Replay for a gradient-trained
        one), so the checkpoint holds what that variant keeps; ncl, which every image detector runs, otherwise."""
        try:
            make_protocol("cl", self.build(), seed=0)
        except ConfigError:  # the one refusal make_protocol has for cl: no continual variant
            return "ncl"
        return "cl"

    def scores(self, det, rows, fresh: bool = False):
        if fresh:
            det.extractor = self.extractor()
        out = det.predict(self.test, np.asarray(rows))
        return np.asarray(out.scores), (None if out.maps is None else np.asarray(out.maps))


class TabularSubject(Subject):
    """Records: 400 normal training rows of 12 features; a test set of 100 normal and 40 shifted rows. Runs read a
    record index of the synthetic tabular benchmark (made on first use)."""

    track = "tabular"
    run_tasks = ("Monday", "Tuesday")

    def __init__(self, detector, root=None):
        super().__init__(detector, root)
        rng = np.random.default_rng(0)
        self.train = rng.normal(size=(400, 12)).astype(np.float32)
        self.test = np.concatenate([rng.normal(size=(100, 12)), rng.normal(size=(40, 12)) + 3.0]).astype(np.float32)
        self.n_test = len(self.test)

    make_data = staticmethod(tiny_record_index)

    def build(self):
        return self.spec.factory(**self.spec.resolve(self.settings))

    def inputs(self):
        return TabularInputs()

    def scores(self, det, rows, fresh: bool = False):
        return np.asarray(det.score(self.test[np.asarray(rows)])), None


SUBJECTS = {cls.track: cls for cls in (ImageSubject, TabularSubject)}  # by the track each subject tests


def subject(name: str, track: str | None = None, root=None) -> Subject:
    """The Subject of detector `name` of `track` (None: the track that registers `name`)."""
    if track is None:
        found = [t for t in SUBJECTS if name in registry.specs(t)]
        if not found:
            raise choice_error("detector", name, [m for t in SUBJECTS for m in registry.specs(t)])
        track = found[0]
    if track not in SUBJECTS:
        raise choice_error("track", track, SUBJECTS)
    return SUBJECTS[track](name, root)


def _subject(detector) -> Subject:
    return detector if isinstance(detector, Subject) else subject(detector)


def _differ(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Where two arrays of one shape differ (NaN equals NaN)."""
    both_nan = np.isnan(a) & np.isnan(b) if a.dtype.kind == "f" and b.dtype.kind == "f" else False
    return (a != b) & ~both_nan


def _max_gap(a: np.ndarray, b: np.ndarray) -> float:
    """max |a − b| over the values that differ; inf for other shapes, NaN for arrays that are not numbers."""
    if a.shape != b.shape:
        return float("inf")
    if a.dtype.kind not in "biuf" or b.dtype.kind not in "biuf":
        return float("nan")
    d = _differ(a, b)
    return float(np.abs(a[d].astype(np.float64) - b[d].astype(np.float64)).max(initial=0.0))


def _assert_same(s: Subject, what: str, got, expected) -> None:
    """AssertionError unless `got` equals `expected` bit for bit (NaN equals NaN), saying how many values differ
    and by how much."""
    got, expected = np.asarray(got), np.asarray(expected)
    if got.shape != expected.shape:
        raise AssertionError(f"{s.name}: {what}: shape {got.shape}, expected {expected.shape}")
    differ = int(_differ(got, expected).sum())
    if differ:
        raise AssertionError(f"{s.name}: {what}: {differ} of {got.size} values differ (max |difference| "
                             f"{_max_gap(got, expected):.3g})")


# --- the checks ---------------------------------------------------------------------------------------------

def check_fit_returns_self(detector) -> None:
    """fit returns the detector itself (scikit-learn style), so `build().fit(...)` chains."""
    s = _subject(detector)
    det, returned = s.fitted()
    if returned is not det:
        raise AssertionError(f"{s.name}: fit returned {type(returned).__name__}, not the detector itself")


def check_scores_shape_and_finite(detector) -> None:
    """One finite score per test sample; anomaly maps, where the detector makes them, one finite map per sample
    at the input size."""
    s = _subject(detector)
    det, _ = s.fitted()
    scores, maps = s.scores(det, np.arange(s.n_test))
    if scores.shape != (s.n_test,) or not np.isfinite(scores).all():
        raise AssertionError(f"{s.name}: scores of {s.n_test} samples have shape {scores.shape} and "
                             f"{int((~np.isfinite(scores)).sum())} non-finite values (expected ({s.n_test},), all "
                             f"finite)")
    if maps is not None:
        expected = (s.n_test, s.size, s.size)
        if maps.shape != expected or not np.isfinite(maps).all():
            raise AssertionError(f"{s.name}: anomaly maps have shape {maps.shape} and "
                                 f"{int((~np.isfinite(maps)).sum())} non-finite values (expected {expected}, finite)")


def check_pointwise_scores(detector) -> None:
    """A sample's score (and map) is the same scored alone as in a batch of the whole test set, each scoring
    through a fresh feature extractor (up to POINTWISE_RTOL)."""
    s = _subject(detector)
    det, _ = s.fitted()
    batch, batch_maps = s.scores(det, np.arange(s.n_test), fresh=True)
    probe = [0, s.n_test // 2, s.n_test - 1]
    alone = [s.scores(det, [i], fresh=True) for i in probe]
    assert_pointwise([a[0][0] for a in alone], batch[probe], f"{s.name} scores")
    if batch_maps is not None:
        assert_pointwise(np.stack([a[1][0] for a in alone]), batch_maps[probe], f"{s.name} anomaly maps")


def check_repeatable_scores(detector) -> None:
    """Scoring the same samples twice gives the same scores, bit for bit."""
    s = _subject(detector)
    det, _ = s.fitted()
    rows = np.arange(min(6, s.n_test))
    _assert_same(s, "scores of the same samples scored twice", s.scores(det, rows)[0], s.scores(det, rows)[0])


def _leaves(obj, key: str, out: dict) -> dict:
    """Every array-like leaf of a (nested) state, copied, by its path."""
    if isinstance(obj, dict):
        for k, v in obj.items():
            _leaves(v, f"{key}.{k}" if key else str(k), out)
    elif isinstance(obj, (list, tuple)):
        for i, v in enumerate(obj):
            _leaves(v, f"{key}[{i}]", out)
    elif hasattr(obj, "detach"):  # a torch tensor
        out[key] = obj.detach().cpu().numpy().copy()
    else:
        out[key] = np.array(obj, copy=True)
    return out


def _buffers_and_state(det) -> dict:
    """The buffers (BatchNorm running statistics...) of the detector's modules and of its backbone, and its
    state_dict."""
    modules = dict(det.modules()) if hasattr(det, "modules") else {}
    backbone = getattr(getattr(det, "extractor", None), "model", None)
    if backbone is not None:
        modules["backbone"] = backbone
    buffers = {f"{m}.{k}": v for m, module in modules.items() if module is not None
               for k, v in module.named_buffers()}
    return _leaves({"buffers": buffers, "state_dict": det.state_dict()}, "", {})


def check_scoring_leaves_buffers_unchanged(detector) -> None:
    """Scoring changes no buffer of the detector's modules or its backbone (a BatchNorm left in train mode
    updates its running statistics while scoring) and nothing in its state_dict."""
    s = _subject(detector)
    det, _ = s.fitted()
    before = _buffers_and_state(det)
    s.scores(det, np.arange(s.n_test))
    after = _buffers_and_state(det)
    if before.keys() != after.keys():
        raise AssertionError(f"{s.name}: scoring added or removed state: {sorted(before.keys() ^ after.keys())}")
    changed = {k: _max_gap(after[k], before[k]) for k in before
               if after[k].shape != before[k].shape or _differ(after[k], before[k]).any()}
    if changed:
        worst = ", ".join(f"{k} (max |change| {v:.3g})" for k, v in sorted(changed.items())[:5])
        raise AssertionError(f"{s.name}: scoring changed {len(changed)} buffer/state entries: {worst}")


def check_state_round_trip(detector) -> None:
    """A new detector loaded with the fitted one's state_dict, saved to and read back from a checkpoint file (plain
    data only: checkpoints never unpickle), scores exactly as the fitted one does."""
    s = _subject(detector)
    det, _ = s.fitted()
    rows = np.arange(s.n_test)
    with tempfile.TemporaryDirectory(prefix="bench-check-state-") as tmp:
        path = Path(tmp) / "state.ckpt"
        checkpoint.save(path, det.state_dict())
        restored = s.build()
        try:
            restored.load_state_dict(checkpoint.load(path))
        except Exception as e:  # noqa: BLE001 - whatever it raises, the property failed: say which and why
            raise AssertionError(f"{s.name}: load_state_dict of its state read back from a checkpoint raised "
                                 f"{type(e).__name__}: {e}") from e
    _assert_same(s, "scores after a state_dict round trip through a checkpoint", s.scores(restored, rows)[0],
                 s.scores(det, rows)[0])


def check_seed_determinism(detector) -> None:
    """A second detector fitted on the same data with the same seed (nothing shared with the first: a new feature
    extractor) scores exactly as the first."""
    s = _subject(detector)
    det, _ = s.fitted()
    again = s.build()
    again.fit(s.train, seed=0)
    rows = np.arange(s.n_test)
    _assert_same(s, "scores of two fits with seed 0", s.scores(again, rows)[0], s.scores(det, rows)[0])


class _Killed(BaseException):
    """Stands in for SIGKILL: not an Exception, so nothing on the way up may swallow it."""


@contextlib.contextmanager
def _train_step_patched(cls: type, wrap):
    """cls.train_step replaced by wrap(original) for the duration (whether cls defines it or inherits it)."""
    own = cls.__dict__.get("train_step")
    cls.train_step = wrap(cls.train_step)
    try:
        yield
    finally:
        if own is None:
            del cls.train_step
        else:
            cls.train_step = own


def _last_step_updates(last_step: int, kill_at: int = 0):
    """A train_step wrapper that counts, in `.calls`, the updates a run makes in its step `last_step` (the runner's
    TrainContext names the step and an epoch checkpoint; a training outside a run, e.g. an audit's fit, has none)
    and dies before update number `kill_at` of that step (0: never)."""
    def wrap(original):
        def train_step(self, batch, optimizers):
            context = getattr(self, "context", None)
            if context is not None and context.checkpoint is not None and context.step == last_step:
                wrap.calls += 1
                if wrap.calls == kill_at:
                    raise _Killed
            return original(self, batch, optimizers)
        return train_step
    wrap.calls = 0
    return wrap


def _compare_runs(s: Subject, whole: dict, resumed: dict) -> None:
    """Every dataset of the two result files but the timings, and the run key, are the same."""
    if whole["attrs"]["run_key"] != resumed["attrs"]["run_key"]:
        raise AssertionError(f"{s.name}: the resumed run has another run key")
    keys = {k for k in whole if k not in ("attrs", "tasks") and not k.startswith("timing/")}
    missing = keys ^ {k for k in resumed if k not in ("attrs", "tasks") and not k.startswith("timing/")}
    if missing:
        raise AssertionError(f"{s.name}: the killed-and-resumed run's file differs in datasets {sorted(missing)}")
    for key in sorted(keys):
        _assert_same(s, f"{key} of a run killed mid-task and resumed vs. an uninterrupted run", resumed[key],
                     whole[key])


def check_kill_and_resume(detector) -> bool:
    """A run of two tasks killed in its second task resumes to a result file identical to an uninterrupted run's
    (R, scores, losses: every dataset but the timings). A detector trained by the suite's loop dies before the
    last update of the second task (after an epoch checkpoint where it trains two epochs); any other between the
    tasks. Returns whether the rerun resumed inside the task: it made fewer updates there than a whole run."""
    s = _subject(detector)
    cls, last = s.detector_class(), len(s.run_tasks) - 1
    trained = hasattr(cls, "train_step")
    with tempfile.TemporaryDirectory(prefix="bench-check-resume-") as tmp:
        whole_updates, resumed_updates = _last_step_updates(last), _last_step_updates(last)
        with _train_step_patched(cls, whole_updates) if trained else contextlib.nullcontext():
            whole = runner.execute(runner.prepare(s.run_config(), out=Path(tmp) / "whole.h5"), **_QUIET)
        run = runner.prepare(s.run_config(), out=Path(tmp) / "killed.h5")
        _kill(s, runner, run, cls, last, whole_updates.calls)
        said = []
        with _train_step_patched(cls, resumed_updates) if trained else contextlib.nullcontext():
            runner.execute(run, progress=False, log=said.append)  # a new protocol and extractor: resumes
        # an unusable checkpoint is moved aside and the run starts afresh, which would also give the same R
        aside = sorted(p.name for p in Path(tmp).glob("*.bad-*"))
        if aside:
            raise AssertionError(f"{s.name}: the rerun could not resume from its checkpoint and started afresh "
                                 f"(moved aside: {', '.join(aside)}): {' '.join(m for m in said if 'warning' in m)}")
        if run.epoch_checkpoint_path.exists():
            raise AssertionError(f"{s.name}: the resumed run left its epoch checkpoint behind")
        _compare_runs(s, results.read_run(whole), results.read_run(run.out))
    return resumed_updates.calls < whole_updates.calls


def _kill(s: Subject, runner, run, cls: type, last: int, updates: int) -> None:
    """Run `run` until it dies before its update number `updates` of step `last` (0: stop it after the step
    before), leaving a checkpoint and an incomplete result file."""
    if updates:
        with _train_step_patched(cls, _last_step_updates(last, updates)), contextlib.suppress(_Killed):
            runner.execute(run, **_QUIET)
            raise AssertionError(f"{s.name}: the rerun made fewer than the {updates} training updates of the "
                                 f"first run in its last step; it cannot be killed at the same point")
    else:
        runner.execute(run, max_steps=last, **_QUIET)
    if results.is_complete(run.out) or not run.checkpoint_path.is_file():
        raise AssertionError(f"{s.name}: the killed run left no checkpoint to resume from (or a complete file)")


CHECKS = (check_fit_returns_self, check_scores_shape_and_finite, check_pointwise_scores, check_repeatable_scores,
          check_scoring_leaves_buffers_unchanged, check_state_round_trip, check_seed_determinism,
          check_kill_and_resume)


def check_detector(name: str, track: str | None = None, root=None) -> None:
    """Every check in CHECKS on detector `name` (of `track`; None: the track that registers it), sharing one fit;
    the first property that fails raises AssertionError."""
    s = subject(name, track, root)
    for check in CHECKS:
        check(s)


def parametrize_with_checks(track: str, *, exclude=(), slow=()):
    """A pytest.mark.parametrize("name,check") over every registered detector of `track` × every check in CHECKS
    but `exclude` (as scikit-learn's parametrize_with_checks), ids `<name>-<check without check_>`; checks in `slow`
    are marked slow. The test gets the detector's name, so it can share one fit per detector (a Subject cache)."""
    import pytest  # only test modules call this: the package itself never needs pytest

    if track not in SUBJECTS:
        raise choice_error("track", track, SUBJECTS)
    names = list(registry.specs(track))
    return pytest.mark.parametrize("name,check", [
        pytest.param(n, c, id=f"{n}-{c.__name__.removeprefix('check_')}",
                     marks=[pytest.mark.slow] if c in slow else [])
        for c in CHECKS if c not in exclude for n in names])
