"""The published releases' per-concept counts (issue 46 §1) against what the readers count on a staged root: VisA's
1-class split CSV and MPDD's MVTec-style folders with the release's counts are comparable; the same layout with one
image held out, added or filed under a renamed concept is "not comparable: dataset not the published release"."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.data import readers
from bench.datasets import get
from bench.report import paper

ADDED = ("visa", "mpdd")


def _config(dataset, tasks):
    from bench.config import ImageInputs, RunConfig

    return RunConfig(dataset=dataset, root="/d", model="padim", tasks=list(tasks), inputs=ImageInputs())


def _counts(index) -> dict[str, tuple[int, int]]:
    """Each concept's (train, test) image count as a run records it (tasks_info/n_train, n_test)."""
    sizes = index.groupby(["task", "split"]).size()
    return {task: (int(sizes.get((task, "train"), 0)), int(sizes.get((task, "test"), 0)))
            for task in sorted(set(index["task"]))}


def _touch(path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"")
    return path


def _stage_visa(root: Path, counts: dict[str, tuple[int, int]]) -> Path:
    """A VisA root in the distributed layout: every image listed in split_csv/1cls.csv, a test image in two
    anomalous (with a mask), as many rows per object and split as `counts` says."""
    lines = ["object,split,label,image,mask"]
    for obj, (n_train, n_test) in counts.items():
        for i in range(n_train):
            lines.append(f"{obj},train,normal,{obj}/Data/Images/Normal/tr{i:04d}.JPG,")
        for i in range(n_test):
            if i % 2:
                image, mask = f"{obj}/Data/Images/Anomaly/{i:04d}.JPG", f"{obj}/Data/Masks/Anomaly/{i:04d}.png"
                _touch(root / mask)
                lines.append(f"{obj},test,anomaly,{image},{mask}")
            else:
                image = f"{obj}/Data/Images/Normal/te{i:04d}.JPG"
                lines.append(f"{obj},test,normal,{image},")
            _touch(root / image)
        for i in range(n_train):
            _touch(root / obj / "Data" / "Images" / "Normal" / f"tr{i:04d}.JPG")
    _touch(root / "split_csv" / "1cls.csv").write_text("\n".join(lines) + "\n")
    return root


def _stage_mpdd(root: Path, counts: dict[str, tuple[int, int]]) -> Path:
    """An MPDD root in its MVTec AD layout: train/good, test/good and test/<defect> with masks in ground_truth."""
    for concept, (n_train, n_test) in counts.items():
        for i in range(n_train):
            _touch(root / concept / "train" / "good" / f"{i:03d}.png")
        for i in range(n_test):
            if i % 2:
                _touch(root / concept / "test" / "scratches" / f"{i:03d}.png")
                _touch(root / concept / "ground_truth" / "scratches" / f"{i:03d}_mask.png")
            else:
                _touch(root / concept / "test" / "good" / f"{i:03d}.png")
    return root


STAGE = {"visa": (_stage_visa, readers.read_visa), "mpdd": (_stage_mpdd, readers.read_mpdd)}


@pytest.mark.parametrize("dataset", sorted(paper.PUBLISHED_COUNTS))
def test_every_published_concept_of_a_checked_dataset_has_its_counts(dataset):
    """A concept of the registration without counts would make the release's own data "not a concept"."""
    assert sorted(paper.PUBLISHED_COUNTS[dataset]) == sorted(get(dataset, "image").known)


@pytest.mark.parametrize("dataset", ADDED)
def test_the_published_counts_read_from_a_staged_root_are_comparable(dataset, tmp_path):
    stage, read = STAGE[dataset]
    known = paper.PUBLISHED_COUNTS[dataset]
    counts = _counts(read(stage(tmp_path / dataset, known)))
    assert counts == known
    assert paper.dataset_reason(_config(dataset, sorted(counts)), counts) is None


@pytest.mark.parametrize("dataset", ADDED)
@pytest.mark.parametrize("change", ["train image held out", "test image added"])
def test_a_staged_root_with_other_counts_is_not_the_published_release(dataset, change, tmp_path):
    """Images filed under the release's concept names, one concept one image off in either split."""
    stage, read = STAGE[dataset]
    known = paper.PUBLISHED_COUNTS[dataset]
    first = sorted(known)[0]
    n_train, n_test = known[first]
    staged = {**known, first: (n_train - 1, n_test) if change.startswith("train") else (n_train, n_test + 1)}
    counts = _counts(read(stage(tmp_path / dataset, staged)))
    reason = paper.dataset_reason(_config(dataset, sorted(counts)), counts)
    assert reason == (f"{first}: {staged[first][0]}/{staged[first][1]} train/test images, published "
                      f"{n_train}/{n_test}")


@pytest.mark.parametrize("dataset", ADDED)
def test_held_out_data_under_a_renamed_concept_is_not_the_published_release(dataset, tmp_path):
    """The release's counts exactly, but one concept's folder (or CSV object) under a name the release lacks."""
    stage, read = STAGE[dataset]
    known = paper.PUBLISHED_COUNTS[dataset]
    first = sorted(known)[0]
    staged = {("renamed" if task == first else task): n for task, n in known.items()}
    counts = _counts(read(stage(tmp_path / dataset, staged)))
    reason = paper.dataset_reason(_config(dataset, sorted(counts)), counts)
    assert reason == f"renamed: not a {dataset} concept"
