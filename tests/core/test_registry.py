"""The detector registry: every detector registered once, hyperparameters typed and range-checked before work."""

import pytest

from bench.errors import ConfigError
from bench.registry import INCLAD_MODELS, get, specs


def test_registered_detectors_come_in_inclad_order_then_by_name(monkeypatch):
    import dataclasses

    from bench import registry

    spec = get("padim")
    for name in ("zz_late", "aa_early"):  # registered in this order, listed by name after InCLAD's nine
        monkeypatch.setitem(registry._SPECS, name, dataclasses.replace(spec, name=name))
    names = list(specs())
    assert names[:len(INCLAD_MODELS)] == list(INCLAD_MODELS)
    assert names.index("aa_early") < names.index("zz_late") and len(INCLAD_MODELS) <= names.index("aa_early")
    assert {"patchcore", "padim", "cfa"} <= set(specs())


@pytest.mark.parametrize("name", list(specs()))
def test_defaults_pass_their_own_checks(name):
    spec = get(name)
    assert spec.resolve(spec.defaults()) == spec.defaults()
    assert spec.resolve(spec.quick).keys() == spec.defaults().keys()


@pytest.mark.parametrize("model,key,value", [
    ("patchcore", "coreset_ratio", -1), ("patchcore", "coreset_ratio", 0), ("patchcore", "coreset_ratio", 2),
    ("patchcore", "coreset_ratio", "abc"), ("patchcore", "projection_dim", 0), ("patchcore", "n_starts", 0),
    ("patchcore", "n_starts", 2.5), ("patchcore", "n_starts", True), ("patchcore", "blur_sigma", -1),
    ("patchcore", "blur_sigma", float("nan")), ("padim", "eps", -1), ("padim", "eps", 0),
    ("cfa", "epochs", -3), ("cfa", "lr", float("inf")), ("cfa", "layers", ["layer9"]), ("cfa", "layers", []),
])
def test_bad_value_names_key_value_and_range(model, key, value):
    with pytest.raises(ConfigError) as err:
        get(model).resolve({key: value})
    assert key in str(err.value) and repr(value) in str(err.value) and "expected" in str(err.value)


def test_values_are_canonicalised():
    assert get("patchcore").resolve({"n_starts": "4", "coreset_ratio": 1})["n_starts"] == 4
    assert isinstance(get("patchcore").resolve({"coreset_ratio": 1})["coreset_ratio"], float)
    assert get("cfa").resolve({"layers": "layer3,layer1"})["layers"] == ["layer1", "layer3"]


def test_unknown_and_unimplemented_names_list_the_valid_ones():
    with pytest.raises(ConfigError, match="valid: .*coreset_ratio"):
        get("patchcore").resolve({"coreset": 0.1})
    with pytest.raises(ConfigError, match="valid:"):
        get("nope")


def _toy_spec(**presets):
    from bench.registry import Float, Int, ModelSpec

    return ModelSpec(name="toy", label="Toy", factory=lambda **kw: None,
                     params={"sigma": Float(0.0, 0, 10), "epochs": Int(5, 1, 100)},
                     presets={"paper": {}, **presets}, default_preset="paper")


def test_a_preset_sets_its_values_and_overrides_apply_on_top():
    spec = _toy_spec(code={"sigma": 4})
    assert spec.resolve() == {"sigma": 0.0, "epochs": 5}
    assert spec.resolve(preset="code") == {"sigma": 4.0, "epochs": 5}
    assert spec.resolve({"sigma": 1, "epochs": 7}, preset="code") == {"sigma": 1.0, "epochs": 7}
    assert spec.preset_name(None) == "paper" and spec.preset_name("code") == "code"


def test_unknown_presets_list_the_valid_ones_and_bad_presets_fail_at_registration():
    spec = _toy_spec(code={"sigma": 4})
    with pytest.raises(ConfigError, match=r"unknown toy preset 'nope' \(valid: code, paper\)"):
        spec.resolve(preset="nope")
    with pytest.raises(ConfigError, match="sigma=11"):
        _toy_spec(code={"sigma": 11})
    with pytest.raises(ConfigError, match="unknown toy hyperparameter 'lr'"):
        _toy_spec(code={"lr": 0.1})
    from bench.registry import Float, ModelSpec

    with pytest.raises(RuntimeError, match="default preset 'paper' must be listed with no values"):
        ModelSpec(name="toy", label="Toy", factory=lambda **kw: None, params={"sigma": Float(0.0, 0, 10)},
                  presets={"paper": {"sigma": 1}}, default_preset="paper")


def test_a_param_table_resolves_through_the_same_presets():
    from bench.registry import Float, ParamTable

    table = ParamTable("filter", {"gamma": Float(0.5, 0, 1)}, presets={"suite": {}, "released": {"gamma": 0.25}},
                       default_preset="suite")
    assert table.resolve() == {"gamma": 0.5}
    assert table.resolve(preset="released") == {"gamma": 0.25}
    with pytest.raises(ConfigError, match="gamma=2"):
        table.resolve({"gamma": 2}, preset="released")


