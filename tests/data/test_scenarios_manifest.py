"""Scenario manifests: schema validation, paths that cannot leave the dataset root, file lists with SHA-256,
`scenarios index/check/rank`, and how `--ordering` reads them (bench/data/stream.py)."""

from __future__ import annotations

import copy
import json
import shutil

import pandas as pd
import pytest

from bench.cli import main
from bench.data import read_index
from bench.data import manifest
from bench.data.readers import KNOWN_CONCEPTS
from bench.data.stream import _synthetic_orderings, resolve_tasks
from bench.errors import ConfigError


def entry(rows):
    return {"n": len(rows), "anomalous": sum(r[1] for r in rows), "sha256": manifest.list_sha256(rows), "list": rows}


def valid():
    return {
        "schema": 1, "dataset": "d", "tasks": ["a", "b"],
        "orderings": {"easy_to_hard": {"tasks": ["b", "a"]}, "hard_to_easy": {"tasks": ["a", "b"]},
                      "random": {"tasks": ["b", "a"], "seed": 0}},
        "source": {"kind": "ste"},
        "files": {"a": {"train": entry([["a/train/0.png", 0, ""]]),
                        "test": entry([["a/test/0.png", 0, ""], ["a/test/1.png", 1, "a/gt/1.png"]])}},
    }


def set_image(m, path):
    rows = [[path, 0, ""]]
    m["files"]["a"]["train"] = entry(rows)


def set_mask(m, path):
    rows = [["a/test/1.png", 1, path]]
    m["files"]["a"]["test"] = entry(rows)


BAD = {
    "parent": (lambda m: set_image(m, "../other/0.png"), "escapes the dataset root"),
    "inner parent": (lambda m: set_image(m, "a/../../0.png"), "escapes the dataset root"),
    "absolute": (lambda m: set_image(m, "/etc/passwd"), "escapes the dataset root"),
    "backslash": (lambda m: set_image(m, "a\\..\\..\\0.png"), "escapes the dataset root"),
    "drive": (lambda m: set_image(m, "C:/data/0.png"), "escapes the dataset root"),
    "empty part": (lambda m: set_image(m, "a//0.png"), "escapes the dataset root"),
    "dot": (lambda m: set_image(m, "./a/0.png"), "escapes the dataset root"),
    "mask": (lambda m: set_mask(m, "../gt/1.png"), "escapes the dataset root"),
    "sha": (lambda m: m["files"]["a"]["test"].update(sha256="0" * 64), "does not match its list"),
    "count": (lambda m: m["files"]["a"]["test"].update(n=5), "do not match the list"),
    "anomalous train": (lambda m: m["files"]["a"].update(train=entry([["a/x.png", 1, "a/m.png"]])),
                        "anomalous images in a training split"),
    "entry": (lambda m: m["files"]["a"]["train"]["list"].append(["a/y.png", "0"]), "is not [image path"),
    "not a task": (lambda m: m["files"].update(z=m["files"]["a"]), "not a task of this manifest"),
    "permutation": (lambda m: m["orderings"]["hard_to_easy"].update(tasks=["a", "a"]), "not a permutation"),
    "missing task": (lambda m: m["orderings"]["easy_to_hard"].update(tasks=["a"]), "not a permutation"),
    "seed": (lambda m: m["orderings"]["random"].pop("seed"), "must record the seed"),
    "alphabetical": (lambda m: m["orderings"].update(alphabetical={"tasks": ["a", "b"]}), "not 'alphabetical'"),
    "unknown key": (lambda m: m.update(extra=1), "unknown keys ['extra']"),
    "schema": (lambda m: m.update(schema=2), "schema 2 is not 1"),
    "source": (lambda m: m.update(source={"kind": "guess"}), "source must be an object"),
    "slash in task": (lambda m: m.update(tasks=["a", "x/b"]), "is not a plain concept name"),
    "multi task": (lambda m: m.update(dataset="multi"), "is not <dataset>/<concept>"),
    "repeated task": (lambda m: m.update(tasks=["a", "a"]), "repeat"),
}


def test_a_valid_manifest_round_trips(tmp_path):
    path = manifest.write(valid(), tmp_path / "d.json")
    assert manifest.read(path) == valid()


@pytest.mark.parametrize("name", BAD)
def test_invalid_manifests_are_refused_naming_the_file(tmp_path, name):
    mutate, message = BAD[name]
    m = valid()
    mutate(m)
    path = tmp_path / "d.json"
    path.write_text(json.dumps(m))
    with pytest.raises(ConfigError, match=str(path)) as err:
        manifest.read(path)
    assert message in str(err.value)


def test_broken_json_is_one_clear_error(tmp_path):
    path = tmp_path / "d.json"
    path.write_text('{"schema": 1,')
    with pytest.raises(ConfigError, match=rf"{path}: not valid JSON"):
        manifest.read(path)


def test_shipped_manifests_validate_and_name_tasks_as_the_readers_do():
    paths = sorted(manifest.DEFAULT_DIR.glob("*.json"))
    assert {p.stem for p in paths} == {"btad", "dagm", "mpdd", "mvtec", "visa", "multi"}  # never synthetic.json
    for path in paths:
        m = manifest.read(path)
        assert m["dataset"] == path.stem
        if m["dataset"] == "multi":
            assert all(t.split("/")[1] in KNOWN_CONCEPTS[t.split("/")[0]] for t in m["tasks"])
            # the released InCLAD-MD stream and the ROC-AUC-selected alternative
            assert set(m["orderings"]) == {"easy_to_hard", "hard_to_easy", "roc_auc_easy_to_hard",
                                           "roc_auc_hard_to_easy"}
        else:
            assert sorted(m["tasks"]) == sorted(KNOWN_CONCEPTS[m["dataset"]])
            assert m["orderings"]["random"]["seed"] == 0
        assert m["orderings"]["easy_to_hard"]["tasks"] == m["orderings"]["hard_to_easy"]["tasks"][::-1]


