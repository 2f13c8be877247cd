"""Dataset readers, image/mask loading and task splits, on tiny trees written in each dataset's upstream layout."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import torch
from PIL import Image

from bench import datasets
from bench.data import DATASETS, read_index
from bench.data.images import load_image, load_mask
from bench.data.index import COLUMNS
from bench.data.readers import KNOWN_CONCEPTS, missing_concepts, read_btad, read_mvtec, read_visa
from bench.data.tasks import task_splits
from bench.errors import ConfigError, DatasetError


def _img(path, size=(8, 6), mode="RGB", value=128):
    """Write a small real image; the format follows the suffix (PNG, BMP, JPEG)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.new(mode, size, value).save(path)
    return path


def _mask(path, size=(8, 6)):
    arr = np.zeros(size[::-1], dtype=np.uint8)
    arr[1:3, 2:5] = 255
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.fromarray(arr).save(path)
    return path


def _mvtec_concept(root, name, n_train=2, defects=("crack",)):
    for i in range(n_train):
        _img(root / name / "train" / "good" / f"{i:03d}.png")
    _img(root / name / "test" / "good" / "000.png")
    for defect in defects:
        _img(root / name / "test" / defect / "000.png")
        _mask(root / name / "ground_truth" / defect / "000_mask.png")


@pytest.fixture
def mvtec_root(tmp_path):
    root = tmp_path / "mvtec"
    _mvtec_concept(root, "bottle", defects=("broken_large", "contamination"))
    _mvtec_concept(root, "widget", n_train=3)  # not an MVTec category: users' own data in the same layout
    (root / "docs").mkdir()  # no train/good: not a concept
    (root / "license.txt").write_text("CC BY-NC-SA 4.0")
    _img(root / "widget" / "train" / "good" / "._000.png")  # macOS resource fork copy, not an image
    return root


# --- MVTec AD / MPDD -----------------------------------------------------------------------------------------------


def test_mvtec_discovers_concepts_and_names_the_missing_known_ones(mvtec_root):
    df = read_index("mvtec", mvtec_root)
    assert missing_concepts("mvtec", df["task"]) == [c for c in KNOWN_CONCEPTS["mvtec"] if c != "bottle"]
    assert list(df.columns) == COLUMNS
    assert sorted(df["task"].unique()) == ["bottle", "widget"]
    assert set(df["dataset"]) == {"mvtec"}
    counts = df.groupby(["task", "split", "label"]).size().to_dict()
    assert counts == {("bottle", "train", 0): 2, ("bottle", "test", 0): 1, ("bottle", "test", 1): 2,
                      ("widget", "train", 0): 3, ("widget", "test", 0): 1, ("widget", "test", 1): 1}
    anomalous = df[df["label"] == 1].set_index("image_path")["mask_path"].to_dict()
    assert anomalous == {
        "bottle/test/broken_large/000.png": "bottle/ground_truth/broken_large/000_mask.png",
        "bottle/test/contamination/000.png": "bottle/ground_truth/contamination/000_mask.png",
        "widget/test/crack/000.png": "widget/ground_truth/crack/000_mask.png",
    }
    assert (df.loc[df["label"] == 0, "mask_path"] == "").all()


def test_mvtec_index_is_sorted_and_deterministic(mvtec_root):
    first = read_mvtec(mvtec_root)
    second = read_mvtec(mvtec_root)
    pd.testing.assert_frame_equal(first, second)
    assert list(first["task"]) == sorted(first["task"])


def test_mvtec_accepts_image_extensions_case_insensitively(tmp_path):
    _mvtec_concept(tmp_path, "part")
    _img(tmp_path / "part" / "train" / "good" / "002.JPG")
    _img(tmp_path / "part" / "train" / "good" / "003.tiff")
    (tmp_path / "part" / "train" / "good" / "notes.txt").write_text("not an image")
    df = read_mvtec(tmp_path, dataset="synthetic")  # no known concept list: no warning
    assert sorted(df.loc[df["split"] == "train", "image_path"]) == [
        "part/train/good/000.png", "part/train/good/001.png", "part/train/good/002.JPG", "part/train/good/003.tiff"]


def test_mvtec_anomaly_without_mask_names_the_expected_mask(tmp_path):
    _mvtec_concept(tmp_path, "bottle")
    _img(tmp_path / "bottle" / "test" / "crack" / "001.png")
    with pytest.raises(DatasetError, match=r"bottle/ground_truth/crack/001_mask\.png"):
        read_mvtec(tmp_path)


