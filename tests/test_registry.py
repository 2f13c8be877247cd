"""The detector registry: every detector registered once, hyperparameters typed and range-checked before work."""

import pytest

from bench.errors import ConfigError
from bench.models import implemented, resolve_hparams
from bench.models.registry import INCLAD_MODELS, get, specs


def test_registered_detectors_come_in_inclad_order():
    names = list(specs())
    assert names == [m for m in INCLAD_MODELS if m in names] + sorted(set(names) - set(INCLAD_MODELS))
    assert {"patchcore", "padim", "cfa"} <= set(implemented())


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
        resolve_hparams(model, {key: value})
    assert key in str(err.value) and repr(value) in str(err.value) and "expected" in str(err.value)


def test_values_are_canonicalised():
    assert resolve_hparams("patchcore", {"n_starts": "4", "coreset_ratio": 1})["n_starts"] == 4
    assert isinstance(resolve_hparams("patchcore", {"coreset_ratio": 1})["coreset_ratio"], float)
    assert resolve_hparams("cfa", {"layers": "layer3,layer1"})["layers"] == ["layer1", "layer3"]


def test_unknown_and_unimplemented_names_list_the_valid_ones():
    with pytest.raises(ConfigError, match="valid: .*coreset_ratio"):
        resolve_hparams("patchcore", {"coreset": 0.1})
    with pytest.raises(ConfigError, match="valid:"):
        get("nope")
