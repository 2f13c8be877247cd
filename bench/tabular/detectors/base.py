"""The tabular detector contract: `fit(X, seed)`, `score(X) -> [n]` (higher = more anomalous, pointwise),
`state_dict() -> {name: ndarray}` / `load_state_dict(state)` (plain arrays: checkpoints never unpickle)."""

from __future__ import annotations

import contextlib
import io

import numpy as np

from bench.errors import ConfigError


class TabularDetector:
    name = ""

    def __init__(self, **hparams):
        self.hparams = hparams

    def fit(self, X: np.ndarray, seed: int) -> "TabularDetector":
        raise NotImplementedError

    def score(self, X: np.ndarray) -> np.ndarray:
        raise NotImplementedError

    def state_dict(self) -> dict[str, np.ndarray]:
        raise NotImplementedError

    def load_state_dict(self, state: dict[str, np.ndarray]) -> "TabularDetector":
        raise NotImplementedError


def hidden_sizes(model: str, text: str) -> list[int]:
    try:
        sizes = [int(t) for t in str(text).split(",") if t.strip()]
    except ValueError:
        sizes = []
    if not sizes or min(sizes) < 1:
        raise ConfigError(f"{model} hyperparameter hidden={text!r} is not allowed (expected sizes like '64,32')")
    return sizes


def quiet():
    """PyOD prints progress from inside fit (AE1SVM every 10 epochs); job logs stay readable without it."""
    return contextlib.redirect_stdout(io.StringIO())


def torch_state(module, prefix: str = "net/") -> dict[str, np.ndarray]:
    return {prefix + k: v.detach().cpu().numpy().copy() for k, v in module.state_dict().items()}


def load_torch_state(module, state: dict[str, np.ndarray], prefix: str = "net/") -> None:
    import torch

    module.load_state_dict({k[len(prefix):]: torch.from_numpy(np.asarray(v)) for k, v in state.items()
                            if k.startswith(prefix)})
