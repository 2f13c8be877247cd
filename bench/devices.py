"""Which device a run computes on, and waiting for it: the runner times each phase up to the GPU's finish."""

from __future__ import annotations

import torch

from bench.config import DEVICES
from bench.errors import choice_error


def resolve_device(device: str) -> torch.device:
    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if device not in DEVICES:
        raise choice_error("device", device, DEVICES)
    if device == "cuda" and not torch.cuda.is_available():
        raise choice_error("device (CUDA is not available here)", device, ("auto", "cpu"))
    return torch.device(device)


def synchronize(device: torch.device) -> None:
    """Wait for queued GPU work so wall times measure the work, not the launch."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)