def test_file_lists_and_their_hash_follow_the_index(tiny_root):
    index = read_index("synthetic", tiny_root)
    files = manifest.file_lists(index)
    assert sorted(files) == sorted(index["task"].unique())
    for task, splits in files.items():
        for split, e in splits.items():
            rows = index[(index["task"] == task) & (index["split"] == split)]
            assert e["n"] == len(rows) and e["anomalous"] == int(rows["label"].sum())
            assert {r[0] for r in e["list"]} == set(rows["image_path"])
    shuffled = manifest.file_lists(index.sample(frac=1, random_state=0))
    assert shuffled == files
    rows = copy.deepcopy(files["disc"]["test"]["list"])
    assert manifest.list_sha256(rows[::-1]) == files["disc"]["test"]["sha256"]
    rows[0][1] = 1 - rows[0][1]
    assert manifest.list_sha256(rows) != files["disc"]["test"]["sha256"]


def synthetic_manifest(tasks):
    order = sorted(tasks)
    return {"schema": 1, "dataset": "synthetic", "tasks": order, "source": {"kind": "ste"},
            "orderings": {"easy_to_hard": {"tasks": order[::-1]}, "hard_to_easy": {"tasks": order},
                          "random": {"tasks": [order[1], order[0], *order[2:]], "seed": 7}}}


def test_ordering_reads_the_manifest_folder_and_falls_back_to_the_generator(tiny_root, scen_dir):
    available = sorted(read_index("synthetic", tiny_root)["task"].unique())
    # no manifest: the generator's synthetic.json defines the curricula (what `make demo` relies on)
    assert resolve_tasks("synthetic", tiny_root, available, "easy_to_hard") == \
        ("easy_to_hard", _synthetic_orderings(tiny_root)["easy_to_hard"])
    manifest.write(synthetic_manifest(available))
    assert resolve_tasks("synthetic", tiny_root, available, "random")[1] == [available[1], available[0],
                                                                               *available[2:]]
    (scen_dir / "synthetic.json").write_text('{"schema": 1}')
    with pytest.raises(ConfigError, match="synthetic.json: missing key 'dataset'"):
        resolve_tasks("synthetic", tiny_root, available, "random")


def test_index_writes_file_lists_and_check_finds_changed_data(tiny_root, scen_dir, tmp_path, capsys):
    root = tmp_path / "data"
    shutil.copytree(tiny_root, root)
    tasks = sorted(read_index("synthetic", root)["task"].unique())
    manifest.write(synthetic_manifest(tasks))
    assert main(["scenarios", "check", "--dataset", "synthetic", "--root", str(root)]) == 2
    assert "no file lists yet" in capsys.readouterr().err

    assert main(["scenarios", "index", "--dataset", "synthetic", "--root", str(root)]) == 0
    m = manifest.load("synthetic")
    assert list(m["files"]) == tasks and m["files"]["disc"]["train"]["n"] == 16
    assert main(["scenarios", "check", "--dataset", "synthetic", "--root", str(root)]) == 0

    (root / "disc" / "test" / "good" / "000.png").unlink()
    assert main(["scenarios", "check", "--dataset", "synthetic", "--root", str(root)]) == 2
    out, err = capsys.readouterr()
    assert "BAD disc/test: 15 of 16 images  missing 1" in out and "1 of 10 task splits differ" in err
    assert main(["scenarios", "index", "--dataset", "synthetic", "--root", str(root)]) == 2
    assert "--force overwrites them" in capsys.readouterr().err
    assert main(["scenarios", "index", "--dataset", "synthetic", "--root", str(root), "--force"]) == 0
    assert manifest.load("synthetic")["files"]["disc"]["test"]["n"] == 15


def test_rank_writes_a_manifest_but_replaces_a_published_one_only_with_force(scen_dir, tmp_path, capsys):
    shutil.copy(manifest.DEFAULT_DIR / "btad.json", scen_dir / "btad.json")
    ste = tmp_path / "ste.csv"
    pd.DataFrame([{"dataset": "btad", "concept": c, "method": m, "backbone": "resnet18", "roc_auc": v}
                  for c, values in {"01": [0.9, 0.8], "02": [0.95, 0.99], "03": [0.7, 0.6]}.items()
                  for m, v in zip(("patchcore", "padim"), values)]).to_csv(ste, index=False)
    assert main(["scenarios", "rank", "--ste", str(ste)]) == 2
    assert "holds orderings from a publication source; pass --force" in capsys.readouterr().err
    assert manifest.load("btad")["source"]["kind"] == "publication"

    assert main(["scenarios", "rank", "--ste", str(ste), "--force"]) == 0
    m = manifest.load("btad")
    assert m["source"]["kind"] == "ste" and m["source"]["methods"] == ["patchcore", "padim"]
    assert m["orderings"]["hard_to_easy"]["tasks"] == ["03", "01", "02"]
    assert (tmp_path / "btad_ordering.md").is_file() and (tmp_path / "spearman.csv").is_file()

    # file lists survive re-ranking the same task set
    m["files"] = {"01": {"train": entry([["01/train/ok/0.bmp", 0, ""]]), "test": entry([["01/test/ko/0.bmp", 1, ""]])}}
    manifest.write(m)
    assert main(["scenarios", "rank", "--ste", str(ste)]) == 0
    assert manifest.load("btad")["files"] == m["files"]
