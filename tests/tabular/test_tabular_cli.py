"""`bench tabular …` speaks the dialect of `bench run`: every option's default and choices come from where the value
lives (a setting or dataclass field, a ParamTable, a function's signature, the registry), checked here for every
action of every tabular parser, and a --min-* that would be ignored is refused."""

import argparse
import dataclasses
import importlib
import inspect
import json

import pytest

from bench.registry import ParamTable, specs
from bench.tabular.synthetic import generate


def tabular_parsers() -> dict[str, argparse.ArgumentParser]:
    from bench.cli import build_parser

    top = build_parser()
    sub = next(a for a in top._actions if isinstance(a, argparse._SubParsersAction))
    tabular = sub.choices["tabular"]
    cmds = next(a for a in tabular._actions if isinstance(a, argparse._SubParsersAction))
    return dict(cmds.choices)


def owner_default(owner, name):
    """The default `owner` holds for `name`, read here without the option builders."""
    if isinstance(owner, ParamTable):  # the framework preset decides: the option itself says nothing
        assert name is None or name in owner.params
        return None
    if dataclasses.is_dataclass(owner):
        item = next(f for f in dataclasses.fields(owner) if f.name == name)
        assert item.default is not dataclasses.MISSING, f"{owner.__name__}.{name} has no default"
        return item.default
    if inspect.ismodule(owner):
        return getattr(owner, name)
    return inspect.signature(owner).parameters[name].default


def owner_choices(owner, name) -> tuple:
    if owner == "registry":
        return tuple(specs(name))
    if isinstance(owner, str):
        return tuple(getattr(importlib.import_module(owner), name))
    if isinstance(owner, ParamTable):
        return tuple(owner.presets) if name is None else tuple(owner.params[name].choices)
    if dataclasses.is_dataclass(owner):
        return tuple(next(f for f in dataclasses.fields(owner) if f.name == name).metadata["choices"])
    return tuple(getattr(owner, name))


def test_every_tabular_option_takes_its_default_and_choices_from_its_owner():
    checked = 0
    for command, parser in tabular_parsers().items():
        for action in parser._actions:
            if isinstance(action, argparse._HelpAction):
                continue
            where = f"tabular {command} {'/'.join(action.option_strings)}"
            source = getattr(action, "source", None)
            if source is None:  # the command's own switch or path: nothing a field or a table already holds
                assert action.default in (None, False), f"{where}: default {action.default!r} typed here"
            else:
                assert action.default == owner_default(*source), where
                checked += 1
            if action.choices is not None:
                assert hasattr(action, "choices_source"), f"{where}: choices {tuple(action.choices)} typed here"
                assert tuple(action.choices) == owner_choices(*action.choices_source), where
            if hasattr(action.type, "choices"):  # --models: each comma-separated name checked against them
                assert tuple(action.type.choices) == tuple(specs("tabular")), where
                assert set(action.default) <= set(specs("tabular")), where
    assert checked >= 20  # seeds, sizes, splits, presets, protocols, models of all five commands


def test_run_and_ste_offer_every_registered_tabular_detector_and_the_tabular_run_protocols():
    from bench.tabular.protocols import PROTOCOLS

    parsers = tabular_parsers()
    registered = tuple(specs("tabular"))
    assert len(registered) >= 7
    for command in ("run", "ste"):
        model = next(a for a in parsers[command]._actions if a.dest == "model")
        assert tuple(model.choices) == registered
        text = " ".join(parsers[command].format_help().split())
        assert all(name in text for name in registered), command  # the help names all, not 3 of 7
    protocol = next(a for a in parsers["run"]._actions if a.dest == "protocol")
    assert tuple(protocol.choices) == PROTOCOLS and "ste" not in PROTOCOLS
    seeds = {next(a for a in p._actions if a.dest == "seed").default for p in parsers.values()}
    assert seeds == {0}


def test_building_the_parser_imports_no_tabular_detector():
    import subprocess
    import sys

    code = ("import sys; from bench.cli import build_parser; build_parser(); "
            "print(sorted(m for m in sys.modules if m == 'torch' or m.startswith('bench.tabular.detectors.')))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]"


def test_an_unknown_model_lists_the_registry(capsys):
    from bench.cli import main

    for argv in (["tabular", "run", "--index", "x", "--model", "patchcore"],
                 ["tabular", "scenarios", "--models", "iforest,patchcore"]):
        with pytest.raises(SystemExit) as stop:
            main(argv)
        assert stop.value.code == 2
        err = capsys.readouterr().err
        assert "patchcore" in err and all(name in err for name in specs("tabular")), argv


@pytest.mark.parametrize("command", ["index", "scenarios"])
def test_min_sizes_that_the_released_natural_split_would_ignore_are_refused(command, tmp_path, capsys):
    """Under --framework-preset released a natural candidate keeps every concept with both classes (no minimum
    sizes): a --min-normal given there is one line, exit 2, before any data is read or written."""
    from bench.cli import main
    from helpers import one_error_line

    root, out = tmp_path / "raw", tmp_path / "out"
    split = ["--candidate", "natural:day"] if command == "index" else ["--candidates", "natural:day,kmeans:nearest:3",
                                                                        "--models", "iforest", "--quick"]
    code = main(["tabular", command, "--root", str(root), "--out", str(out), "--framework-preset", "released",
                 "--min-normal", "5", *split])
    assert code == 2
    err = one_error_line(capsys)
    assert "--min-normal 5" in err and "released natural split" in err and "natural:day" in err
    assert not root.exists() and not out.exists()


def test_min_sizes_are_honoured_by_index_under_the_released_preset(tmp_path, capsys):
    from helpers import cli_stdout

    root = generate(tmp_path / "raw", seed=1, n_normal=120, n_anomal=30)
    cli_stdout("tabular", "index", "--root", root, "--out", tmp_path / "idx", "--framework-preset", "released",
               "--candidate", "kmeans:nearest:3", "--min-normal", 20, "--min-anomalous", 5)
    settings = json.loads((tmp_path / "idx" / "index.json").read_text())["settings"]
    discovery = settings["discovery"]
    assert (discovery["min_normal"], discovery["min_anomalous"], discovery["semantics"]) == (20, 5, "released")
    assert settings["preprocessing"]["split"] == "released"
