"""Every numeric hyperparameter of every registered image detector, at each end of the range its Param allows,
builds and fits on a tiny input (4 images of 32-64 px, one epoch) or fails with one clean BenchError: a value the registry
accepts never ends in a traceback (a probe found beta1=1 and blur_sigma=1e9 did).

Ends tested: the low bound (or just above it when open), the high bound (or just below it when open); a float
with no high bound at 1e6 (lr, weights, ε: accepted values the code must survive or refuse cleanly). Integers
without a high bound (epochs, batch sizes, widths) are costs, not numerical edges: tested at their low end only.
"""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch

from bench.errors import BenchError
from bench.features import ImageSource
from bench.registry import get, specs
from helpers import create, model_extractor, task_split_pair

pytestmark = pytest.mark.slow  # about 100 tiny fits

UNBOUNDED_FLOAT = 1e6
SIZE = {"efficientad": 48, "rd4ad": 64}  # the smallest each accepts; the rest runs at 32
N_TRAIN = 4
CHEAP = {"epochs": 1, "batch_size": 2, "n_features": 8, "out_channels": 8, "latent": 8, "embed_dim": 16,
         "projection_dim": 8, "flow_steps": 1}  # the base settings each extreme is applied on top of


def extremes(param) -> list:
    if param.kind not in ("int", "float") or param.choices is not None:
        return []
    step = 1 if param.kind == "int" else 1e-6
    out = [] if param.low is None else [param.low + step if param.low_open else param.low]
    if param.high is not None:
        out.append(param.high - step if param.high_open else param.high)
    elif param.kind == "float":
        out.append(UNBOUNDED_FLOAT)
    return [param.check("", "", v) for v in out]


CASES = [(m, k, v) for m, spec in specs().items() for k, p in spec.params.items() for v in extremes(p)]


def cheap(name: str) -> dict:
    return {k: v for k, v in CHEAP.items() if k in get(name).params}


@pytest.mark.parametrize("name,key,value", CASES, ids=[f"{m}-{k}={v:g}" for m, k, v in CASES])
def test_extreme_builds_and_fits_or_fails_cleanly(tiny_root, name, key, value):
    spec = get(name)
    size = SIZE.get(name, 32)
    settings = {**cheap(name), key: value}
    if spec.inputs == "images":
        extractor = ImageSource(torch.device("cpu"), batch_size=8, progress=False)
    else:
        extractor = model_extractor(spec.layers(spec.resolve(settings)))
    train, test = task_split_pair(tiny_root, "disc", size)
    train = replace(train, rows=train.rows.iloc[:N_TRAIN].reset_index(drop=True))
    try:
        det = create(name, extractor, size, **settings)
        det.fit(train, seed=0)
        det.predict(test, torch.arange(2).numpy())
    except BenchError as e:
        assert "\n" not in str(e) and str(e), f"{type(e).__name__} is not one line: {e}"
