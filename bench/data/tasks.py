"""One task's train or test split: the rows of the index plus lazy image and mask loading."""

from __future__ import annotations

import warnings
from collections.abc import Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from functools import cached_property
from pathlib import Path

import numpy as np
import pandas as pd
import torch

from bench.data import reuse
from bench.config import IMAGE_LOADING_DEFAULTS
from bench.data.images import MASK_THRESHOLD, MaskCounts, header_size, load_image, load_mask
from bench.errors import DatasetError, choice_error


@dataclass(frozen=True, eq=False)
class TaskSplit:
    """The images of one task and split; `rows` is that subset of the index with a fresh 0..n-1 index."""

    dataset: str
    task: str
    split: str
    root: Path
    rows: pd.DataFrame
    image_size: int
    mask_threshold: int | None = MASK_THRESHOLD  # bench.data.images.load_mask; None: any nonzero pixel is defect
    # how load_images reads the images (bench.data.images.load_image; the run's ImageInputs.normalize / .resize)
    normalize: bool = IMAGE_LOADING_DEFAULTS["normalize"]
    resize: str = IMAGE_LOADING_DEFAULTS["resize"]

    @property
    def name(self) -> str:
        return f"{self.dataset}/{self.task}"

    @cached_property
    def keys(self) -> list[str]:
        """Feature-cache keys, one per row: `<dataset>/<image_path>` (unique, since paths are unique), followed by
        how the image is loaded where that is not the default (`#raw`, `#8bit`): features of one loading are never
        served for another."""
        tag = ("" if self.normalize else "#raw") + ("" if self.resize == "float" else f"#{self.resize}")
        return [f"{self.dataset}/{p}{tag}" for p in self.rows["image_path"]]

    @property
    def labels(self) -> np.ndarray:
        return self.rows["label"].to_numpy(dtype=np.int64)

    @property
    def has_pixel_labels(self) -> bool:
        """True when every anomalous row has a mask, so pixel-level ROC-AUC is defined."""
        anomalous = self.rows["label"] == 1
        return bool((self.rows.loc[anomalous, "mask_path"] != "").all())

    def __len__(self) -> int:
        return len(self.rows)

    def load_images(self, idx, workers: int = 0, normalize: bool | None = None) -> torch.Tensor:
        """Images of rows `idx` as [B, 3, S, S], resized as the split's `resize` says, ImageNet-normalised as its
        `normalize` says unless `normalize` is given (False: raw [0, 1], for detectors that normalise themselves);
        `workers` > 0 decodes in threads (PIL releases the GIL)."""
        paths = [self.root / p for p in self.rows["image_path"].to_numpy()[np.asarray(idx, dtype=np.int64)]]
        norm = self.normalize if normalize is None else normalize
        if workers > 0:
            with ThreadPoolExecutor(max_workers=workers) as pool:
                images = list(pool.map(lambda p: load_image(p, self.image_size, norm, self.resize), paths))
        else:
            images = [load_image(p, self.image_size, norm, self.resize) for p in paths]
        return torch.stack(images) if images else torch.empty(0, 3, self.image_size, self.image_size)

    def load_masks(self, idx, counts: MaskCounts | None = None) -> np.ndarray:
        """Masks of rows `idx` as uint8 [B, S, S] of 0/1; rows without a mask (normal images) are all zeros.
        `counts` tallies soft and empty masks (MaskCounts.warn tells them)."""
        sub = self.rows.iloc[np.asarray(idx, dtype=np.int64)]
        out = np.zeros((len(sub), self.image_size, self.image_size), dtype=np.uint8)
        for i, (image, mask) in enumerate(zip(sub["image_path"], sub["mask_path"])):
            if mask:
                out[i] = load_mask(self.root / mask, self.image_size, self.root / image, self.mask_threshold, counts)
        return out

    def load_native_masks(self, idx, counts: MaskCounts | None = None) -> list[np.ndarray]:
        """Masks of rows `idx` at their own size, uint8 [H, W] of 0/1 (zeros of the image's size without a mask)."""
        out = []
        for image, mask in zip(self.rows["image_path"].to_numpy()[np.asarray(idx, dtype=np.int64)],
                               self.rows["mask_path"].to_numpy()[np.asarray(idx, dtype=np.int64)]):
            if mask:
                out.append(load_mask(self.root / mask, None, self.root / image, self.mask_threshold, counts))
            else:
                w, h = header_size(self.root / image, "image")
                out.append(np.zeros((h, w), dtype=np.uint8))
        return out

    def check_files(self) -> frozenset[tuple[int, int]]:
        """Read every image and mask header: an unreadable file or a mask of the wrong size fails here,
        before any work, instead of after hours of a run. Returns the (W, H) image sizes seen (upright).
        Inside `reuse_reads()` a split is checked once."""
        done = reuse.checked()
        key = (self.root, tuple(self.rows["image_path"]), tuple(self.rows["mask_path"]))
        if done is not None and key in done:
            return done[key]
        sizes = set()
        for image, mask in zip(key[1], key[2]):
            size = header_size(self.root / image, "image")
            sizes.add(size)
            if mask and header_size(self.root / mask, "mask") != size:
                load_mask(self.root / mask, self.image_size, self.root / image)  # raises the size-mismatch error
        if done is not None:
            done[key] = frozenset(sizes)
        return frozenset(sizes)

    def batches(self, batch_size: int) -> Iterator[np.ndarray]:
        """Consecutive row-index arrays of at most `batch_size` rows, in order."""
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
        for start in range(0, len(self), batch_size):
            yield np.arange(start, min(start + batch_size, len(self)))