def test_mpdd_reads_the_mvtec_layout(tmp_path):
    _mvtec_concept(tmp_path, "tubes", defects=("anomalous",))
    df = read_index("mpdd", tmp_path)
    assert missing_concepts("mpdd", df["task"]) == [c for c in KNOWN_CONCEPTS["mpdd"] if c != "tubes"]
    assert set(df["dataset"]) == {"mpdd"} and set(df["task"]) == {"tubes"}
    assert len(df) == 4


# --- VisA -------------------------------------------------------------------------------------------------------------

VISA_HEADER = "object,split,label,image,mask\n"


def _visa(root, extra_rows=""):
    for rel in ("candle/Data/Images/Normal/0000.JPG", "candle/Data/Images/Normal/0001.JPG",
                "candle/Data/Images/Normal/0002.JPG", "candle/Data/Images/Anomaly/000.JPG",
                "pcb1/Data/Images/Normal/0000.JPG", "pcb1/Data/Images/Anomaly/000.JPG"):
        _img(root / rel)
    _mask(root / "candle/Data/Masks/Anomaly/000.png")
    _mask(root / "pcb1/Data/Masks/Anomaly/000.png")
    csv = root / "split_csv" / "1cls.csv"
    csv.parent.mkdir(parents=True, exist_ok=True)
    csv.write_text(VISA_HEADER
                   + "candle,train,normal,candle/Data/Images/Normal/0000.JPG,\n"
                   + "candle,train,normal,candle/Data/Images/Normal/0001.JPG,\n"
                   + "candle,test,normal,candle/Data/Images/Normal/0002.JPG,\n"
                   + "candle,test,anomaly,candle/Data/Images/Anomaly/000.JPG,candle/Data/Masks/Anomaly/000.png\n"
                   + "pcb1,train,normal,pcb1/Data/Images/Normal/0000.JPG,\n"
                   + "pcb1,test,anomaly,pcb1/Data/Images/Anomaly/000.JPG,pcb1/Data/Masks/Anomaly/000.png\n"
                   + extra_rows)
    return root


def test_visa_reads_the_distributed_split_csv(tmp_path):
    df = read_index("visa", _visa(tmp_path))
    assert "capsules" in missing_concepts("visa", df["task"])
    assert set(df["dataset"]) == {"visa"}
    assert df.groupby(["task", "split", "label"]).size().to_dict() == {
        ("candle", "train", 0): 2, ("candle", "test", 0): 1, ("candle", "test", 1): 1,
        ("pcb1", "train", 0): 1, ("pcb1", "test", 1): 1}
    row = df[(df["task"] == "candle") & (df["label"] == 1)].iloc[0]
    assert (row["image_path"], row["mask_path"]) == ("candle/Data/Images/Anomaly/000.JPG",
                                                     "candle/Data/Masks/Anomaly/000.png")


@pytest.mark.parametrize("row, message", [
    ("candle,test,normal,candle/Data/Images/Normal/9999.JPG,\n", r"candle/Data/Images/Normal/9999\.JPG"),
    ("candle,test,anomaly,candle/Data/Images/Anomaly/000.JPG,candle/Data/Masks/Anomaly/404.png\n",
     r"candle/Data/Masks/Anomaly/404\.png"),
    ("candle,train,anomaly,candle/Data/Images/Anomaly/000.JPG,candle/Data/Masks/Anomaly/000.png\n",
     "training split"),
    ("candle,test,defect,candle/Data/Images/Anomaly/000.JPG,\n", "label 'defect'"),
    ("candle,test,normal,../outside.JPG,\n", "escapes the dataset root"),
])
def test_visa_rejects_bad_rows(tmp_path, row, message):
    with pytest.raises(DatasetError, match=message):
        read_visa(_visa(tmp_path, extra_rows=row))


def test_visa_without_split_csv_names_the_expected_layout(tmp_path):
    _img(tmp_path / "candle" / "Data" / "Images" / "Normal" / "0000.JPG")
    with pytest.raises(DatasetError, match=r"split_csv/1cls\.csv.*expected VisA layout"):
        read_visa(tmp_path)


# --- BTAD -------------------------------------------------------------------------------------------------------------


