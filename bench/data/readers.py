"""Dataset readers: each turns an upstream layout, exactly as distributed, into the sample index.

Readers only list files (and, for VisA, read the split CSV); they never open images, so indexing a dataset of
tens of thousands of images takes seconds. Concepts (tasks) are discovered from the folders; which published
concepts a partially staged root lacks is told by `missing_concepts`, once, at `bench data` (own data beside a
published name is normal: no run warns about it). Nothing is dropped silently: a concept
folder without training images, a dangling symbolic link, a VisA image listed twice or without an object name
are errors naming the file.
"""

from __future__ import annotations

import os
from pathlib import Path

import pandas as pd

from bench.data.index import escapes_root, make_index
from bench.datasets import BUILT_IN
from bench.errors import DatasetError

IMAGE_EXTS = frozenset({".png", ".jpg", ".jpeg", ".bmp", ".tif", ".tiff"})

# Each dataset's published concepts and layout text come from its registration (bench.datasets.BUILT_IN)
KNOWN_CONCEPTS = {s.name: s.known for s in BUILT_IN if s.track == "image" and s.known}
_LAYOUTS = {s.name: s.layout for s in BUILT_IN if s.track == "image"}
MVTEC_LAYOUT = _LAYOUTS["mvtec"]
VISA_LAYOUT = _LAYOUTS["visa"]
BTAD_LAYOUT = _LAYOUTS["btad"]
DAGM_LAYOUT = _LAYOUTS["dagm"]
VISA_COLUMNS = ("object", "split", "label", "image", "mask")


def read_mvtec(root, dataset: str = "mvtec", layout: str = MVTEC_LAYOUT) -> pd.DataFrame:
    """MVTec AD layout (also MPDD and the synthetic benchmark): every folder holding train/good is a concept;
    errors quote `layout` (the reading dataset's registration text)."""
    root = check_root(root, layout)
    concepts = [d for d in _subdirs(root) if (d / "train" / "good").is_dir()]
    if not concepts:
        raise DatasetError(f"{root}: no concept folders with train/good found (expected {layout})")
    for d in _subdirs(root):
        if (d / "test").is_dir() and d not in concepts:
            raise DatasetError(f"{d}: concept with a test folder but no training images in {d.name}/train/good "
                               f"(expected {layout})")
    rows = []
    for concept in concepts:
        train = _images(concept / "train" / "good", layout)
        rows += [_row(dataset, concept.name, "train", 0, root, p) for p in train]
        test_dir = concept / "test"
        if not test_dir.is_dir():
            raise DatasetError(f"{test_dir}: missing test folder (expected {layout})")
        for defect_dir in _subdirs(test_dir):
            for image in _images(defect_dir, layout, allow_empty=True):
                if defect_dir.name == "good":
                    rows.append(_row(dataset, concept.name, "test", 0, root, image))
                    continue
                mask = concept / "ground_truth" / defect_dir.name / f"{image.stem}_mask.png"
                if not mask.is_file():
                    raise DatasetError(f"{image}: anomalous image without its mask {mask} (expected {layout})")
                rows.append(_row(dataset, concept.name, "test", 1, root, image, mask))
    return make_index(rows)


def read_synthetic(root) -> pd.DataFrame:
    """The synthetic benchmark (`bench data --dataset synthetic`) is written in the MVTec AD layout."""
    return read_mvtec(root, dataset="synthetic", layout=_LAYOUTS["synthetic"])


def read_mpdd(root) -> pd.DataFrame:
    """MPDD ships in the MVTec AD layout."""
    return read_mvtec(root, dataset="mpdd")