def warn_non_square(dataset: str, sizes, image_size: int) -> None:
    """Say once per dataset (a run's tasks) that images of another shape are resized to a square: a detector
    then sees KolektorSDD's 1:2.5 parts squashed. The aspect ratios seen are named."""
    ratios = sorted({round(w / h, 2) for w, h in sizes if w != h})
    if ratios:
        shown = ", ".join(f"{r:g}" for r in ratios[:6]) + (", ..." if len(ratios) > 6 else "")
        warnings.warn(f"{dataset}: images with width/height {shown} are resized to {image_size}x{image_size} "
                      "without keeping their aspect ratio (see data/README.md)", stacklevel=2)


def task_splits(index: pd.DataFrame, root, task: str, image_size: int, mask_threshold: int | None = MASK_THRESHOLD,
                normalize: bool = IMAGE_LOADING_DEFAULTS["normalize"],
                resize: str = IMAGE_LOADING_DEFAULTS["resize"]) -> tuple[TaskSplit, TaskSplit]:
    """(train, test) of `task`. A one-class test split is allowed (its metrics are NaN later); an empty one is not.
    `root` is the dataset root, or {dataset: root} when the index spans datasets (the multi-dataset stream);
    `normalize`, `resize`: how its images load (TaskSplit)."""
    tasks = sorted(index["task"].unique())
    if task not in tasks:
        raise choice_error("task", task, tasks)
    rows = index[index["task"] == task]
    datasets = sorted(rows["dataset"].unique())
    if len(datasets) != 1:
        raise DatasetError(f"task {task!r} appears in several datasets {datasets}; index one dataset at a time")
    root = Path(root[datasets[0]]) if isinstance(root, Mapping) else Path(root)
    splits = []
    for split in ("train", "test"):
        sub = rows[rows["split"] == split].reset_index(drop=True)
        if sub.empty:
            raise DatasetError(f"{root}: task {datasets[0]}/{task} has no {split} images")
        dup = sub["image_path"].duplicated()
        if dup.any():
            raise DatasetError(f"{root}: image {sub.loc[dup, 'image_path'].iloc[0]} listed twice in {task}/{split}")
        splits.append(TaskSplit(datasets[0], task, split, root, sub, image_size, mask_threshold, normalize, resize))
    return splits[0], splits[1]


def split_state(split: TaskSplit) -> dict:
    """A TaskSplit as plain data for a checkpoint (its rows, not its images)."""
    return {"dataset": split.dataset, "task": split.task, "split": split.split, "root": str(split.root),
            "image_size": split.image_size, "rows": split.rows.to_dict("list"), "normalize": split.normalize,
            "resize": split.resize}


def split_from_state(state: dict, root: Path | None = None) -> TaskSplit:
    """The TaskSplit of `split_state`, optionally re-rooted (a resumed run may see the dataset at another path).
    A state saved before the loading was recorded loaded its images the default way."""
    return TaskSplit(state["dataset"], state["task"], state["split"], Path(root or state["root"]),
                     pd.DataFrame(state["rows"]), state["image_size"],
                     normalize=state.get("normalize", IMAGE_LOADING_DEFAULTS["normalize"]),
                     resize=state.get("resize", IMAGE_LOADING_DEFAULTS["resize"]))


def rerooted(kept: list, split: TaskSplit) -> list:
    """`kept` with the splits of `split`'s dataset moved to `split`'s root. Only that dataset's: in the
    multi-dataset stream every member dataset has a root of its own."""
    return [replace(s, root=split.root) if s.dataset == split.dataset and s.root != split.root else s
            for s in kept]
