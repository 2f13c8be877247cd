"""Side by side with InCLAD's released classes: what every adapter in tools/released/ shares.

The released code is never part of the suite: its files are fetched (for example with the reference search
tool's read_file) into a folder outside the repository, laid out as `<folder>/<repository>/<path>`, and run in a
scratch virtual environment that sees the suite's packages, e.g.

    /work/main/.venv/bin/python -m venv --system-site-packages /tmp/released-venv
    echo "$PWD/.venv/lib/python3.11/site-packages" > /tmp/released-venv/lib/python3.11/site-packages/suite.pth
    /tmp/released-venv/bin/python -m pip install pytorch-lightning pydantic
    /tmp/released-venv/bin/python tools/released/stfpm.py --released /tmp/released

Both sides get the same images (the synthetic `tiny` benchmark, generated here) and, where the two networks have
the same parameters, the same initial weights (copied from the suite's network into the released one); the
feature-based detectors' released backbone is replaced by the suite's feature extractor (RowsToFeatures), so both
sides see the same features. Modules the released code imports but the reference repositories do not hold or that
were not read (PLACEHOLDERS: `pyclad.models.model`, `pyclad.models.vision.preprocessing`, builders, configs, the
strategies' base classes) are empty placeholders the adapters never reach; PaDiM's `align_feature_maps` is a
stand-in doing what upstream pyCLAD's does (ALIGN_STAND_IN).
"""

from __future__ import annotations

import argparse
import functools
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))  # this checkout's `bench`, not an installed copy

ALIGN_STAND_IN = """import torch
import torch.nn.functional as F


def align_feature_maps(features):
    features = list(features.values()) if isinstance(features, dict) else list(features)
    size = features[0].shape[-2:]
    up = [F.interpolate(f, size=size, mode="bilinear", align_corners=False) for f in features[1:]]
    return torch.cat([features[0], *up], dim=1)
"""

# placeholders for modules absent from the reference repositories: importable, never called by the adapters
PLACEHOLDERS = {
    "pyclad/models/model.py": "class Model:\n    pass\n",
    "pyclad/models/vision/preprocessing.py": "class ImagePreprocessor:\n"
                                            "    def __init__(self, *args, **kwargs):\n"
                                            "        raise RuntimeError('not in the reference repositories')\n",
    # EfficientAD's efficientad.py imports resolve_device from a module the index does not hold; the adapter
    # builds the network and module itself and never calls EfficientAD.__init__
    "pyclad/models/vision/utils.py": "def resolve_device(device=None):\n"
                                     "    raise RuntimeError('not in the reference repositories')\n",
    # PatchCore's and PaDiM's builders and configs: the adapters set the attributes __init__ would
    "pyclad/models/patchcore/builder.py": "def build(config):\n    raise RuntimeError('not read')\n",
    "pyclad/models/patchcore/config.py": "class PatchCoreConfig:\n    pass\n",
    "pyclad/models/padim/builder.py": "def build(config):\n    raise RuntimeError('not read')\n",
    "pyclad/models/padim/config.py": "class PaDiMConfig:\n    pass\n",
    # CFA's builder and config (ContinualCFA's base imports them): the CFA-CL adapter sets the attributes
    "pyclad/models/cfa/builder.py": "def build(config):\n    raise RuntimeError('not read')\n",
    "pyclad/models/cfa/config.py": "class CFAConfig:\n    pass\n",
    # PaDiM imports align_feature_maps from a module in neither repository: a stand-in doing what upstream
    # pyCLAD's (models/vision/utilities/features.py) does, later layers upsampled bilinearly to the first's grid
    "pyclad/models/vision/features.py": ALIGN_STAND_IN,
    # the strategies' base classes (upstream pyCLAD's, not read): the adapters call learn/predict directly
    "pyclad/strategies/strategy.py": "class ConceptAwareStrategy:\n    pass\n\n\n"
                                     "class ConceptIncrementalStrategy:\n    pass\n",
}