def read_visa(root) -> pd.DataFrame:
    """VisA as distributed: the 1-class split CSV lists every image (and mask) relative to the root."""
    root = check_root(root, VISA_LAYOUT)
    csv = root / "split_csv" / "1cls.csv"
    if not csv.is_file():
        raise DatasetError(f"{root}: missing {csv.relative_to(root)} (expected {VISA_LAYOUT})")
    try:
        table = pd.read_csv(csv, dtype=str, keep_default_na=False)
    except (pd.errors.ParserError, pd.errors.EmptyDataError, UnicodeDecodeError) as exc:
        raise DatasetError(f"{csv}: unreadable split CSV ({exc}) (expected {VISA_LAYOUT})") from None
    missing_cols = [c for c in VISA_COLUMNS if c not in table.columns]
    if missing_cols:
        raise DatasetError(f"{csv}: missing columns {missing_cols} (expected {VISA_LAYOUT})")
    rows, seen = [], {}
    for line, rec in enumerate(table.to_dict("records"), start=2):  # line 1 is the header
        where = f"{csv} line {line}"
        if not rec["object"].strip():
            raise DatasetError(f"{where}: empty object name")
        if rec["split"] not in ("train", "test"):
            raise DatasetError(f"{where}: split {rec['split']!r} is not train or test")
        if rec["label"] not in ("normal", "anomaly"):
            raise DatasetError(f"{where}: label {rec['label']!r} is not normal or anomaly")
        label = int(rec["label"] == "anomaly")
        if label and rec["split"] == "train":
            raise DatasetError(f"{where}: anomalous image {rec['image']} in the training split")
        image = _inside(root, rec["image"], where)
        mask = _inside(root, rec["mask"], where) if label else None
        if label and mask is None:
            raise DatasetError(f"{where}: anomalous image {rec['image']} without a mask")
        for path in (image, mask):
            if path is not None and not path.is_file():
                raise DatasetError(f"{path}: listed in {where} but missing (expected {VISA_LAYOUT})")
        if image in seen:
            raise DatasetError(f"{where}: image {rec['image']} already listed on line {seen[image]} "
                               "(an image belongs to one split of one object)")
        seen[image] = line
        rows.append(_row("visa", rec["object"], rec["split"], label, root, image, mask))
    if not rows:
        raise DatasetError(f"{csv}: no rows (expected {VISA_LAYOUT})")
    return make_index(rows)


def read_btad(root) -> pd.DataFrame:
    """BTAD: products 01-03 with train/ok, test/ok, test/ko; masks share the image's stem, .bmp or .png."""
    root = check_root(root, BTAD_LAYOUT)
    products = [d for d in _subdirs(root) if (d / "train" / "ok").is_dir()]
    if not products:
        raise DatasetError(f"{root}: no product folders with train/ok found (expected {BTAD_LAYOUT})")
    for d in _subdirs(root):
        if (d / "test").is_dir() and d not in products:
            raise DatasetError(f"{d}: product with a test folder but no training images in {d.name}/train/ok "
                               f"(expected {BTAD_LAYOUT})")
    rows = []
    for product in products:
        rows += [_row("btad", product.name, "train", 0, root, p)
                 for p in _images(product / "train" / "ok", BTAD_LAYOUT)]
        rows += [_row("btad", product.name, "test", 0, root, p)
                 for p in _images(product / "test" / "ok", BTAD_LAYOUT, allow_empty=True)]
        mask_dir = product / "ground_truth" / "ko"
        masks = _by_stem(mask_dir)
        for image in _images(product / "test" / "ko", BTAD_LAYOUT, allow_empty=True):
            if image.stem not in masks:
                raise DatasetError(f"{image}: anomalous image without its mask {mask_dir}/{image.stem}.bmp|png "
                                   f"(expected {BTAD_LAYOUT})")
            rows.append(_row("btad", product.name, "test", 1, root, image, masks[image.stem]))
    return make_index(rows)


