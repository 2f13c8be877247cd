"""The fixed synthetic streams the released BOCPD's reference numbers (fixtures/bocpd_released.json) were computed
on: seeded numpy draws, so the test regenerates them exactly."""

from __future__ import annotations

import numpy as np

STREAMS = ("shift8", "shift84")


def stream(name: str) -> np.ndarray:
    """shift8: 3,000 × 8, seed 20260312, per-feature scales (one small enough for the variance floor to bind),
    a 6σ mean shift of every feature from record 1,500 on, and 10σ spikes on features 0–3 at records 700, 1100,
    2300, 2800. shift84: 1,200 × 84, seed 20260313, scales 10^U(−2, 2), a 6σ shift from record 600 on."""
    if name == "shift8":
        rng = np.random.default_rng(20260312)
        scales = np.array([1.0, 10.0, 0.005, 100.0, 1.0, 1.0, 3.0, 0.1])
        X = rng.normal(size=(3000, 8)) * scales
        X[1500:] += 6.0 * scales
        for row in (700, 1100, 2300, 2800):
            X[row, :4] += 10.0 * scales[:4]
        return X
    if name == "shift84":
        rng = np.random.default_rng(20260313)
        scales = 10.0 ** rng.uniform(-2.0, 2.0, 84)
        X = rng.normal(size=(1200, 84)) * scales
        X[600:] += 6.0 * scales
        return X
    raise KeyError(name)
