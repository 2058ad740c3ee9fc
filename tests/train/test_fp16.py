"""train.amp=fp16: float16 autocast with torch's GradScaler; an overflowing step is skipped, not a failed run."""

from __future__ import annotations

import json

import torch

from retrieval.checkpoint import Checkpoint
from retrieval.cli.main import main
from retrieval.config import load_config
from retrieval.losses import MetricLoss
from retrieval.train.trainer import Trainer

TINY = ["model.backbone=resnet10t", "model.embedding_dim=16", "data.image_size=16", "data.batch_size=128"]


def _state(trainer: Trainer) -> dict[str, torch.Tensor]:
    parts = trainer.parts
    return {
        name: value.detach().clone()
        for name, value in [*parts.model.state_dict().items(), *parts.loss.state_dict().items()]
    }


def _inject_inf_once(parameter: torch.nn.Parameter) -> None:
    """The next backward writes inf into `parameter`'s gradient, once: an fp16 overflow."""
    calls = []

    def hook(grad: torch.Tensor) -> torch.Tensor:
        calls.append(1)
        return grad * float("inf") if len(calls) == 1 else grad

    parameter.register_hook(hook)


def test_an_overflowing_step_is_skipped_lowers_the_scale_and_the_next_step_trains(tmp_path):
    trainer = Trainer.from_config(load_config(None, [*TINY, "train.amp=fp16"]), tmp_path / "run")
    step, optimizer = trainer.parts.step, trainer.parts.optimizer
    assert step.scaler is not None and step.scaler.get_scale() == 65536.0
    trainer.begin_epoch(0)
    images, labels = next(iter(trainer.parts.loader))
    before = _state(trainer)
    _inject_inf_once(trainer.parts.model.head.weight)

    loss = trainer.train_step(images, labels, step=0)
    assert torch.isfinite(loss)  # the loss was fine: only a gradient overflowed
    for name, value in _state(trainer).items():
        torch.testing.assert_close(value, before[name], rtol=0, atol=0, msg=name)  # weights unchanged
    assert not optimizer.state  # AdamW never stepped
    assert step.scaler.get_scale() == 32768.0 and int(step.skipped_steps) == 1

    trainer.train_step(images, labels, step=1)
    assert not torch.equal(trainer.parts.model.head.weight, before["head.weight"])
    assert step.scaler.get_scale() == 32768.0 and int(step.skipped_steps) == 1


def test_a_cpu_fp16_run_counts_skipped_steps_resumes_the_scale_and_fails_only_when_every_step_overflows(
    tmp_path, monkeypatch, capsys
):
    calls = []
    original = MetricLoss.__call__

    def first_loss_infinite(self, *args, **kwargs):  # a non-finite loss: the scaler skips that step
        calls.append(1)
        loss = original(self, *args, **kwargs)
        return loss * float("inf") if len(calls) == 1 else loss

    monkeypatch.setattr(MetricLoss, "__call__", first_loss_infinite)
    run = tmp_path / "run"
    args = [f"--set={o}" for o in [*TINY, "train.amp=fp16", "train.epochs=1"]]
    assert main(["train", *args, "--output-dir", str(run)]) == 0  # not reported as a failed run
    assert "fp16 skipped 1 (scale 32768)" in capsys.readouterr().out
    (record,) = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert (
        record["skipped_steps"] == 1
        and record["loss_scale"] == 32768.0
        and torch.isfinite(torch.tensor(record["loss"]))
    )
    last = Checkpoint.load(run / "checkpoints" / "last.pt")
    assert last.grad_scaler is not None and last.grad_scaler["scale"] == 32768.0
    assert Checkpoint.load(run / "checkpoints" / "best.pt").grad_scaler is None

    resumed = Trainer.from_config(last.config(overrides=["train.epochs=2"]), run, resuming=True)
    resumed.resume(last, Checkpoint.load(run / "checkpoints" / "best.pt"))
    assert resumed.parts.step.scaler is not None and resumed.parts.step.scaler.get_scale() == 32768.0

    monkeypatch.setattr(MetricLoss, "__call__", lambda self, *a, **k: original(self, *a, **k) * float("inf"))
    assert main(["train", *args, "--output-dir", str(tmp_path / "diverged")]) == 2
    line = capsys.readouterr().err.strip()
    assert line.startswith("error: train.amp=fp16: every one of the") and "use train.amp=bf16" in line