def test_btad_matches_masks_by_stem_across_bmp_and_png(tmp_path):
    for product, image_ext, mask_ext in (("01", ".bmp", ".png"), ("03", ".bmp", ".bmp"), ("02", ".png", ".png")):
        for i in range(2):
            _img(tmp_path / product / "train" / "ok" / f"{i:04d}{image_ext}")
        _img(tmp_path / product / "test" / "ok" / f"0000{image_ext}")
        _img(tmp_path / product / "test" / "ko" / f"0000{image_ext}")
        _mask(tmp_path / product / "ground_truth" / "ko" / f"0000{mask_ext}")
    df = read_index("btad", tmp_path)  # all three products: no warning
    assert df.groupby(["task", "split", "label"]).size().to_dict() == {
        (p, s, lab): n for p in ("01", "02", "03") for s, lab, n in (("train", 0, 2), ("test", 0, 1), ("test", 1, 1))}
    masks = df[df["label"] == 1].set_index("task")["mask_path"].to_dict()
    assert masks == {"01": "01/ground_truth/ko/0000.png", "02": "02/ground_truth/ko/0000.png",
                     "03": "03/ground_truth/ko/0000.bmp"}


def test_btad_anomaly_without_mask_is_an_error(tmp_path):
    _img(tmp_path / "01" / "train" / "ok" / "0000.bmp")
    _img(tmp_path / "01" / "test" / "ko" / "0007.bmp")
    with pytest.raises(DatasetError, match=r"01/ground_truth/ko/0007\.bmp\|png"):
        read_btad(tmp_path)


# --- DAGM 2007 --------------------------------------------------------------------------------------------------------


def test_dagm_labels_come_from_label_files_and_anomalous_training_images_are_dropped(tmp_path):
    cls = tmp_path / "Class1"
    for split in ("Train", "Test"):
        for i in (1, 2, 3):
            _img(cls / split / f"{i:04d}.PNG", mode="L")
        _mask(cls / split / "Label" / "0002_label.PNG")
        (cls / split / "Label" / "Labels.txt").write_text("1\n0002.PNG 1 0002_label.PNG\n")
    df = read_index("dagm", tmp_path)
    assert missing_concepts("dagm", df["task"]) == sorted(f"Class{i}" for i in range(2, 11))
    train = df[df["split"] == "train"]
    assert list(train["image_path"]) == ["Class1/Train/0001.PNG", "Class1/Train/0003.PNG"]
    test = df[df["split"] == "test"].set_index("image_path")
    assert test["label"].to_dict() == {"Class1/Test/0001.PNG": 0, "Class1/Test/0002.PNG": 1,
                                       "Class1/Test/0003.PNG": 0}
    assert test.loc["Class1/Test/0002.PNG", "mask_path"] == "Class1/Test/Label/0002_label.PNG"


# --- errors common to all readers -------------------------------------------------------------------------------------


def single_image_datasets() -> list[str]:
    """Every registered image dataset read by a reader of its own (the streams read their members)."""
    return [name for name, spec in datasets.specs("image").items() if not spec.stream]


def assert_root_errors_quote_the_layout(name: str, tmp_path) -> None:
    """A missing root, a file given as the root and a folder in another layout are each a one-line DatasetError
    naming the root and quoting the dataset's registered layout text."""
    layout = datasets.get(name, "image").layout
    missing = tmp_path / "nowhere"
    a_file = tmp_path / "file.txt"
    a_file.write_text("x")
    wrong = tmp_path / "wrong"
    _img(wrong / "images" / "0000.png")
    for root, what in ((missing, "does not exist"), (a_file, "not a directory"), (wrong, "expected")):
        with pytest.raises(DatasetError) as info:
            read_index(name, root)
        message = str(info.value)
        assert str(root) in message and what in message and "\n" not in message, message
        assert f"expected {layout}" in message, message


@pytest.mark.parametrize("name", single_image_datasets())
def test_missing_root_file_root_and_wrong_layout_are_one_line_errors(tmp_path, name):
    assert_root_errors_quote_the_layout(name, tmp_path)


def test_unknown_dataset_lists_the_choices(tmp_path):
    with pytest.raises(ConfigError, match="unknown dataset 'no-such-dataset'") as info:
        read_index("no-such-dataset", tmp_path)
    assert set(DATASETS) <= set(datasets.names("image"))
    assert all(name in str(info.value) for name in datasets.names("image"))


