"""What a run ran on: library versions, threads, processor and device, recorded beside its results.

CPU convolution gradients depend on the thread count, so a run is reproducible (bit for bit) only
with the same versions, thread count, processor kind and `train.deterministic` setting.
"""

from __future__ import annotations

import importlib.metadata
import os
import platform
from pathlib import Path
from typing import Any

import torch

from retrieval.config import TrainConfig

__all__ = ["apply_runtime_settings", "describe_environment"]

_PACKAGES = ("torch", "torchvision", "timm", "faiss-cpu", "pytorch-metric-learning", "numpy", "retrieval")


def apply_runtime_settings(train: TrainConfig) -> None:
    """Set the CPU thread count and deterministic algorithms as configured (process-wide)."""
    if train.threads is not None:
        torch.set_num_threads(train.threads)
    if train.deterministic:
        os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")  # cuBLAS needs it for determinism
        torch.backends.cudnn.benchmark = False
    torch.use_deterministic_algorithms(train.deterministic)


def describe_environment(device: torch.device) -> dict[str, Any]:
    """Versions, threads, CPU model and device, as one JSON-ready dict."""
    versions = {}
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
