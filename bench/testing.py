"""Checks a detector author can import (the seed of a detector-check module, like scikit-learn's check_estimator).

Pointwise: a sample's score never depends on the other samples scored with it. Equality is too
strict a test of that: a float32 kernel (BLAS GEMM, convolutions) picks its blocking and summation order from the
matrix shape, so the same record scored alone and inside a batch of 200 differs in the last bits (measured with the
locked packages: 2.4e-7 on the VAE's scores). A transductive scorer (ECOD's batch-wide empirical CDFs, a min-max or rank
normalisation over the scoring batch) moves scores by a sizeable fraction of their range instead, so one
tolerance separates the two by orders of magnitude (tests/test_contract.py shows it on a min-max scorer).
"""

from __future__ import annotations

import numpy as np

# Largest allowed |alone − batch| as a fraction of max |score| over both. Scale by the largest magnitude rather
# than by each score or by the spread: float32 rounding of a sum is relative to the size of its terms, so a score
# near zero (a difference of large terms) carries an absolute error of ~eps·max|score|, and a set of large scores
# with a small spread still rounds at their magnitude. 1e-5 is ~84 float32 ulps (eps 1.19e-7) of that scale: room for
# kernels that reorder sums and for what a few layers, a log-determinant or an exponential amplify (measured:
# DAGMM's energies alone vs. among 140 records, 1.2e-6), still orders of magnitude below the moves of
# batch-normalised scores (a sizeable fraction of their range).
POINTWISE_RTOL = 1e-5


def pointwise_gap(alone, batch) -> float:
    """max |alone − batch| / max(|alone|, |batch|): how far scores (or maps) computed alone differ from the same
    samples' scores computed inside a batch, relative to their scale. 0 when both are all zeros; inf on
    non-finite values (a NaN must never pass for agreement)."""
    alone, batch = np.asarray(alone, dtype=np.float64), np.asarray(batch, dtype=np.float64)
    if alone.shape != batch.shape:
        raise ValueError(f"pointwise_gap: shapes {alone.shape} and {batch.shape} differ")
    if not (np.isfinite(alone).all() and np.isfinite(batch).all()):
        return float("inf")
    scale = max(np.abs(alone).max(initial=0.0), np.abs(batch).max(initial=0.0))
    diff = np.abs(alone - batch).max(initial=0.0)
    return 0.0 if diff == 0.0 else float(diff / scale)


def assert_pointwise(alone, batch, what: str) -> None:
    """AssertionError naming `what` when scores computed alone and in a batch differ beyond POINTWISE_RTOL."""
    gap = pointwise_gap(alone, batch)
    if not gap <= POINTWISE_RTOL:
        raise AssertionError(f"{what}: scores depend on the batch they are computed in (relative gap {gap:.3g} > "
                             f"{POINTWISE_RTOL:g} of their scale)")