# --- a dataset registered in this repository ---------------------------------------------------------------------

TINY_LAYOUT = "Tiny layout <root>/<concept>/{train,test}/*.png, anomalous test images bad_*.png beside <stem>_mask.png"


def _read_tiny(root) -> pd.DataFrame:
    """A reader of a layout of its own that quotes no layout text itself: its registration's reaches its errors."""
    from pathlib import Path

    from bench.data.index import make_index

    rows = []
    for concept in sorted(p for p in Path(root).iterdir() if p.is_dir()):
        for split in ("train", "test"):
            for image in sorted((concept / split).glob("*.png")):
                if image.stem.endswith("_mask"):
                    continue
                mask = image.with_name(f"{image.stem}_mask.png") if image.stem.startswith("bad_") else None
                if mask is not None and not mask.is_file():
                    raise DatasetError(f"{image}: anomalous image without its mask {mask.name}")
                rows.append({"dataset": "tiny", "task": concept.name, "split": split, "label": int(mask is not None),
                             "image_path": image.relative_to(root).as_posix(),
                             "mask_path": mask.relative_to(root).as_posix() if mask else ""})
    return make_index(rows)


@pytest.fixture
def tiny_registered(monkeypatch):
    """A dataset added the way the repository's own are: a reader and one registration, and no grid file."""
    monkeypatch.setattr(datasets, "_SPECS", dict(datasets._SPECS))  # the registration ends with the test
    return datasets.register(datasets.DatasetSpec("tiny", "image", _read_tiny, "Tiny", TINY_LAYOUT, ("a", "b", "c")))


def test_a_dataset_registered_in_tree_without_a_grid_is_a_dataset_and_submit_refuses_it_in_one_line(
        tiny_registered, tmp_path, capsys):
    from bench.cli import main
    from bench.hpc import grid as grids, records

    root = tmp_path / "tiny"
    for concept in ("a", "b"):
        for split in ("train", "test"):
            _img(root / concept / split / "000.png")
        _img(root / concept / "test" / "bad_001.png", value=250)
        _mask(root / concept / "test" / "bad_001_mask.png")
    assert "tiny" in single_image_datasets() and not grids.grid_path("tiny").exists()
    assert_root_errors_quote_the_layout("tiny", tmp_path)
    index = read_index("tiny", root)
    assert (len(index), sorted(set(index["task"])), int(index["label"].sum())) == (6, ["a", "b"], 2)
    train, test = task_splits(index, root, "b", 8)
    assert (len(train), len(test), test.has_pixel_labels) == (1, 2, True)
    (root / "b" / "test" / "bad_001_mask.png").unlink()  # the reader's own error gets the layout text too
    with pytest.raises(DatasetError, match=r"bad_001.png: anomalous image without its mask bad_001_mask.png "
                                           r"\(expected Tiny layout ") as info:
        read_index("tiny", root)
    assert "\n" not in str(info.value)
    _mask(root / "b" / "test" / "bad_001_mask.png")

    assert main(["data", "--dataset", "tiny", "--root", str(root)]) == 0
    out = capsys.readouterr().out
    assert f"tiny at {root}: 2 tasks, 6 images" in out and "concepts not found: c" in out
    outputs = tmp_path / "outputs"
    for dry_run in (["--dry-run"], []):
        assert main(["submit", "--dataset", "tiny", "--root", str(root), "--outputs", str(outputs), *dry_run]) == 2
        err = capsys.readouterr().err.strip()
        assert err == (f"error: {grids.grid_path('tiny')}: dataset 'tiny' has no cluster grid, so it cannot be "
                       "submitted (write one: docs/cluster.md, section 2; or pass --grid FILE)"), err
    assert not records.records_dir(outputs, "tiny").exists()


# --- images and masks -------------------------------------------------------------------------------------------------


def test_load_image_is_normalised_rgb_at_the_requested_size(tmp_path):
    grey = _img(tmp_path / "g.png", size=(20, 10), mode="L", value=255)
    x = load_image(grey, 16)
    assert x.shape == (3, 16, 16) and x.dtype == torch.float32
    expected = (1 - torch.tensor([0.485, 0.456, 0.406])) / torch.tensor([0.229, 0.224, 0.225])
    torch.testing.assert_close(x.mean(dim=(1, 2)), expected)


