"""Experiment trackers (`train.loggers`): the run's records mirrored to TensorBoard and MLflow.

A `Tracker` receives what the trainer writes to the run directory: the resolved config at the
start, every `metrics.jsonl` record (its numbers, nested keys joined by `/`, at step = epoch) and
the result (the selected checkpoint's test metrics) at the end. `open_tracker` fans one out to the
configured trackers (names of the registry `retrieval.choices.trackers.TRACKERS`); without any it is a
no-op, and neither `tensorboard` nor `mlflow` is imported. Both are optional extras:
`pip install 'retrieval[trackers]'`.

- `tensorboard`: event files in `RUN_DIR/tensorboard` (`tensorboard --logdir RUN_DIR`; for a sweep,
  `--logdir SWEEP_DIR` shows one run per cell). The config is a text summary.
- `mlflow`: one MLflow run per training run: params = the resolved config flattened (`model.backbone`),
  metrics = the records and `result/...`, the config YAML as the artifact `config.yaml`. The store is
  `MLFLOW_TRACKING_URI` when set, else a local file store, `RUN_DIR/mlruns` (a sweep's cells share
  `SWEEP_DIR/mlruns`, one experiment named after the sweep). MLflow 3 keeps its file store in
  maintenance mode and refuses it unless `MLFLOW_ALLOW_FILE_STORE=true`; the toolkit sets that
  when it picks the file store itself (a database store needs sqlalchemy, which mlflow-skinny lacks).
  MLflow names allow no `@`: `val/recall@1` is logged as `val/recall_at_1`. A resumed run continues
  its MLflow run (`RUN_DIR/mlflow.json` holds its id) and keeps the params it started with.
"""

from __future__ import annotations

import contextlib
import importlib
import json
import os
import re
import time
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from types import ModuleType
from typing import Any

import yaml

from retrieval.choices.trackers import TRACKERS
from retrieval.errors import UserError
from retrieval.runtime.files import write_text

__all__ = ["SWEEP_DIR_ENV", "MlflowTracker", "TensorBoardTracker", "Tracker", "open_tracker", "scalars", "tracked"]

SWEEP_DIR_ENV = "RETRIEVAL_SWEEP_DIR"  # set by `retrieval sweep` for its cells: their runs are grouped by sweep
_MLFLOW_BATCH = 100  # MLflow's limit of params (and tags) per log_batch call


def scalars(record: Mapping[str, Any], prefix: str = "") -> dict[str, float]:
    """The numbers of a record, nested keys joined by `/` (`{"c": {"min": 1}}` -> `{"c/min": 1.0}`).

    Strings, booleans, lists (histograms) and None are left out.
    """
    out: dict[str, float] = {}
    for key, value in record.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping):
            out.update(scalars(value, f"{name}/"))
        elif isinstance(value, int | float) and not isinstance(value, bool):
            out[name] = float(value)
    return out


def _texts(record: Mapping[str, Any]) -> dict[str, str]:
    """The top-level string values of a record (e.g. `selected_on`)."""
    return {key: value for key, value in record.items() if isinstance(value, str)}


class Tracker:
    """Receives the run's config, records and result. This base does nothing: the no-logger case."""

    def start(self, config: Mapping[str, Any] | None) -> None:
        """The run starts (or resumes) with the resolved `config` (None: no config, a custom model)."""

    def log_record(self, record: Mapping[str, Any]) -> None:
        """One epoch's `metrics.jsonl` record (it has an `epoch`, 1-based)."""

    def log_result(self, result: Mapping[str, Any]) -> None:
        """The run's result: `result.json` (selected epoch, its test metrics and their intervals)."""

    def finish(self, status: str) -> None:
        """The run ended: `FINISHED`, `FAILED` (an error) or `KILLED` (interrupted)."""


class _FanOut(Tracker):
    """Every call goes to each of `trackers`, in order."""

    def __init__(self, trackers: Sequence[Tracker]) -> None:
        self.trackers = list(trackers)

    def start(self, config: Mapping[str, Any] | None) -> None:
        for tracker in self.trackers:
            tracker.start(config)

    def log_record(self, record: Mapping[str, Any]) -> None:
        for tracker in self.trackers:
            tracker.log_record(record)

    def log_result(self, result: Mapping[str, Any]) -> None:
        for tracker in self.trackers:
            tracker.log_result(result)

    def finish(self, status: str) -> None:
        for tracker in self.trackers:
            tracker.finish(status)