def arguments(description: str, size: int = 64) -> argparse.Namespace:
    """The adapters' command line; `size`: the default image size (a released network may need a larger one)."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--released", type=Path, required=True,
                        help="folder holding the released files as <repository>/<path>")
    parser.add_argument("--size", type=int, default=size, help="image size (px)")
    parser.add_argument("--steps", type=int, default=5, help="training steps before the scores are compared")
    parser.add_argument("--seeds", type=int, default=10, help="seeds of the start-distribution comparison")
    parser.add_argument("--dist-steps", type=int, default=19, help="steps per seed in that comparison")
    parser.add_argument("--cl-steps", type=int, default=4, help="training steps per task of the 3-task stream")
    return parser.parse_args()


def use_released(folder: Path, repository: str) -> None:
    """Import the released package from `folder/repository/src` (namespace packages: no __init__ needed),
    with the placeholders beside it."""
    src = folder / repository / "src"
    if not (src / "pyclad").is_dir():
        raise SystemExit(f"error: {src / 'pyclad'} not found: fetch the released files there first")
    shim = Path(tempfile.mkdtemp(prefix="released-shim-"))
    for rel, text in PLACEHOLDERS.items():
        if not (src / rel).exists() and not (src / rel).with_suffix("").is_dir():
            (shim / rel).parent.mkdir(parents=True, exist_ok=True)
            (shim / rel).write_text(text)
    sys.path[:0] = [str(src), str(shim)]


STREAM = ("chip", "disc", "grain")  # the 3-task stream of the R-matrix comparisons: the first three tiny tasks


@functools.cache
def _tiny_root() -> Path:
    """The synthetic `tiny` benchmark (seed 0), generated once per process."""
    from bench.data.synthetic import generate

    return generate(Path(tempfile.mkdtemp(prefix="released-tiny-")) / "tiny", preset="tiny", seed=0)


def tiny_task(size: int, task: str = "chip"):
    """(train, test) splits of one task of the synthetic `tiny` benchmark (seed 0), as the suite loads them."""
    from bench.data import read_index
    from bench.data.tasks import task_splits

    return task_splits(read_index("synthetic", _tiny_root()), _tiny_root(), task, size)


def tiny_stream(size: int, tasks=STREAM) -> list:
    """[(train, test)] of each task of the stream, in order."""
    return [tiny_task(size, task) for task in tasks]


def r_matrix(stream, learn, scores) -> np.ndarray:
    """R[i, j]: image ROC-AUC on task j's test split after learning tasks 0..i in order; `learn(i, train)` learns
    task i, `scores(test)` scores a test split's images."""
    r = np.full((len(stream), len(stream)), np.nan)
    for i, (train, _) in enumerate(stream):
        learn(i, train)
        for j, (_, test) in enumerate(stream):
            r[i, j] = roc_auc(scores(test), test.labels)
    return r


def print_matrices(report: "Report", what: str, ours: np.ndarray, theirs: np.ndarray) -> None:
    """The two R matrices row by row, and their largest cell difference."""
    report.note(f"{what}: R[i, j] = image ROC-AUC on task j after tasks 0..i ({', '.join(STREAM)})")
    for i in range(len(ours)):
        report.note(f"  row {i}   suite {np.array2string(ours[i], precision=4)}   "
                    f"released {np.array2string(theirs[i], precision=4)}")
    report.row(f"{what}: R matrix", "", "", float(np.nanmax(np.abs(ours - theirs))))


def suite_detector(name: str, size: int, seed: int, layers=None, **overrides):
    """The suite's detector under its `inclad` preset (random-init resnet18 backbone on the CPU), built."""
    from bench import registry
    from bench.features import FeatureExtractor, ImageSource

    spec = registry.get(name)
    hparams = spec.resolve(overrides, preset="inclad")
    if spec.inputs == "images":
        source = ImageSource(torch.device("cpu"), progress=False)
    else:
        wanted = layers or spec.layers_of(hparams) if spec.layers_of else layers or hparams["layers"]
        source = FeatureExtractor("resnet18", "none", tuple(wanted), torch.device("cpu"), progress=False)
    det = spec.factory(source, image_size=size, **hparams)
    if hasattr(det, "build"):  # the trained detectors draw their networks here; the memory-bank ones have none
        det.build(seed)
    return det


class RowsToFeatures(torch.nn.Module):
    """A released backbone module (images in, the layers' features out) standing in as the suite's feature
    extractor: its input is a column of row indices of `split` (`rows_tensor`), so the released code runs on the
    suite's features of those rows. Set `split` before each call on another split."""

    def __init__(self, extractor, split):
        super().__init__()
        self.extractor, self.split = extractor, split

    def forward(self, rows: torch.Tensor) -> list[torch.Tensor]:
        return self.extractor(self.split, rows[:, 0].long().tolist())


def rows_tensor(rows) -> torch.Tensor:
    """Row indices as the [N, 1] float tensor a released DataLoader / forward passes on to RowsToFeatures."""
    return torch.as_tensor(list(rows), dtype=torch.float32)[:, None]


def descend(optimizer: torch.optim.Optimizer, loss: torch.Tensor) -> float:
    """One released optimiser step on `loss` (what Lightning's automatic optimisation does); returns the loss."""
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    return float(loss.detach())


def compare_predictions(report: "Report", pred, scores, maps, labels, scale: float = 1.0) -> None:
    """The suite's Prediction beside the released image scores and maps (the suite's × `scale`)."""
    report.row("image scores (max)", float(pred.scores.max() * scale), float(scores.max()),
               max_gap(pred.scores * scale, scores))
    report.row("pixel maps, max |Δ| / max |map|", "", "",
               max_gap(pred.maps * scale, maps) / float(np.abs(np.asarray(maps)).max()))
    report.row("image ROC-AUC", roc_auc(pred.scores, labels), roc_auc(np.asarray(scores), labels))


def compare_on_test(report: "Report", det, arch: torch.nn.Module, test) -> None:
    """Score `test` with the suite's detector and with a released network whose backbone is RowsToFeatures
    (`arch.feature_extractor`; its forward in eval mode returns (maps, scores)), and compare."""
    idx = list(range(len(test)))
    pred = det.predict(test, idx)
    arch.eval()
    arch.feature_extractor.split = test
    with torch.no_grad():
        maps, scores = arch(rows_tensor(idx))
    compare_predictions(report, pred, scores.numpy(), maps.numpy(), test.labels)