@pytest.mark.parametrize("content", [b"not an image at all", "truncated"])
def test_corrupt_image_raises_dataset_error_naming_the_file(tmp_path, content):
    path = tmp_path / "broken.png"
    if content == "truncated":
        Image.fromarray(np.random.default_rng(0).integers(0, 255, (64, 64, 3), dtype=np.uint8)).save(path)
        content = path.read_bytes()[:200]
    path.write_bytes(content)
    with pytest.raises(DatasetError, match="broken.png: cannot read image") as info:
        load_image(path, 8)
    assert "\n" not in str(info.value)


def test_load_mask_thresholds_at_half_scale_and_resizes_nearest(tmp_path):
    image = _img(tmp_path / "img.png", size=(8, 8))
    arr = np.zeros((8, 8), dtype=np.uint8)
    arr[:4, :4] = 255
    arr[:4, 4:6] = 7  # a soft border: not defect
    Image.fromarray(arr).save(tmp_path / "mask.png")
    mask = load_mask(tmp_path / "mask.png", 4, image)
    assert mask.dtype == np.uint8 and mask.shape == (4, 4)
    assert mask.tolist() == [[1, 1, 0, 0], [1, 1, 0, 0], [0, 0, 0, 0], [0, 0, 0, 0]]
    old = load_mask(tmp_path / "mask.png", 4, image, threshold=None)  # runs recorded before the threshold
    assert old.tolist() == [[1, 1, 1, 0], [1, 1, 1, 0], [0, 0, 0, 0], [0, 0, 0, 0]]


def test_mask_of_another_size_than_its_image_is_an_error(tmp_path):
    image = _img(tmp_path / "img.png", size=(8, 6))
    mask = _mask(tmp_path / "mask.png", size=(6, 8))
    with pytest.raises(DatasetError, match=r"mask\.png: mask size 6x8 differs from image .*img\.png size 8x6"):
        load_mask(mask, 4, image)


def test_corrupt_mask_raises_dataset_error_naming_the_file(tmp_path):
    image = _img(tmp_path / "img.png")
    (tmp_path / "mask.png").write_bytes(b"\x89PNG garbage")
    with pytest.raises(DatasetError, match="mask.png: cannot read mask"):
        load_mask(tmp_path / "mask.png", 4, image)


# --- task splits ------------------------------------------------------------------------------------------------------


def test_task_splits_expose_rows_keys_labels_images_and_masks(mvtec_root):
    index = read_index("mvtec", mvtec_root)
    train, test = task_splits(index, mvtec_root, "bottle", 16)
    assert (train.name, train.split, len(train), test.split, len(test)) == ("mvtec/bottle", "train", 2, "test", 3)
    assert train.keys == ["mvtec/bottle/train/good/000.png", "mvtec/bottle/train/good/001.png"]
    assert test.labels.dtype == np.int64 and test.labels.tolist() == [1, 1, 0]
    assert test.has_pixel_labels and list(test.rows.index) == [0, 1, 2]
    images = test.load_images([2, 0])
    assert images.shape == (2, 3, 16, 16)
    torch.testing.assert_close(test.load_images([2, 0], workers=2), images)
    masks = test.load_masks(np.arange(3))
    assert masks.shape == (3, 16, 16) and masks.dtype == np.uint8
    assert masks[0].any() and masks[1].any() and not masks[2].any()
    assert [b.tolist() for b in test.batches(2)] == [[0, 1], [2]]


def test_has_pixel_labels_is_false_when_an_anomaly_lacks_a_mask(mvtec_root):
    index = read_index("mvtec", mvtec_root)
    index.loc[index["label"] == 1, "mask_path"] = ""
    assert not task_splits(index, mvtec_root, "widget", 8)[1].has_pixel_labels


def test_unknown_task_lists_the_tasks_and_an_empty_split_is_an_error(mvtec_root):
    index = read_index("mvtec", mvtec_root)
    with pytest.raises(ConfigError, match="unknown task 'cable' \\(valid: bottle, widget\\)"):
        task_splits(index, mvtec_root, "cable", 8)
    with pytest.raises(DatasetError, match="mvtec/widget has no test images"):
        task_splits(index[index["split"] == "train"], mvtec_root, "widget", 8)


# --- nothing clipped, nothing dropped silently, warnings only about what matters ------------------------------------