def _import(module: str, logger: str) -> ModuleType:
    """Import an optional tracker package, or say how to install it."""
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        raise UserError(
            f"train.loggers includes {logger} but {module} cannot be imported ({exc}); "
            "install the trackers extra: pip install 'retrieval[trackers]', or remove it from train.loggers"
        ) from exc


class TensorBoardTracker(Tracker):
    """Scalars of every record and of the result in TensorBoard event files under `run_dir/tensorboard`.

    Args:
        run_dir: the run directory.
        sweep_dir: the sweep this run is a cell of (unused: `tensorboard --logdir SWEEP_DIR` finds the cells).
    """

    def __init__(self, run_dir: Path, sweep_dir: Path | None = None) -> None:
        tensorboard = _import("torch.utils.tensorboard", "tensorboard")
        self.writer = tensorboard.SummaryWriter(log_dir=str(run_dir / "tensorboard"))

    def start(self, config: Mapping[str, Any] | None) -> None:
        if config is not None:
            text = yaml.safe_dump(dict(config), sort_keys=False)
            self.writer.add_text("config", "".join(f"    {line}\n" for line in text.splitlines()))  # a code block

    def log_record(self, record: Mapping[str, Any]) -> None:
        self._add(scalars(record), int(record["epoch"]))

    def log_result(self, result: Mapping[str, Any]) -> None:
        self._add(scalars(result, "result/"), int(result["epoch"]))

    def finish(self, status: str) -> None:
        self.writer.close()

    def _add(self, values: Mapping[str, float], step: int) -> None:
        for tag, value in values.items():
            if tag != "epoch":
                self.writer.add_scalar(tag, value, global_step=step)
        self.writer.flush()


class MlflowTracker(Tracker):
    """One MLflow run per training run (see the module docstring for the store, names and resume).

    Args:
        run_dir: the run directory.
        sweep_dir: the sweep this run is a cell of (its runs share a store and an experiment), or None.
    """

    def __init__(self, run_dir: Path, sweep_dir: Path | None = None) -> None:
        _import("mlflow", "mlflow")
        from mlflow.tracking import MlflowClient

        self.run_dir = run_dir
        self.tracking_uri = os.environ.get("MLFLOW_TRACKING_URI") or _local_store(sweep_dir or run_dir)
        self.client = MlflowClient(self.tracking_uri)
        self.sweep_dir = sweep_dir
        self.run_id = ""

    def start(self, config: Mapping[str, Any] | None) -> None:
        self.run_id = self._resumed_run() or self._new_run()
        self.run_dir.mkdir(parents=True, exist_ok=True)
        write_text(self.run_dir / "mlflow.json", json.dumps({"tracking_uri": self.tracking_uri, "run_id": self.run_id}))
        if config is None:
            return
        from mlflow.entities import Param

        logged = self.client.get_run(self.run_id).data.params
        params = [Param(key, str(value)) for key, value in _flat(config).items() if key not in logged]
        for first in range(0, len(params), _MLFLOW_BATCH):
            self.client.log_batch(self.run_id, params=params[first : first + _MLFLOW_BATCH])
        self.client.log_text(self.run_id, yaml.safe_dump(dict(config), sort_keys=False), "config.yaml")

    def log_record(self, record: Mapping[str, Any]) -> None:
        self._log(scalars(record), int(record["epoch"]))

    def log_result(self, result: Mapping[str, Any]) -> None:
        self._log(scalars(result, "result/"), int(result["epoch"]))
        for key, value in _texts(result).items():
            self.client.set_tag(self.run_id, f"result.{key}", value)

    def finish(self, status: str) -> None:
        if self.run_id:
            self.client.set_terminated(self.run_id, status)

    def _log(self, values: Mapping[str, float], step: int) -> None:
        from mlflow.entities import Metric

        now = int(time.time() * 1000)
        metrics = [Metric(_mlflow_name(key), value, now, step) for key, value in values.items() if key != "epoch"]
        self.client.log_batch(self.run_id, metrics=metrics)

    def _resumed_run(self) -> str | None:
        """The id of this run directory's MLflow run in this store, when the run started before (a resume)."""
        path = self.run_dir / "mlflow.json"
        if not path.is_file():
            return None
        previous = json.loads(path.read_text())
        if previous.get("tracking_uri") != self.tracking_uri:
            return None
        from mlflow.exceptions import MlflowException

        try:
            self.client.update_run(previous["run_id"], status="RUNNING")
        except MlflowException:
            return None  # deleted from the store: start a new one
        return str(previous["run_id"])

    def _new_run(self) -> str:
        name = (
            os.path.relpath(self.run_dir.resolve(), self.sweep_dir.resolve()) if self.sweep_dir else self.run_dir.name
        )
        experiment = os.environ.get("MLFLOW_EXPERIMENT_NAME") or (
            self.sweep_dir.name if self.sweep_dir else "retrieval"
        )
        tags = {"retrieval.run_dir": str(self.run_dir.resolve())}
        if self.sweep_dir is not None:
            tags["retrieval.sweep"] = str(self.sweep_dir.resolve())
        run = self.client.create_run(self._experiment_id(experiment), run_name=name, tags=tags)
        return str(run.info.run_id)

    def _experiment_id(self, name: str) -> str:
        """The experiment `name`, created if needed (a sweep's cells may race to create it)."""
        from mlflow.exceptions import MlflowException

        experiment = self.client.get_experiment_by_name(name)
        if experiment is None:
            try:
                return str(self.client.create_experiment(name))
            except MlflowException:  # another cell created it first
                experiment = self.client.get_experiment_by_name(name)
        assert experiment is not None  # created by this process or another
        return str(experiment.experiment_id)


