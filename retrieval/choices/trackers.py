"""The registry of `train.loggers`: name -> the experiment tracker it opens, torch-free.

An entry is a `retrieval.train.trackers.Tracker` class (or a factory) called as
`factory(run_dir, sweep_dir)`: the run directory, and the sweep it is a cell of or None. The
built-ins (`tensorboard`, `mlflow`) are imported on first use, so the config checks the names before
PyTorch and the tracker packages load; a new tracker is one module with `@TRACKERS.register("name")`,
or a `retrieval.trackers` entry point (`docs/extending.md`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from retrieval.registry import Registry

__all__ = ["TRACKERS"]

TRACKERS: Registry[Callable[..., Any]] = Registry(
    "train.loggers",
    "retrieval.trackers",
    {
        "tensorboard": "retrieval.train.trackers:TensorBoardTracker",
        "mlflow": "retrieval.train.trackers:MlflowTracker",
    },
    expected="a Tracker class or factory (run_dir, sweep_dir) -> Tracker",
)