def test_16_bit_images_are_scaled_not_clipped_and_32_bit_ones_refused(tmp_path):
    grey = np.random.default_rng(0).integers(0, 256, (16, 16)).astype(np.uint8)
    Image.fromarray(grey).save(tmp_path / "g8.png")
    Image.fromarray(grey.astype(np.uint16) * 257).save(tmp_path / "g16.png")  # the same pixels in 16 bit
    assert Image.open(tmp_path / "g16.png").mode == "I;16"
    torch.testing.assert_close(load_image(tmp_path / "g16.png", 16), load_image(tmp_path / "g8.png", 16))
    torch.testing.assert_close(load_image(tmp_path / "g16.png", 8), load_image(tmp_path / "g8.png", 8),
                               atol=0.02, rtol=0)  # 8-bit resizing rounds to a grey level (1/255/0.229)
    Image.fromarray(np.full((16, 16), 0.5, np.float32)).save(tmp_path / "f.tif")
    with pytest.raises(DatasetError, match=r"f\.tif: 32-bit float image .* convert it to 8- or 16-bit"):
        load_image(tmp_path / "f.tif", 16)


def test_16_bit_mask_thresholds_at_the_same_fraction_of_its_scale(tmp_path):
    image = _img(tmp_path / "i.png", size=(8, 8))
    mask = np.zeros((8, 8), np.uint16)
    mask[:4] = 65535
    mask[4:6] = 256  # nonzero only in the high byte, far below half scale
    Image.fromarray(mask).save(tmp_path / "m.png")
    assert load_mask(tmp_path / "m.png", 8, image).sum(axis=1).tolist() == [8] * 4 + [0] * 4
    assert load_mask(tmp_path / "m.png", 8, image, threshold=None)[:6].all()  # the old rule: any nonzero


def test_concept_without_training_images_is_an_error(mvtec_root):
    (mvtec_root / "widget" / "train" / "good").rename(mvtec_root / "widget" / "train" / "elsewhere")
    with pytest.raises(DatasetError, match=r"widget: concept with a test folder but no training images"):
        read_index("mvtec", mvtec_root)


def test_dangling_symlink_is_an_error(mvtec_root, tmp_path):
    (mvtec_root / "bottle" / "train" / "good" / "009.png").symlink_to(tmp_path / "gone.png")
    with pytest.raises(DatasetError, match=r"009\.png: dangling symbolic link"):
        read_index("mvtec", mvtec_root)


@pytest.mark.parametrize("row, message", [
    ("candle,test,normal,candle/Data/Images/Normal/0000.JPG,\n", r"0000\.JPG already listed on line 2"),
    (",test,normal,candle/Data/Images/Normal/0002.JPG,\n", "empty object name"),
])
def test_visa_image_in_two_splits_or_without_object_is_an_error(tmp_path, row, message):
    with pytest.raises(DatasetError, match=message):
        read_visa(_visa(tmp_path, extra_rows=row))


def test_own_data_in_mvtec_layout_reads_without_a_warning(tmp_path):
    import warnings

    _mvtec_concept(tmp_path / "own", "widget")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert set(read_index("mvtec", tmp_path / "own")["task"]) == {"widget"}


def test_own_data_beside_an_mvtec_name_is_told_once_at_bench_data_and_never_at_runs(mvtec_root, capsys):
    """Bottle beside own concepts is normal; a grid of runs must not repeat which MVTec concepts are
    absent (runs read the index with warnings as errors here), `bench data` says it once, as a note."""
    import warnings

    from bench.cli import main

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        read_index("mvtec", mvtec_root)
        assert main(["data", "--dataset", "mvtec", "--root", str(mvtec_root)]) == 0
    out = capsys.readouterr().out
    assert out.count("cable, capsule") == 1 and "note: " in out and "warning" not in out


def test_unlistable_folder_is_one_line(mvtec_root, monkeypatch):
    from pathlib import Path

    real = Path.iterdir
    denied = mvtec_root / "bottle" / "test"

    def iterdir(self):
        if self == denied:
            raise PermissionError(13, "Permission denied", str(self))
        return real(self)

    monkeypatch.setattr(Path, "iterdir", iterdir)
    with pytest.raises(DatasetError, match=r"bottle/test: cannot list folder \(Permission denied\)"):
        read_index("mvtec", mvtec_root)