def read_dagm(root) -> pd.DataFrame:
    """DAGM 2007: a Label/<stem>_label.PNG file marks an image anomalous; anomalous training images are dropped
    because training is on normal images only."""
    root = check_root(root, DAGM_LAYOUT)
    classes = [d for d in _subdirs(root) if (d / "Train").is_dir() and (d / "Test").is_dir()]
    if not classes:
        raise DatasetError(f"{root}: no class folders with Train/ and Test/ found (expected {DAGM_LAYOUT})")
    rows = []
    for cls in classes:
        for split, folder in (("train", cls / "Train"), ("test", cls / "Test")):
            labels = {stem.lower().removesuffix("_label"): path for stem, path in _by_stem(folder / "Label").items()}
            for image in _images(folder, DAGM_LAYOUT):
                mask = labels.get(image.stem.lower())
                if mask is None:
                    rows.append(_row("dagm", cls.name, split, 0, root, image))
                elif split == "test":
                    rows.append(_row("dagm", cls.name, split, 1, root, image, mask))
    return make_index(rows)


def check_root(root, layout: str) -> Path:
    """`root` as a Path when it is a folder; a DatasetError quoting `layout` otherwise (every read checks it first:
    bench.data.datasets)."""
    root = Path(root).expanduser()
    if not root.exists():
        raise DatasetError(f"{root}: dataset root does not exist (expected {layout})")
    if not root.is_dir():
        raise DatasetError(f"{root}: dataset root is not a directory (expected {layout})")
    return root


def _listdir(folder: Path) -> list[Path]:
    try:
        return list(folder.iterdir())
    except OSError as e:  # PermissionError and friends: one line naming the folder
        raise DatasetError(f"{folder}: cannot list folder ({e.strerror or e})") from None


def _subdirs(folder: Path) -> list[Path]:
    return sorted(d for d in _listdir(folder) if d.is_dir() and not d.name.startswith("."))


def _images(folder: Path, layout: str, allow_empty: bool = False) -> list[Path]:
    """Image files directly in `folder`, sorted; dotfiles are skipped (macOS `._x.png` copies are not images)."""
    candidates = [p for p in _listdir(folder) if p.suffix.lower() in IMAGE_EXTS
                  and not p.name.startswith(".")] if folder.is_dir() else []
    dangling = [p for p in candidates if p.is_symlink() and not p.exists()]
    if dangling:
        raise DatasetError(f"{dangling[0]}: dangling symbolic link (its target {os.readlink(dangling[0])} does not "
                           "exist)")
    found = sorted(p for p in candidates if p.is_file())
    if not found and not allow_empty:
        raise DatasetError(f"{folder}: no images (.png .jpg .jpeg .bmp .tif .tiff) found (expected {layout})")
    return found


def _by_stem(folder: Path) -> dict[str, Path]:
    """Image files in `folder` keyed by stem (the first in name order wins, so ties are deterministic)."""
    out: dict[str, Path] = {}
    for path in _images(folder, "", allow_empty=True):
        out.setdefault(path.stem, path)
    return out


def _inside(root: Path, rel: str, where: str) -> Path | None:
    """A path read from a file, refused when it would leave the dataset root."""
    rel = rel.strip().replace("\\", "/")
    if not rel:
        return None
    if escapes_root(rel):
        raise DatasetError(f"{where}: path {rel!r} escapes the dataset root {root}")
    return root / rel


def _row(dataset: str, task: str, split: str, label: int, root: Path, image: Path, mask: Path | None = None):
    return {"dataset": dataset, "task": task, "split": split, "label": label,
            "image_path": image.relative_to(root).as_posix(),
            "mask_path": mask.relative_to(root).as_posix() if mask is not None else ""}


def missing_concepts(dataset: str, found) -> list[str]:
    """The published concepts of `dataset` absent from `found`, when some but not all are there (partial staging);
    none found is the user's own data in that layout: nothing is missing then. `bench data` says it, once."""
    from bench.datasets import get

    known = set(KNOWN_CONCEPTS[dataset] if dataset in KNOWN_CONCEPTS else get(dataset, "image").known)
    return sorted(known - set(found)) if known & set(found) else []
