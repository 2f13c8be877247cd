"""Chunked nearest-neighbour distances (memory stays bounded for large banks and many queries)."""

from __future__ import annotations

import torch


def nn_distance(queries: torch.Tensor, bank: torch.Tensor, chunk: int = 4096) -> torch.Tensor:
    """Euclidean distance from each query row [M, d] to its nearest bank row [K, d] → [M]."""
    bank_sq = (bank * bank).sum(1)
    out = torch.empty(queries.shape[0], dtype=torch.float32, device=queries.device)
    for s in range(0, queries.shape[0], chunk):
        q = queries[s : s + chunk]
        d2 = (q * q).sum(1, keepdim=True) + bank_sq[None, :] - 2.0 * (q @ bank.T)
        out[s : s + chunk] = d2.min(1).values.clamp_min_(0).sqrt_()
    return out