@pytest.mark.parametrize("name", list(specs()) + list(specs("tabular")))
def test_every_preset_of_every_detector_resolves(name):
    spec = get(name, "image") if name in specs() else get(name, "tabular")
    assert spec.presets[spec.default_preset] == {}
    for preset in spec.presets:
        assert spec.resolve(preset=preset).keys() == spec.defaults().keys()


def test_the_preset_is_recorded_but_only_its_values_enter_the_run_key():
    from bench.config import RunConfig

    base = RunConfig(dataset="synthetic", root=".", model="patchcore", tasks=["a"], hparams={"blur_sigma": 4.0})
    named = RunConfig(dataset="synthetic", root=".", model="patchcore", tasks=["a"], hparams={"blur_sigma": 4.0},
                      preset="original")
    assert base.run_key("i", "w") == named.run_key("i", "w")
    assert base.sha256() != named.sha256()
    assert RunConfig.from_json(named.to_json()).preset == "original"
    assert RunConfig.from_json(base.to_json()).preset is None


# --- one protocol list per track ------------------------------------------------------------------------


def _run_argv(root, out, model, protocol):
    return ["run", "--dataset", "synthetic", "--root", str(root), "--model", model, "--protocol", protocol,
            "--weights", "none", "--image-size", "32", "--device", "cpu", "--batch-size", "8", "--workers", "0",
            "--tasks", "chip,disc", "--set", "epochs=1", "--set", "batch_size=8", "--out", str(out)]


@pytest.mark.slow
def test_cumulative_image_run_completes_for_a_gradient_detector(tiny_root, tmp_path):
    from bench.cli import main
    from bench.results import is_complete, load

    out = tmp_path / "stfpm-cumulative.h5"
    assert main(_run_argv(tiny_root, out, "stfpm", "cumulative")) == 0
    assert is_complete(out)
    row = load(out).iloc[0]
    assert (row["model"], row["protocol"], row["steps_done"]) == ("stfpm", "cumulative", 2)


def test_cumulative_is_refused_for_a_memory_bank_detector_before_any_work(tiny_root, tmp_path, capsys):
    from bench.cli import main
    from helpers import one_error_line

    out = tmp_path / "patchcore-cumulative.h5"
    assert main(_run_argv(tiny_root, out, "patchcore", "cumulative")) == 2
    err = one_error_line(capsys)
    assert "'patchcore'" in err and "cumulative" in err and "ncl, cl" in err
    assert not out.exists() and not list(tmp_path.iterdir())


def test_every_protocol_surface_reads_the_one_image_list(tmp_path):
    import argparse

    from bench.cli import add_run_arguments
    from bench.config import IMAGE_PROTOCOLS
    from bench.hpc.grid import load_grid
    from bench.image.protocols import make_protocol
    from helpers import write_grid

    parser = argparse.ArgumentParser()
    add_run_arguments(parser)
    action = next(a for a in parser._actions if a.dest == "protocol")
    assert tuple(action.choices) == IMAGE_PROTOCOLS
    with pytest.raises(ConfigError, match="valid: " + ", ".join(sorted(IMAGE_PROTOCOLS))):
        make_protocol("replay", None, seed=0)
    path = write_grid(tmp_path / "synthetic.yaml", protocols=["cumulative", "sideways"])
    with pytest.raises(ConfigError, match="'sideways' .*valid: " + ", ".join(IMAGE_PROTOCOLS)):
        load_grid("synthetic", path)


def test_the_torch_free_names_are_the_registered_detectors():
    """The CLI's --model choices (module and entry-point names, nothing imported) are what the registry holds."""
    from bench.registry import names

    assert names() == tuple(specs())


def test_bench_models_holds_no_aliases_of_the_registry():
    """Callers ask the registry's spec (resolve, layers, factory): a second spelling in bench.models would drift."""
    import inspect

    import bench.models

    assert [n for n, v in vars(bench.models).items() if inspect.isfunction(v)] == []


def test_every_list_of_tracks_is_the_one_table_of_bench_tracks():
    """Issue 30 §2: track names lived in five hand lists. bench.tracks.TRACKS is the table; the run inputs of
    bench.config, the registry's checks and bench.testing's subjects follow it, each from its own classes."""
    from bench import config, registry, testing, tracks

    assert tracks.TRACK_NAMES == tuple(tracks.TRACKS) == ("image", "tabular")
    assert config.TRACKS == registry.TRACKS == tracks.TRACK_NAMES
    assert tuple(config.INPUTS) == tuple(testing.SUBJECTS) == tuple(registry.INPUTS) == tracks.TRACK_NAMES
    assert all(cls.track == name for name, cls in config.INPUTS.items())
    assert set(tracks.TRACK_MODULES) == set(tracks.DETECTOR_PACKAGES) == set(tracks.TRACKS)
