"""train.loggers: metrics.jsonl, the config and the result mirrored to TensorBoard and MLflow, read back here."""

from __future__ import annotations

import json
import re
import sys

import pytest
import yaml

from retrieval.config import check_config
from retrieval.errors import UserError
from retrieval.sweep.runner import _environment
from retrieval.train.trackers import SWEEP_DIR_ENV, open_tracker, scalars
from tests.conftest import TINY_BACKBONE, TINY_DIGITS
from tests.train.training import train

pytestmark = pytest.mark.slow

TINY = [*TINY_DIGITS, "data.batch_size=4"]


@pytest.fixture
def tiny(csv_dataset) -> list[str]:
    """16 training images, half of each class validating: a few seconds an epoch."""
    return [*TINY, "data.name=csv", f"data.path={csv_dataset}", "data.val_fraction=0.5"]


@pytest.fixture(autouse=True)
def _local_mlflow_store(monkeypatch):
    for name in ("MLFLOW_TRACKING_URI", "MLFLOW_EXPERIMENT_NAME", SWEEP_DIR_ENV):
        monkeypatch.delenv(name, raising=False)


def _mlflow_run(run_dir):
    from mlflow.tracking import MlflowClient

    store = json.loads((run_dir / "mlflow.json").read_text())
    client = MlflowClient(store["tracking_uri"])
    return client, client.get_run(store["run_id"])


def test_every_record_the_config_and_the_result_reach_tensorboard_and_mlflow(tiny, tmp_path, capsys):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    run = tmp_path / "run"
    train([*tiny, "train.epochs=2", "train.loggers=[tensorboard, mlflow]"], run)
    records = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    result = json.loads((run / "result.json").read_text())

    events = EventAccumulator(str(run / "tensorboard")).Reload()
    assert scalars(records[0]).keys() - {"epoch"} == set(events.Tags()["scalars"]) - {
        tag for tag in events.Tags()["scalars"] if tag.startswith("result/")
    }
    for key in ("loss", "lr", "val/recall@1", "val/map@r", "time/train", "c/median"):
        assert [event.step for event in events.Scalars(key)] == [record["epoch"] for record in records]
        expected = [scalars(record)[key] for record in records]
        assert [event.value for event in events.Scalars(key)] == pytest.approx(expected, rel=1e-6)
    assert events.Scalars("result/test/recall@1")[0].value == pytest.approx(result["test"]["recall@1"], rel=1e-6)
    assert any(tag.startswith("config") for tag in events.Tags()["tensors"])

    client, mlflow_run = _mlflow_run(run)
    assert mlflow_run.info.status == "FINISHED" and mlflow_run.info.run_name == "run"
    history = client.get_metric_history(mlflow_run.info.run_id, "val/map_at_r")
    assert [m.step for m in history] == [r["epoch"] for r in records]
    assert [m.value for m in history] == pytest.approx([r["val/map@r"] for r in records])
    metrics, params = mlflow_run.data.metrics, mlflow_run.data.params
    assert metrics["result/test/recall_at_1"] == pytest.approx(result["test"]["recall@1"])
    assert params["model.backbone"] == TINY_BACKBONE and params["train.loggers"] == "['tensorboard', 'mlflow']"
    assert mlflow_run.data.tags["result.selected_on"] == "val"
    config = client.download_artifacts(mlflow_run.info.run_id, "config.yaml", str(tmp_path))
    assert yaml.safe_load(open(config)) == yaml.safe_load((run / "config.yaml").read_text())


def test_a_resumed_run_continues_its_mlflow_run_and_a_sweep_groups_its_cells(tmp_path, monkeypatch):
    sweep = tmp_path / "sweep"
    monkeypatch.setenv(SWEEP_DIR_ENV, str(sweep))
    first = sweep / "loss.gamma=4" / "seed-0"
    config = {"train": {"epochs": 2}, "model": {"backbone": "resnet10t"}}
    tracker = open_tracker(["mlflow"], first)
    tracker.start(config)
    tracker.log_record({"epoch": 1, "loss": 2.0, "val/recall@1": 0.5, "c": {"min": 1.0}, "grad": {"hist": [1, 2]}})
    tracker.finish("KILLED")
    resumed = open_tracker(["mlflow"], first)
    resumed.start({"train": {"epochs": 3}, "model": {"backbone": "resnet10t"}})  # --set train.epochs=3 on resume
    resumed.log_record({"epoch": 2, "loss": 1.0, "val/recall@1": 0.75})
    resumed.finish("FINISHED")
    other = open_tracker(["mlflow"], sweep / "loss.gamma=8" / "seed-0")
    other.start(config)
    other.finish("FINISHED")

    client, run = _mlflow_run(first)
    assert run.info.status == "FINISHED" and run.info.run_name == "loss.gamma=4/seed-0"
    assert [m.value for m in client.get_metric_history(run.info.run_id, "loss")] == [2.0, 1.0]
    assert run.data.metrics["c/min"] == 1.0 and run.data.params["train.epochs"] == "2"  # params as first logged
    (experiment,) = [e for e in client.search_experiments() if e.name == "sweep"]
    runs = client.search_runs([experiment.experiment_id])
    assert sorted(r.info.run_name for r in runs) == ["loss.gamma=4/seed-0", "loss.gamma=8/seed-0"]
    assert json.loads((first / "mlflow.json").read_text())["tracking_uri"] == (sweep / "mlruns").resolve().as_uri()
    assert _environment(sweep)[SWEEP_DIR_ENV] == str(sweep.resolve())  # what `retrieval sweep` gives its cells


def test_without_loggers_no_tracker_package_is_imported_and_a_missing_one_says_how_to_install(
    tiny, tmp_path, monkeypatch
):
    for module in ("mlflow", "tensorboard", "torch.utils.tensorboard"):
        monkeypatch.setitem(sys.modules, module, None)  # importing it now raises ImportError
    run = tmp_path / "run"
    train([*tiny, "train.epochs=1"], run)
    assert not {"tensorboard", "mlruns", "mlflow.json"} & {path.name for path in run.iterdir()}
    for logger in ("tensorboard", "mlflow"):
        with pytest.raises(UserError, match=r"install the trackers extra: pip install 'retrieval\[trackers\]'"):
            open_tracker([logger], tmp_path / "other")
    # What `train --set train.loggers=[wandb]` checks first; its one-line refusal is tests/cli/test_train_cli.py's.
    with pytest.raises(UserError, match=re.escape("train.loggers must be a list of tensorboard and mlflow, or []")):
        check_config(None, ["train.loggers=[wandb]"])
