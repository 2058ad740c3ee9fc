"""Training as a library: any nn.Module on any Dataset without a config, and no process-wide side effects."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest
import torch

from retrieval.config import load_config
from retrieval.core.epoch_record import EpochRecord
from retrieval.errors import UserError
from retrieval.train.run_files import RunFiles
from retrieval.train.trainer import Trainer
from tests.conftest import TINY_DIGITS

EXAMPLE = Path(__file__).parents[2] / "examples" / "train_custom_model.py"
TINY = list(TINY_DIGITS)


def _example():
    spec = importlib.util.spec_from_file_location("train_custom_model", EXAMPLE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.slow
def test_the_example_trains_a_custom_module_on_a_tensor_dataset_without_a_yaml_file(tmp_path):
    result = _example().train(epochs=1, out=tmp_path / "run")
    assert result.selected_on == "last" and result.epoch == 1
    assert result.test["recall@1"] > 0.3  # 10 classes: chance is about 0.1
    for name in ("metrics.jsonl", "result.json", "environment.json", "plots/curves.png"):
        assert (tmp_path / "run" / name).is_file(), name
    # A registered backbone: the toolkit rebuilds the model, so the run writes its checkpoints and config.
    assert (tmp_path / "run" / "checkpoints" / "best.pt").is_file()
    assert (tmp_path / "run" / "config.yaml").is_file()


def test_freezing_a_backbone_needs_a_model_with_one(tmp_path):
    example = _example()
    parts = example.assemble_training(
        example.SmallCNN(),
        example.build_loss("proxy_nca", {}, num_classes=10, embedding_dim=example.EMBEDDING_DIM),
        example.digits_data(),
        example.TrainConfig(epochs=1, device="cpu", freeze_bn=False),
        example.DataConfig(batch_size=64, num_workers=0),
    )
    with pytest.raises(UserError, match="freeze_backbone_epochs=1 freezes the model's `backbone` submodule"):
        Trainer(parts, example.TrainConfig(epochs=1, freeze_backbone_epochs=1), tmp_path)


def test_a_python_trainer_trains_as_the_config_says_with_the_config_defaults(tmp_path):
    """One source of training settings: `Trainer` takes the config's `TrainConfig`, so its defaults
    (BatchNorm frozen, `train.freeze_bn: true`) are a config user's."""
    example = _example()
    model = torch.nn.Sequential(torch.nn.BatchNorm2d(1), example.SmallCNN())
    loss = example.build_loss("proxy_nca", {}, num_classes=10, embedding_dim=example.EMBEDDING_DIM)
    knobs = example.TrainConfig(epochs=1, device="cpu", freeze_backbone_epochs=0)
    parts = example.assemble_training(model, loss, example.digits_data(), knobs, example.DataConfig(num_workers=0))
    trainer = Trainer(parts, knobs, tmp_path)
    trainer.begin_epoch(0)
    assert knobs.freeze_bn  # the config default: BatchNorm frozen
    assert not model[0].training and not model[0].weight.requires_grad  # frozen, as a config run's default
    assert model[1].training


def test_building_a_trainer_leaves_process_settings_and_random_state_alone(tmp_path):
    threads, deterministic = torch.get_num_threads(), torch.are_deterministic_algorithms_enabled()
    torch.use_deterministic_algorithms(True)
    try:
        torch.manual_seed(123)
        state = torch.get_rng_state()
        first = Trainer.from_config(load_config(None, [*TINY, "train.deterministic=false"]), tmp_path / "a")
        assert torch.are_deterministic_algorithms_enabled()
        assert torch.get_num_threads() == threads
        assert torch.equal(torch.get_rng_state(), state)
        second = Trainer.from_config(load_config(None, TINY), tmp_path / "b")  # the same seed: the same weights
        weights = second.parts.model.state_dict()
        for name, value in first.parts.model.state_dict().items():
            torch.testing.assert_close(value, weights[name], rtol=0, atol=0, msg=name)
        torch.testing.assert_close(first.parts.loss.proxies, second.parts.loss.proxies, rtol=0, atol=0)
    finally:
        torch.use_deterministic_algorithms(deterministic)


def test_metrics_grow_by_whole_lines_and_a_resume_keeps_only_its_epochs(tmp_path):
    files = RunFiles(tmp_path / "run")
    files.start({"device": "cpu"}, {"train": {"epochs": 3}}, records=[])
    for epoch in (1, 2, 3):
        files.append_record(EpochRecord(epoch=epoch, loss=1.0 / epoch, lr=0.1))
    assert [json.loads(line)["epoch"] for line in files.metrics.read_text().splitlines()] == [1, 2, 3]
    kept = files.read_records(up_to_epoch=2)
    files.start({"device": "cpu"}, None, kept)  # a run resumed after epoch 2 rewrites what it keeps, once
    assert files.metrics.read_text() == "".join(record.line() + "\n" for record in kept)
    assert files.read_records(up_to_epoch=0) == []
    assert sorted(path.name for path in files.root.iterdir()) == [
        "config.yaml",
        "environment.json",
        "metrics.jsonl",
        "plots",
    ]
