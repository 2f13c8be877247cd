"""Which device a run computes on, on how many CPU threads, and waiting for it: the runner times each phase up to
the GPU's finish."""

from __future__ import annotations

import os
from contextlib import contextmanager
from dataclasses import dataclass

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


@dataclass(frozen=True)
class ThreadChoice:
    threads: int
    why: str


def choose_threads(parallel: bool) -> ThreadChoice:
    """torch's intra-op thread count for a workload. A cluster job gets its allocation (SLURM_CPUS_PER_TASK: its
    cores are its own); a count the user set (OMP_NUM_THREADS) is kept; otherwise a workload whose operations are
    too small to share (`parallel=False`: the tabular detectors' small networks and trees) runs on one thread.
    Spread over a core that another process is using, such a workload waits at every operation for the thread
    that is not running: AE1SVM's released preset took 8.7 s on one thread and 157 s on two beside a busy
    process (2 cores). A parallel workload keeps torch's count (by default one thread per core)."""
    allocated = _env_count("SLURM_CPUS_PER_TASK")
    if allocated:
        return ThreadChoice(allocated, "the SLURM allocation")
    if parallel:  # torch's count: its default reads OMP_NUM_THREADS, and a caller's own setting is kept
        return ThreadChoice(torch.get_num_threads(), "torch's count")
    told = _env_count("OMP_NUM_THREADS")
    if told:
        return ThreadChoice(told, "OMP_NUM_THREADS")
    return ThreadChoice(1, "one thread: the workload's operations are too small to share")


def _env_count(variable: str) -> int:
    """A positive count from environment `variable`; 0 when unset or not one."""
    text = os.environ.get(variable, "").strip()
    return int(text) if text.isdigit() and int(text) >= 1 else 0


@contextmanager
def use_threads(parallel: bool):
    """Run the block on `choose_threads(parallel)` torch threads (a run records the count it ran with), then
    restore the count found: a command called in a longer-lived process leaves it as it was."""
    choice, before = choose_threads(parallel), torch.get_num_threads()
    if choice.threads != before:
        torch.set_num_threads(choice.threads)
    try:
        yield choice
    finally:
        if torch.get_num_threads() != before:
            torch.set_num_threads(before)
