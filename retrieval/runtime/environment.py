"""The process a run lives in: its settings (threads, determinism, seeds) and a record of what it ran on.

CPU convolution gradients depend on the thread count, so a run is reproducible (bit for bit) only
with the same versions, thread count, processor kind and `train.deterministic` setting.

Process-wide settings are the command line's business (`retrieval train` calls `configure_process`);
library code never calls it, so building a `Trainer` leaves a caller's threads, determinism and
random state as they were.
"""

from __future__ import annotations

import importlib.metadata
import os
import platform
import random
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np
import torch

__all__ = ["configure_process", "describe_environment", "seed_everything", "torch_seeded"]

_PACKAGES = ("torch", "torchvision", "timm", "faiss-cpu", "pytorch-metric-learning", "numpy", "retrieval")


def configure_process(*, threads: int | None, deterministic: bool, seed: int) -> None:
    """Set the CPU thread count (None: torch's default) and deterministic algorithms, and seed every RNG.

    Process-wide; the values are `train.threads`, `train.deterministic` and `train.seed`.
    """
    if threads is not None:
        torch.set_num_threads(threads)
    if deterministic:
        os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")  # cuBLAS needs it for determinism
        torch.backends.cudnn.benchmark = False
    torch.use_deterministic_algorithms(deterministic)
    seed_everything(seed)


def seed_everything(seed: int) -> None:
    """Seed Python's, NumPy's and torch's global random number generators."""
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)


@contextmanager
def torch_seeded(seed: int) -> Iterator[None]:
    """Run the block with torch's CPU generator seeded with `seed`, and give the caller's state back after.

    Weights initialized inside (on the CPU) depend only on `seed`, and the caller's random stream
    is untouched.
    """
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        yield


def describe_environment(device: torch.device) -> dict[str, Any]:
    """Versions, threads, CPU model and device, as one JSON-ready dict."""
    versions: dict[str, str | None] = {}
    for name in _PACKAGES:
        try:
            versions[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            versions[name] = None
    return {
        "versions": versions,
        "python": platform.python_version(),
        "platform": platform.platform(),
        "cpu": _cpu_model(),
        "cpu_count": os.cpu_count(),
        "torch_threads": torch.get_num_threads(),
        "torch_interop_threads": torch.get_num_interop_threads(),
        "deterministic": torch.are_deterministic_algorithms_enabled(),
        "device": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu",
    }


def _cpu_model() -> str:
    cpuinfo = Path("/proc/cpuinfo")
    if cpuinfo.is_file():
        for line in cpuinfo.read_text(errors="replace").splitlines():
            if line.lower().startswith("model name"):
                return line.partition(":")[2].strip()
    return platform.processor() or platform.machine()