def _local_store(root: Path) -> str:
    """The file store under `root` (MLflow 3 asks for an opt-in to it: given here, see the module docstring)."""
    os.environ.setdefault("MLFLOW_ALLOW_FILE_STORE", "true")
    return (root.resolve() / "mlruns").as_uri()


def _mlflow_name(key: str) -> str:
    """A metric name MLflow accepts: `@` -> `_at_`, other characters out of [/\\w.- :] -> `_`."""
    return re.sub(r"[^/\w.\- :]", "_", key.replace("@", "_at_"))


def _flat(config: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """Nested config sections as `section.key` -> value (lists and None included, as MLflow params).

    Untyped values on purpose: they are handed to MLflow's `log_params`, which takes any value.
    """
    out: dict[str, Any] = {}
    for key, value in config.items():
        if isinstance(value, Mapping):
            out.update(_flat(value, f"{prefix}{key}."))
        else:
            out[f"{prefix}{key}"] = value
    return out


def open_tracker(loggers: Sequence[str], run_dir: Path) -> Tracker:
    """The trackers `loggers` names (`train.loggers`, names of `TRACKERS`) for the run directory `run_dir`, as one.

    A run started by `retrieval sweep` (`SWEEP_DIR_ENV` set) joins its sweep's MLflow experiment.

    Raises:
        UserError: an unknown logger name, or a tracker package that is not installed.
    """
    for name in loggers:
        TRACKERS.check(name)
    sweep = os.environ.get(SWEEP_DIR_ENV)
    sweep_dir = Path(sweep) if sweep else None
    trackers = [TRACKERS.get(name)(run_dir, sweep_dir) for name in dict.fromkeys(loggers)]  # each once, in order
    return _FanOut(trackers)


@contextlib.contextmanager
def tracked(tracker: Tracker, config: Mapping[str, Any] | None) -> Iterator[Tracker]:
    """`tracker` started with `config`, finished as FINISHED, FAILED (an exception) or KILLED (Ctrl-C)."""
    tracker.start(config)
    try:
        yield tracker
    except KeyboardInterrupt:
        tracker.finish("KILLED")
        raise
    except BaseException:
        tracker.finish("FAILED")
        raise
    tracker.finish("FINISHED")
