"""A scenario folder holds one release (issue 32): `bench tabular scenarios` into a folder that already has one
replaced it with rc 0, and validation runs made from the old release kept ordering names that then meant other
task orders. It is refused before any work, in one line naming the release, which stays as it was."""

from __future__ import annotations

import json

from bench.cli import main


def test_a_second_release_into_one_scenario_folder_is_refused(tmp_path, capsys):
    release = tmp_path / "scen" / "release"
    release.mkdir(parents=True)
    manifest = json.dumps({"selected_candidate": "natural-day", "orderings": {"smooth_drift": ["a", "b"]}})
    (release / "manifest.json").write_text(manifest)
    code = main(["tabular", "scenarios", "--dataset", "synthetic", "--root", str(tmp_path / "raw"), "--models",
                 "iforest", "--quick", "--out", str(tmp_path / "scen")])
    err = capsys.readouterr().err.strip()
    assert code == 2 and err.splitlines() == [
        f"error: {release / 'manifest.json'}: this scenario folder already holds a release, and runs made from it "
        f"name its orderings; build the new one into another --out (or move this folder away first)"]
    assert (release / "manifest.json").read_text() == manifest
    assert sorted(p.name for p in (tmp_path / "scen").iterdir()) == ["release"]  # no candidate was built