def run_sections(doc: str, detector: str, repository: str, *sections) -> None:
    """An adapter's main: parse the arguments, import the released package of `repository`, load task chip and
    run each `section(report, train, test, args)` in order, then print the report."""
    args = arguments(doc.splitlines()[0])
    use_released(args.released, repository)
    train, test = tiny_task(args.size)
    report = Report(detector)
    for section in sections:
        section(report, train, test, args)
    report.print()


def max_gap(a, b) -> float:
    """max |a − b| over two tensors or arrays."""
    a = a.detach().double().cpu() if isinstance(a, torch.Tensor) else torch.as_tensor(np.asarray(a, np.float64))
    b = b.detach().double().cpu() if isinstance(b, torch.Tensor) else torch.as_tensor(np.asarray(b, np.float64))
    return float((a - b).abs().max())


def state_gap(ours: dict, theirs: dict) -> tuple[float, str]:
    """(max |Δ| over the floating tensors both state dicts hold, the key where it is largest)."""
    worst, where = 0.0, ""
    for key, value in ours.items():
        if key in theirs and value.is_floating_point():
            gap = max_gap(value, theirs[key])
            if gap >= worst:
                worst, where = gap, key
    return worst, where


def copy_into(target: torch.nn.Module, state: dict) -> None:
    """Load `state` into `target`, refusing a partial match (names differ only by a prefix the caller strips)."""
    missing, unexpected = target.load_state_dict(state, strict=False)
    if missing or unexpected:
        raise SystemExit(f"error: weights do not match: missing {missing[:3]}, unexpected {unexpected[:3]}")


def roc_auc(scores, labels) -> float:
    from bench.metrics import roc_auc as auc

    return float(auc(np.asarray(labels), np.asarray(scores, np.float64)))


@dataclass
class Report:
    """The lines an adapter prints: one quantity per line, suite beside released."""

    detector: str
    lines: list[str] = field(default_factory=list)

    def row(self, what: str, suite, released, gap: float | None = None) -> None:
        tail = "" if gap is None else f"   max |Δ| {gap:.3g}"
        self.lines.append(f"{what:<44} suite {_fmt(suite):>22}   released {_fmt(released):>22}{tail}")

    def note(self, text: str) -> None:
        self.lines.append(text)

    def print(self) -> None:
        print(f"== {self.detector}: suite `inclad` beside the released class (torch {torch.__version__}, CPU)")
        for line in self.lines:
            print(line)


def _fmt(value) -> str:
    if isinstance(value, float):
        return f"{value:.6g}"
    return str(value)


def mean_std(values) -> str:
    v = np.asarray(values, np.float64)
    return f"{v.mean():.3f} ± {v.std(ddof=1):.3f}"


@dataclass
class Step:
    """One training step taken by both sides on the same batch: its number (0 = the first) and the two losses."""

    index: int
    suite: float
    released: float


def lockstep(det, suite_net: torch.nn.Module, train, steps: int, released_step, after=None,
             batch: int = 8, load=None) -> Step:
    """Train the suite's `det` (its `suite_net` in train mode) and the released side on the same batches of
    `train` (in order, `batch` images each, cycling): `released_step(inputs)` takes one released step on
    `load(rows)` (default: the loaded images) and returns its loss; `after(step)`, if given, sees every step.
    Returns the last step."""
    load = load or train.load_images
    opts = det.optimizers()
    rows = list(range(len(train)))
    plan = [[(train, r) for r in rows[s:s + batch]] for s in range(0, len(rows), batch)]
    for index in range(steps):
        chosen = plan[index % len(plan)]
        suite_net.train()
        ours = det.train_step(chosen, opts)
        theirs = released_step(load([r for _, r in chosen]))
        step = Step(index, float(ours), float(theirs))
        if after is not None:
            after(step)
    return step


def copy_by_order(state: dict, targets: list[torch.nn.Module]) -> None:
    """Load `state` into `targets` (their state dicts concatenated) entry by entry in registration order: for two
    implementations of one architecture whose modules are named differently. Every shape must match."""
    slots = [(module, key) for module in targets for key in module.state_dict()]
    values = list(state.values())
    if len(values) != len(slots):
        raise SystemExit(f"error: {len(values)} tensors for {len(slots)} slots: the architectures differ")
    per_module: dict[int, dict] = {}
    for (module, key), value in zip(slots, values):
        mine = module.state_dict()[key]
        if mine.shape != value.shape:
            raise SystemExit(f"error: {key}: shape {tuple(value.shape)} for {tuple(mine.shape)}")
        per_module.setdefault(id(module), {})[key] = value.detach().contiguous().clone()
    for module in targets:
        module.load_state_dict(per_module[id(module)])


def released_image_scores(arch, test) -> np.ndarray:
    """The image scores a released network returning (maps, scores) gives a whole test split, in eval mode."""
    arch.eval()
    with torch.no_grad():
        return arch(test.load_images(list(range(len(test)))))[1].numpy()

