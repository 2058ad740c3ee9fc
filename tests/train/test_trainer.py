"""Trainer behaviour that no metric shows: optimizer groups, frozen parts, the lr schedule, selection, resume."""

from __future__ import annotations

import json

import pytest
import torch
from torch.nn.modules.batchnorm import _BatchNorm

from retrieval.config import load_config
from retrieval.data import PKSampler
from retrieval.train.trainer import Trainer
from tests.conftest import TINY_DIGITS
from tests.train.training import train

pytestmark = pytest.mark.slow

TINY = [*TINY_DIGITS, "data.batch_size=128"]


def _trainer(tmp_path, *overrides: str, **kwargs) -> Trainer:
    config = load_config(None, [*TINY, *overrides])
    return Trainer.from_config(config, tmp_path / "run", **kwargs)


def _snapshot(module: torch.nn.Module) -> dict[str, torch.Tensor]:
    return {name: value.detach().clone() for name, value in module.state_dict().items()}


def test_proxies_learn_faster_without_decay_and_norms_and_biases_are_not_decayed(tmp_path):
    trainer = _trainer(tmp_path, "train.lr=0.002", "train.proxy_lr_mult=50", "train.weight_decay=0.01")
    *model_groups, proxies = trainer.parts.optimizer.param_groups
    assert proxies["lr"] == pytest.approx(0.1) and proxies["weight_decay"] == 0.0
    assert [p for p in proxies["params"]] == list(trainer.parts.loss.parameters())
    decay = {id(p) for g in model_groups if g["weight_decay"] > 0 for p in g["params"]}
    for name, param in trainer.parts.model.named_parameters():
        assert (id(param) in decay) == (param.ndim > 1), name
    assert all(g["lr"] == pytest.approx(0.002) for g in model_groups)


def test_a_frozen_epoch_leaves_the_backbone_and_its_batchnorm_unchanged(tmp_path):
    trainer = _trainer(tmp_path, "train.freeze_backbone_epochs=1", "train.epochs=2")
    backbone, head = _snapshot(trainer.parts.model.backbone), _snapshot(trainer.parts.model.head)
    trainer._train_epoch(0)
    for name, value in trainer.parts.model.backbone.state_dict().items():
        torch.testing.assert_close(value, backbone[name], rtol=0, atol=0, msg=name)
    assert not torch.equal(trainer.parts.model.head.weight, head["weight"])


def test_warm_up_starts_when_the_backbone_thaws(tmp_path):
    trainer = _trainer(tmp_path, "train.freeze_backbone_epochs=1", "train.warmup_epochs=1", "train.epochs=3")
    steps, base = len(trainer.parts.loader), trainer.base_lrs[0]
    trainer._set_lr(steps - 1)  # last step of the frozen epoch: head and proxies at the full rate
    assert trainer.parts.optimizer.param_groups[0]["lr"] == pytest.approx(base)
    trainer._set_lr(steps)  # first step with the backbone training: the warm-up begins
    assert trainer.parts.optimizer.param_groups[0]["lr"] == pytest.approx(base / steps)
    trainer._set_lr(2 * steps)  # warm-up done: full rate, then cosine decay
    assert trainer.parts.optimizer.param_groups[0]["lr"] == pytest.approx(base)


def test_freeze_bn_keeps_statistics_and_affine_parameters_and_warns_without_pretrained_weights(tmp_path):
    with pytest.warns(UserWarning, match="freeze_bn is set but the backbone starts from scratch"):
        trainer = _trainer(tmp_path, "train.freeze_bn=true", "train.freeze_backbone_epochs=0")
    norms = {n: _snapshot(m) for n, m in trainer.parts.model.named_modules() if isinstance(m, _BatchNorm)}
    conv = trainer.parts.model.backbone.conv1[0].weight.detach().clone()
    trainer._train_epoch(0)
    for name, module in trainer.parts.model.named_modules():
        if isinstance(module, _BatchNorm):
            for key, value in module.state_dict().items():
                torch.testing.assert_close(value, norms[name][key], rtol=0, atol=0, msg=f"{name}.{key}")
    assert not torch.equal(trainer.parts.model.backbone.conv1[0].weight, conv)


def test_the_pk_sampler_is_told_every_epoch(tmp_path, monkeypatch):
    seen = []
    original = PKSampler.set_epoch
    monkeypatch.setattr(PKSampler, "set_epoch", lambda self, epoch: (seen.append(epoch), original(self, epoch)))
    # 8 x 16 fills TINY's batch of 128: 5 steps an epoch (4 x 4 took 44); the epochs, not the steps, are the point
    trainer = _trainer(tmp_path, "loss.name=circle", "data.p=8", "data.k=16", "train.epochs=2")
    trainer.fit()
    assert seen == [0, 1]


def test_without_validation_the_last_epoch_is_the_result(tmp_path, capsys):
    _, out = train([*TINY, "data.val_fraction=0", "train.epochs=2"], tmp_path / "run")
    assert "result: last epoch (2); no validation split, so nothing was selected" in out
    assert json.loads((tmp_path / "run" / "result.json").read_text())["selected_on"] == "last"
    best = torch.load(tmp_path / "run" / "checkpoints" / "best.pt", weights_only=True)
    assert best["epoch"] == 1  # 0-based: the final epoch


def test_selecting_on_test_is_labelled_on_every_figure(tmp_path, capsys):
    overrides = [*TINY, "data.val_fraction=0", "train.epochs=2", "train.select_on_test=true", "train.plots=true"]
    _, said = train(overrides, tmp_path / "run")
    lines = said.splitlines()
    assert "on the TEST set (train.select_on_test; optimistic)" in lines[-7]
    assert all(line.endswith("(selected on test)") for line in lines[-6:])  # the 95% CI line and the metrics
    records = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert all("test/recall@1" in record for record in records)
