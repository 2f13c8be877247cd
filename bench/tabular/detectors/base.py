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


def reconstruction_distance(module, X: np.ndarray, mean: np.ndarray, std: np.ndarray, batch: int = 8192,
                            recon=lambda out: out) -> np.ndarray:
    """‖x̃ − decoder(encoder(x̃))‖₂ with x̃ = (x − mean)/(std + 1e-8): PyOD's AutoEncoder/AE1SVM score, vectorised.

    PyOD computes the same through a per-record Dataset and a numba kernel compiled in every new process (tens of
    seconds on a busy machine); tests check the two agree.
    """
    import torch

    X = (np.asarray(X, dtype=np.float32) - mean) / (std + 1e-8)
    module.eval()
    out = np.empty(len(X))
    with torch.no_grad():
        for s in range(0, len(X), batch):
            x = torch.from_numpy(np.ascontiguousarray(X[s:s + batch], dtype=np.float32))
            r = recon(module(x))
            out[s:s + batch] = torch.sqrt(((x - r) ** 2).sum(1)).double().numpy()
    return out


def torch_state(module, prefix: str = "net/") -> dict[str, np.ndarray]:
    return {prefix + k: v.detach().cpu().numpy().copy() for k, v in module.state_dict().items()}


def load_torch_state(module, state: dict[str, np.ndarray], prefix: str = "net/") -> None:
    import torch

    module.load_state_dict({k[len(prefix):]: torch.from_numpy(np.asarray(v)) for k, v in state.items()
                            if k.startswith(prefix)})
